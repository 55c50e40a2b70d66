package diskref

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/lightq/lightq/tools/internal/proccpu"
)

// Sizes of what a roll writes besides the segment, per batch of the sealed segment (one
// index entry per batch: a 512 KiB batch is past the broker's 4096-byte index interval), and
// of the checkpoint record (log/checkpoint.go).
const (
	indexEntry     = 8
	timeIndexEntry = 12
	checkpointRec  = 40
	checkpointSlot = 512
)

// writer is one run. The writer goroutine (run) owns seg's position and the roll; the syncer
// (always) or ticker (interval) goroutine syncs. mu guards the fields marked so; cond
// (on mu) signals written and synced changes.
type writer struct {
	cfg  config
	dir  string // where the files go: a fresh directory under cfg.dir
	buf  []byte
	mu   sync.Mutex
	cond *sync.Cond

	seg     *os.File   // active segment; guarded by mu
	files   []*os.File // every segment, closed at the end (a sync may hold an old one); writer only
	segPos  int64      // bytes in the active segment; writer only
	batches int        // batches in the active segment; writer only
	cp      *os.File   // checkpoint file
	cpSeq   int64      // checkpoints written; guarded by mu
	cpAt    time.Time  // last checkpoint; syncer only
	written int64      // guarded by mu
	synced  int64      // bytes covered by a finished sync; guarded by mu
	err     error      // first error; guarded by mu
	done    bool       // the writer is finished: the syncer exits; guarded by mu

	syncs, smallSyncs int64         // guarded by mu
	syncTotal         time.Duration // guarded by mu
	syncMax           time.Duration // guarded by mu
	rolls             int           // writer only
}

// run writes cfg.total bytes and returns the rates. Every file it made is removed before it
// returns, also on error.
func run(ctx context.Context, cfg config) (*result, error) {
	dir, err := os.MkdirTemp(cfg.dir, "diskref-")
	if err != nil {
		return nil, err
	}
	w := &writer{cfg: cfg, dir: dir, buf: make([]byte, cfg.write)}
	w.cond = sync.NewCond(&w.mu)
	for i := range w.buf {
		w.buf[i] = byte('a' + i%26)
	}
	defer func() {
		for _, f := range w.files {
			f.Close()
		}
		if w.cp != nil {
			w.cp.Close()
		}
		os.RemoveAll(dir)
	}()
	if w.cp, err = os.OpenFile(filepath.Join(dir, "checkpoint"), os.O_RDWR|os.O_CREATE, 0o644); err != nil {
		return nil, err
	}
	if err := w.newSegment(0); err != nil {
		return nil, err
	}
	stopCtx := context.AfterFunc(ctx, func() { w.fail(ctx.Err()) })
	defer stopCtx()

	var bg sync.WaitGroup
	stopTick := make(chan struct{})
	switch cfg.policy {
	case syncAlways:
		bg.Go(w.syncer)
	case syncInterval:
		bg.Go(func() { w.ticker(stopTick) })
	}
	cpu0, start := proccpu.Self(), time.Now()
	err = w.writeAll()
	if err == nil && cfg.policy == syncAlways {
		err = w.waitSynced()
	}
	end, cpu := time.Now(), proccpu.Self()-cpu0
	w.mu.Lock()
	w.done = true
	w.cond.Broadcast()
	w.mu.Unlock()
	close(stopTick)
	bg.Wait()
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	s := end.Sub(start).Seconds()
	r := &result{Bytes: w.written, Seconds: s, MBPerSec: float64(w.written) / s / 1e6, WriteSize: cfg.write,
		SegmentBytes: cfg.segment, Writes: (w.written + int64(cfg.write) - 1) / int64(cfg.write),
		Syncs: w.syncs, SmallSyncs: w.smallSyncs, Rolls: w.rolls, CPU: cpu}
	if cfg.policy == syncAlways {
		r.Inflight = cfg.inflight
	}
	if w.syncs > 0 {
		r.SyncMeanMs = w.syncTotal.Seconds() * 1000 / float64(w.syncs)
		r.SyncMaxMs = w.syncMax.Seconds() * 1000
	}
	return r, nil
}

// fail records the first error and wakes everyone.
func (w *writer) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.cond.Broadcast()
	w.mu.Unlock()
}

// writeAll is the producer and the broker's append: batch after batch, rolling segments.
func (w *writer) writeAll() error {
	limit := int64(w.cfg.inflight) * int64(w.cfg.write)
	for sent := int64(0); sent < w.cfg.total; {
		n := int(min(int64(w.cfg.write), w.cfg.total-sent))
		if w.segPos > 0 && w.segPos+int64(n) > w.cfg.segment {
			if err := w.roll(); err != nil {
				w.fail(err)
				return err
			}
		}
		w.mu.Lock()
		for w.cfg.policy == syncAlways && w.written-w.synced >= limit && w.err == nil {
			w.cond.Wait() // every batch in flight waits for its ack
		}
		err, seg := w.err, w.seg
		w.mu.Unlock()
		if err != nil {
			return err
		}
		if _, err := seg.WriteAt(w.buf[:n], w.segPos); err != nil {
			w.fail(err)
			return err
		}
		w.segPos += int64(n)
		w.batches++
		sent += int64(n)
		w.mu.Lock()
		w.written = sent
		w.cond.Broadcast()
		w.mu.Unlock()
	}
	return nil
}

// waitSynced waits until the syncer has covered everything written.
func (w *writer) waitSynced() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.synced < w.written && w.err == nil {
		w.cond.Wait()
	}
	return w.err
}

// syncData syncs a segment's data with the configured call and counts it.
func (w *writer) syncData(f *os.File) error {
	t := time.Now()
	var err error
	if w.cfg.fsync {
		err = f.Sync()
	} else {
		err = fdatasync(f)
	}
	d := time.Since(t)
	w.mu.Lock()
	w.syncs++
	w.syncTotal += d
	w.syncMax = max(w.syncMax, d)
	w.mu.Unlock()
	if err != nil {
		return fmt.Errorf("sync %s: %w", f.Name(), err)
	}
	return nil
}

// covered marks everything up to target as synced.
func (w *writer) covered(target int64) {
	w.mu.Lock()
	w.synced = max(w.synced, target)
	w.cond.Broadcast()
	w.mu.Unlock()
}

// syncer is the always policy's group commit, as durablePart.syncer and Log.Sync: whenever
// something was written since the last sync, sync the active segment, which covers every
// byte written before the sync began; then the checkpoint, at most once per interval.
func (w *writer) syncer() {
	for {
		w.mu.Lock()
		for w.synced >= w.written && !w.done && w.err == nil {
			w.cond.Wait()
		}
		if w.done || w.err != nil {
			w.mu.Unlock()
			return
		}
		target, seg := w.written, w.seg
		w.mu.Unlock()
		if err := w.syncData(seg); err != nil {
			w.fail(err)
			return
		}
		w.covered(target)
		if time.Since(w.cpAt) >= w.cfg.checkpointEvery {
			if err := w.checkpoint(); err != nil {
				w.fail(err)
				return
			}
			w.cpAt = time.Now()
		}
	}
}

// ticker is the interval policy: a sync every interval when something is unsynced.
func (w *writer) ticker(stop <-chan struct{}) {
	t := time.NewTicker(w.cfg.interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		w.mu.Lock()
		target, seg := w.written, w.seg
		pending := w.synced < target
		w.mu.Unlock()
		if pending {
			if err := w.syncData(seg); err != nil {
				w.fail(err)
				return
			}
			w.covered(target)
		}
	}
}

// roll is Log.roll: sync the full segment (on the writer: appends wait), write its index
// files, create the next segment, sync the directory, write the checkpoint.
func (w *writer) roll() error {
	w.mu.Lock()
	old, written := w.seg, w.written
	w.mu.Unlock()
	if err := w.syncData(old); err != nil {
		return err
	}
	w.covered(written)
	for _, idx := range []struct {
		suffix string
		entry  int
	}{{".index", indexEntry}, {".timeindex", timeIndexEntry}} {
		if err := w.smallFile(fmt.Sprintf("%020d%s", w.rolls, idx.suffix), (w.batches-1)*idx.entry); err != nil {
			return err
		}
	}
	w.rolls++
	if err := w.newSegment(w.rolls); err != nil {
		return err
	}
	if err := w.syncDir(); err != nil {
		return err
	}
	return w.checkpoint()
}

// newSegment creates segment file n and makes it the active one.
func (w *writer) newSegment(n int) error {
	f, err := os.OpenFile(filepath.Join(w.dir, fmt.Sprintf("%020d.log", n)), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	w.files = append(w.files, f)
	w.segPos, w.batches = 0, 0
	w.mu.Lock()
	w.seg = f
	w.mu.Unlock()
	return nil
}

// smallFile writes n bytes to name atomically: temp file, sync, close, rename.
func (w *writer) smallFile(name string, n int) error {
	path := filepath.Join(w.dir, name)
	f, err := os.OpenFile(path+".tmp", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(w.buf[:min(max(n, 0), len(w.buf))], 0)
	if err == nil {
		err = w.smallSync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(path+".tmp", path)
	}
	return err
}

// checkpoint writes the 40-byte record into the next of two 512-byte slots and syncs it.
func (w *writer) checkpoint() error {
	w.mu.Lock()
	w.cpSeq++
	slot := w.cpSeq % 2
	w.mu.Unlock()
	if _, err := w.cp.WriteAt(w.buf[:checkpointRec], slot*checkpointSlot); err != nil {
		return err
	}
	return w.smallSync(w.cp)
}

func (w *writer) syncDir() error {
	d, err := os.Open(w.dir)
	if err != nil {
		return err
	}
	err = w.smallSync(d)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// smallSync fsyncs a file that is not segment data, as the broker does (os.File.Sync).
func (w *writer) smallSync(f *os.File) error {
	w.mu.Lock()
	w.smallSyncs++
	w.mu.Unlock()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", f.Name(), err)
	}
	return nil
}
