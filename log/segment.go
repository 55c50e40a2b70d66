package log

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lightq/lightq/log/vfs"
	"github.com/lightq/lightq/wire"
)

// File names. NEVER CHANGE: existing logs are found by them.
const (
	logSuffix       = ".log"
	indexSuffix     = ".index"
	timeIndexSuffix = ".timeindex"
	tmpSuffix       = ".tmp"
	brokenInfix     = ".broken."
	producersSuffix = ".producers" // producer state snapshot, named by the offset it covers up to
	checkpointName  = "checkpoint"
	segmentNameLen  = 20 // zero-padded decimal base offset
)

func segmentName(base int64, suffix string) string {
	return fmt.Sprintf("%0*d%s", segmentNameLen, base, suffix)
}

// parseSegmentName returns the base offset of a segment file name with the given suffix.
func parseSegmentName(name, suffix string) (int64, bool) {
	digits, ok := strings.CutSuffix(name, suffix)
	if !ok || len(digits) != segmentNameLen {
		return 0, false
	}
	base, err := strconv.ParseInt(digits, 10, 64)
	return base, err == nil && base >= 0
}

// segment is one segment file and its in-memory indexes.
type segment struct {
	base int64
	path string
	f    vfs.File
	refs atomic.Int32 // 1 for the log while listed, plus 1 per unreleased Chunk or Sync

	// Published under Log.segMu (by writers holding Log.mu).
	size  int64 // bytes of whole batches
	next  int64 // offset after the last batch
	maxTS int64 // largest batch max timestamp; math.MinInt64 when empty
	idx   []indexEntry
	tidx  []timeEntry

	// Writer state, under Log.mu only.
	sinceIndex int       // bytes appended since the last index entry
	created    time.Time // for SegmentAge
}

func newSegment(base int64, path string, f vfs.File, now time.Time) *segment {
	s := &segment{base: base, path: path, f: f, next: base, maxTS: math.MinInt64, created: now}
	s.refs.Store(1)
	return s
}

// release drops one reference; the last one closes the file.
func (s *segment) release() {
	if s.refs.Add(-1) == 0 {
		s.f.Close() // read-only use by now; nothing to lose
	}
}

// add records a batch appended at s.size. Log.segMu held for writing.
func (s *segment) add(base int64, count uint32, size int, maxTS int64, interval int) {
	if maxTS > s.maxTS {
		s.maxTS = maxTS
	}
	if s.size > 0 && s.sinceIndex >= interval {
		rel := uint32(base - s.base)
		s.idx = append(s.idx, indexEntry{rel: rel, pos: uint32(s.size)})
		if n := len(s.tidx); n == 0 || s.maxTS > s.tidx[n-1].ts {
			s.tidx = append(s.tidx, timeEntry{ts: s.maxTS, rel: rel})
		}
		s.sinceIndex = 0
	}
	s.sinceIndex += size
	s.size += int64(size)
	s.next = base + int64(count)
}

// readHeader reads the header of the batch at pos in a file holding size valid bytes and
// checks only its length: within MaxBatch and the file. The rest is left to the CRC check of
// whoever reads the batch (see Chunk.locate). buf must hold wire.BatchHeaderSize bytes.
func readHeader(f vfs.File, path string, buf []byte, pos, size int64, maxBatch int) (wire.BatchHeader, error) {
	if size-pos < wire.BatchHeaderSize {
		return wire.BatchHeader{}, fmt.Errorf("%w: %s at %d: %d bytes left, less than a batch header", ErrCorrupt, path, pos, size-pos)
	}
	if _, err := f.ReadAt(buf[:wire.BatchHeaderSize], pos); err != nil {
		return wire.BatchHeader{}, fmt.Errorf("log: read %s at %d: %w", path, pos, err)
	}
	h := wire.PeekBatchHeaderUnchecked(buf)
	if h.Size() < wire.BatchHeaderSize || h.Size() > maxBatch || int64(h.Size()) > size-pos {
		return wire.BatchHeader{}, fmt.Errorf("%w: %s at %d: batch length %d outside [%d, %d] or past the end (%d bytes left)",
			ErrCorrupt, path, pos, h.Size(), wire.BatchHeaderSize, maxBatch, size-pos)
	}
	return h, nil
}
