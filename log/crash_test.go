package log

import (
	"bytes"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lightq/lightq/log/vfs/crashfs"
	"github.com/lightq/lightq/wire"
)

// TestCrashLoop simulates power loss at random points (D2 in reliability.md): appends with
// rolls and retention deletes, Syncs at random points, then a kill at a random file system
// operation (often inside a roll, an index write or a retention delete) and a Crash that
// applies, drops, tears or garbles every unsynced write. After reopening:
//   - lost-acked = 0: every offset below the last durable offset Sync returned (and not
//     deleted by retention) is present with identical bytes;
//   - Verify is clean, offsets are continuous, and every batch present was appended.
//
// 200 iterations by default, 2000 with LIGHTQ_LONG=1. A failure prints the seed.
func TestCrashLoop(t *testing.T) {
	iters := 200
	if long {
		iters = 2000
	}
	if testing.Short() {
		iters = 50
	}
	var st crashStats
	for i := range iters {
		seed := uint64(1000 + i)
		if !t.Run("", func(t *testing.T) { crashOnce(t, seed, &st) }) {
			t.Fatalf("seed %d failed", seed)
		}
	}
	t.Logf("crash loop: %d iterations, %d batches acked durable (%d records), lost-acked=%d, phantom=0, corrupt=0; "+
		"kill points: %v; torn tails repaired: %d", iters, st.ackedBatches, st.ackedRecords, st.lostAcked, st.killedAt, st.repaired)
}

type crashStats struct {
	ackedBatches, ackedRecords, lostAcked, repaired int
	killedAt                                        map[string]int
}

func crashOnce(t *testing.T, seed uint64, st *crashStats) {
	rng := rand.New(rand.NewPCG(seed, 77))
	dir := t.TempDir()
	fsys := crashfs.New()
	opts := Options{
		FS:                 fsys,
		SegmentBytes:       int64(1<<10 + rng.IntN(4<<10)),
		IndexIntervalBytes: 256,
		CheckpointInterval: -1,
	}
	if rng.IntN(2) == 0 {
		opts.CheckpointInterval = 0 // default: 1 s, so Sync rarely writes it
	}
	if rng.IntN(2) == 0 {
		opts.RetentionBytes = int64(4<<10 + rng.IntN(8<<10))
	}
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("seed %d: Open: %v", seed, err)
	}
	appended := map[int64][]byte{}
	var durable int64
	// A quarter of the iterations die inside a retention delete; the rest anywhere.
	killInRetention := rng.IntN(4) == 0
	if !killInRetention {
		fsys.KillAfter(1 + rng.IntN(300))
	}
	for step := 0; step < 600; step++ {
		var err error
		switch r := rng.IntN(10); {
		case r < 7:
			n := 1 + rng.IntN(4)
			b := makeBatch(rng, n, 40+rng.IntN(400), int64(step))
			var base int64
			if base, err = l.Append(b, uint32(n)); err == nil {
				appended[base] = b
			}
		case r < 9:
			var d int64
			if d, err = l.Sync(); err == nil {
				durable = d
			}
		default:
			if killInRetention && len(l.segs) > 3 {
				opts.RetentionBytes = 1 // delete all but the active segment
				l.opts.RetentionBytes = 1
				fsys.KillAfter(1 + rng.IntN(6))
				killInRetention = false
			}
			err = l.EnforceRetention()
		}
		if err != nil {
			if dead, _, _ := fsys.Killed(); !dead {
				t.Fatalf("seed %d: error before the kill: %v", seed, err)
			}
			break
		}
	}
	if dead, op, path := fsys.Killed(); dead {
		t.Logf("killed at %s %s; durable %d next %d", op, path, durable, l.NextOffset())
		if st.killedAt == nil {
			st.killedAt = map[string]int{}
		}
		st.killedAt[killKind(op, path)]++
	}
	start := l.StartOffset()
	if err := fsys.Crash(rng); err != nil {
		t.Fatal(err)
	}

	l2, err := Open(dir, Options{FS: fsys, Logf: func(f string, a ...any) {
		t.Logf(f, a...)
		if strings.Contains(f, "torn tail") {
			st.repaired++
		}
	}})
	if err != nil {
		t.Fatalf("seed %d: Open after crash: %v", seed, err)
	}
	defer l2.Close()
	if cs, err := Verify(dir, fsys, 0); err != nil || len(cs) != 0 {
		t.Fatalf("seed %d: Verify after recovery: %v %v", seed, cs, err)
	}
	got := readAll(t, l2)
	present := map[int64]bool{}
	for _, b := range got {
		want, ok := appended[b.base]
		if !ok || !bytes.Equal(want, b.data) {
			t.Fatalf("seed %d: phantom or altered batch at %d", seed, b.base)
		}
		present[b.base] = true
	}
	// Acked: every batch below durable and at or after the start (retention) must be there.
	from := max(start, l2.StartOffset())
	for base, b := range appended {
		if base >= durable {
			continue
		}
		st.ackedBatches++
		st.ackedRecords += int(wire.PeekBatchHeaderUnchecked(b).RecordCount)
		if base >= from && !present[base] {
			st.lostAcked++
			t.Fatalf("seed %d: lost acked batch %d (durable %d, start %d, next %d)", seed, base, durable, l2.StartOffset(), l2.NextOffset())
		}
	}
	if l2.NextOffset() < durable {
		t.Fatalf("seed %d: next %d below durable %d", seed, l2.NextOffset(), durable)
	}
	// The recovered log takes appends at the right offset.
	b := makeBatch(rng, 1, 10, 0)
	if base, err := l2.Append(b, 1); err != nil || base != l2.NextOffset()-1 {
		t.Fatalf("seed %d: append after recovery: %d %v", seed, base, err)
	}
}

func killKind(op crashfs.Op, path string) string {
	switch name := filepath.Base(path); {
	case op == crashfs.OpRemove:
		return "retention-remove"
	case strings.HasSuffix(name, tmpSuffix) || strings.HasSuffix(name, indexSuffix) || strings.HasSuffix(name, timeIndexSuffix):
		return "index-" + string(op)
	case op == crashfs.OpCreate && strings.HasSuffix(name, logSuffix), op == crashfs.OpSyncDir:
		return "roll-" + string(op)
	case name == checkpointName:
		return "checkpoint-" + string(op)
	default:
		return string(op)
	}
}
