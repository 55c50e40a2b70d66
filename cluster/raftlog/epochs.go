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
	"sort"

	"github.com/lightq/lightq/log/vfs"
)

// The leader epochs file: the first index of every term the log holds, beside the log, as
// Kafka's leader-epoch-checkpoint. The term and the raft index of a stored batch are written
// by the replica after the producer sealed the batch, so its CRC does not cover them
// (wire/batch.go); a flipped bit there would go unseen, and raft's log matching trusts the
// term. The file is the second opinion every entry's term is checked against (at Open, and
// whenever a batch is read), without a second copy of the data: it changes once a term.
//
// It is rewritten whole (a temp file, synced, renamed, the directory synced) before the first
// entry of a new term is stored, so that no stored entry has a term the file does not know
// (a crash after the save and before the append leaves an epoch past the log's end, which
// Open drops). Epochs are dropped lazily: those past a cut of the log when the next term
// starts, those below the log's start at retention, all of them when a snapshot resets the
// log.
//
// Layout (big-endian):
//
//	0 magic "LQEP" | 4 version u8 = 1 | 5 reserved [3] | 8 count u32 |
//	12 crc32c of bytes 0..12 and the epochs | 16 epochs: count × (term u64 | first index u64)
//
// Terms and first indexes strictly increase. NEVER CHANGE the layout without a new version:
// it is on disk.
const (
	// EpochsFileName is the leader epochs file in a replica's directory.
	EpochsFileName = "leader-epochs"

	epochsMagic   = "LQEP"
	epochsVersion = 1
	epochsHeader  = 16
	epochSize     = 16
	// maxEpochs bounds what the decoder accepts (16 MiB of file): far more term changes than
	// a log holds between two retentions.
	maxEpochs = 1 << 20
)

// ErrBadEpochs is a leader epochs file that does not decode.
var ErrBadEpochs = errors.New("raftlog: leader epochs file damaged")

// epoch is a term and the index of its first entry.
type epoch struct {
	term, first uint64
}

// epochs is the open leader epochs file and the list it holds.
//
// Concurrency: guarded by Storage.mu.
type epochs struct {
	fsys vfs.FS
	path string
	list []epoch
	buf  []byte
}

// loadEpochs reads the file at path: found is false when there is none.
func loadEpochs(fsys vfs.FS, path string) (e *epochs, found bool, err error) {
	e = &epochs{fsys: fsys, path: path}
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return e, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("raftlog: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, false, fmt.Errorf("raftlog: %w", err)
	}
	if info.Size() > epochsHeader+maxEpochs*epochSize {
		return e, true, fmt.Errorf("%w: %s: %d bytes", ErrBadEpochs, path, info.Size())
	}
	b := make([]byte, info.Size())
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, false, fmt.Errorf("raftlog: read %s: %w", path, err)
	}
	list, err := decodeEpochs(b)
	if err != nil {
		return e, true, fmt.Errorf("%w: %s: %v", ErrBadEpochs, path, err)
	}
	e.list = list
	return e, true, nil
}

// decodeEpochs decodes a whole file.
func decodeEpochs(b []byte) ([]epoch, error) {
	if len(b) < epochsHeader {
		return nil, fmt.Errorf("%d bytes, shorter than the header", len(b))
	}
	if string(b[:4]) != epochsMagic {
		return nil, errors.New("no magic")
	}
	if b[4] != epochsVersion {
		return nil, fmt.Errorf("version %d, want %d", b[4], epochsVersion)
	}
	n := binary.BigEndian.Uint32(b[8:])
	if n > maxEpochs || len(b) != epochsHeader+int(n)*epochSize {
		return nil, fmt.Errorf("%d epochs in %d bytes", n, len(b))
	}
	if got, want := crc32.Update(crc32.Checksum(b[:12], castagnoli), castagnoli, b[epochsHeader:]), binary.BigEndian.Uint32(b[12:]); got != want {
		return nil, fmt.Errorf("crc 0x%08x, want 0x%08x", got, want)
	}
	list := make([]epoch, n)
	for i := range list {
		p := b[epochsHeader+i*epochSize:]
		list[i] = epoch{term: binary.BigEndian.Uint64(p), first: binary.BigEndian.Uint64(p[8:])}
		if i > 0 && (list[i].term <= list[i-1].term || list[i].first <= list[i-1].first) {
			return nil, fmt.Errorf("epoch %d (term %d from entry %d) does not follow term %d from entry %d",
				i, list[i].term, list[i].first, list[i-1].term, list[i-1].first)
		}
	}
	return list, nil
}

// appendEpochs encodes list after dst.
func appendEpochs(dst []byte, list []epoch) []byte {
	start := len(dst)
	dst = append(dst, epochsMagic...)
	dst = append(dst, epochsVersion, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(list)))
	dst = append(dst, 0, 0, 0, 0)
	for _, ep := range list {
		dst = binary.BigEndian.AppendUint64(dst, ep.term)
		dst = binary.BigEndian.AppendUint64(dst, ep.first)
	}
	b := dst[start:]
	binary.BigEndian.PutUint32(b[12:], crc32.Update(crc32.Checksum(b[:12], castagnoli), castagnoli, b[epochsHeader:]))
	return dst
}

// save writes the list, durable on return.
func (e *epochs) save() error {
	e.buf = appendEpochs(e.buf[:0], e.list)
	tmp := e.path + ".tmp"
	f, err := e.fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("raftlog: leader epochs: %w", err)
	}
	_, err = f.WriteAt(e.buf, 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = e.fsys.Rename(tmp, e.path)
	}
	if err == nil {
		err = e.fsys.SyncDir(filepath.Dir(e.path))
	}
	if err != nil {
		return fmt.Errorf("raftlog: save %s: %w", e.path, err)
	}
	return nil
}

// termAt is the term of entry i by the file: ok is false when i is below its first epoch
// (entries stored before the file existed, or none recorded).
func (e *epochs) termAt(i uint64) (uint64, bool) {
	n := len(e.list)
	if n > 0 && e.list[n-1].first <= i { // mostly the last one
		return e.list[n-1].term, true
	}
	k := sort.Search(n, func(k int) bool { return e.list[k].first > i }) // the first past i
	if k == 0 {
		return 0, false
	}
	return e.list[k-1].term, true
}

// covers reports whether entry i is checked against the file.
func (e *epochs) covers(i uint64) bool { return len(e.list) > 0 && e.list[0].first <= i }

// dropFrom drops the epochs starting at entry i or later, and reports whether any went.
func (e *epochs) dropFrom(i uint64) bool {
	n := len(e.list)
	for n > 0 && e.list[n-1].first >= i {
		n--
	}
	changed := n != len(e.list)
	e.list = e.list[:n]
	return changed
}

// noteAppend records that entry i of term is to be stored next (the log ends before it):
// when it starts a term, the file is saved first. Epochs at i or past it (a cut log's) go.
func (e *epochs) noteAppend(i, term uint64) error {
	changed := e.dropFrom(i)
	if t, ok := e.termAt(i); !ok || t != term {
		if n := len(e.list); n > 0 && e.list[n-1].term >= term {
			return fmt.Errorf("%w: entry %d of term %d after term %d", ErrBadEntry, i, term, e.list[n-1].term)
		}
		e.list, changed = append(e.list, epoch{term: term, first: i}), true
	}
	if !changed {
		return nil
	}
	return e.save()
}

// compactTo drops the epochs that end before entry first (the log's new first entry), and
// reports whether any went; the one first is in stays.
func (e *epochs) compactTo(first uint64) bool {
	k := 0
	for k+1 < len(e.list) && e.list[k+1].first <= first {
		k++
	}
	if k == 0 {
		return false
	}
	e.list = append(e.list[:0], e.list[k:]...)
	return true
}
