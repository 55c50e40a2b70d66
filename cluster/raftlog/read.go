package raftlog

import (
	"fmt"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/wire"
)

// Reading the Raft log: the window of recent entries, the cursor of sequential reads, the
// binary search over offsets, and Entries.

// entryPos is where an entry is: its term and the offset of its batch, and, while it is in
// the cache of recent entries, the entry's type and data as Entries returns them (data
// aliases what Append stored).
type entryPos struct {
	term   uint64
	off    int64
	typ    raftpb.EntryType
	cached bool
	data   []byte
}

// window holds the positions of the most recent entries, [first, first+n), in a ring. It
// always ends at the last entry when it holds any. It is also the cache of recent entries:
// those Append stored keep their data until they hold more than limit bytes together, or
// more than keep bytes once applied (up to applied), the oldest given up first, so that
// raft's reads of entries just appended (to apply them once committed, to send them to a
// follower a little behind) do not read the log again, and an idle group holds no more
// than keep.
type window struct {
	ring    []entryPos
	head    int // ring index of entry first
	n       int
	first   uint64
	bytes   int    // data bytes cached
	limit   int    // cache limit in bytes
	keep    int    // cache limit in bytes while the oldest cached entry is applied
	applied uint64 // the last entry applied (Storage.Applied)
	evict   uint64 // entries below it are not cached
}

func newWindow(size, cacheBytes, keepBytes int) window {
	return window{ring: make([]entryPos, size), limit: cacheBytes, keep: min(keepBytes, cacheBytes)}
}

// trim gives up cached data, oldest first, while over limit, or over keep with the oldest
// cached entry applied.
func (w *window) trim() {
	for end := w.first + uint64(w.n); w.evict < end; {
		at := max(w.evict, w.first)
		if w.bytes <= w.limit && (w.bytes <= w.keep || at > w.applied) {
			return
		}
		w.forget(w.slot(at))
		w.evict = at + 1
	}
}

func (w *window) slot(i uint64) *entryPos { return &w.ring[(w.head+int(i-w.first))%len(w.ring)] }

func (w *window) get(i uint64) (entryPos, bool) {
	if w.n == 0 || i < w.first || i-w.first >= uint64(w.n) {
		return entryPos{}, false
	}
	return *w.slot(i), true
}

// forget drops p's cached data.
func (w *window) forget(p *entryPos) {
	if p.cached {
		w.bytes -= len(p.data)
		p.cached, p.data = false, nil
	}
}

// forgetRange drops the cached data of the entries [from, to) held.
func (w *window) forgetRange(from, to uint64) {
	for i := max(from, w.first); i < to && i < w.first+uint64(w.n); i++ {
		w.forget(w.slot(i))
	}
}

// reset empties the window.
func (w *window) reset() {
	w.forgetRange(w.first, w.first+uint64(w.n))
	w.n, w.evict = 0, 0
}

// oldest is the first entry held.
func (w *window) oldest() (uint64, entryPos, bool) {
	if w.n == 0 {
		return 0, entryPos{}, false
	}
	return w.first, w.ring[w.head], true
}

// push adds entry i, the one after the last held (any when empty), dropping the oldest when
// the ring is full, and then cached data past the limit, oldest first.
func (w *window) push(i uint64, p entryPos) {
	if w.n > 0 && i != w.first+uint64(w.n) {
		w.reset() // not the next entry: start over (Append keeps them consecutive)
	}
	if w.n == 0 {
		w.first, w.head = i, 0
	}
	if w.n == len(w.ring) {
		w.forget(&w.ring[w.head])
		w.head = (w.head + 1) % len(w.ring)
		w.first++
		w.n--
	}
	if p.cached && w.limit <= 0 {
		p.cached, p.data = false, nil
	}
	w.ring[(w.head+w.n)%len(w.ring)] = p
	w.n++
	if p.cached {
		w.bytes += len(p.data)
	}
	w.trim()
}

// truncateFrom drops the entries from i on.
func (w *window) truncateFrom(i uint64) {
	switch {
	case w.n == 0 || i >= w.first+uint64(w.n):
	case i <= w.first:
		w.reset()
	default:
		w.forgetRange(i, w.first+uint64(w.n))
		w.n = int(i - w.first)
		w.evict = min(w.evict, i)
	}
}

// dropThrough drops the entries up to and including i.
func (w *window) dropThrough(i uint64) {
	switch {
	case w.n == 0 || i < w.first:
	case i-w.first+1 >= uint64(w.n):
		w.reset()
	default:
		k := int(i - w.first + 1)
		w.forgetRange(w.first, i+1)
		w.head = (w.head + k) % len(w.ring)
		w.first += uint64(k)
		w.n -= k
	}
}

// cachedEntries is Entries(lo, hi, maxSize) from the cache, when it holds every entry
// asked for. s.mu held, lo in (SnapIndex, last], hi in (lo, last+1].
func (s *Storage) cachedEntries(lo, hi, maxSize uint64) ([]raftpb.Entry, bool) {
	w := &s.win
	if w.n == 0 || lo < w.first || lo < w.evict {
		return nil, false
	}
	for i := lo; i < hi; i++ {
		if !w.slot(i).cached {
			return nil, false
		}
	}
	var (
		ents []raftpb.Entry
		size uint64
	)
	for i := lo; i < hi; i++ {
		p := w.slot(i)
		e := raftpb.Entry{Term: p.term, Index: i, Type: p.typ, Data: p.data}
		es := uint64(e.Size())
		if len(ents) > 0 && size+es > maxSize {
			break
		}
		if ents == nil {
			ents = make([]raftpb.Entry, 0, hi-i)
		}
		ents = append(ents, e)
		size += es
	}
	next := lo + uint64(len(ents))
	off := s.l.NextOffset()
	if next <= s.last {
		off = w.slot(next).off
	}
	s.cur = cursor{valid: true, index: next, off: off, prevTerm: ents[len(ents)-1].Term}
	s.cacheHits++
	return ents, true
}

// cursor is where the last Entries stopped: entry index is at offset off, and entry index-1
// has term prevTerm. A follower catching up asks for index next.
type cursor struct {
	valid    bool
	index    uint64
	off      int64
	prevTerm uint64
}

// headerAt reads the header of the batch that holds offset off (in [FirstOffset,
// NextOffset)): the header, its segment file and the offset of the batch after it.
func (s *Storage) headerAt(off int64) (wire.BatchHeader, string, int64, error) {
	c, err := s.l.Read(off, s.l.NextOffset(), 1)
	if err != nil {
		return wire.BatchHeader{}, "", 0, fmt.Errorf("raftlog: read the batch at offset %d: %w", off, err)
	}
	if c == nil {
		return wire.BatchHeader{}, "", 0, fmt.Errorf("%w: %s: no batch at offset %d (the log ends at %d)", ErrCorrupt, s.dir, off, s.l.NextOffset())
	}
	defer c.Release()
	buf := s.hdr[:min(int64(len(s.hdr)), c.Len)]
	if _, err := c.File.ReadAt(buf, c.Pos); err != nil {
		return wire.BatchHeader{}, "", 0, fmt.Errorf("raftlog: read %s at %d: %w", c.Path(), c.Pos, err)
	}
	h, err := wire.PeekBatchHeader(buf)
	check := CheckBatch
	bad := func(format string, args ...any) (wire.BatchHeader, string, int64, error) {
		return h, "", 0, &CorruptEntryError{Index: h.RaftIndex, Offset: c.BaseOffset, Path: c.Path(), Reason: fmt.Sprintf(format, args...), Check: check}
	}
	switch {
	case err != nil:
		return bad("%v", err)
	case h.Magic != wire.BatchMagic2 || h.LeaderEpoch < 0:
		if h.Magic == wire.BatchMagic2 {
			check = CheckTerm
		}
		return bad("magic %d, leader epoch %d: no raft entry", h.Magic, h.LeaderEpoch)
	}
	if r := s.termProblem(h.RaftIndex, uint64(h.LeaderEpoch)); r != "" {
		check = CheckTerm
		return bad("%s", r)
	}
	return h, c.Path(), c.NextOffset, nil
}

// maxProbes bounds a search: each probe halves an offset range of at most 2^63.
const maxProbes = 128

// locate finds entry i, in [SnapIndex+1, last], by a binary search over offsets, reading the
// header of one batch per probe. It narrows [lo, hi), whose entries lie in [loOff, hiOff)
// (loOff is entry lo's offset, hiOff entry hi's), starting from the raft log's start and the
// oldest entry of the window or the end, tightened by the cursor. Every entry takes at least
// one offset, so entry i lies in [loOff+(i-lo), hiOff-(hi-i)]; a header that contradicts
// what is known is corruption. s.mu held.
func (s *Storage) locate(i uint64) (int64, uint64, error) {
	lo, loOff := s.st.SnapIndex+1, s.st.FirstOffset
	hi, hiOff := s.last+1, s.l.NextOffset()
	if first, p, ok := s.win.oldest(); ok && first > i {
		hi, hiOff = first, p.off
	}
	if c := s.cur; c.valid && c.index > lo && c.index <= i {
		lo, loOff = c.index, c.off
	} else if c.valid && c.index > i && c.index < hi {
		hi, hiOff = c.index, c.off
	}
	for range maxProbes {
		minOff, maxOff := loOff+int64(i-lo), hiOff-int64(hi-i)
		if i < lo || i >= hi || minOff > maxOff {
			return 0, 0, fmt.Errorf("%w: %s: entries %d to %d cannot lie in offsets [%d, %d)", ErrCorrupt, s.dir, lo, hi-1, loOff, hiOff)
		}
		probe := minOff + (maxOff-minOff)/2
		s.probes++
		h, path, next, err := s.headerAt(probe)
		if err != nil {
			return 0, 0, err
		}
		x, b := h.RaftIndex, h.BaseOffset
		if x < lo || x >= hi || int64(x-lo) > b-loOff || int64(hi-x) > hiOff-b || next > hiOff {
			return 0, 0, fmt.Errorf("%w: %s: the batch at offset %d has raft index %d, between entry %d at offset %d and entry %d at offset %d",
				ErrCorrupt, path, b, x, lo, loOff, hi, hiOff)
		}
		switch {
		case x == i:
			if err := s.checkBefore(i, b, path); err != nil {
				return 0, 0, err
			}
			return b, uint64(h.LeaderEpoch), nil
		case x < i:
			lo, loOff = x+1, next
		default:
			hi, hiOff = x, b
		}
	}
	return 0, 0, fmt.Errorf("%w: %s: entry %d not found in %d probes", ErrCorrupt, s.dir, i, maxProbes)
}

// checkBefore checks that the batch before the one a search found as entry i, at offset b,
// is entry i-1: a damaged raft index (the CRC does not cover it) may claim to be entry i, and
// the search would give that batch's data as entry i. The batch before has the index of the
// one at b less one, unless it is damaged too. s.mu held.
func (s *Storage) checkBefore(i uint64, b int64, path string) error {
	if i == s.st.SnapIndex+1 {
		if b != s.st.FirstOffset {
			return &CorruptEntryError{Index: i, Offset: s.st.FirstOffset, Path: path, Check: CheckRaftIndex,
				Reason: fmt.Sprintf("the batch at offset %d says it is entry %d", b, i)}
		}
		return nil
	}
	if b <= s.st.FirstOffset {
		return fmt.Errorf("%w: %s: entry %d found at offset %d, where the raft log starts", ErrCorrupt, path, i, b)
	}
	h, _, next, err := s.headerAt(b - 1)
	if err != nil {
		return err
	}
	if h.RaftIndex != i-1 || next != b {
		return &CorruptEntryError{Index: h.RaftIndex + 1, Offset: b, Path: path, Check: CheckRaftIndex,
			Reason: fmt.Sprintf("raft index %d, but the batch before it has raft index %d", i, h.RaftIndex)}
	}
	return nil
}

// offsetOf is the offset of entry i, in [SnapIndex+1, last]. s.mu held.
func (s *Storage) offsetOf(i uint64) (int64, error) {
	if p, ok := s.win.get(i); ok {
		return p.off, nil
	}
	switch {
	case i == s.st.SnapIndex+1:
		return s.st.FirstOffset, nil
	case s.cur.valid && s.cur.index == i:
		return s.cur.off, nil
	}
	off, _, err := s.locate(i)
	return off, err
}

// offsetAfter is the offset of entry i+1, for i in [SnapIndex, last]: NextOffset after the
// last entry. s.mu held.
func (s *Storage) offsetAfter(i uint64) (int64, error) {
	if i == s.last {
		return s.l.NextOffset(), nil
	}
	return s.offsetOf(i + 1)
}

// activeStart is the first offset in [lo, hi) of the log's active segment, hi when the
// active segment holds none of them (it is empty).
func (s *Storage) activeStart(lo, hi int64) int64 {
	if s.l.InActiveSegment(lo) {
		return lo
	}
	if !s.l.InActiveSegment(hi - 1) {
		return hi
	}
	a, b := lo, hi-1 // not in it, in it
	for b-a > 1 {
		if m := a + (b-a)/2; s.l.InActiveSegment(m) {
			b = m
		} else {
			a = m
		}
	}
	return b
}

// walkTail walks the batch headers of the active segment at Open: the raft indexes must be
// consecutive and the terms must not go down; the window gets the last entries, and the last
// one gives LastIndex. When the active segment is empty, the last batch of the log does.
// s.st.FirstOffset < NextOffset, and the batch there is entry SnapIndex+1.
func (s *Storage) walkTail() error {
	first, next := s.st.FirstOffset, s.l.NextOffset()
	from := s.activeStart(first, next)
	idx, prevTerm, knownPrev := s.st.SnapIndex+1, s.st.SnapTerm, true
	if from > first {
		at := from
		if from == next {
			at = next - 1 // the active segment is empty: take the last batch
		}
		h, path, nb, err := s.headerAt(at)
		if err != nil {
			return err
		}
		if h.RaftIndex <= s.st.SnapIndex+1 || int64(h.RaftIndex-(s.st.SnapIndex+1)) > h.BaseOffset-first {
			// Which entry it is, is not known: cut from the batch, whose offset the log's
			// index gives; the walk after the cut starts from the batch before.
			off := from
			if from == next {
				c, err := s.l.Read(next-1, next, 1)
				if err != nil || c == nil {
					return fmt.Errorf("raftlog: read the last batch: %w", err)
				}
				off = c.BaseOffset
				c.Release()
			}
			return &CorruptEntryError{Index: h.RaftIndex, Offset: off, Path: path, Check: CheckRaftIndex,
				Reason: fmt.Sprintf("raft index %d, but entry %d is at offset %d", h.RaftIndex, s.st.SnapIndex+1, first)}
		}
		// The first entry walked takes its index from its header: the batch before it (the
		// last of a sealed segment) must be the entry before.
		if err := s.checkBefore(h.RaftIndex, h.BaseOffset, path); err != nil {
			return err
		}
		if from == next {
			if nb != next {
				return fmt.Errorf("%w: %s: the last batch ends at %d, the log at %d", ErrCorrupt, path, nb, next)
			}
			if s.rebuilding {
				s.ep.list = append(s.ep.list, epoch{term: uint64(h.LeaderEpoch), first: h.RaftIndex})
			}
			s.win.push(h.RaftIndex, entryPos{term: uint64(h.LeaderEpoch), off: h.BaseOffset})
			s.last, s.lastTerm = h.RaftIndex, uint64(h.LeaderEpoch)
			return nil
		}
		idx, knownPrev = h.RaftIndex, false
	}
	defer func() { s.rbuf = nil }() // only Open walks
	for off := from; off < next; {
		c, err := s.l.Read(off, next, s.opts.ReadBytes)
		if err != nil {
			return fmt.Errorf("raftlog: read the log at offset %d: %w", off, err)
		}
		s.rbuf = slices.Grow(s.rbuf[:0], int(c.Len))[:c.Len]
		_, err = c.File.ReadAt(s.rbuf, c.Pos)
		path := c.Path()
		c.Release()
		if err != nil {
			return fmt.Errorf("raftlog: read %s: %w", path, err)
		}
		for p := 0; p < len(s.rbuf); {
			h, err := wire.PeekBatchHeader(s.rbuf[p:])
			check := CheckBatch
			bad := func(format string, args ...any) error {
				return &CorruptEntryError{Index: idx, Offset: off, Path: path, Reason: fmt.Sprintf(format, args...), Check: check}
			}
			switch {
			case err != nil:
				return bad("%v", err)
			case h.Magic != wire.BatchMagic2 || h.LeaderEpoch < 0:
				if h.Magic == wire.BatchMagic2 {
					check = CheckTerm
				}
				return bad("magic %d, leader epoch %d: no raft entry", h.Magic, h.LeaderEpoch)
			case h.BaseOffset != off:
				return bad("base offset %d", h.BaseOffset)
			case h.RaftIndex != idx:
				check = CheckRaftIndex
				return bad("raft index %d, want %d: the indexes are not consecutive", h.RaftIndex, idx)
			case knownPrev && uint64(h.LeaderEpoch) < prevTerm:
				check = CheckTerm
				return bad("term %d after term %d: terms go down", h.LeaderEpoch, prevTerm)
			}
			if r := s.termProblem(idx, uint64(h.LeaderEpoch)); r != "" {
				check = CheckTerm
				return bad("%s", r)
			}
			if t := uint64(h.LeaderEpoch); s.rebuilding && (len(s.ep.list) == 0 || s.ep.list[len(s.ep.list)-1].term != t) {
				s.ep.list = append(s.ep.list, epoch{term: t, first: idx})
			}
			term := uint64(h.LeaderEpoch)
			s.win.push(idx, entryPos{term: term, off: off})
			s.last, s.lastTerm = idx, term
			prevTerm, knownPrev = term, true
			idx++
			off = h.NextOffset()
			p += h.Size()
		}
	}
	return nil
}

// Entries returns the entries [lo, hi), at most maxSize bytes of them (raft's measure:
// Entry.Size) but at least one: raft.ErrCompacted when lo is at or below SnapIndex,
// raft.ErrUnavailable when hi is past LastIndex+1. Each entry's data is the stored batch (for
// a control batch, its value): the caller may keep it, and must not modify it (entries still
// in the cache of recent ones, Options.CacheBytes, share the data Append stored; older ones
// are read from the log into new memory).
func (s *Storage) Entries(lo, hi, maxSize uint64) ([]raftpb.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.broken != nil:
		return nil, s.broken
	case lo <= s.st.SnapIndex:
		return nil, raft.ErrCompacted
	case lo > hi || hi > s.last+1:
		return nil, raft.ErrUnavailable
	case lo == hi:
		return nil, nil
	}
	if ents, ok := s.cachedEntries(lo, hi, maxSize); ok {
		return ents, nil
	}
	off, err := s.offsetOf(lo)
	if err != nil {
		return nil, err
	}
	limit := s.l.NextOffset() // offset of entry hi, when known: reads stop there
	if p, ok := s.win.get(hi); ok {
		limit = p.off
	}
	var (
		ents []raftpb.Entry
		size uint64
		idx  = lo
		full bool
	)
	for idx < hi && !full {
		want := s.opts.ReadBytes
		if rem := maxSize - min(size, maxSize); rem < uint64(want) {
			want = int(max(rem, 1))
		}
		c, err := s.l.Read(off, limit, want)
		if err != nil {
			return nil, fmt.Errorf("raftlog: entries from %d: read offset %d: %w", lo, off, err)
		}
		if c == nil {
			return nil, fmt.Errorf("%w: %s: entry %d should be at offset %d, where the log ends", ErrCorrupt, s.dir, idx, off)
		}
		buf := make([]byte, c.Len) // the caller's: every entry's data aliases it
		_, err = c.File.ReadAt(buf, c.Pos)
		path := c.Path()
		c.Release()
		if err != nil {
			return nil, fmt.Errorf("raftlog: read %s: %w", path, err)
		}
		for p := 0; p < len(buf) && idx < hi; {
			n := wire.BatchSize(buf[p:])
			if n < wire.BatchHeaderSize || n > len(buf)-p {
				return nil, fmt.Errorf("%w: %s: batch at offset %d: length %d of %d bytes read", ErrCorrupt, path, off, n, len(buf)-p)
			}
			e, next, err := decodeEntry(buf[p:p+n:p+n], idx, off, s.maxBatch(), path)
			if err != nil {
				return nil, err
			}
			if err := s.checkTerm(&e, off, path, ents); err != nil {
				return nil, err
			}
			es := uint64(e.Size())
			if len(ents) > 0 && size+es > maxSize {
				full = true
				break
			}
			ents = append(ents, e)
			size += es
			idx, off = idx+1, next
			p += n
		}
	}
	s.cur = cursor{valid: true, index: idx, off: off, prevTerm: ents[len(ents)-1].Term}
	return ents, nil
}

// checkTerm checks the term of entry e, read at offset off, against the leader epochs file
// and the entry before it in ents. s.mu held.
func (s *Storage) checkTerm(e *raftpb.Entry, off int64, path string, ents []raftpb.Entry) error {
	r := s.termProblem(e.Index, e.Term)
	if n := len(ents); r == "" && n > 0 && ents[n-1].Term > e.Term {
		r = fmt.Sprintf("term %d after term %d: terms go down", e.Term, ents[n-1].Term)
	}
	if r != "" {
		return &CorruptEntryError{Index: e.Index, Offset: off, Path: path, Reason: r, Check: CheckTerm}
	}
	return nil
}

// maxBatch is the log's batch limit, which decodeEntry checks batches against.
func (s *Storage) maxBatch() int {
	if s.opts.Log.MaxBatch > 0 {
		return s.opts.Log.MaxBatch
	}
	return 1 << 20 // log.Options' default
}
