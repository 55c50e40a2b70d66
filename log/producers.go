package log

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"time"

	"github.com/lightq/lightq/log/producerstate"
	"github.com/lightq/lightq/wire"
)

// The producer state of idempotent produce (package producerstate) lives in the log, under
// Log.mu, because the check of a batch's sequence, its write and the record of its offsets
// must be one step: two connections may append batches of one producer at the same moment
// (an old connection's batches still in flight after a reconnect).
//
// Persistence: the batches carry their producer fields, so the log itself is the state's
// record. At each roll the state (which then reflects every batch before the new segment) is
// written beside the new segment as <base>.producers (temp file, fsync, rename; the roll's
// directory fsync covers the rename). Open loads the newest snapshot that is valid and names
// the offset of its file, scans the batch headers of the sealed segments after it (none,
// normally), and then the active segment, which recovery reads whole anyway. A damaged or
// missing snapshot falls back to an older one, or to a scan of the whole log. The two newest
// snapshots are kept; retention deletes a snapshot with its segment.

// ErrDuplicate is what Append returns, with the batch's original base offset, for a batch
// the log already holds (the same producer, epoch and sequence numbers as one of the
// producer's last producerstate.Window batches in this log). It is not a failure: nothing
// was written, and the batch's records are at the offset returned.
var ErrDuplicate = errors.New("log: duplicate batch, already stored")

// ProducerOptions configure the producer state (Options.Producers). Zero fields take the
// defaults.
type ProducerOptions struct {
	// Disabled turns deduplication off: Append stores a batch with a producer id like any
	// other, the log keeps no producer state and writes no snapshots (existing ones are
	// left alone). For a replica, which stores what its Raft log commits and may refuse
	// nothing for idempotence reasons: its leader deduplicates before proposing.
	Disabled bool

	Expiry       time.Duration         // drop a producer idle this long (default 24 h)
	MaxProducers int                   // producer states in this log (default 10,000)
	Budget       *producerstate.Budget // a cap shared with other logs; nil: none
	Label        string                // names the partition in refusals (default the directory)
}

const (
	defaultProducerExpiry = 24 * time.Hour
	defaultMaxProducers   = 10_000
	keepSnapshots         = 2
)

func (o *ProducerOptions) config(dir string) producerstate.Config {
	c := producerstate.Config{Expiry: o.Expiry, MaxProducers: o.MaxProducers, Budget: o.Budget, Label: o.Label}
	if c.Expiry <= 0 {
		c.Expiry = defaultProducerExpiry
	}
	if c.MaxProducers <= 0 {
		c.MaxProducers = defaultMaxProducers
	}
	if c.Label == "" {
		c.Label = "log " + dir
	}
	return c
}

// checkProducer decides about a batch with a producer id. l.mu held.
func (l *Log) checkProducer(h *wire.BatchHeader, now int64) (producerstate.Result, error) {
	res, err := l.producers.Check(h, now)
	if err != nil {
		l.producerStates.Store(int64(l.producers.Len())) // Check may have dropped expired states
	}
	return res, err
}

// recordProducer notes a stored batch with a producer id. l.mu held.
func (l *Log) recordProducer(h *wire.BatchHeader, base, now int64) {
	l.producers.Record(h, base, now)
	l.producerStates.Store(int64(l.producers.Len()))
}

// ProducerStates is the number of producer states the log holds. Safe for concurrent use;
// lock-free.
func (l *Log) ProducerStates() int { return int(l.producerStates.Load()) }

// ExpireProducers drops the producer states idle past the expiry. Safe for concurrent use;
// it takes the writer lock briefly (call it from a background goroutine, not an event loop:
// the lock may be held by a roll's fsyncs).
func (l *Log) ExpireProducers() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.producers.Expire(l.opts.Now().UnixMilli())
	l.producerStates.Store(int64(l.producers.Len()))
}

// snapshotProducers writes the state, as of offset base (the new segment's base), beside the
// segment about to be created, and removes snapshots older than the ones kept. A failure is
// reported and otherwise ignored: recovery then scans from an older snapshot. l.mu held, in
// roll, before the new segment's file exists.
func (l *Log) snapshotProducers(base int64) {
	if l.opts.Producers.Disabled {
		return
	}
	now := l.opts.Now().UnixMilli()
	l.producers.Expire(now)
	l.producerStates.Store(int64(l.producers.Len()))
	l.snapBuf = l.producers.AppendSnapshot(l.snapBuf[:0], base, now)
	path := filepath.Join(l.dir, segmentName(base, producersSuffix))
	if err := l.writeFileAtomic(path, l.snapBuf); err != nil {
		l.opts.Logf("log %s: writing the producer state snapshot %s (the next start scans from an older one): %v", l.dir, path, err)
		return
	}
	if n := len(l.snaps); n == 0 || l.snaps[n-1] != base { // a roll retried after a failure writes it again
		l.snaps = append(l.snaps, base)
	}
	for len(l.snaps) > keepSnapshots {
		old := filepath.Join(l.dir, segmentName(l.snaps[0], producersSuffix))
		if err := l.fsys.Remove(old); err != nil && !errors.Is(err, fs.ErrNotExist) {
			l.opts.Logf("log %s: removing the old snapshot %s: %v", l.dir, old, err)
		}
		l.snaps = l.snaps[1:]
	}
}

// loadProducers rebuilds the producer state of the sealed segments (l.segs, at Open) from
// the newest valid snapshot (snapshots: the bases of the snapshot files found, ascending;
// each names a segment, the active one at activeBase included), then from the batch
// headers of the sealed segments from that snapshot on. The active segment's batches are
// added by recoverActive. now is the recovery time, when the states found by scanning count
// as last seen.
func (l *Log) loadProducers(snapshots []int64, activeBase, now int64) {
	if l.opts.Producers.Disabled {
		return
	}
	l.snaps = snapshots
	from := 0 // index in l.segs of the first sealed segment to scan
	for i := len(snapshots) - 1; i >= 0; i-- {
		base := snapshots[i]
		at := len(l.segs) // the active segment's snapshot: no sealed segment to scan
		if base != activeBase {
			if at = slices.IndexFunc(l.segs, func(s *segment) bool { return s.base == base }); at < 0 {
				continue
			}
		}
		path := filepath.Join(l.dir, segmentName(base, producersSuffix))
		b, err := l.readWhole(path)
		if err == nil {
			var info producerstate.SnapshotInfo
			if info, err = l.producers.LoadSnapshot(b); err == nil && info.Offset != base {
				l.producers.Release()
				err = fmt.Errorf("it covers offsets below %d, its name says %d", info.Offset, base)
			}
		}
		if err != nil {
			l.opts.Logf("log %s: producer state snapshot %s not used (falling back to an older one or a scan): %v", l.dir, path, err)
			continue
		}
		from = at
		break
	}
	l.producers.Expire(now)
	head := make([]byte, wire.MaxBatchHeaderSize)
	for _, s := range l.segs[from:] {
		l.scanProducers(s, head, now)
	}
}

// scanProducers adds the producer fields of the batches of sealed segment s, reading only
// their headers. A header that does not decode ends the scan of s (reported: reads of that
// range fail too, and Verify says more).
func (l *Log) scanProducers(s *segment, head []byte, now int64) {
	for pos := int64(0); pos < s.size; {
		n := min(int64(len(head)), s.size-pos)
		if _, err := s.f.ReadAt(head[:n], pos); err != nil {
			l.opts.Logf("log %s: scanning %s for producer state: read at %d: %v", l.dir, s.path, pos, err)
			return
		}
		h, err := wire.PeekBatchHeader(head[:n])
		if err != nil || int64(h.Size()) > s.size-pos {
			l.opts.Logf("log %s: scanning %s for producer state: batch at byte %d: %v (the state misses what follows)", l.dir, s.path, pos, err)
			return
		}
		if h.HasProducer() {
			l.producers.Record(&h, h.BaseOffset, now)
		}
		pos += int64(h.Size())
	}
}
