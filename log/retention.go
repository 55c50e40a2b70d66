package log

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
)

// EnforceRetention deletes the oldest whole segments while the log is larger than
// RetentionBytes, and those whose newest record is older than RetentionAge. It never deletes
// the active segment. The segments leave the log (StartOffset moves) under a short lock;
// their files are unlinked afterwards, oldest first, without holding up Append, and each
// descriptor is closed when the last Chunk on it is released. Safe for concurrent use.
func (l *Log) EnforceRetention() error { return l.EnforceRetentionBelow(math.MaxInt64, nil) }

// EnforceRetentionBelow is EnforceRetention for a log whose start must be recorded elsewhere
// before it moves (a replica's Raft log, whose first index and the term before it must follow
// the log start): it deletes only segments that end at or below limit (an offset), and calls
// before with the StartOffset the log will have, before any segment leaves the log. When
// before fails, nothing is deleted and its error is returned. before runs on the caller's
// goroutine holding none of the log's locks but the one that serialises retention (so
// TruncateFrom, Reset and Close wait for it): it may Read, and must not call
// EnforceRetention*, TruncateFrom, Reset or Close. nil before is allowed.
func (l *Log) EnforceRetentionBelow(limit int64, before func(newStart int64) error) error {
	l.retMu.Lock()
	defer l.retMu.Unlock()
	if l.opts.RetentionBytes <= 0 && l.opts.RetentionAge <= 0 {
		return nil
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	cutoff := l.opts.Now().Add(-l.opts.RetentionAge).UnixMilli()
	l.segMu.Lock()
	var total int64
	for _, s := range l.segs {
		total += s.size
	}
	k := 0
	for ; k < len(l.segs)-1; k++ {
		s := l.segs[k]
		byBytes := l.opts.RetentionBytes > 0 && total > l.opts.RetentionBytes
		byAge := l.opts.RetentionAge > 0 && s.maxTS < cutoff
		if !byBytes && !byAge || s.next > limit {
			break
		}
		total -= s.size
	}
	var newStart int64
	if k > 0 {
		newStart = l.segs[k].base
	}
	l.segMu.Unlock()
	l.mu.Unlock()
	if k == 0 {
		return nil
	}
	if before != nil {
		// Without l.mu, so that before may Read and Appends go on. retMu keeps the first k
		// segments as they are: only retention, TruncateFrom and Reset remove segments, and
		// Appends add them at the end.
		if err := before(newStart); err != nil {
			return err
		}
	}
	l.mu.Lock()
	if l.closed { // cannot happen while retMu is held (Close takes it); kept for safety
		l.mu.Unlock()
		return ErrClosed
	}
	l.segMu.Lock()
	dead := l.segs[:k:k]
	l.segs = append([]*segment(nil), l.segs[k:]...)
	l.start.Store(l.segs[0].base)
	l.segMu.Unlock()
	l.mu.Unlock()

	var errs []error
	for _, s := range dead {
		l.opts.Logf("log %s: retention: deleting %s (offsets %d to %d, %d bytes)", l.dir, s.path, s.base, s.next-1, s.size)
		for _, suf := range []string{logSuffix, indexSuffix, timeIndexSuffix, producersSuffix} {
			err := l.fsys.Remove(filepath.Join(l.dir, segmentName(s.base, suf)))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		s.release()
	}
	if err := l.fsys.SyncDir(l.dir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("log: retention: %w", err)
	}
	return nil
}
