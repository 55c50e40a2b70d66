package offsetlog

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/lightq/lightq/log/vfs/crashfs"
)

// TestPowerLoss commits from several goroutines through crashfs, kills the "process" at a
// random file operation, cuts the power (crashfs.Crash: unsynced writes dropped, torn or
// garbled, unsynced renames maybe lost), reopens, and checks every acknowledged commit: each
// pair holds at least its last acknowledged offset and no more than its last attempted one
// (offsets only grow per pair here). Compaction is set to run often, so kills also land in
// snapshots and their renames.
func TestPowerLoss(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	fsys := crashfs.New()
	dir := t.TempDir()
	opts := Options{FS: fsys, CompactMin: 2 << 10, CompactFactor: 2, Logf: t.Logf}
	const workers, pairs = 6, 5
	var mu sync.Mutex
	acked := map[key]int64{}     // last acknowledged offset per pair
	attempted := map[key]int64{} // last offset sent per pair
	rounds := 40
	if testing.Short() {
		rounds = 10
	}
	for round := range rounds {
		s, err := Open(dir, opts)
		if err != nil {
			t.Fatalf("round %d: Open after the crash: %v", round, err)
		}
		for k, want := range acked {
			got, ok := s.Get(k.group, k.partition)
			if !ok || got < want || got > attempted[k] {
				t.Fatalf("round %d: %v = %d (present %v); acknowledged %d, attempted up to %d", round, k, got, ok, want, attempted[k])
			}
		}
		fsys.KillAfter(1 + rng.IntN(120))
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					k := key{fmt.Sprintf("g%d", w), uint32(i % pairs)}
					mu.Lock()
					off := attempted[k] + 1
					attempted[k] = off
					mu.Unlock()
					done := make(chan error, 1)
					if err := s.Commit(k.group, k.partition, off, func(err error) { done <- err }); err != nil {
						return // broken after the kill
					}
					if err := <-done; err != nil {
						if !errors.Is(err, ErrBroken) && !errors.Is(err, crashfs.ErrKilled) {
							t.Errorf("commit failed with %v", err)
						}
						return
					}
					mu.Lock()
					acked[k] = max(acked[k], off)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		s.Close()
		if dead, _, _ := fsys.Killed(); !dead {
			t.Fatalf("round %d: commits stopped but the process was not killed", round)
		}
		if err := fsys.Crash(rng); err != nil {
			t.Fatal(err)
		}
	}
	total := int64(0)
	for _, v := range acked {
		total += v
	}
	t.Logf("%d rounds, %d commits acknowledged", rounds, total)
}
