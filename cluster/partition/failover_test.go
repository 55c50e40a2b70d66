package partition

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lightq/lightq/cluster/replica"
)

// whenLeaderPast runs act(leader) once some running leader's high watermark reaches hw, on
// its own goroutine (so the test goroutine can run producers meanwhile); the returned
// channel is closed when act returned, or after a deadline without a leader that far.
func (c *cluster) whenLeaderPast(hw int64, act func(id uint64)) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for deadline := time.Now().Add(25 * time.Second); time.Now().Before(deadline); <-tick.C {
			for _, id := range c.live() {
				if p := c.part(id); p != nil && p.Status().IsLeader && p.HighWatermark() >= hw {
					act(id)
					return
				}
			}
		}
	}()
	return done
}

// TestLeaderStopsMidStream: the leader stops while producers stream idempotent batches; they
// send their unanswered batches again, unchanged, to the new leader. Every acked batch is
// in every replica's log exactly once, and the old leader, started again from its
// directory, catches up to byte-identical.
func TestLeaderStopsMidStream(t *testing.T) {
	c := newCluster(t, 10, 3, nil)
	c.leader()
	var old uint64
	stopped := c.whenLeaderPast(150, func(id uint64) {
		old = id
		c.stop(id)
	})
	acked := runProducers(c, 10, 200, 4, 60, 4)
	<-stopped
	if old == 0 {
		t.Fatal("the leader never reached offset 150")
	}
	hw := c.quiet()
	rest := c.live()
	t.Logf("leader %d stopped mid-stream; %d batches acked, high watermark %d on %v", old, len(acked), hw, rest)
	for _, id := range rest {
		exactlyOnce(t, c.part(id), acked)
	}
	c.sameLogs(rest...)

	c.start(old)
	c.quiet()
	for _, id := range c.ids {
		exactlyOnce(t, c.part(id), acked)
	}
	c.sameLogs(c.ids...)
	if a, b := tables(c.part(old)), tables(c.part(rest[0])); a != b {
		t.Fatalf("the restarted replica's producer state differs:\n%s\n%s", a, b)
	}
}

// TestFaultyNetworkPartitionedLeader: messages dropped, duplicated and delayed (so
// reordered) on every link while producers stream, and the leader cut off from the others
// mid-stream. Batches sent straight to the cut-off leader end NotLeader or MaybeStored, or
// stored at an offset the majority holds them at; nothing acked is lost, nothing is stored
// twice.
func TestFaultyNetworkPartitionedLeader(t *testing.T) {
	c := newCluster(t, 11, 3, nil)
	c.leader()
	c.faults.SetDrop(0.05)
	c.faults.SetDuplicate(0.05)
	c.faults.SetDelay(0.1, 3*testTick)
	const direct = 10
	var (
		old     uint64
		answers []outcome
		sent    [][]byte
	)
	cut := c.whenLeaderPast(100, func(id uint64) {
		old = id
		p := c.part(id)
		c.faults.Isolate(id)
		var chs []<-chan outcome
		for i := range direct {
			b := newProducer(int64(1000+i)).next(1, 30)
			sent = append(sent, b)
			chs = append(chs, produceAsync(p, b))
		}
		for _, ch := range chs {
			select {
			case o := <-ch:
				answers = append(answers, o)
			case <-time.After(30 * time.Second):
				answers = append(answers, outcome{err: errors.New("no answer")})
			}
		}
		// Heal once the majority has a leader of its own and went on.
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); <-tick.C {
			for _, o := range c.live() {
				if q := c.part(o); o != id && q.Status().IsLeader && q.HighWatermark() > p.HighWatermark()+20 {
					c.faults.Heal()
					return
				}
			}
		}
		c.faults.Heal()
	})
	acked := runProducers(c, 11, 300, 4, 50, 4)
	<-cut
	if old == 0 || len(answers) != direct {
		t.Fatalf("the cut never happened (leader %d, %d answers)", old, len(answers))
	}
	c.faults.Heal()
	c.quiet()
	var notLeader, maybe, storedN int
	for i, o := range answers {
		var nl *replica.NotLeaderError
		switch {
		case errors.As(o.err, &nl):
			notLeader++
		case errors.Is(o.err, ErrMaybeStored):
			maybe++
		case o.err == nil:
			storedN++
		default:
			t.Fatalf("the cut-off leader answered batch %d with %v", i, o.err)
		}
		// Every one of them is settled now: sent again, it is stored once, and where the
		// cut-off leader said stored, at the offset it said.
		base, dup := c.produceAcked(sent[i])
		if o.err == nil && (!dup || base != o.base) {
			t.Fatalf("the cut-off leader acked batch %d at %d; the cluster holds it at %d (duplicate %v)", i, o.base, base, dup)
		}
		acked[batchKey{int64(1000 + i), 0, 0}] = base
	}
	c.quiet()
	for _, id := range c.ids {
		exactlyOnce(t, c.part(id), acked)
	}
	c.sameLogs(c.ids...)
	f := c.faults
	t.Logf("cut-off leader %d: %d NotLeader, %d MaybeStored, %d stored; faults: %d dropped, %d duplicated, %d delayed, %d cut",
		old, notLeader, maybe, storedN, f.Dropped, f.Duplicated, f.Delayed, f.Cut)
	if f.Dropped == 0 || f.Duplicated == 0 || f.Delayed == 0 || f.Cut == 0 {
		t.Fatal("faults did not happen")
	}
}

// TestFollowerLostEntries: a follower's log loses entries it had acknowledged while it is
// down: its segment file cut (as a power loss under fsync=never does), or a bit flipped in
// it (damage, which the replica's log cuts at instead of refusing). Raft never lowers what a
// member acknowledged, so without help its leader would never send them again (and raft
// would panic on a heartbeat's commit past the follower's log). The follower abstains from
// votes while short, the leader removes it and adds it back, and it is brought up to the
// same bytes as the others; nothing acked is lost or stored twice.
func TestFollowerLostEntries(t *testing.T) {
	// A sealed segment is read at start only from the producer checkpoint on (the log's
	// Open checks the active segment): the sealed case removes the checkpoint, as a kill -9
	// before the next one leaves it behind the damage.
	for _, damage := range []string{"cut", "bit flip", "bit flip in a sealed segment"} {
		t.Run(damage, func(t *testing.T) {
			c := newCluster(t, 0, 3, func(cfg *Config) { cfg.Log.SegmentBytes = 8 << 10 })
			l := c.leader()
			acked := runProducers(c, 20, 200, 2, 40, 2)
			c.quiet()
			f := c.ids[0]
			if f == l {
				f = c.ids[1]
			}
			if err := c.stop(f); err != nil {
				t.Fatal(err)
			}
			segs, err := filepath.Glob(filepath.Join(c.nodes[f].dir, "*.log"))
			if err != nil || len(segs) == 0 {
				t.Fatalf("segments of node %d: %v %v", f, segs, err)
			}
			active := segs[len(segs)-1]
			if damage == "bit flip in a sealed segment" {
				if len(segs) < 2 {
					t.Fatalf("node %d has one segment: nothing sealed to damage", f)
				}
				active = segs[len(segs)-2]
				if err := os.Remove(filepath.Join(c.nodes[f].dir, CheckpointFileName)); err != nil {
					t.Fatal(err)
				}
			}
			b, err := os.ReadFile(active)
			if err != nil || len(b) < 1024 {
				t.Fatalf("active segment %s: %d bytes, %v", active, len(b), err)
			}
			if damage == "cut" {
				b = b[:len(b)/2]
			} else {
				b[len(b)-1] ^= 0x10 // in the last batch's records, which its CRC covers
			}
			if err := os.WriteFile(active, b, 0o644); err != nil {
				t.Fatal(err)
			}
			c.start(f)
			if lc := c.part(f).st.LostCommit(); lc == 0 {
				t.Fatal("the damaged log was not seen as having lost committed entries")
			}
			more := runProducers(c, 30, 100, 2, 20, 2)
			for k, v := range more {
				acked[k] = v
			}
			c.quiet()
			for _, id := range c.ids {
				exactlyOnce(t, c.part(id), acked)
			}
			c.sameLogs(c.ids...)
		})
	}
}
