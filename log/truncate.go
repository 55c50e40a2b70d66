package log

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"github.com/lightq/lightq/log/producerstate"
	"github.com/lightq/lightq/wire"
)

// TruncateFrom removes every batch at or after offset, which must be the base offset of a
// stored batch (or NextOffset: nothing to do). It exists for replication: a follower whose
// uncommitted tail a new leader replaced cuts it before appending the leader's entries. The
// caller guarantees that no reader was given those batches (replicated reads stop at the
// commit index, which never covers a tail raft replaces).
//
// The cut is durable on return and survives a crash at any point as either the old log or a
// shorter continuous one that still holds every batch below offset: later segments are
// removed newest first, then the segment holding offset is cut and fsynced. A sealed segment
// holding offset becomes the active one again (its index files go, as recovery would remove
// them for an active segment). A cut at a segment's base offset removes that segment and
// makes the one before it active again (cut at its end), and so does a cut at NextOffset
// when the active segment is empty: where the segments split then depends only on the
// batches that stay, so that replicas that appended and cut a tail split their logs where
// those that never had it do, and their segment files stay byte-identical. NextOffset becomes offset and DurableOffset at most offset;
// the checkpoint moves back to the cut, so that a torn append after it is cut at the next
// start rather than taken for damage to confirmed data.
//
// Errors: ErrOffsetOutOfRange (offset below StartOffset or above NextOffset), ErrCorrupt
// (offset is not a batch boundary, or the headers on the way do not walk), ErrBroken, ErrClosed.
// Safe for concurrent use: it holds out Sync, retention and Append while it runs.
func (l *Log) TruncateFrom(offset int64) error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.retMu.Lock()
	defer l.retMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	next := l.next.Load()
	if offset == next && (len(l.segs) == 1 || l.active().size > 0) {
		return nil
	}
	if start := l.start.Load(); offset < start || offset > next {
		return fmt.Errorf("%w: truncate at %d, outside [%d, %d]", ErrOffsetOutOfRange, offset, start, next)
	}
	k := len(l.segs) - 1
	for l.segs[k].base > offset {
		k--
	}
	if k > 0 && l.segs[k].base == offset {
		k-- // cut the one before at its end, and remove this one (see above)
	}
	s := l.segs[k]
	pos, err := l.batchPosition(s, offset)
	if err != nil {
		return err
	}

	// Later segments go first, newest first, so that a crash leaves a continuous log.
	for i := len(l.segs) - 1; i > k; i-- {
		if err := l.removeSegmentFiles(l.segs[i].base); err != nil {
			return l.setBroken(fmt.Errorf("truncate at %d: %w", offset, err))
		}
	}
	if k < len(l.segs)-1 {
		if err := l.fsys.SyncDir(l.dir); err != nil {
			return l.setBroken(fmt.Errorf("fsync directory %s: %w", l.dir, err))
		}
	}
	act := s
	if k < len(l.segs)-1 {
		// s was sealed: it is active again, with a writable descriptor of its own (Chunks
		// may still hold the read-only one, closed when they release it).
		for _, suf := range []string{indexSuffix, timeIndexSuffix} {
			if err := l.fsys.Remove(filepath.Join(l.dir, segmentName(s.base, suf))); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return l.setBroken(fmt.Errorf("truncate at %d: %w", offset, err))
			}
		}
		f, err := l.fsys.OpenFile(s.path, os.O_RDWR, 0)
		if err != nil {
			return l.setBroken(fmt.Errorf("truncate at %d: reopen %s: %w", offset, s.path, err))
		}
		act = newSegment(s.base, s.path, f, l.opts.Now())
	}
	if err := act.f.Truncate(pos); err != nil {
		return l.setBroken(fmt.Errorf("truncate %s to %d: %w", act.path, pos, err))
	}
	if err := act.f.Sync(); err != nil {
		return l.setBroken(fmt.Errorf("fsync %s after truncating: %w", act.path, err))
	}
	// Rebuild the segment's in-memory indexes for what is left (a rare operation: one walk
	// of the headers).
	act.idx, act.tidx, act.maxTS, act.sinceIndex = nil, nil, math.MinInt64, 0
	act.size, act.next = pos, act.base
	if err := l.walkTail(act); err != nil {
		return l.setBroken(fmt.Errorf("truncate at %d: rebuild the index of %s: %w", offset, act.path, err))
	}
	l.segMu.Lock()
	dead := l.segs[k+1:]
	if act != s {
		dead = append(dead[:len(dead):len(dead)], s)
	}
	l.segs = append(l.segs[:k:k], act)
	l.next.Store(offset)
	if l.durable.Load() > offset {
		l.durable.Store(offset)
	}
	l.segMu.Unlock()
	for _, d := range dead {
		d.release()
	}
	if err := l.cp.rewind(act.base, act.size); err != nil {
		// A checkpoint past the cut would make a torn append after it look like corruption.
		return l.setBroken(fmt.Errorf("truncate at %d: rewind the checkpoint: %w", offset, err))
	}
	l.opts.Logf("log %s: truncated at offset %d (was %d)", l.dir, offset, next)
	return nil
}

// batchPosition finds the position in s of the batch whose base offset is offset, walking the
// headers from the nearest index entry. l.mu held.
func (l *Log) batchPosition(s *segment, offset int64) (int64, error) {
	pos, base := int64(0), s.base
	for _, e := range s.idx {
		if s.base+int64(e.rel) > offset {
			break
		}
		pos, base = int64(e.pos), s.base+int64(e.rel)
	}
	buf := make([]byte, wire.BatchHeaderSize)
	for base < offset {
		h, err := readHeader(s.f, s.path, buf, pos, s.size, l.opts.MaxBatch)
		if err != nil {
			return 0, err
		}
		if h.BaseOffset != base {
			return 0, fmt.Errorf("%w: %s at %d: base offset %d, want %d", ErrCorrupt, s.path, pos, h.BaseOffset, base)
		}
		pos += int64(h.Size())
		base = h.NextOffset()
	}
	if base != offset {
		return 0, fmt.Errorf("%w: truncate at %d: not a batch boundary in %s (a batch covers it up to %d)", ErrCorrupt, offset, s.path, base)
	}
	return pos, nil
}

func (l *Log) removeSegmentFiles(base int64) error {
	for _, suf := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		if err := l.fsys.Remove(filepath.Join(l.dir, segmentName(base, suf))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// Reset empties the log and starts it again at offset (>= 0): every segment is removed and
// the next Append gets offset, whatever the log held before. It exists for replication: a
// replica that a snapshot brings past everything it holds starts again where its leader's
// log goes on, so that its offsets stay the leader's. The producer state is dropped too.
//
// Durable on return. A crash in the middle leaves the old log, a prefix of it (segments are
// removed newest first), an empty log at offset 0 (Open's default), or the new empty log at
// offset: the caller records its intent durably first and calls Reset again after such a
// crash (cluster/raftlog does). Chunks held keep their files open until released.
//
// Errors: ErrBroken, ErrClosed. Safe for concurrent use: it holds out Sync, retention and
// Append while it runs.
func (l *Log) Reset(offset int64) error {
	if offset < 0 {
		return fmt.Errorf("log: reset at negative offset %d", offset)
	}
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.retMu.Lock()
	defer l.retMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	for i := len(l.segs) - 1; i >= 0; i-- {
		if err := l.removeSegmentFiles(l.segs[i].base); err != nil {
			return l.setBroken(fmt.Errorf("reset at %d: %w", offset, err))
		}
		if err := l.fsys.Remove(filepath.Join(l.dir, segmentName(l.segs[i].base, producersSuffix))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return l.setBroken(fmt.Errorf("reset at %d: %w", offset, err))
		}
	}
	path := filepath.Join(l.dir, segmentName(offset, logSuffix))
	f, err := l.fsys.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return l.setBroken(fmt.Errorf("reset at %d: create %s: %w", offset, path, err))
	}
	if err := l.fsys.SyncDir(l.dir); err != nil {
		f.Close()
		return l.setBroken(fmt.Errorf("fsync directory %s after reset: %w", l.dir, err))
	}
	seg := newSegment(offset, path, f, l.opts.Now())
	l.segMu.Lock()
	dead := l.segs
	l.segs = []*segment{seg}
	l.start.Store(offset)
	l.next.Store(offset)
	l.durable.Store(offset)
	l.segMu.Unlock()
	for _, d := range dead {
		d.release()
	}
	l.producers.Release()
	l.producers = producerstate.New(l.opts.Producers.config(l.dir))
	l.producerStates.Store(0)
	l.snaps = nil
	if err := l.cp.rewind(offset, 0); err != nil {
		return l.setBroken(fmt.Errorf("reset at %d: rewind the checkpoint: %w", offset, err))
	}
	l.opts.Logf("log %s: reset: empty, starting at offset %d", l.dir, offset)
	return nil
}
