package transport

import (
	"math/rand/v2"
	"sync"
	"time"
)

// Faults injects network faults into the send path of every Transport that shares it: drop,
// duplicate and delay messages with given probabilities (a delay past the next message's
// reorders them), and cut nodes apart. Tests give one Faults to all the transports of a
// cluster, so a partition is symmetric and one seed drives every decision.
//
// Determinism: the decisions come from one PCG generator seeded by NewFaults, drawn under a
// mutex, so a seed fixes the sequence of decisions; which message meets which decision also
// depends on goroutine scheduling, as it does in any real network test.
//
// A nil *Faults injects nothing. Concurrency: every method is safe from any goroutine.
type Faults struct {
	mu       sync.Mutex
	rng      *rand.Rand
	drop     float64
	dup      float64
	delayP   float64
	maxDelay time.Duration
	side     map[uint64]int // partition side per node; nodes on different sides cannot talk
	timers   map[*time.Timer]struct{}
	stopped  bool
	segCut   int64 // cut the next segment stream served after this many data bytes
	segStall bool  // the armed cut stalls the stream instead (StallSegmentStream)
	unstall  chan struct{}

	// Counters of what was done, for tests to check that faults happened.
	Dropped, Duplicated, Delayed, Cut int
	SegmentCuts                       int // segment streams cut (CutSegmentStream)
}

// NewFaults returns a Faults that injects nothing until told, with its decisions seeded.
func NewFaults(seed uint64) *Faults {
	return &Faults{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), side: map[uint64]int{}, timers: map[*time.Timer]struct{}{}}
}

// SetDrop drops each message with probability p.
func (f *Faults) SetDrop(p float64) { f.mu.Lock(); f.drop = p; f.mu.Unlock() }

// SetDuplicate sends each message twice with probability p.
func (f *Faults) SetDuplicate(p float64) { f.mu.Lock(); f.dup = p; f.mu.Unlock() }

// SetDelay holds each message with probability p for a random time up to max.
func (f *Faults) SetDelay(p float64, max time.Duration) {
	f.mu.Lock()
	f.delayP, f.maxDelay = p, max
	f.mu.Unlock()
}

// Partition splits the nodes named into sides: a node can reach only nodes on its own side.
// Nodes not named are on side 0 with each other. Partition() with no sides heals.
func (f *Faults) Partition(sides ...[]uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.side)
	for i, s := range sides {
		for _, n := range s {
			f.side[n] = i + 1
		}
	}
}

// Isolate cuts node off from every other node.
func (f *Faults) Isolate(node uint64) { f.Partition([]uint64{node}) }

// Heal removes every partition and every probability: the network is clean again.
func (f *Faults) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.side)
	f.drop, f.dup, f.delayP = 0, 0, 0
}

// apply decides e's fate from node from to node to and enqueues it (maybe twice, maybe
// later). It reports false when e was dropped or cut.
func (f *Faults) apply(from, to uint64, e Envelope, enqueue func(Envelope) bool) bool {
	f.mu.Lock()
	if f.side[from] != f.side[to] {
		f.Cut++
		f.mu.Unlock()
		return false
	}
	if f.drop > 0 && f.rng.Float64() < f.drop {
		f.Dropped++
		f.mu.Unlock()
		return false
	}
	copies := 1
	if f.dup > 0 && f.rng.Float64() < f.dup {
		copies = 2
		f.Duplicated++
	}
	var delay time.Duration
	if f.delayP > 0 && f.maxDelay > 0 && f.rng.Float64() < f.delayP {
		delay = time.Duration(f.rng.Int64N(int64(f.maxDelay))) + 1
		f.Delayed++
	}
	if delay == 0 {
		f.mu.Unlock()
		ok := true
		for range copies {
			ok = enqueue(e) && ok
		}
		return ok
	}
	if f.stopped {
		f.mu.Unlock()
		return false
	}
	var tm *time.Timer
	tm = time.AfterFunc(delay, func() {
		f.mu.Lock()
		delete(f.timers, tm)
		f.mu.Unlock()
		for range copies {
			enqueue(e) // a late drop is a drop; raft resends
		}
	})
	f.timers[tm] = struct{}{}
	f.mu.Unlock()
	return true
}

// Stop cancels every delayed message and delays no more (a test is ending). Transports that
// share f may close in any order without it: a late message to a closed one is dropped.
func (f *Faults) Stop() {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
	if f.unstall != nil {
		close(f.unstall)
		f.unstall = nil
	}
	for tm := range f.timers {
		tm.Stop()
	}
	clear(f.timers)
}

// CutSegmentStream makes the next segment stream any transport sharing f serves drop its
// connection once it has sent about n bytes of data (once).
func (f *Faults) CutSegmentStream(n int64) {
	f.mu.Lock()
	f.segCut, f.segStall = n, false
	f.mu.Unlock()
}

// StallSegmentStream makes the next segment stream any transport sharing f serves stop
// sending, its connection left open, once it has sent about n bytes of data (once), as a
// stopped process would (SIGSTOP), until ReleaseStalls or Stop.
func (f *Faults) StallSegmentStream(n int64) {
	f.mu.Lock()
	f.segCut, f.segStall = n, true
	if f.unstall == nil {
		f.unstall = make(chan struct{})
	}
	f.mu.Unlock()
}

// ReleaseStalls ends the stalls of StallSegmentStream: each stalled stream then drops its
// connection.
func (f *Faults) ReleaseStalls() {
	f.mu.Lock()
	if f.unstall != nil {
		close(f.unstall)
		f.unstall = nil
	}
	f.mu.Unlock()
}

// segmentCut takes the armed cut (0: none) and, for a stall, the channel that ends it.
func (f *Faults) segmentCut() (int64, <-chan struct{}) {
	if f == nil {
		return 0, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.segCut
	var stall <-chan struct{}
	if n > 0 {
		f.segCut = 0
		f.SegmentCuts++
		if f.segStall {
			stall = f.unstall
		}
	}
	return n, stall
}
