package smlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/wire"
)

// Format is one state machine's snapshot file (see the package doc for its layout) and how
// its state is decoded. A package keeps one as a variable; it is read only.
type Format[S any] struct {
	// Name starts the messages of errors: "meta", "offsets".
	Name string
	// FileName is the snapshot file's name in the store's directory, and Magic its first four
	// bytes. NEVER CHANGE either for a machine that has stores on disk.
	FileName string
	Magic    string
	// MaxState bounds the state snapshot a file may hold.
	MaxState int
	// Corrupt is wrapped by the errors of a store directory that cannot be trusted (a damaged
	// snapshot file, a log compacted past the file it needs); Malformed by those of bytes that
	// do not decode. The machine's own sentinels, so its callers test them as before.
	Corrupt   error
	Malformed error
	// Decode decodes and checks a state snapshot, and returns the index it is as of. Errors
	// wrap Malformed; nothing returned aliases b.
	Decode func(b []byte) (st S, index uint64, err error)
	// Empty is the state of a store that has no snapshot file yet.
	Empty func() S
}

const (
	snapFileVersion = 1
	snapFileHeader  = 12 // magic, version, reserved, crc32c
	maxConfState    = 64 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (f *Format[S]) tempPrefix() string { return f.FileName + ".tmp-" }

// AppendFile appends the snapshot file of snap (Data the state snapshot) to dst.
func (f *Format[S]) AppendFile(dst []byte, snap raftpb.Snapshot) ([]byte, error) {
	cs, err := snap.Metadata.ConfState.Marshal()
	if err != nil {
		return nil, fmt.Errorf("%s: encode the membership of the snapshot at %d: %w", f.Name, snap.Metadata.Index, err)
	}
	start := len(dst)
	dst = append(dst, f.Magic...)
	dst = append(dst, snapFileVersion, 0, 0, 0, 0, 0, 0, 0)
	dst = wire.AppendU64(dst, snap.Metadata.Index)
	dst = wire.AppendU64(dst, snap.Metadata.Term)
	dst = wire.AppendBytes(dst, cs)
	dst = wire.AppendBytes(dst, snap.Data)
	binary.BigEndian.PutUint32(dst[start+8:], crc32.Checksum(dst[start+snapFileHeader:], castagnoli))
	return dst, nil
}

// DecodeFile decodes a snapshot file's bytes into the raft snapshot (Data the state
// snapshot, copied) and the state it holds. Errors wrap Malformed.
func (f *Format[S]) DecodeFile(b []byte) (raftpb.Snapshot, S, error) {
	var zero S
	bad := func(format string, args ...any) (raftpb.Snapshot, S, error) {
		return raftpb.Snapshot{}, zero, fmt.Errorf("%w snapshot file: %s", f.Malformed, fmt.Sprintf(format, args...))
	}
	switch {
	case len(b) < snapFileHeader:
		return bad("%d bytes, shorter than its header", len(b))
	case string(b[:4]) != f.Magic:
		return bad("magic %q, want %q", b[:4], f.Magic)
	case b[4] != snapFileVersion:
		return bad("version %d, this broker reads %d (written by a newer broker?)", b[4], snapFileVersion)
	case b[5]|b[6]|b[7] != 0:
		return bad("reserved bytes not zero")
	}
	if got, want := crc32.Checksum(b[snapFileHeader:], castagnoli), binary.BigEndian.Uint32(b[8:]); got != want {
		return bad("crc32c %08x, stored %08x", got, want)
	}
	r := wire.NewReader(b[snapFileHeader:])
	var snap raftpb.Snapshot
	snap.Metadata.Index, snap.Metadata.Term = r.U64(), r.U64()
	cs := r.Bytes(maxConfState, "conf state")
	data := r.Bytes(f.MaxState, "state")
	if err := r.Done("snapshot file"); err != nil {
		return bad("%v", err)
	}
	if err := snap.Metadata.ConfState.Unmarshal(cs); err != nil {
		return bad("membership: %v", err)
	}
	st, index, err := f.Decode(data)
	if err != nil {
		return raftpb.Snapshot{}, zero, err
	}
	if index != snap.Metadata.Index {
		return bad("a state as of index %d in a snapshot at index %d", index, snap.Metadata.Index)
	}
	snap.Data = append([]byte(nil), data...)
	return snap, st, nil
}

// WriteFile replaces dir's snapshot file with snap, durably: temporary file, fsync, rename,
// directory fsync. On error the old file is in place (or, after a failed directory fsync,
// one of the two).
func (f *Format[S]) WriteFile(dir string, snap raftpb.Snapshot) (err error) {
	data, err := f.AppendFile(nil, snap)
	if err != nil {
		return err
	}
	tf, err := os.CreateTemp(dir, f.tempPrefix()+"*")
	if err != nil {
		return fmt.Errorf("%s: snapshot file: %w", f.Name, err)
	}
	tmp := tf.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if _, err := tf.Write(data); err != nil {
		tf.Close()
		return fmt.Errorf("%s: write %s: %w", f.Name, tmp, err)
	}
	if err := tf.Sync(); err != nil {
		tf.Close()
		return fmt.Errorf("%s: sync %s: %w", f.Name, tmp, err)
	}
	if err := tf.Close(); err != nil {
		return fmt.Errorf("%s: close %s: %w", f.Name, tmp, err)
	}
	path := filepath.Join(dir, f.FileName)
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("%s: rename %s to %s: %w", f.Name, tmp, path, err)
	}
	return f.syncDir(dir)
}

func (f *Format[S]) syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("%s: sync directory %s: %w", f.Name, dir, err)
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return fmt.Errorf("%s: sync directory %s: %w", f.Name, dir, err)
	}
	return d.Close()
}

// ReadFile reads dir's snapshot file, after removing temporary files a crash left. ok is
// false when there is none (a new store, or one that never took a snapshot); a file that
// does not decode is an error wrapping Corrupt and naming it.
func (f *Format[S]) ReadFile(dir string) (snap raftpb.Snapshot, st S, ok bool, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return snap, st, false, fmt.Errorf("%s: %w", f.Name, err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), f.tempPrefix()) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return snap, st, false, fmt.Errorf("%s: remove a leftover: %w", f.Name, err)
			}
		}
	}
	path := filepath.Join(dir, f.FileName)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return snap, st, false, nil
	case err != nil:
		return snap, st, false, fmt.Errorf("%s: %w", f.Name, err)
	}
	snap, st, err = f.DecodeFile(b)
	if err != nil {
		return snap, st, false, fmt.Errorf("%w: %s: %w", f.Corrupt, path, err)
	}
	return snap, st, true, nil
}
