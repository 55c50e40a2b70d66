package raftlog

import (
	"fmt"
	"slices"

	"github.com/lightq/lightq/wire"
)

// The scrub: a walk over the sealed segments, a little at a time, that verifies every batch
// as Entries would (its length, its CRC, its control value, its base offset, its raft index
// the one after the previous entry's, its term the leader epochs file's). The log's Open
// checks the active segment, and a partition's Open reads its sealed segments only from the
// producer checkpoint on: without the scrub, a bit flipped in an old segment is found when
// the batch is read (by a consumer, or by raft for a follower far behind, which panics on a
// read error), long after the damage could have been repaired from the other replicas.

// scrubPos is where the scrub goes on: entry index at offset off, the entry before it of
// term prevTerm, valid while gen is the Storage's.
type scrubPos struct {
	valid    bool
	gen      uint64
	off      int64
	index    uint64
	prevTerm uint64
	buf      []byte
	passes   uint64
}

// ScrubResult is what one Scrub step did.
type ScrubResult struct {
	Bytes int64 // bytes of batches verified
	// Passed: the step reached the end of the sealed segments (or found none); the next
	// step starts again from the raft log's start.
	Passed bool
}

// Scrub verifies the next batches of the sealed segments, about maxBytes of them (at least
// one batch, at most Options.ReadBytes), and returns what it verified. A damaged batch is a
// *CorruptEntryError (errors.Is ErrCorrupt), naming the entry to cut from (CutDamaged, with
// the replica stopped; see cluster/partition); the next step verifies it again. The
// position survives between steps and starts over when entries are cut, the log is reset,
// or retention passes it. Safe for concurrent use; it holds the Storage's mutex during one
// step (one read of at most maxBytes), so the caller paces the steps (the rate is its).
func (s *Storage) Scrub(maxBytes int) (ScrubResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return ScrubResult{}, s.broken
	}
	sc := &s.scrub
	if !sc.valid || sc.gen != s.gen || sc.off < s.st.FirstOffset {
		*sc = scrubPos{valid: true, gen: s.gen, off: s.st.FirstOffset, index: s.st.SnapIndex + 1,
			prevTerm: s.st.SnapTerm, buf: sc.buf, passes: sc.passes}
	}
	end := s.l.NextOffset()
	if end > s.st.FirstOffset {
		end = s.activeStart(s.st.FirstOffset, end)
	}
	if sc.off >= end || sc.index > s.last {
		sc.valid = false
		sc.passes++
		return ScrubResult{Passed: true}, nil
	}
	want := min(max(maxBytes, 1), s.opts.ReadBytes)
	c, err := s.l.Read(sc.off, end, want)
	if err != nil {
		return ScrubResult{}, fmt.Errorf("raftlog: scrub: read offset %d: %w", sc.off, err)
	}
	if c == nil {
		return ScrubResult{}, fmt.Errorf("%w: %s: scrub: entry %d should be at offset %d, where the log ends", ErrCorrupt, s.dir, sc.index, sc.off)
	}
	sc.buf = slices.Grow(sc.buf[:0], int(c.Len))[:c.Len]
	_, err = c.File.ReadAt(sc.buf, c.Pos)
	path := c.Path()
	c.Release()
	if err != nil {
		return ScrubResult{}, fmt.Errorf("raftlog: scrub: read %s: %w", path, err)
	}
	var res ScrubResult
	buf := sc.buf
	for p := 0; p < len(buf) && sc.index <= s.last; {
		n := wire.BatchSize(buf[p:])
		if n < wire.BatchHeaderSize || n > len(buf)-p {
			return res, &CorruptEntryError{Index: sc.index, Offset: sc.off, Path: path,
				Reason: fmt.Sprintf("length %d of %d bytes read", n, len(buf)-p)}
		}
		e, next, err := decodeEntry(buf[p:p+n:p+n], sc.index, sc.off, s.maxBatch(), path)
		if err == nil {
			switch r := s.termProblem(e.Index, e.Term); {
			case r != "":
				err = &CorruptEntryError{Index: e.Index, Offset: sc.off, Path: path, Reason: r, Check: CheckTerm}
			case e.Term < sc.prevTerm:
				err = &CorruptEntryError{Index: e.Index, Offset: sc.off, Path: path, Check: CheckTerm,
					Reason: fmt.Sprintf("term %d after term %d: terms go down", e.Term, sc.prevTerm)}
			}
		}
		if err != nil {
			return res, err
		}
		res.Bytes += int64(n)
		sc.off, sc.index, sc.prevTerm = next, sc.index+1, e.Term
		p += n
	}
	return res, nil
}

// ScrubPasses is how many times the scrub went through every sealed segment, for tests.
func (s *Storage) ScrubPasses() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scrub.passes
}
