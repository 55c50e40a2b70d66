package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/log/vfs"
)

// State is what raft needs from disk besides the entries: the HardState (term, vote,
// commit), the membership (ConfState) as of entry ConfIndex, and the index and term of the
// entry just before the first one the log still holds (Snap*: what retention removed, or what
// a catch-up from whole segments started after), which raft sees as its snapshot, with the
// log offset where entry SnapIndex+1 is (or goes).
type State struct {
	HardState raftpb.HardState
	ConfState raftpb.ConfState
	ConfIndex uint64
	SnapIndex uint64
	SnapTerm  uint64
	// FirstOffset is the offset of entry SnapIndex+1 in the segment log: where the raft log
	// starts in it. Batches below it are left over from a retention or a reset that a crash
	// interrupted. -1: unknown (a version-1 file, written when it was the log's start).
	FirstOffset int64
	// ResetPending: a snapshot was recorded and the segment log is to be emptied and
	// started again at FirstOffset (log.Reset); a crash before that finished is finished
	// by the next Open.
	ResetPending bool
	// InstallPending: with ResetPending, the segment log is to take the segments a
	// catch-up brought (CatchUpDir, log.FinishInstall) instead of starting empty; the next
	// Open finishes an install a crash interrupted.
	InstallPending bool
}

// State file layout: two slots of slotSize bytes. A save writes the slot that does not hold
// the newest durable state, so a torn or unsynced write never damages what a crash falls back
// to; a synced save then becomes that state. Each slot (big-endian):
//
//	0 magic "LQRS" | 4 version u8 = 2 | 5 reserved [3] | 8 seq u64 | 16 payload length u32 |
//	20 crc32c of bytes 8..20 and the payload | 24 payload
//
//	payload: term u64 | vote u64 | commit u64 | conf index u64 | snap index u64 |
//	         snap term u64 | first offset i64 | flags u64 (bit 0: reset pending; bit 1: install pending; the others 0) |
//	         conf state (protobuf), the rest of the payload length
//
// Version 1 had no first offset and no flags (a fixed part of 6 fields); it is still read.
// The valid slot with the higher seq is the state. NEVER CHANGE the layout without a new
// version: it is on disk.
const (
	stateMagic    = "LQRS"
	stateVersion  = 2
	slotSize      = 4096
	slotHeader    = 24
	fixedPayload  = 8 * 8
	fixedPayload1 = 6 * 8 // version 1
	maxConfStateB = slotSize - slotHeader - fixedPayload

	flagResetPending   = 1 << 0
	flagInstallPending = 1 << 1
)

// ErrDamagedState is a state file with no valid slot. The replica must not start from it: its
// vote could be lost, and a second vote in one term breaks raft. An operator removes the
// replica and adds it back (it then catches up from the others).
var ErrDamagedState = errors.New("raft state file damaged")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// StateFile is an open raft state file.
//
// Concurrency: not safe for concurrent use; the replica's goroutine owns it.
type StateFile struct {
	f    vfs.File
	path string
	seq  uint64 // of the newest save
	// keep is the slot holding the newest state known durable (synced, or found on open):
	// every save writes the other slot, so no unsynced write can tear the state a crash
	// must fall back to.
	keep int
	buf  [slotSize]byte
}

// OpenState opens (creating) the state file at path and returns it with the state it holds
// (the zero State for a new file). A new file is created whole (a temp file holding a valid
// slot of the zero State with seq 0, fsynced, renamed, the directory fsynced), so that a
// crash during a replica's first save finds that slot rather than a file with none.
func OpenState(fsys vfs.FS, path string) (*StateFile, State, error) {
	f, err := fsys.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		if err = createState(fsys, path); err == nil {
			f, err = fsys.OpenFile(path, os.O_RDWR, 0)
		}
	}
	if err != nil {
		return nil, State{}, err
	}
	sf := &StateFile{f: f, path: path}
	st, err := sf.load()
	if err != nil {
		_ = f.Close() // refused; the error says why
		return nil, State{}, err
	}
	return sf, st, nil
}

// createState writes a new state file at path holding the zero State (seq 0: never saved).
func createState(fsys vfs.FS, path string) error {
	var zero State
	slot, err := encodeSlot(make([]byte, 0, slotSize), 0, &zero)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(slot[:slotSize], 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(tmp, path)
	}
	if err == nil {
		err = fsys.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		return fmt.Errorf("raft state: create %s: %w", path, err)
	}
	return nil
}

func (sf *StateFile) load() (State, error) {
	info, err := sf.f.Stat()
	if err != nil {
		return State{}, err
	}
	if info.Size() == 0 {
		return State{}, nil
	}
	var best State
	found := false
	var errs []error
	for slot := range 2 {
		n, err := sf.f.ReadAt(sf.buf[:], int64(slot)*slotSize)
		if err != nil && !errors.Is(err, io.EOF) {
			return State{}, err
		}
		st, seq, err := decodeSlot(sf.buf[:n])
		if err != nil {
			errs = append(errs, fmt.Errorf("slot %d: %w", slot, err))
			continue
		}
		if !found || seq > sf.seq {
			best, sf.seq, sf.keep, found = st, seq, slot, true
		}
	}
	if !found {
		return State{}, fmt.Errorf("%w: %s: %v", ErrDamagedState, sf.path, errors.Join(errs...))
	}
	return best, nil
}

// Save writes st into the slot after the current one; with sync it is durable on return.
// raft needs sync for a new term or vote (and entries); a commit index alone may be written
// without it (raft learns commit again from the leader).
func (sf *StateFile) Save(st State, sync bool) error {
	slot, err := encodeSlot(sf.buf[:0], sf.seq+1, &st)
	if err != nil {
		return err
	}
	clear(sf.buf[len(slot):]) // whole slots, so the file's size never changes after the first two saves
	target := 1 - sf.keep
	if _, err := sf.f.WriteAt(sf.buf[:], int64(target)*slotSize); err != nil {
		return err
	}
	sf.seq++
	if sync {
		if err := sf.f.Sync(); err != nil {
			return err
		}
		sf.keep = target
	}
	return nil
}

// Saved reports whether the file holds a state (false for a new file, never saved).
func (sf *StateFile) Saved() bool { return sf.seq > 0 }

// Close closes the file.
func (sf *StateFile) Close() error { return sf.f.Close() }

func encodeSlot(dst []byte, seq uint64, st *State) ([]byte, error) {
	cs, err := st.ConfState.Marshal()
	if err != nil {
		return nil, err
	}
	if len(cs) > maxConfStateB {
		return nil, fmt.Errorf("raft state: membership of %d bytes does not fit a %d-byte slot", len(cs), slotSize)
	}
	dst = append(dst, stateMagic...)
	dst = append(dst, stateVersion, 0, 0, 0)
	dst = binary.BigEndian.AppendUint64(dst, seq)
	dst = binary.BigEndian.AppendUint32(dst, uint32(fixedPayload+len(cs)))
	crcAt := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	var flags uint64
	if st.ResetPending {
		flags |= flagResetPending
	}
	if st.InstallPending {
		flags |= flagInstallPending
	}
	for _, v := range []uint64{st.HardState.Term, st.HardState.Vote, st.HardState.Commit, st.ConfIndex, st.SnapIndex, st.SnapTerm, uint64(st.FirstOffset), flags} {
		dst = binary.BigEndian.AppendUint64(dst, v)
	}
	dst = append(dst, cs...)
	crc := crc32.Update(crc32.Checksum(dst[8:20], castagnoli), castagnoli, dst[slotHeader:])
	binary.BigEndian.PutUint32(dst[crcAt:], crc)
	return dst, nil
}

// decodeSlot decodes one slot (b may be short: a file cut by a crash).
func decodeSlot(b []byte) (State, uint64, error) {
	var st State
	if len(b) < slotHeader+fixedPayload1 {
		return st, 0, fmt.Errorf("%d bytes, shorter than a slot", len(b))
	}
	if string(b[:4]) != stateMagic {
		return st, 0, errors.New("no magic")
	}
	fixed := fixedPayload
	switch b[4] {
	case stateVersion:
	case 1:
		fixed = fixedPayload1
	default:
		return st, 0, fmt.Errorf("version %d, want 1 or %d", b[4], stateVersion)
	}
	seq := binary.BigEndian.Uint64(b[8:])
	n := int(binary.BigEndian.Uint32(b[16:]))
	if n < fixed || n > slotSize-slotHeader || slotHeader+n > len(b) {
		return st, 0, fmt.Errorf("payload length %d out of range", n)
	}
	payload := b[slotHeader : slotHeader+n]
	if got, want := crc32.Update(crc32.Checksum(b[8:20], castagnoli), castagnoli, payload), binary.BigEndian.Uint32(b[20:]); got != want {
		return st, 0, fmt.Errorf("crc 0x%08x, want 0x%08x", got, want)
	}
	u := func(i int) uint64 { return binary.BigEndian.Uint64(payload[8*i:]) }
	st.HardState = raftpb.HardState{Term: u(0), Vote: u(1), Commit: u(2)}
	st.ConfIndex, st.SnapIndex, st.SnapTerm = u(3), u(4), u(5)
	st.FirstOffset = -1
	if fixed == fixedPayload {
		st.FirstOffset = int64(u(6))
		flags := u(7)
		if flags&^(flagResetPending|flagInstallPending) != 0 || st.FirstOffset < -1 {
			return st, 0, fmt.Errorf("flags 0x%x or first offset %d invalid", flags, st.FirstOffset)
		}
		st.ResetPending = flags&flagResetPending != 0
		st.InstallPending = flags&flagInstallPending != 0
	}
	if err := st.ConfState.Unmarshal(payload[fixed:]); err != nil {
		return st, 0, fmt.Errorf("membership: %v", err)
	}
	return st, seq, nil
}
