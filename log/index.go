package log

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// Index entry sizes. NEVER CHANGE: see the format in doc.go.
const (
	indexEntrySize     = 8  // relative offset u32 | position u32
	timeIndexEntrySize = 12 // timestamp i64 | relative offset u32
)

// indexEntry: the batch with base offset segment base + rel starts at byte pos.
type indexEntry struct {
	rel uint32
	pos uint32
}

// timeEntry: every batch up to and including the one at segment base + rel has a max
// timestamp <= ts, and ts is reached there.
type timeEntry struct {
	ts  int64
	rel uint32
}

// errBadIndex is why an index file is ignored (and rebuilt).
var errBadIndex = errors.New("bad index")

// decodeIndex decodes an offset index and checks that it is sane for a segment of segSize
// bytes: whole entries, relative offsets and positions strictly increasing, positions in
// (0, segSize). An entry of zeros is invalid, so zeroed space never reads as an entry.
func decodeIndex(b []byte, segSize int64) ([]indexEntry, error) {
	if len(b)%indexEntrySize != 0 {
		return nil, fmt.Errorf("%w: %d bytes is not a whole number of %d-byte entries", errBadIndex, len(b), indexEntrySize)
	}
	ents := make([]indexEntry, 0, len(b)/indexEntrySize)
	for i := 0; i < len(b); i += indexEntrySize {
		e := indexEntry{rel: binary.BigEndian.Uint32(b[i:]), pos: binary.BigEndian.Uint32(b[i+4:])}
		if e.pos == 0 || int64(e.pos) >= segSize {
			return nil, fmt.Errorf("%w: entry %d: position %d outside (0, %d)", errBadIndex, i/indexEntrySize, e.pos, segSize)
		}
		if n := len(ents); n > 0 && (e.rel <= ents[n-1].rel || e.pos <= ents[n-1].pos) {
			return nil, fmt.Errorf("%w: entry %d does not increase", errBadIndex, i/indexEntrySize)
		}
		ents = append(ents, e)
	}
	return ents, nil
}

// decodeTimeIndex decodes a time index: whole entries, timestamps and relative offsets
// strictly increasing, relative offsets below maxRel.
func decodeTimeIndex(b []byte, maxRel uint32) ([]timeEntry, error) {
	if len(b)%timeIndexEntrySize != 0 {
		return nil, fmt.Errorf("%w: %d bytes is not a whole number of %d-byte entries", errBadIndex, len(b), timeIndexEntrySize)
	}
	ents := make([]timeEntry, 0, len(b)/timeIndexEntrySize)
	for i := 0; i < len(b); i += timeIndexEntrySize {
		e := timeEntry{ts: int64(binary.BigEndian.Uint64(b[i:])), rel: binary.BigEndian.Uint32(b[i+8:])}
		if e.rel == 0 || e.rel >= maxRel {
			return nil, fmt.Errorf("%w: time entry %d: relative offset %d outside (0, %d)", errBadIndex, i/timeIndexEntrySize, e.rel, maxRel)
		}
		if n := len(ents); n > 0 && (e.ts <= ents[n-1].ts || e.rel <= ents[n-1].rel) {
			return nil, fmt.Errorf("%w: time entry %d does not increase", errBadIndex, i/timeIndexEntrySize)
		}
		ents = append(ents, e)
	}
	return ents, nil
}

func appendIndex(dst []byte, ents []indexEntry) []byte {
	for _, e := range ents {
		dst = binary.BigEndian.AppendUint32(dst, e.rel)
		dst = binary.BigEndian.AppendUint32(dst, e.pos)
	}
	return dst
}

func appendTimeIndex(dst []byte, ents []timeEntry) []byte {
	for _, e := range ents {
		dst = binary.BigEndian.AppendUint64(dst, uint64(e.ts))
		dst = binary.BigEndian.AppendUint32(dst, e.rel)
	}
	return dst
}

// floor returns the start position and relative offset of the last indexed batch whose base
// is <= rel (position 0, relative offset 0 when none is).
func floor(ents []indexEntry, rel uint32) (pos int64, at uint32) {
	i := sort.Search(len(ents), func(i int) bool { return ents[i].rel > rel })
	if i == 0 {
		return 0, 0
	}
	return int64(ents[i-1].pos), ents[i-1].rel
}

// timeFloor returns the relative offset from which to scan for the first batch with a max
// timestamp >= ts: the last entry whose running max is still < ts (0 when none).
func timeFloor(ents []timeEntry, ts int64) uint32 {
	i := sort.Search(len(ents), func(i int) bool { return ents[i].ts >= ts })
	if i == 0 {
		return 0
	}
	return ents[i-1].rel
}

// writeIndexes writes the index files of a sealed segment: each to a temp file, fsynced, then
// renamed over the final name (the roll's directory fsync makes the renames durable).
func (l *Log) writeIndexes(s *segment) error {
	l.segMu.RLock()
	idx := appendIndex(nil, s.idx)
	tidx := appendTimeIndex(nil, s.tidx)
	l.segMu.RUnlock()
	if err := l.writeFileAtomic(filepath.Join(l.dir, segmentName(s.base, indexSuffix)), idx); err != nil {
		return err
	}
	return l.writeFileAtomic(filepath.Join(l.dir, segmentName(s.base, timeIndexSuffix)), tidx)
}

func (l *Log) writeFileAtomic(path string, data []byte) error {
	tmp := path + tmpSuffix
	f, err := l.fsys.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(data, 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = l.fsys.Rename(tmp, path)
	}
	if err != nil {
		l.fsys.Remove(tmp) // best effort; Open removes leftovers too
	}
	return err
}

// readWhole reads a small file whole.
func (l *Log) readWhole(path string) ([]byte, error) {
	f, err := l.fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > maxSegmentBytes {
		return nil, fmt.Errorf("%w: %s is %d bytes", errBadIndex, path, fi.Size())
	}
	b := make([]byte, fi.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, err
	}
	return b, nil
}
