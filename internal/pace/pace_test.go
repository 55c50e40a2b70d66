package pace

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"
)

// TestUntilNeverEarly: Until returns at or after its target, for targets in the past, within
// the precise-sleep window and beyond it, and with several pacers sleeping at once.
func TestUntilNeverEarly(t *testing.T) {
	delays := []time.Duration{-time.Millisecond, 0, time.Microsecond, 20 * time.Microsecond, 50 * time.Microsecond,
		100 * time.Microsecond, 199 * time.Microsecond, 201 * time.Microsecond, 300 * time.Microsecond,
		time.Millisecond, 2500 * time.Microsecond}
	var late time.Duration
	p := New()
	defer p.Close()
	var lates []time.Duration
	for round := 0; round < 10; round++ {
		for _, d := range delays {
			target := time.Now().Add(d)
			Until(target, p)
			now := time.Now()
			if now.Before(target) {
				t.Fatalf("Until(now+%v) returned %v early", d, target.Sub(now))
			}
			late = max(late, now.Sub(target))
			lates = append(lates, now.Sub(target))
		}
	}
	sort.Slice(lates, func(i, j int) bool { return lates[i] < lates[j] })
	t.Logf("return after the target: median %v, latest %v", lates[len(lates)/2], late)

	// Concurrent sleepers too.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := New()
			defer p.Close()
			for i := 0; i < 20; i++ {
				target := time.Now().Add(time.Duration(50+37*i) * time.Microsecond)
				Until(target, p)
				if time.Now().Before(target) {
					errs <- fmt.Errorf("goroutine %d: early return", g)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
