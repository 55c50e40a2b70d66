package broker

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	cpart "github.com/lightq/lightq/cluster/partition"
	qlog "github.com/lightq/lightq/log"
	"github.com/lightq/lightq/wire"
)

// fsyncMode is a durable topic's fsync policy.
type fsyncMode int

const (
	fsyncAlways   fsyncMode = iota // ack only after fsync; group commit
	fsyncInterval                  // fsync every interval; acks after the write
	fsyncNever                     // leave it to the OS; acks after the write
)

// durableShape is what a durable topic's options make of it.
type durableShape struct {
	mode     fsyncMode
	interval time.Duration
	logOpts  qlog.Options
	replicas int // replication.factor (1: not replicated)
}

// parseDurableOptions validates the options of a durable topic.
func parseDurableOptions(opts []wire.Option, maxBatch int) (durableShape, error) {
	sh := durableShape{mode: fsyncAlways, replicas: 1}
	sh.logOpts.SegmentBytes = 64 << 20
	sh.logOpts.MaxBatch = maxBatch
	for _, o := range opts {
		switch o.Key {
		case wire.OptionFsync:
			switch {
			case o.Value == "always":
				sh.mode = fsyncAlways
			case o.Value == "never":
				sh.mode = fsyncNever
			case strings.HasPrefix(o.Value, "interval="):
				d, err := time.ParseDuration(strings.TrimPrefix(o.Value, "interval="))
				if err != nil || d < time.Millisecond || d > time.Hour {
					return sh, answer(wire.CodeInvalidRequest, "fsync=interval=<duration> needs a duration from 1ms to 1h, got %q", o.Value)
				}
				sh.mode, sh.interval = fsyncInterval, d
			default:
				return sh, answer(wire.CodeInvalidRequest, "fsync must be always, never or interval=<duration>, got %q", o.Value)
			}
		case wire.OptionSegmentBytes, wire.OptionRetentionBytes:
			v, err := strconv.ParseInt(o.Value, 10, 64)
			if o.Key == wire.OptionSegmentBytes && (err != nil || v < int64(2*maxBatch) || v > 1<<30) {
				return sh, answer(wire.CodeInvalidRequest, "%s: %q is out of range: want an integer from %d (two max batches) to %d (1 GiB)", o.Key, o.Value, 2*maxBatch, 1<<30)
			}
			if err != nil || v < 0 {
				return sh, answer(wire.CodeInvalidRequest, "%s: %q is out of range: want an integer from 0 (no limit) to %d", o.Key, o.Value, int64(math.MaxInt64))
			}
			if o.Key == wire.OptionSegmentBytes {
				sh.logOpts.SegmentBytes = v
			} else {
				sh.logOpts.RetentionBytes = v
			}
		case wire.OptionSegmentMs, wire.OptionRetentionMs:
			v, err := strconv.ParseInt(o.Value, 10, 64)
			if err != nil || v < 0 {
				return sh, answer(wire.CodeInvalidRequest, "%s: %q is not a number of milliseconds", o.Key, o.Value)
			}
			if o.Key == wire.OptionSegmentMs {
				sh.logOpts.SegmentAge = time.Duration(v) * time.Millisecond
			} else {
				sh.logOpts.RetentionAge = time.Duration(v) * time.Millisecond
			}
		case wire.OptionReplicationFactor:
			v, err := strconv.Atoi(o.Value)
			if err != nil || v < 1 || v > wire.MaxReplicas {
				return sh, answer(wire.CodeInvalidRequest, "%s: %q is out of range: want an integer from 1 to the number of brokers in the cluster", o.Key, o.Value)
			}
			sh.replicas = v
		default:
			return sh, answer(wire.CodeInvalidRequest, "unknown option %q for a durable topic (fsync, segment.bytes, segment.ms, retention.bytes, retention.ms, replication.factor)", o.Key)
		}
	}
	return sh, nil
}

// durablePart is the durable side of a partition: its log and its syncer, which fsyncs on
// behalf of many batches at once (group commit) off the event loops.
//
// Concurrency: Append happens on producers' loops (the log serialises it); the syncer
// goroutine calls Sync and completes waiting acks through their connections' completion
// queues. mu guards waiters.
type durablePart struct {
	log   *qlog.Log
	shape durableShape
	part  *partition
	err   error // set at open: the partition could not be recovered and serves nothing
	// repl is the replica of a replicated partition, whose log is log: it has no syncer
	// (the replica fsyncs per its policy) and consumers read below its high watermark.
	repl *cpart.Partition

	kick chan struct{} // wakes the syncer; capacity 1
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	waiters []durableAck
	closed  bool // the syncer is gone: waiters are failed at once

	doneBuf []durableAck // the syncer's scratch for completed waiters
}

// durableAck is a produced batch waiting for the fsync that makes it durable.
type durableAck struct {
	c    *conn
	corr uint32
	base int64
	next int64
	at   time.Time // the PRODUCE's arrival, for lightq_produce_ack_duration_seconds (zero: metrics off)
}

// partitionDir is where partition p of topic lives.
func partitionDir(dataDir, topic string, p int) string {
	return filepath.Join(dataDir, "topics", topic, strconv.Itoa(p))
}

// openDurable opens (recovering) the log of one partition and starts its syncer. A partition
// that cannot be recovered is returned with err set, so the rest of the topic still works.
func openDurable(dir string, shape durableShape, part *partition, producers qlog.ProducerOptions, logf func(string, ...any)) *durablePart {
	d := &durablePart{shape: shape, part: part, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	part.logf = logf
	opts := shape.logOpts
	opts.Logf = logf
	opts.Producers = producers
	l, err := qlog.Open(dir, opts)
	if err != nil {
		d.err = fmt.Errorf("partition %d cannot be served: %w", part.id, err)
		close(d.done)
		return d
	}
	d.log = l
	go d.syncer()
	return d
}

// visibleLimit is the offset a consumer may read up to.
func (d *durablePart) visibleLimit(iso wire.Isolation) int64 {
	if d.repl != nil {
		return d.repl.HighWatermark()
	}
	if d.shape.mode == fsyncAlways && iso == wire.IsolationDurable {
		return d.log.DurableOffset()
	}
	return d.log.NextOffset()
}

// needsSyncForAck reports whether a batch produced with acks waits for an fsync.
func (d *durablePart) needsSyncForAck(acks wire.Acks) bool {
	return acks == wire.AcksDurable || (acks == wire.AcksWritten && d.shape.mode == fsyncAlways)
}

// waitDurable queues an ack for the batch [base, next) until it is fsynced.
func (d *durablePart) waitDurable(a durableAck) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		a.c.queueAck(pendingAck{corr: a.corr, partition: d.part.id, base: a.base, err: qlog.ErrClosed})
		return
	}
	d.waiters = append(d.waiters, a)
	d.mu.Unlock()
	d.kickSync()
}

func (d *durablePart) kickSync() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// retentionCheck is how often a partition with a retention limit looks for old segments.
const retentionCheck = 500 * time.Millisecond

// syncer fsyncs whenever there are waiters (always, or any acks=durable batch), every interval
// for the interval policy, and once at close. It also applies retention, so that deleting old
// segments never happens on an event loop.
func (d *durablePart) syncer() {
	defer close(d.done)
	var tick, retention <-chan time.Time
	if d.shape.mode == fsyncInterval {
		t := time.NewTicker(d.shape.interval)
		defer t.Stop()
		tick = t.C
	}
	if d.shape.logOpts.RetentionBytes > 0 || d.shape.logOpts.RetentionAge > 0 {
		t := time.NewTicker(retentionCheck)
		defer t.Stop()
		retention = t.C
	}
	sweep := time.NewTicker(producerSweepInterval)
	defer sweep.Stop()
	for {
		closing := false
		select {
		case <-d.kick:
		case <-sweep.C:
			d.log.ExpireProducers() // off the loops: it may wait for a roll's fsyncs
			continue
		case <-tick:
		case <-retention:
			if err := d.log.EnforceRetention(); err != nil {
				d.part.logf("retention: %v", err)
			}
			continue
		case <-d.stop:
			closing = true
		}
		if d.log.DurableOffset() < d.log.NextOffset() || d.hasWaiters() {
			start := d.part.metrics.now()
			durable, err := d.log.Sync()
			d.part.metrics.synced(start)
			d.complete(durable, err)
			if d.shape.mode == fsyncAlways {
				d.part.wakeAll() // durable data became visible to consumers
			}
		}
		if closing {
			return
		}
	}
}

func (d *durablePart) hasWaiters() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.waiters) > 0
}

// complete answers every waiter whose batch is now durable, or fails them all when the fsync
// failed (the log is then broken and refuses writes).
func (d *durablePart) complete(durable int64, err error) {
	d.mu.Lock()
	done := d.doneBuf[:0]
	keep := d.waiters[:0]
	for _, w := range d.waiters {
		if err != nil || w.next <= durable {
			done = append(done, w)
		} else {
			keep = append(keep, w)
		}
	}
	clear(d.waiters[len(keep):])
	d.waiters = keep
	d.mu.Unlock()
	for _, w := range done {
		w.c.queueAck(pendingAck{corr: w.corr, partition: d.part.id, base: w.base, err: err, start: w.at})
	}
	clear(done)
	d.doneBuf = done[:0]
}

// close stops the syncer after a last fsync and closes the log.
func (d *durablePart) close() error {
	if d.repl != nil {
		return d.repl.Close()
	}
	if d.log == nil {
		return nil
	}
	close(d.stop)
	<-d.done
	// Batches appended during the last fsync have no syncer left: fail their acks (the
	// topic is being deleted or the broker stopped).
	d.mu.Lock()
	d.closed = true
	left := d.waiters
	d.waiters = nil
	d.mu.Unlock()
	for _, w := range left {
		w.c.queueAck(pendingAck{corr: w.corr, partition: d.part.id, base: w.base, err: qlog.ErrClosed})
	}
	return d.log.Close()
}

// storageCode maps a log error to the code a client gets.
func storageCode(err error) wire.Code {
	switch {
	case errors.Is(err, qlog.ErrClosed):
		return wire.CodeUnknownTopic // the topic was deleted under the request
	case errors.Is(err, qlog.ErrStorageFull):
		return wire.CodeStorageFull
	case errors.Is(err, qlog.ErrOffsetOutOfRange):
		return wire.CodeOffsetOutOfRange
	}
	return wire.CodeStorageError
}
