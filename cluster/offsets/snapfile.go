package offsets

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

// The snapshot file, SnapshotFileName in the store's directory: the latest raft snapshot of
// the partition's state, which this replica restarts from and sends to replicas too far
// behind. Written whole (temporary file, fsync, rename, directory fsync), so a crash leaves
// the old file or the new one. Big-endian:
//
//	0 magic "LQOF" | 4 version u8 = 1 | 5 reserved [3] zero | 8 crc32c u32 of bytes 12.. |
//	12 index u64 | 20 term u64 | 28 conf state (raftpb.ConfState protobuf) u32 length + bytes |
//	state snapshot (state.go) u32 length + bytes
//
// index and term are the entry the state is as of (the state's own index repeats it); the
// conf state is the group's membership as of that entry. NEVER CHANGE version 1: it is on disk.
const (
	SnapshotFileName = "offsets.snap"
	snapFileMagic    = "LQOF"
	snapFileVersion  = 1
	snapTempPrefix   = SnapshotFileName + ".tmp-"
	maxConfState     = 64 << 10
)

// ErrCorrupt wraps the errors of a store directory that cannot be trusted: a damaged snapshot
// file, or a log that was compacted past the snapshot file it needs.
var ErrCorrupt = errors.New("offsets: corrupt offsets store")

func appendSnapFile(dst []byte, snap raftpb.Snapshot) ([]byte, error) {
	cs, err := snap.Metadata.ConfState.Marshal()
	if err != nil {
		return nil, fmt.Errorf("offsets: encode the membership of the snapshot at %d: %w", snap.Metadata.Index, err)
	}
	start := len(dst)
	dst = append(dst, snapFileMagic...)
	dst = append(dst, snapFileVersion, 0, 0, 0, 0, 0, 0, 0)
	dst = wire.AppendU64(dst, snap.Metadata.Index)
	dst = wire.AppendU64(dst, snap.Metadata.Term)
	dst = wire.AppendBytes(dst, cs)
	dst = wire.AppendBytes(dst, snap.Data)
	binary.BigEndian.PutUint32(dst[start+8:], crc32.Checksum(dst[start+12:], castagnoli))
	return dst, nil
}

// decodeSnapFile decodes a snapshot file's bytes into the raft snapshot (Data the state
// snapshot, copied) and the state it holds. Errors wrap ErrMalformed.
func decodeSnapFile(b []byte) (raftpb.Snapshot, *state, error) {
	bad := func(format string, args ...any) (raftpb.Snapshot, *state, error) {
		return raftpb.Snapshot{}, nil, fmt.Errorf("%w snapshot file: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	switch {
	case len(b) < 12:
		return bad("%d bytes, shorter than its header", len(b))
	case string(b[:4]) != snapFileMagic:
		return bad("magic %q, want %q", b[:4], snapFileMagic)
	case b[4] != snapFileVersion:
		return bad("version %d, this broker reads %d (written by a newer broker?)", b[4], snapFileVersion)
	case b[5]|b[6]|b[7] != 0:
		return bad("reserved bytes not zero")
	}
	if got, want := crc32.Checksum(b[12:], castagnoli), binary.BigEndian.Uint32(b[8:]); got != want {
		return bad("crc32c %08x, stored %08x", got, want)
	}
	r := wire.NewReader(b[12:])
	var snap raftpb.Snapshot
	snap.Metadata.Index, snap.Metadata.Term = r.U64(), r.U64()
	cs := r.Bytes(maxConfState, "conf state")
	data := r.Bytes(MaxSnapshot, "state")
	if err := r.Done("snapshot file"); err != nil {
		return bad("%v", err)
	}
	if err := snap.Metadata.ConfState.Unmarshal(cs); err != nil {
		return bad("membership: %v", err)
	}
	st, err := decodeState(data)
	if err != nil {
		return raftpb.Snapshot{}, nil, err
	}
	if st.index != snap.Metadata.Index {
		return bad("a state as of index %d in a snapshot at index %d", st.index, snap.Metadata.Index)
	}
	snap.Data = append([]byte(nil), data...)
	return snap, st, nil
}

// writeSnapFile replaces dir's snapshot file with snap, durably: temporary file, fsync,
// rename, directory fsync. On error the old file is in place (or, after a failed directory
// fsync, one of the two).
func writeSnapFile(dir string, snap raftpb.Snapshot) (err error) {
	data, err := appendSnapFile(nil, snap)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, snapTempPrefix+"*")
	if err != nil {
		return fmt.Errorf("offsets: snapshot file: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("offsets: write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("offsets: sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("offsets: close %s: %w", tmp, err)
	}
	path := filepath.Join(dir, SnapshotFileName)
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("offsets: rename %s to %s: %w", tmp, path, err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("offsets: sync directory %s: %w", dir, err)
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return fmt.Errorf("offsets: sync directory %s: %w", dir, err)
	}
	return d.Close()
}

// readSnapFile reads dir's snapshot file, after removing temporary files a crash left. ok is
// false when there is none (a new store, or one that never took a snapshot).
func readSnapFile(dir string) (snap raftpb.Snapshot, st *state, ok bool, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return snap, nil, false, fmt.Errorf("offsets: %w", err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), snapTempPrefix) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return snap, nil, false, fmt.Errorf("offsets: remove a leftover: %w", err)
			}
		}
	}
	path := filepath.Join(dir, SnapshotFileName)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return snap, nil, false, nil
	case err != nil:
		return snap, nil, false, fmt.Errorf("offsets: %w", err)
	}
	snap, st, err = decodeSnapFile(b)
	if err != nil {
		return snap, nil, false, fmt.Errorf("%w: %s: %w", ErrCorrupt, path, err)
	}
	return snap, st, true, nil
}
