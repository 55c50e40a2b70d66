package partition

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lightq/lightq/log/vfs/crashfs"
	"github.com/lightq/lightq/wire"
)

// checkDedup sends again the last batches of every producer of w (at most the window's
// worth, all acked) and checks they are answered as duplicates at their acked offsets; then
// each producer's next batch is stored, and one with a gap refused.
func checkDedup(t *testing.T, c *cluster, w *workload, acked map[batchKey]int64) {
	t.Helper()
	for i, bs := range w.batches {
		for j := max(0, len(bs)-4); j < len(bs); j++ {
			k := w.keys[i][j]
			want, ok := acked[k]
			if !ok {
				continue
			}
			base, dup := c.produceAcked(bs[j])
			if !dup || base != want {
				t.Fatalf("producer %d sequence %d sent again: at %d, duplicate %v; acked at %d", k.pid, k.seq, base, dup, want)
			}
		}
		last := w.keys[i][len(bs)-1]
		h, _ := wire.PeekBatchHeader(bs[len(bs)-1])
		pr := newProducer(last.pid)
		pr.seq = wire.NextSequence(last.seq, h.RecordCount)
		if _, dup := c.produceAcked(pr.next(1, 10)); dup {
			t.Fatalf("producer %d: a new batch answered as a duplicate", last.pid)
		}
		pr.seq += 5
		p := c.part(c.leader())
		if o := produceWait(p, pr.next(1, 10)); !errors.Is(o.err, wire.ErrOutOfOrderSequence) {
			t.Fatalf("producer %d: a batch after a gap: %v", last.pid, o.err)
		}
	}
}

// TestRestartAll: the three replicas stop and start again from their directories (one
// without its checkpoint, so it rebuilds the producer state from its whole log); the
// producer state is the same everywhere, and duplicates are still recognised.
func TestRestartAll(t *testing.T) {
	c := newCluster(t, 20, 3, nil)
	c.leader()
	w := newWorkload(20, 400, 3, 30)
	acked, err := w.run(c, 4)
	if err != nil {
		t.Fatal(err)
	}
	c.quiet()
	before := tables(c.part(1))
	for _, id := range c.ids {
		if err := c.stop(id); err != nil {
			t.Fatalf("node %d: Close: %v", id, err)
		}
	}
	if err := os.Remove(filepath.Join(c.nodes[2].dir, CheckpointFileName)); err != nil {
		t.Fatal(err)
	}
	for _, id := range c.ids {
		c.start(id)
	}
	c.leader()
	c.quiet()
	for _, id := range c.ids {
		if got := tables(c.part(id)); got != before {
			t.Fatalf("node %d's producer state after the restart:\n%s\nbefore:\n%s", id, got, before)
		}
		exactlyOnce(t, c.part(id), acked)
	}
	checkDedup(t, c, w, acked)
	c.quiet()
	c.sameLogs(c.ids...)
}

// TestPowerLoss: with fsync=always, the power of all three brokers fails at once, at a
// random file system operation while producers stream (crashfs: every write not synced is
// kept, dropped, torn or garbled). After the restart nothing acked is lost or stored twice,
// the replicas agree byte for byte, and the producers' retries are deduplicated.
func TestPowerLoss(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run("", func(t *testing.T) { powerLossOnce(t, seed) })
	}
}

func powerLossOnce(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 77))
	fsys := crashfs.New()
	c := newCluster(t, seed, 3, func(cfg *Config) {
		cfg.Fsync = FsyncAlways
		cfg.Log.FS = fsys
		cfg.Log.SegmentBytes = 16 << 10 // rolls, so crashes land in them too
		cfg.CheckpointInterval = 20 * time.Millisecond
	})
	c.leader()
	c.abort = func() bool { dead, _, _ := fsys.Killed(); return dead }
	w := newWorkload(seed, 500, 3, 60)
	at := c.whenLeaderPast(int64(50+rng.IntN(150)), func(uint64) { fsys.KillAfter(1 + rng.IntN(100)) })
	acked, err := w.run(c, 4)
	<-at
	dead, op, path := fsys.Killed()
	if !dead {
		t.Fatalf("seed %d: the power never failed (producers: %v)", seed, err)
	}
	if err != nil && !errors.Is(err, errAborted) {
		t.Fatalf("seed %d: %v", seed, err)
	}
	t.Logf("seed %d: power failed at %s of %s with %d batches acked", seed, op, filepath.Base(path), len(acked))
	for _, id := range c.ids {
		c.stop(id) // errors expected: the disks are gone
	}
	if err := fsys.Crash(rng); err != nil {
		t.Fatal(err)
	}
	c.abort = nil
	for _, id := range c.ids {
		c.start(id)
	}
	c.leader()
	c.quiet()
	for _, id := range c.ids {
		exactlyOnce(t, c.part(id), acked)
	}
	c.sameLogs(c.ids...)
	// The producers send again, unchanged, their last acked batches (duplicates, at the
	// offsets acked) and then what was not acked.
	for i, bs := range w.batches {
		first := 0
		for first < len(bs) {
			if _, ok := acked[w.keys[i][first]]; !ok {
				break
			}
			first++
		}
		from := max(0, first-4)
		base, err := c.pipeline(bs[from:], 4)
		if err != nil {
			t.Fatalf("seed %d: producer %d after the restart: %v", seed, w.keys[i][0].pid, err)
		}
		for j, k := range w.keys[i][from:] {
			if want, ok := acked[k]; ok && base[j] != want {
				t.Fatalf("seed %d: producer %d sequence %d acked at %d before the power cut, at %d after", seed, k.pid, k.seq, want, base[j])
			}
			acked[k] = base[j]
		}
	}
	c.quiet()
	for _, id := range c.ids {
		exactlyOnce(t, c.part(id), acked)
	}
	c.sameLogs(c.ids...)
	if a, b := tables(c.part(1)), tables(c.part(3)); a != b {
		t.Fatalf("seed %d: producer states differ:\n%s\n%s", seed, a, b)
	}
}
