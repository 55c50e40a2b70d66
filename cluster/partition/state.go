package partition

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"github.com/lightq/lightq/log/producerstate"
	"github.com/lightq/lightq/log/vfs"
)

// Partition state: the producer state of a replica as of a raft index, as a replica keeps it
// in its directory (the checkpoint file, CheckpointFileName) and as a leader sends it in the
// raft snapshots it gives followers behind its log's start (after the segment log's own
// snapshot data, the log part). Big-endian:
//
//	 0        4        8    9     12                20       24
//	+--------+--------+----+-----+-----------------+--------+------------+-----------------
//	| "LQPT" | crc32c | ver| zero| state index u64 | log    | log part   | producer state
//	|        |        | 1  |     |                 | part n | (n bytes)  | (to the end)
//	+--------+--------+----+-----+-----------------+--------+------------+-----------------
//
// crc32c (Castagnoli) covers bytes 8 to 24 and the log part; the producer state is a
// producerstate snapshot (log/producerstate/snapshot.go), which carries its own CRC and is
// checked whole when loaded. state index: every committed entry up to it is reflected in the
// producer state. The log part is raftlog's snapshot data (cluster/raftlog/snapdata.go) in a
// snapshot, empty in the checkpoint file. NEVER CHANGE version 1: it is on disk, and replicas
// of two releases exchange it.
const (
	stateMagic      = "LQPT"
	stateVersion    = 1
	stateHeaderSize = 24
	// maxLogPart bounds the log part a decoder accepts (raftlog's is 16 bytes today; a later
	// version naming segments stays far below this).
	maxLogPart = 1 << 20

	// CheckpointFileName is the checkpoint of the producer state in a replica's directory.
	CheckpointFileName = "producers.state"
	tmpSuffix          = ".tmp"
)

// ErrBadState wraps every refusal of partition state bytes.
var ErrBadState = errors.New("partition state invalid")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendState appends the partition state (index, logPart, the table's snapshot stamped
// with offset and written) to dst.
func appendState(dst []byte, index uint64, logPart []byte, t *producerstate.Table, offset, written int64) []byte {
	start := len(dst)
	dst = append(dst, stateMagic...)
	dst = append(dst, 0, 0, 0, 0, stateVersion, 0, 0, 0)
	dst = binary.BigEndian.AppendUint64(dst, index)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(logPart)))
	dst = append(dst, logPart...)
	crc := crc32.Checksum(dst[start+8:], castagnoli)
	binary.BigEndian.PutUint32(dst[start+4:], crc)
	return t.AppendSnapshot(dst, offset, written)
}

// decodeState splits partition state b into its state index, log part and producer state
// snapshot (both aliasing b), checking everything but the producer state, which
// producerstate.Table.LoadSnapshot checks.
func decodeState(b []byte) (index uint64, logPart, producers []byte, err error) {
	bad := func(format string, args ...any) (uint64, []byte, []byte, error) {
		return 0, nil, nil, fmt.Errorf("%w: %s", ErrBadState, fmt.Sprintf(format, args...))
	}
	switch {
	case len(b) < stateHeaderSize:
		return bad("%d bytes, shorter than its header", len(b))
	case string(b[:4]) != stateMagic:
		return bad("magic %q, want %q", b[:4], stateMagic)
	case b[8] != stateVersion:
		return bad("version %d, want %d", b[8], stateVersion)
	case b[9]|b[10]|b[11] != 0:
		return bad("reserved bytes not zero")
	}
	n := binary.BigEndian.Uint32(b[20:])
	if n > maxLogPart || uint64(n) > uint64(len(b)-stateHeaderSize) {
		return bad("log part of %d bytes in %d", n, len(b)-stateHeaderSize)
	}
	end := stateHeaderSize + int(n)
	if got, want := binary.BigEndian.Uint32(b[4:]), crc32.Checksum(b[8:end], castagnoli); got != want {
		return bad("CRC-32C mismatch (stored %08x, computed %08x)", got, want)
	}
	return binary.BigEndian.Uint64(b[12:]), b[stateHeaderSize:end:end], b[end:], nil
}

// loadState decodes partition state b into a new table of cfg: the state index, the log
// part, the table.
func loadState(b []byte, cfg producerstate.Config) (uint64, []byte, *producerstate.Table, error) {
	index, logPart, prod, err := decodeState(b)
	if err != nil {
		return 0, nil, nil, err
	}
	t := producerstate.New(cfg)
	if _, err := t.LoadSnapshot(prod); err != nil {
		return 0, nil, nil, fmt.Errorf("%w: %w", ErrBadState, err)
	}
	return index, logPart, t, nil
}

// writeCheckpoint replaces the checkpoint file in dir with b, durably: a temp file written
// and synced, renamed over the old one, the directory synced.
func writeCheckpoint(fsys vfs.FS, dir string, b []byte) error {
	path := filepath.Join(dir, CheckpointFileName)
	tmp := path + tmpSuffix
	f, err := fsys.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("partition: checkpoint: %w", err)
	}
	_, err = f.WriteAt(b, 0)
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
		err = fsys.SyncDir(dir)
	}
	if err != nil {
		_ = fsys.Remove(tmp) // best effort; the next write truncates it anyway
		return fmt.Errorf("partition: write the checkpoint %s: %w", path, err)
	}
	return nil
}

// readCheckpoint reads the checkpoint file in dir; nil, nil when there is none.
func readCheckpoint(fsys vfs.FS, dir string) ([]byte, error) {
	path := filepath.Join(dir, CheckpointFileName)
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("partition: read the checkpoint: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("partition: read the checkpoint: %w", err)
	}
	const limit = 256 << 20 // far above any table (10,000 producers take 1.5 MB)
	if fi.Size() > limit {
		return nil, fmt.Errorf("%w: %s is %d bytes", ErrBadState, path, fi.Size())
	}
	b := make([]byte, fi.Size())
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("partition: read the checkpoint %s: %w", path, err)
	}
	return b, nil
}
