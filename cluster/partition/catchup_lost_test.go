package partition

import (
	"sync"
	"testing"
	"time"
)

// A follower fetching a snapshot's segments does not run its election timer and does not
// read raft's messages; when its source, the leader, dies or stops in the middle of the
// stream, the follower must give the snapshot up quickly so that the other follower can win
// an election with its vote (in a group of three, the only quorum left).

type lossKind int

const (
	killed   lossKind = iota // kill -9: partition and transport closed
	stopped                  // SIGSTOP: the stream stalls, the leader cut off from raft messages
	stalled                  // only the stream stalls; the leader goes on
	silenced                 // as stopped, with a CatchUpStall too long to matter: the newer term ends it
)

// abandonCounts checks that the catch-ups of p abandoned snapshots for some of the reasons
// want (AbandonStall...), as its Counts say, and that these add up to what its CatchUps say.
func abandonCounts(t *testing.T, p *Partition, want ...int) {
	t.Helper()
	cu, n := p.CatchUps(), p.Status().Counts
	var sum, wanted int64
	for _, v := range n.CatchUpsAbandoned {
		sum += v
	}
	for _, r := range want {
		wanted += n.CatchUpsAbandoned[r]
	}
	if sum < int64(cu.Abandoned) || wanted == 0 {
		t.Fatalf("abandons by reason %v (stall, term, no answer), want some of %v; the catch-ups abandoned %d", n.CatchUpsAbandoned, want, cu.Abandoned)
	}
}

// maxElection bounds the time from the leader's loss to a new ready leader: a few election
// timeouts (300 ms here) and the catch-up's stall bound, with room for a loaded machine.
const maxElection = 5 * time.Second

// leaderLostCase stops a follower until the leader's retention passes it, starts it again,
// and once its segment stream is under way (the first chunk in, the source stalled after
// about 6000 bytes) takes the leader away: kill closes the leader's partition and transport
// (kill -9: the stream is cut, dials are refused); otherwise the stream stays stalled with
// its connection open and the leader is cut off from raft messages (SIGSTOP).
func leaderLostCase(t *testing.T, how lossKind) {
	kill := how == killed
	c := newCluster(t, 42, 3, func(cfg *Config) {
		cfg.Log.SegmentBytes = 4 << 10
		cfg.Log.RetentionBytes = 24 << 10
		cfg.RetentionCheck = 10 * time.Millisecond
		cfg.CheckpointInterval = 50 * time.Millisecond
		cfg.ElectionTicks = 30 // 300 ms: no spurious election under -race on a loaded machine
		if how == silenced {
			// Ten election timeouts: the other follower's pre-vote comes first (the watcher
			// looks every CatchUpStall/8).
			cfg.CatchUpStall = 3 * time.Second
		}
	})
	l := c.leader()
	acked, err := newWorkload(42, 600, 3, 20).run(c, 4)
	if err != nil {
		t.Fatal(err)
	}
	c.quiet()
	var f, g uint64 // the follower to catch up, the other
	for _, id := range c.ids {
		switch {
		case id == l:
		case f == 0:
			f = id
		default:
			g = id
		}
	}
	behind := c.part(f).Log().NextOffset()
	c.stop(f)
	more, err := newWorkload(43, 700, 3, 60).run(c, 4)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range more {
		acked[k] = v
	}
	waitFor(t, "the leader's retention to pass the stopped follower", func() bool {
		return c.part(l).Log().StartOffset() > behind
	})

	// The gate: the follower's first chunk waits until the leader is gone, so the loss lands
	// mid-stream.
	mid, gone := make(chan struct{}), make(chan struct{})
	var once sync.Once
	nd := c.nodes[f]
	nd.gate.mu.Lock()
	nd.gate.onChunk = func() {
		once.Do(func() {
			close(mid)
			<-gone
		})
	}
	nd.gate.mu.Unlock()
	// The source stops sending after about 6000 bytes (the whole range would fit in the
	// sockets' buffers, and arrive whole though the leader died): the kill then cuts the
	// stalled stream.
	c.faults.StallSegmentStream(6000)
	defer c.faults.ReleaseStalls()
	c.start(f)
	select {
	case <-mid:
	case <-time.After(25 * time.Second):
		defer c.logStatusIfFailed()
		t.Fatal("the follower's segment stream did not start")
	}
	if st := c.part(l).Status(); !st.IsLeader {
		close(gone)
		t.Skipf("node %d lost the leadership before the loss (a spurious election on a loaded machine): the scenario did not happen", l)
	}
	lost := time.Now()
	switch how {
	case killed:
		c.stop(l)
	case stopped, silenced:
		c.faults.Isolate(l)
	case stalled:
		close(gone)
		waitFor(t, "the stalled catch-up to be abandoned", func() bool { return c.part(f).CatchUps().Abandoned > 0 })
		took := time.Since(lost)
		c.quiet()
		st := c.part(f).CatchUps()
		t.Logf("stream stalled after the first chunk: abandoned after %v (CatchUpStall %v), then caught up: %+v", took.Round(time.Millisecond), c.part(f).cfg.CatchUpStall, st)
		if st.Done == 0 || c.leader() != l {
			t.Fatalf("follower %d: %+v; leader %d (was %d)", f, st, c.leader(), l)
		}
		if took > maxElection {
			t.Fatalf("the stalled stream was given up after %v (bound %v)", took, maxElection)
		}
		abandonCounts(t, c.part(f), AbandonStall)
		c.sameLogs(c.ids...)
		exactlyOnce(t, c.part(f), retained(acked, c.part(l).Log().StartOffset()))
		return
	}
	close(gone)

	var nl uint64
	waitFor(t, "a new leader among the two others", func() bool {
		for _, id := range []uint64{f, g} {
			if st := c.part(id).Status(); st.IsLeader && st.Ready {
				nl = id
				return true
			}
		}
		return false
	})
	took := time.Since(lost)
	st := c.part(f).CatchUps()
	t.Logf("leader %d lost mid-stream (killed %v): node %d leads after %v; follower %d catch-ups: %+v", l, kill, nl, took.Round(time.Millisecond), f, st)
	if took > maxElection {
		t.Fatalf("a new leader took %v (bound %v)", took, maxElection)
	}
	if st.Abandoned == 0 {
		t.Fatalf("follower %d did not abandon the snapshot: %+v", f, st)
	}
	switch how {
	case killed: // the stream cut, then dials refused (or the stream stalled first)
		abandonCounts(t, c.part(f), AbandonNoAnswer, AbandonStall)
	case stopped:
		abandonCounts(t, c.part(f), AbandonStall, AbandonTerm)
	case silenced:
		abandonCounts(t, c.part(f), AbandonTerm)
	}

	// The follower catches up from the new leader, and nothing acknowledged is lost.
	if !kill {
		c.stop(l) // isolated: it could not rejoin before the others settle
		c.faults.Heal()
	}
	c.quiet()
	if st := c.part(f).CatchUps(); st.Done == 0 {
		t.Fatalf("follower %d never caught up: %+v", f, st)
	}
	c.sameLogs(f, g)
	lead := c.part(nl)
	acked = retained(acked, lead.Log().StartOffset())
	exactlyOnce(t, lead, acked)
	exactlyOnce(t, c.part(f), acked)

	// The old leader comes back and follows.
	c.start(l)
	c.quiet()
	c.sameLogs(c.ids...)
}

// retained is acked without the batches below start (deleted by retention everywhere).
func retained(acked map[batchKey]int64, start int64) map[batchKey]int64 {
	out := make(map[batchKey]int64, len(acked))
	for k, base := range acked {
		if base >= start {
			out[k] = base
		}
	}
	return out
}

// TestCatchUpLeaderKilled: the leader is killed (partition and transport closed) mid-stream.
func TestCatchUpLeaderKilled(t *testing.T) { leaderLostCase(t, killed) }

// TestCatchUpLeaderStopped: the leader's stream stalls with its connection open and the
// leader hears and says nothing (a stopped process).
func TestCatchUpLeaderStopped(t *testing.T) { leaderLostCase(t, stopped) }

// TestCatchUpNewerTerm: as TestCatchUpLeaderStopped, but the stream is never given up for
// its stall: what ends the catch-up is the other follower's election reaching the follower.
func TestCatchUpNewerTerm(t *testing.T) { leaderLostCase(t, silenced) }

// TestCatchUpStalled: only the stream stalls, the leader goes on: the follower gives the
// snapshot up after CatchUpStall (no newer term to hear), and the leader's next snapshot
// brings it up.
func TestCatchUpStalled(t *testing.T) { leaderLostCase(t, stalled) }

// TestCatchUpNeverAnswered: the leader lives but its segments cannot be had (every fetch
// refused): the follower abandons the leader's snapshots for CatchUpTimeout, then installs
// one the old way (its log starting at the snapshot's offset) rather than never.
func TestCatchUpNeverAnswered(t *testing.T) {
	c := newCluster(t, 44, 3, func(cfg *Config) {
		cfg.Log.SegmentBytes = 4 << 10
		cfg.Log.RetentionBytes = 24 << 10
		cfg.RetentionCheck = 10 * time.Millisecond
		cfg.CheckpointInterval = 50 * time.Millisecond
		cfg.CatchUpTimeout = 500 * time.Millisecond
	})
	l := c.leader()
	f := c.ids[0]
	if f == l {
		f = c.ids[1]
	}
	behind := c.part(f).Log().NextOffset()
	c.stop(f)
	acked, err := newWorkload(44, 700, 3, 60).run(c, 4)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the leader's retention to pass the stopped follower", func() bool {
		return c.part(l).Log().StartOffset() > behind
	})
	nd := c.nodes[f]
	nd.gate.mu.Lock()
	nd.gate.refuse = true
	nd.gate.mu.Unlock()
	c.start(f)
	c.quiet()
	st := c.part(f).CatchUps()
	t.Logf("follower %d: %+v; its log [%d, %d), the leader's [%d, %d)", f, st,
		c.part(f).Log().StartOffset(), c.part(f).Log().NextOffset(), c.part(l).Log().StartOffset(), c.part(l).Log().NextOffset())
	if st.Abandoned == 0 || st.Failed != 1 || st.Done != 0 {
		t.Fatalf("follower %d: %+v, want snapshots abandoned, then one installed without its segments", f, st)
	}
	abandonCounts(t, c.part(f), AbandonNoAnswer)
	if n := c.part(f).Status().Counts; n.CatchUpsAbandoned[AbandonNoAnswer] != int64(st.Abandoned) || n.CatchUpsTimedOut != 1 ||
		n.CatchUpsDone != 0 || n.CatchUpsStarted != int64(st.Abandoned)+1 || n.SnapshotsApplied < 1 {
		t.Fatalf("follower %d's counts: %+v (catch-ups %+v)", f, n, st)
	}
	exactlyOnce(t, c.part(f), retained(acked, c.part(f).Log().StartOffset()))
}
