package log

import (
	"fmt"
	"sort"
	"sync/atomic"

	"github.com/lightq/lightq/log/vfs"
	"github.com/lightq/lightq/wire"
)

// Chunk is a byte range of whole batches in one segment file: bytes [Pos, Pos+Len) of File
// hold the batches with offsets [BaseOffset, NextOffset). Send it with sendfile on File.Fd()
// or read it with File.ReadAt; never close File. The file stays open, even if retention
// deletes the segment, until Release.
type Chunk struct {
	File       vfs.File
	Pos        int64
	Len        int64
	BaseOffset int64 // base offset of the first batch (<= the offset asked for)
	NextOffset int64 // offset after the last batch: where to read next

	seg      *segment
	released atomic.Bool
	hdr      [wire.BatchHeaderSize]byte // scratch for header reads
}

// Path is the segment file the chunk lies in, for messages.
func (c *Chunk) Path() string { return c.seg.path }

// Release lets the segment file be closed. Idempotent; safe for concurrent use.
func (c *Chunk) Release() {
	if c != nil && c.released.CompareAndSwap(false, true) {
		c.seg.release()
	}
}

// RangeError is the error of a Read outside the log: Offset is not in [Start, Next]. It
// wraps ErrOffsetOutOfRange. Its text names no file, so the broker may pass it to a client.
type RangeError struct {
	Offset int64 // asked for
	Start  int64 // StartOffset at the time
	Next   int64 // NextOffset at the time
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("%v: offset %d, the log holds [%d, %d)", ErrOffsetOutOfRange, e.Offset, e.Start, e.Next)
}

func (e *RangeError) Unwrap() error { return ErrOffsetOutOfRange }

// Read returns the batches from the one containing offset: whole batches of one segment,
// ending before limit (an offset, e.g. NextOffset or DurableOffset; clamped to NextOffset)
// and within maxBytes, but always at least the first batch even if it is larger. It returns
// (nil, nil) when offset >= limit, and a *RangeError (wrapping ErrOffsetOutOfRange) when
// offset is below StartOffset or above NextOffset. Read does not wait for Appends and holds
// no lock during I/O. Safe for concurrent use; Release every Chunk.
func (l *Log) Read(offset, limit int64, maxBytes int) (*Chunk, error) {
	l.segMu.RLock()
	if l.closed {
		l.segMu.RUnlock()
		return nil, ErrClosed
	}
	start, next := l.segs[0].base, l.next.Load()
	if offset < start || offset > next {
		l.segMu.RUnlock()
		return nil, &RangeError{Offset: offset, Start: start, Next: next}
	}
	limit = min(limit, next)
	if offset >= limit {
		l.segMu.RUnlock()
		return nil, nil
	}
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].base > offset }) - 1
	s := l.segs[i]
	idx, size, segNext := s.idx, s.size, s.next
	s.refs.Add(1)
	l.segMu.RUnlock()

	c := &Chunk{File: s.f, seg: s}
	if err := c.locate(l.opts.MaxBatch, idx, size, segNext, offset, limit, int64(maxBytes)); err != nil {
		s.release()
		return nil, err
	}
	return c, nil
}

// locate fills in the chunk's range. A segment holds size bytes of batches with offsets
// [s.base, segNext). The walk trusts only each batch's base offset and length field, so a
// damaged record count or payload does not stop reads (the consumer's CRC check reports it).
func (c *Chunk) locate(maxBatch int, idx []indexEntry, size, segNext, offset, limit, maxBytes int64) error {
	s := c.seg
	pos, rel := floor(idx, uint32(offset-s.base))
	h, err := c.header(pos, size, s.base+int64(rel), maxBatch)
	if err != nil {
		return err
	}
	// Find the batch containing offset: the first whose successor starts after it.
	curBase := h.BaseOffset
	var end, nextBase int64
	for {
		end = pos + int64(h.Size())
		nb, nh, err := c.successor(end, size, segNext, curBase, maxBatch)
		if err != nil {
			return err
		}
		if nb > offset {
			nextBase, h = nb, nh
			break
		}
		pos, curBase, h = end, nb, nh
	}
	c.Pos, c.BaseOffset = pos, curBase
	// Extend by whole batches below limit and within maxBytes.
	for end < size && nextBase < limit {
		batchEnd := end + int64(h.Size())
		if batchEnd-pos > maxBytes {
			break
		}
		after, nh, err := c.successor(batchEnd, size, segNext, h.BaseOffset, maxBatch)
		if err != nil {
			return err
		}
		if after > limit {
			break
		}
		end, nextBase, h = batchEnd, after, nh
	}
	c.Len, c.NextOffset = end-pos, nextBase
	return nil
}

// header reads the batch header at pos and checks it has base offset want.
func (c *Chunk) header(pos, size, want int64, maxBatch int) (wire.BatchHeader, error) {
	h, err := readHeader(c.seg.f, c.seg.path, c.hdr[:], pos, size, maxBatch)
	if err == nil && h.BaseOffset != want {
		err = fmt.Errorf("%w: %s at %d: base offset %d, want %d", ErrCorrupt, c.seg.path, pos, h.BaseOffset, want)
	}
	return h, err
}

// successor returns the base offset of the batch starting at pos (segNext at the end) and
// its header, checking that it follows prevBase.
func (c *Chunk) successor(pos, size, segNext, prevBase int64, maxBatch int) (int64, wire.BatchHeader, error) {
	if pos == size {
		return segNext, wire.BatchHeader{}, nil
	}
	h, err := readHeader(c.seg.f, c.seg.path, c.hdr[:], pos, size, maxBatch)
	if err == nil && (h.BaseOffset <= prevBase || h.BaseOffset >= segNext) {
		err = fmt.Errorf("%w: %s at %d: base offset %d does not follow %d (segment ends at %d)", ErrCorrupt, c.seg.path, pos, h.BaseOffset, prevBase, segNext)
	}
	return h.BaseOffset, h, err
}

// OffsetForTime returns the offset of the first record whose timestamp is >= ts (unix ms),
// or NextOffset when there is none: the answer to LIST_OFFSETS by timestamp. The time index
// finds the first batch whose max timestamp is >= ts; that batch is read, decompressed if it
// is compressed, and its records walked (a batch's records need not be in time order).
// Blocking: it reads the disk, so call it from a worker, not an event loop. Safe for concurrent
// use.
func (l *Log) OffsetForTime(ts int64) (int64, error) {
	hit, err := l.batchForTime(ts)
	if err != nil || hit.seg == nil {
		return hit.next, err
	}
	defer hit.seg.release()
	s, pos := hit.seg, hit.pos
	buf := make([]byte, hit.hdr.Size())
	if _, err := s.f.ReadAt(buf, pos); err != nil {
		return 0, fmt.Errorf("log: read %s at %d: %w", s.path, pos, err)
	}
	bt, err := wire.ParseBatch(buf, l.opts.MaxBatch)
	if err != nil {
		return 0, fmt.Errorf("%w: %s at %d: %w", ErrCorrupt, s.path, pos, err)
	}
	var comp wire.Compressor
	defer comp.Close()
	records, err := comp.Decompress(nil, &bt)
	if err != nil {
		return 0, fmt.Errorf("%w: %s at %d: %w", ErrCorrupt, s.path, pos, err)
	}
	it := wire.NewRecordIter(records, bt.RecordCount, bt.BaseOffset, bt.FirstTimestamp)
	var rec wire.Record
	for it.Next(&rec) {
		if rec.Timestamp >= ts {
			return rec.Offset, nil
		}
	}
	if err := it.Err(); err != nil {
		return 0, fmt.Errorf("%w: %s at %d: %w", ErrCorrupt, s.path, pos, err)
	}
	return bt.NextOffset(), nil // max timestamp lied; the next batch is the best answer
}

// timeHit is where batchForTime lands.
type timeHit struct {
	seg  *segment // holds a reference the caller releases; nil when no batch qualifies
	pos  int64    // byte of the batch in seg
	hdr  wire.BatchHeader
	next int64 // when seg is nil: the offset after every batch looked at (NextOffset)
}

// batchForTime finds the first batch whose max timestamp is >= ts (unix ms) through the time
// index, reading only batch headers.
func (l *Log) batchForTime(ts int64) (timeHit, error) {
	l.segMu.RLock()
	if l.closed {
		l.segMu.RUnlock()
		return timeHit{}, ErrClosed
	}
	var s *segment
	for _, cand := range l.segs {
		if cand.maxTS >= ts {
			s = cand
			break
		}
	}
	if s == nil {
		next := l.next.Load()
		l.segMu.RUnlock()
		return timeHit{next: next}, nil
	}
	idx, tidx, size, segNext := s.idx, s.tidx, s.size, s.next
	s.refs.Add(1)
	l.segMu.RUnlock()

	pos, rel := floor(idx, timeFloor(tidx, ts))
	want := s.base + int64(rel)
	var buf [wire.BatchHeaderSize]byte
	for pos < size {
		h, err := readHeader(s.f, s.path, buf[:], pos, size, l.opts.MaxBatch)
		if err == nil && h.BaseOffset != want {
			err = fmt.Errorf("%w: %s at %d: base offset %d, want %d", ErrCorrupt, s.path, pos, h.BaseOffset, want)
		}
		if err != nil {
			s.release()
			return timeHit{}, err
		}
		if h.MaxTimestamp >= ts {
			return timeHit{seg: s, pos: pos, hdr: h}, nil
		}
		pos += int64(h.Size())
		want = h.NextOffset()
	}
	s.release()
	return timeHit{next: segNext}, nil
}

// InActiveSegment reports whether offset lies in the active (last) segment. Its pages were
// written recently and are most likely in the page cache; older segments may have to come from
// the disk, which a caller on an event loop must not wait for. Safe for concurrent use.
func (l *Log) InActiveSegment(offset int64) bool {
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	return !l.closed && len(l.segs) > 0 && offset >= l.segs[len(l.segs)-1].base
}

// Probe asks probe about the bytes where offset lies — the segment's file descriptor, the
// position of the nearest index entry at or before offset, and up to n bytes from there —
// without any I/O of its own, holding the segment open meanwhile. The broker uses it to ask
// the page cache whether a Read would wait for the disk. It returns false when offset is
// outside the log.
func (l *Log) Probe(offset, n int64, probe func(fd uintptr, pos, n int64) bool) bool {
	l.segMu.RLock()
	if l.closed || len(l.segs) == 0 || offset < l.segs[0].base || offset >= l.next.Load() {
		l.segMu.RUnlock()
		return false
	}
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].base > offset }) - 1
	s := l.segs[i]
	pos, _ := floor(s.idx, uint32(offset-s.base))
	n = min(n, s.size-pos)
	s.refs.Add(1)
	l.segMu.RUnlock()
	defer s.release()
	return probe(s.f.Fd(), pos, n)
}
