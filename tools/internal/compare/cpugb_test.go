package compare

import (
	"errors"
	"math"
	"sync"
	"testing"
	"time"
)

func TestProcSeriesAt(t *testing.T) {
	s := &procSeries{}
	if s.at(5) != 0 {
		t.Error("an empty series used CPU")
	}
	for _, p := range []cpuPoint{{100, 0}, {200, 1}, {150, 9} /* out of order: dropped */, {400, 0.5} /* lower: kept at 1 */, {500, 3}} {
		s.add(p.t, p.cpu)
	}
	for _, c := range []struct {
		t    int64
		want float64
	}{{50, 0}, {100, 0}, {150, 0.5}, {200, 1}, {300, 1}, {450, 2}, {500, 3}, {900, 3}} {
		if got := s.at(c.t); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("at(%d) = %v, want %v", c.t, got, c.want)
		}
	}
	// The process exits at 420 with 1.2 s in all (rusage): later samples go, none exceeds it.
	s.exit(420, 1.2)
	if want := []cpuPoint{{100, 0}, {200, 1}, {400, 1}, {420, 1.2}}; len(s.pts) != len(want) || !s.done {
		t.Fatalf("after exit: %v", s.pts)
	} else {
		for i := range want {
			if s.pts[i] != want[i] {
				t.Errorf("after exit: point %d = %v, want %v", i, s.pts[i], want[i])
			}
		}
	}
	s2 := &procSeries{}
	s2.add(100, 0.5)
	s2.add(200, 2)
	s2.exit(300, 1) // stat said more than rusage: clamped
	if s2.at(200) != 1 || s2.at(1000) != 1 {
		t.Errorf("clamped series: %v", s2.pts)
	}
}

// TestCPUSamplerWindow: roles add up over the window, a process's start counts as zero, an
// exited one ends at its rusage, and unreadable stat files are skipped.
func TestCPUSamplerWindow(t *testing.T) {
	var mu sync.Mutex
	cpu := map[int]float64{1: 10, 2: 0.5, 3: 0}
	read := func(pid int) (float64, error) {
		mu.Lock()
		defer mu.Unlock()
		v, ok := cpu[pid]
		if !ok {
			return 0, errors.New("no such process")
		}
		return v, nil
	}
	s := &cpuSampler{read: read}
	t0 := time.Now()
	s.track("server", 1, time.Time{}) // running already: sampled at 10 s
	s.track("pub", 2, t0)             // started at t0 with 0
	s.track("sub", 3, t0)
	s.track("sub", 4, t0) // its stat file cannot be read: only its exit counts
	mu.Lock()
	cpu[1], cpu[2], cpu[3] = 12, 1.5, 0.25
	mu.Unlock()
	s.sample()
	s.exited(4, time.Now(), 0.75)
	w := s.window(t0.UnixNano(), time.Now().Add(time.Hour).UnixNano())
	// server 12-10 (its first sample is after t0), pub 1.5, sub 0.25 + 0.75.
	for role, want := range map[string]float64{"server": 2, "pub": 1.5, "sub": 1} {
		if math.Abs(w[role]-want) > 1e-9 {
			t.Errorf("%s used %v, want %v (all: %v)", role, w[role], want, w)
		}
	}
	g := perGB(w, 2e9)
	for k, want := range map[string]float64{"cpu_gb_broker": 1, "cpu_gb_pub": 0.75, "cpu_gb_sub": 0.5, "cpu_gb_total": 2.25} {
		if math.Abs(g[k]-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", k, g[k], want)
		}
	}
}

// TestCPUSamplerLive: the sampler's own loop samples a live process (this one) and stops.
func TestCPUSamplerLive(t *testing.T) {
	reads := make(chan struct{}, 1)
	s := newCPUSampler(func(int) (float64, error) {
		select {
		case reads <- struct{}{}:
		default:
		}
		return 1, nil
	})
	s.track("server", 1, time.Time{})
	<-reads // the first read is track's; the loop reads again every cpuEvery
	select {
	case <-reads:
	case <-time.After(time.Minute):
		t.Fatal("the sampler's loop did not sample within a minute")
	}
	s.close()
}
