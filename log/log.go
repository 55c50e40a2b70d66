package log

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lightq/lightq/log/producerstate"
	"github.com/lightq/lightq/log/vfs"
	"github.com/lightq/lightq/wire"
)

// Errors. Every error the package returns wraps one of these (or a wire error for a batch
// Append refuses), with the file and position when there is one.
var (
	// ErrStorageFull: the disk is full. Nothing was written; a later Append retries.
	ErrStorageFull = errors.New("log: storage full")
	// ErrBroken: a failed fsync or an I/O error the log cannot reason about. Sticky: every
	// later Append and Sync fails with it until the log is reopened.
	ErrBroken = errors.New("log: broken by an earlier I/O error")
	// ErrOffsetOutOfRange: Read below StartOffset or above NextOffset (as a *RangeError).
	ErrOffsetOutOfRange = errors.New("log: offset out of range")
	// ErrCorrupt: stored bytes fail their checks where a torn write cannot explain it.
	ErrCorrupt = errors.New("log: corrupt segment")
	// ErrClosed: the log was closed.
	ErrClosed = errors.New("log: closed")
)

// Options configure a Log. The zero value gives the defaults.
type Options struct {
	FS                 vfs.FS        // default vfs.OS
	SegmentBytes       int64         // roll when the active segment would exceed this (default 64 MiB, max 1 GiB)
	SegmentAge         time.Duration // roll when the active segment is older than this (0 = never)
	IndexIntervalBytes int           // one sparse index entry per this many bytes (default 4096)
	RetentionBytes     int64         // delete oldest whole segments while the log is larger (<=0: no limit)
	RetentionAge       time.Duration // delete whole segments whose newest record is older (0: keep)
	MaxBatch           int           // largest batch accepted (default 1 MiB); recovery treats larger length fields as corrupt
	// CheckpointInterval is how often Sync records the durable position in the checkpoint
	// file, which recovery uses to tell a torn tail from corruption (see the package doc).
	// Default 1 s; negative: at every Sync.
	CheckpointInterval time.Duration
	Now                func() time.Time                 // clock, default time.Now
	Logf               func(format string, args ...any) // recovery and corruption reports; default none
	// Producers configures the deduplication of batches with a producer id (see
	// producers.go and ErrDuplicate).
	Producers ProducerOptions
	// CutDamage makes Open cut the active segment at a damaged batch, whatever follows it,
	// as it cuts a torn tail (the cut bytes copied aside), instead of refusing the log. For
	// a replica, whose peers hold the same bytes and bring the cut part back (see
	// cluster/replica's handling of lost entries); never for a log that is the only copy.
	CutDamage bool
}

const (
	defaultSegmentBytes = 64 << 20
	maxSegmentBytes     = 1 << 30 // positions in the index are u32
	defaultIndexBytes   = 4096
	defaultMaxBatch     = 1 << 20
)

func (o *Options) setDefaults() error {
	if o.FS == nil {
		o.FS = vfs.OS
	}
	if o.SegmentBytes == 0 {
		o.SegmentBytes = defaultSegmentBytes
	}
	if o.IndexIntervalBytes == 0 {
		o.IndexIntervalBytes = defaultIndexBytes
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = defaultMaxBatch
	}
	if o.CheckpointInterval == 0 {
		o.CheckpointInterval = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	switch {
	case o.SegmentBytes < 0 || o.SegmentBytes > maxSegmentBytes:
		return fmt.Errorf("log: segment bytes %d outside (0, %d]", o.SegmentBytes, maxSegmentBytes)
	case o.MaxBatch < wire.BatchHeaderSize || o.MaxBatch > 256<<20:
		return fmt.Errorf("log: max batch %d outside [%d, 256 MiB]", o.MaxBatch, wire.BatchHeaderSize)
	case o.IndexIntervalBytes < 0:
		return fmt.Errorf("log: negative index interval %d", o.IndexIntervalBytes)
	}
	return nil
}

// Log is one partition: a directory of segments. See the package doc for which methods are
// safe for concurrent use.
type Log struct {
	dir  string
	opts Options
	fsys vfs.FS

	// mu serialises the writers: Append, roll, the list edit of EnforceRetention, Close.
	mu     sync.Mutex
	broken error // sticky, wraps ErrBroken; guarded by mu
	closed bool  // guarded by mu and segMu (both held to set it)

	// segMu guards segs and each segment's published fields (size, next, maxTS, idx, tidx).
	// Writers hold mu and take segMu only to publish; readers take segMu.RLock only to
	// snapshot, never across I/O.
	segMu sync.RWMutex
	segs  []*segment // oldest first; the last is active

	syncMu sync.Mutex // serialises Sync
	retMu  sync.Mutex // serialises EnforceRetention

	cp checkpointer // has its own leaf lock

	// producers is the producer state of idempotent produce, snaps the bases of the snapshot
	// files kept (ascending), snapBuf the encoding scratch: all guarded by mu.
	// producerStates mirrors producers.Len() for lock-free readers.
	producers      *producerstate.Table
	snaps          []int64
	snapBuf        []byte
	producerStates atomic.Int64

	// damagedTail is what Open cut from the active segment at a damaged batch followed by
	// valid ones (CutDamage), from the damaged batch on; nil when none. Set by Open only.
	damagedTail []byte

	start   atomic.Int64
	next    atomic.Int64
	durable atomic.Int64
}

// StartOffset is the oldest offset still stored. Safe for concurrent use; lock-free.
func (l *Log) StartOffset() int64 { return l.start.Load() }

// NextOffset is the high watermark: the offset the next record gets. Everything below it is
// readable. Safe for concurrent use; lock-free.
func (l *Log) NextOffset() int64 { return l.next.Load() }

// DurableOffset: everything below it has been fsynced. Safe for concurrent use; lock-free.
func (l *Log) DurableOffset() int64 { return l.durable.Load() }

// Dir is the log's directory.
func (l *Log) Dir() string { return l.dir }

func (l *Log) active() *segment { return l.segs[len(l.segs)-1] }

// Append writes one whole batch, already validated with wire.ParseBatch, holding recordCount
// records. It rewrites the batch's base offset in place in the caller's slice (only when it
// differs: a batch that has it already is only read, so other goroutines may read it
// meanwhile), writes it with one write, rolls the segment first when needed, and returns the base offset.
//
// A batch with a producer id (magic 2) is first checked against the producer's state (unless
// Options.Producers.Disabled): a
// duplicate of one of its last batches returns that batch's base offset with ErrDuplicate
// and writes nothing; a batch out of sequence, of a fenced epoch or of an unknown producer,
// or one that would start a state past a cap, is refused with an error wrapping
// wire.ErrOutOfOrderSequence, wire.ErrProducerFenced, wire.ErrUnknownProducer or
// producerstate.ErrTooManyProducers (see package producerstate).
//
// Errors: ErrStorageFull when the disk is full (the partial bytes are cut back, so the file
// ends at the last whole batch; retry later), ErrBroken (sticky) after an I/O error the log
// cannot reason about, ErrClosed. Safe for concurrent use: Appends are serialised.
func (l *Log) Append(batch []byte, recordCount uint32) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return 0, err
	}
	size := len(batch)
	if size > l.opts.MaxBatch {
		return 0, fmt.Errorf("log: append: %w: %d bytes, limit %d", wire.ErrBatchTooLarge, size, l.opts.MaxBatch)
	}
	h, err := wire.PeekBatchHeader(batch)
	switch {
	case err != nil:
		return 0, fmt.Errorf("log: append: %w", err)
	case h.Size() != size:
		return 0, fmt.Errorf("log: append: %w: %d bytes, length field says %d", wire.ErrCorruptBatch, size, h.Size())
	case recordCount == 0 || h.RecordCount != recordCount:
		return 0, fmt.Errorf("log: append: %w: record count %d, header says %d", wire.ErrCorruptBatch, recordCount, h.RecordCount)
	}
	var now int64
	dedup := h.HasProducer() && !l.opts.Producers.Disabled
	if dedup {
		now = l.opts.Now().UnixMilli()
		res, err := l.checkProducer(&h, now)
		switch {
		case err != nil:
			return 0, err
		case res.Duplicate:
			return res.Base, ErrDuplicate
		}
	}
	seg := l.active()
	if seg.size > 0 && (seg.size+int64(size) > l.opts.SegmentBytes ||
		l.opts.SegmentAge > 0 && l.opts.Now().Sub(seg.created) >= l.opts.SegmentAge) {
		if err := l.roll(); err != nil {
			return 0, err
		}
		seg = l.active()
	}
	base := l.next.Load()
	if h.BaseOffset != base {
		// Only where it differs: a replicated leader's entry has it already and may be
		// read by the goroutines sending it to the followers meanwhile.
		wire.SetBaseOffset(batch, base)
	}
	n, err := seg.f.WriteAt(batch, seg.size)
	if err != nil || n != size {
		return 0, l.writeFailed(seg, n, err)
	}
	l.segMu.Lock()
	seg.add(base, recordCount, size, h.MaxTimestamp, l.opts.IndexIntervalBytes)
	l.next.Store(base + int64(recordCount))
	l.segMu.Unlock()
	if dedup {
		l.recordProducer(&h, base, now)
	}
	return base, nil
}

// writable reports why the log cannot be written. l.mu held.
func (l *Log) writable() error {
	if l.closed {
		return ErrClosed
	}
	return l.broken
}

// setBroken makes the log broken (sticky) and returns the error. l.mu held.
func (l *Log) setBroken(cause error) error {
	if l.broken == nil {
		l.broken = fmt.Errorf("%w: %w", ErrBroken, cause)
		l.opts.Logf("log %s: broken: %v", l.dir, cause)
	}
	return l.broken
}

// writeFailed handles a failed or short write of n bytes: it cuts the partial bytes back so
// the file ends at the last whole batch. l.mu held.
func (l *Log) writeFailed(seg *segment, n int, err error) error {
	if err == nil {
		err = io.ErrShortWrite
	}
	if n > 0 {
		if terr := seg.f.Truncate(seg.size); terr != nil {
			return l.setBroken(fmt.Errorf("cut back a partial write in %s at %d: %w (write: %v)", seg.path, seg.size, terr, err))
		}
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, io.ErrShortWrite) {
		return fmt.Errorf("%w: %s at %d: %w", ErrStorageFull, seg.path, seg.size, err)
	}
	return l.setBroken(fmt.Errorf("write %s at %d: %w", seg.path, seg.size, err))
}

// Sync fsyncs everything appended before the call and returns the offset below which
// everything is durable. It does not hold up Appends during the fsync (group commit: call it
// from one syncer goroutine). A failed fsync makes the log broken (sticky): Sync then never
// reports progress again. Safe for concurrent use.
func (l *Log) Sync() (int64, error) {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.mu.Lock()
	if err := l.writable(); err != nil {
		l.mu.Unlock()
		return l.durable.Load(), err
	}
	seg := l.active()
	target, size := l.next.Load(), seg.size
	seg.refs.Add(1)
	l.mu.Unlock()
	defer seg.release()

	if target > l.durable.Load() {
		if err := seg.f.Sync(); err != nil {
			l.mu.Lock()
			err = l.setBroken(fmt.Errorf("fsync %s: %w", seg.path, err))
			l.mu.Unlock()
			return l.durable.Load(), err
		}
		l.advanceDurable(target)
	}
	l.cp.maybeWrite(seg.base, size, l.opts.CheckpointInterval, l.opts.Now())
	return l.durable.Load(), nil
}

func (l *Log) advanceDurable(to int64) {
	for {
		cur := l.durable.Load()
		if to <= cur || l.durable.CompareAndSwap(cur, to) {
			return
		}
	}
}

// roll seals the active segment and starts a new one at NextOffset. Order matters for
// recovery, which scans only the last segment: the old segment is fsynced before the new
// file exists, then its index files are written (tmp, fsync, rename), then the new file is
// created and the directory fsynced. l.mu held.
func (l *Log) roll() error {
	old := l.active()
	if err := old.f.Sync(); err != nil {
		return l.setBroken(fmt.Errorf("fsync %s before roll: %w", old.path, err))
	}
	l.advanceDurable(old.next)
	if err := l.writeIndexes(old); err != nil {
		l.opts.Logf("log %s: writing the index of %s (rebuilt at the next start): %v", l.dir, old.path, err)
	}
	base := l.next.Load()
	l.snapshotProducers(base)
	path := filepath.Join(l.dir, segmentName(base, logSuffix))
	f, err := l.fsys.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return fmt.Errorf("%w: create %s: %w", ErrStorageFull, path, err)
		}
		return fmt.Errorf("log: roll: %w", err)
	}
	if err := l.fsys.SyncDir(l.dir); err != nil {
		f.Close()
		return l.setBroken(fmt.Errorf("fsync directory %s after creating %s: %w", l.dir, path, err))
	}
	seg := newSegment(base, path, f, l.opts.Now())
	l.segMu.Lock()
	l.segs = append(l.segs, seg)
	l.segMu.Unlock()
	if err := l.cp.write(base, 0); err != nil {
		l.opts.Logf("log %s: checkpoint: %v", l.dir, err)
	}
	return nil
}

// Close syncs the active segment, records a final checkpoint and closes the files. Chunks
// still held keep their segment files open until released. Safe to call concurrently with
// other methods (they then fail with ErrClosed); idempotent.
func (l *Log) Close() error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.retMu.Lock()
	defer l.retMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	var err error
	seg := l.active()
	if l.broken == nil {
		if err = seg.f.Sync(); err == nil {
			l.advanceDurable(l.next.Load())
			err = l.cp.write(seg.base, seg.size)
		} else {
			err = l.setBroken(fmt.Errorf("fsync %s at close: %w", seg.path, err))
		}
	}
	l.segMu.Lock()
	l.closed = true
	segs := l.segs
	l.segMu.Unlock()
	l.producers.Release()
	l.producerStates.Store(0)
	for _, s := range segs {
		s.release()
	}
	if cerr := l.cp.close(); err == nil {
		err = cerr
	}
	return err
}
