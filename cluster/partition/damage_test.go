package partition

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/lightq/lightq/cluster/raftlog"
	"github.com/lightq/lightq/wire"
)

// batchesOf lists the byte positions of the batches in segment file b.
func batchesOf(b []byte) []int {
	var out []int
	for p := 0; p+wire.BatchHeaderSize2 <= len(b); {
		n := wire.BatchSize(b[p:])
		if n < wire.BatchHeaderSize || p+n > len(b) {
			break
		}
		out = append(out, p)
		p += n
	}
	return out
}

// flipInSegment flips bit k (0 the lowest of the last byte) of the field of width size at pos
// in the batch chosen by pick among those of segment file path, in place (the file may be
// open: the replica's reads see the change), and returns the batch's byte position.
func flipInSegment(t testing.TB, path string, pick func(batches []int) int, pos, size, k int) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	batches := batchesOf(b)
	if len(batches) == 0 {
		t.Fatalf("%s holds no batch", path)
	}
	at := batches[pick(batches)]
	byteAt := at + pos + size - 1 - k/8
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte{b[byteAt] ^ 1<<(k%8)}, int64(byteAt)); err != nil {
		t.Fatal(err)
	}
	return at
}

// segments lists node id's segment files, oldest first.
func (c *cluster) segments(id uint64) []string {
	c.t.Helper()
	segs, err := filepath.Glob(filepath.Join(c.nodes[id].dir, "*.log"))
	if err != nil || len(segs) < 3 {
		c.t.Fatalf("segments of node %d: %v %v", id, segs, err)
	}
	return segs
}

// follower is a running node that does not lead.
func (c *cluster) follower() uint64 {
	l := c.leader()
	for _, id := range c.ids {
		if id != l {
			return id
		}
	}
	return 0
}

// The batch header fields the replica writes outside the CRC.
var headerFields = []struct {
	name      string
	pos, size int
}{
	{"leader epoch", 20, 4},
	{"raft index", 64, 8},
}

// TestHeaderBitFlipsRepaired flips each bit of the leader epoch and of the raft index (which
// the batch CRC does not cover) of a follower's stored batch while the follower is down: in
// the last batch of its active segment (found by Open's walk, which cuts there), and in a
// batch of a sealed segment with the producer checkpoint removed (found when the partition
// rebuilds its producer state from the log, and cut). Each time the follower sees that it
// lost entries it had acknowledged, is re-added by its leader and filled again: the
// replicas end byte-identical, and every acked batch is stored exactly once. Each bit is
// flipped once, in the active segment for even bits and a sealed one for odd bits; under
// -short every seventh bit, in both.
func TestHeaderBitFlipsRepaired(t *testing.T) {
	c := newCluster(t, 0, 3, func(cfg *Config) { cfg.Log.SegmentBytes = 8 << 10 })
	acked := runProducers(c, 40, 1000, 2, 30, 2)
	flips := 0
	for _, fld := range headerFields {
		for k := range 8 * fld.size {
			if testing.Short() && k%7 != 0 {
				continue
			}
			for _, where := range []string{"active", "sealed"} {
				if !testing.Short() && (k%2 == 0) != (where == "active") {
					continue // each bit once, the location alternating (the raftlog tests flip every bit in both)
				}
				c.quiet()
				f := c.follower()
				if err := c.stop(f); err != nil {
					t.Fatal(err)
				}
				segs := c.segments(f)
				path, pick := segs[len(segs)-1], func(b []int) int { return len(b) - 1 }
				if where == "sealed" {
					path, pick = segs[1], func(b []int) int { return len(b) / 2 }
					if err := os.Remove(filepath.Join(c.nodes[f].dir, CheckpointFileName)); err != nil && !os.IsNotExist(err) {
						t.Fatal(err)
					}
				}
				flipInSegment(t, path, pick, fld.pos, fld.size, k)
				c.start(f)
				if testing.Verbose() {
					t.Logf("FLIP %s bit %d in the %s segment of node %d", fld.name, k, where, f)
				}
				if lc := c.part(f).st.LostCommit(); lc == 0 {
					t.Fatalf("%s bit %d in the %s segment: the damage was not seen", fld.name, k, where)
				}
				// Counted since this Open: found and cut at Open, by the check the flipped
				// field failed (a flip can make a raft index a term problem of the batch
				// before, so either of the two), with the entries from it on cut.
				n := c.part(f).Status().Counts
				if n.DamageFound[FoundAtOpen] < 1 || n.DamageRepaired[FoundAtOpen] != n.DamageFound[FoundAtOpen] || n.EntriesCut < 1 ||
					n.CheckFailures[raftlog.CheckBatch] != 0 || n.CheckFailures[raftlog.CheckRaftIndex]+n.CheckFailures[raftlog.CheckTerm] != n.DamageFound[FoundAtOpen] ||
					fld.name == "leader epoch" && n.CheckFailures[raftlog.CheckTerm] < 1 {
					t.Fatalf("%s bit %d in the %s segment: counts %+v", fld.name, k, where, n)
				}
				flips++
				more := runProducers(c, uint64(100+flips), int64(2000+10*flips), 1, 3, 1)
				for key, v := range more {
					acked[key] = v
				}
			}
		}
	}
	c.quiet()
	for _, id := range c.ids {
		exactlyOnce(t, c.part(id), acked)
	}
	c.sameLogs(c.ids...)
	t.Logf("%d flips found and repaired", flips)
}

// TestScrubRepairs: with the scrub on, a bit flipped in the leader epoch of a batch in a
// sealed segment of a running replica (where nothing else reads it) is found, and the
// replica repaired from the others: a follower cuts its log there and is filled again; a
// leader first hands its leadership over. Nothing acked is lost, the replicas end
// byte-identical, and the counters say what happened.
func TestScrubRepairs(t *testing.T) {
	for _, who := range []string{"follower", "leader"} {
		t.Run(who, func(t *testing.T) {
			rate := NewScrubRate(64 << 20)
			c := newCluster(t, 0, 3, func(cfg *Config) { cfg.Log.SegmentBytes = 8 << 10; cfg.Scrub = rate })
			acked := runProducers(c, 50, 1000, 2, 30, 2)
			c.quiet()
			target := c.follower()
			if who == "leader" {
				target = c.leader()
			}
			waitFor(t, "a first scrub pass", func() bool { return c.part(target).Status().ScrubPasses > 0 })
			segs := c.segments(target)
			flipInSegment(t, segs[0], func(b []int) int { return len(b) / 2 }, 20, 4, 3)
			waitFor(t, fmt.Sprintf("node %d to repair its log", target), func() bool { return c.part(target).Status().Repairs > 0 })
			st := c.part(target).Status()
			if st.DamagedBatches == 0 || st.ScrubbedBytes == 0 {
				t.Fatalf("status after the repair: %+v", st)
			}
			// A leader epoch flipped: a term check failed, found by the scrub and repaired,
			// the entries from it on cut.
			if n := st.Counts; n.DamageFound[FoundByScrub] < 1 || n.DamageRepaired[FoundByScrub] < 1 || n.CheckFailures[raftlog.CheckTerm] < 1 ||
				n.EntriesCut < 1 || n.DamageFound[FoundAtOpen] != 0 || st.Repairs != n.DamageRepaired[FoundByScrub]+n.DamageRepaired[FoundByRead] {
				t.Fatalf("counts after the repair: %+v", n)
			}
			more := runProducers(c, 51, 3000, 2, 10, 2)
			for key, v := range more {
				acked[key] = v
			}
			c.quiet()
			for _, id := range c.ids {
				exactlyOnce(t, c.part(id), acked)
			}
			c.sameLogs(c.ids...)
			waitFor(t, "a scrub pass over the repaired log", func() bool { return c.part(target).Status().ScrubPasses > st.ScrubPasses+1 })
			if got := c.part(target).Status().DamagedBatches; got != st.DamagedBatches {
				t.Fatalf("damage found again after the repair: %d, was %d", got, st.DamagedBatches)
			}
		})
	}
}

// TestReadDamageRepaired: damage that only a raft read meets (a leader epoch flipped in a
// sealed segment of the leader, below its producer checkpoint, no scrub) when the leader
// sends a follower that was down the entries it missed: the read is answered ErrCompacted,
// the leader hands its leadership over and cuts its log there, and the counters say it was
// found by a read and repaired. Nothing acked is lost; the replicas end byte-identical.
func TestReadDamageRepaired(t *testing.T) {
	c := newCluster(t, 0, 3, func(cfg *Config) { cfg.Log.SegmentBytes = 8 << 10 })
	acked := runProducers(c, 60, 1000, 2, 20, 2)
	c.quiet()
	l := c.leader()
	f := c.follower()
	behind := c.part(f).Log().NextOffset()
	c.stop(f)
	for k, v := range runProducers(c, 61, 2000, 2, 40, 2) {
		acked[k] = v
	}
	c.quiet()
	c.stop(l)
	// The last sealed segment of the leader past what the follower holds.
	segs := c.segments(l)
	var path string
	for _, s := range segs[:len(segs)-1] {
		var base int64
		if _, err := fmt.Sscanf(filepath.Base(s), "%020d.log", &base); err == nil && base >= behind {
			path = s
		}
	}
	if path == "" {
		t.Fatalf("no sealed segment of node %d past offset %d: %v", l, behind, segs)
	}
	flipInSegment(t, path, func(b []int) int { return len(b) / 2 }, 20, 4, 3)
	c.start(l)
	if n := c.leader(); n != l {
		c.part(n).Replica().TransferLeadership(l)
		waitFor(t, fmt.Sprintf("node %d to lead again", l), func() bool { st := c.part(l).Status(); return st.IsLeader && st.Ready })
	}
	if n := c.part(l).Status().Counts; n.DamageFound != [FoundKinds]int64{} {
		t.Fatalf("damage found before the read: %+v", n)
	}
	c.start(f)
	waitFor(t, fmt.Sprintf("node %d to repair the damage its read met", l), func() bool {
		return c.part(l).Status().Counts.DamageRepaired[FoundByRead] > 0
	})
	n := c.part(l).Status().Counts
	if n.DamageFound[FoundByRead] < 1 || n.CheckFailures[raftlog.CheckTerm] < 1 || n.EntriesCut < 1 || n.DamageFound[FoundByScrub] != 0 {
		t.Fatalf("counts after the repair: %+v", n)
	}
	// As in TestScrubRepairs, the next appends show the new leader that the cut replica lost
	// entries it had acknowledged (a quiet group only sends heartbeats), and it is re-added.
	for k, v := range runProducers(c, 62, 3000, 2, 10, 2) {
		acked[k] = v
	}
	c.quiet()
	for _, id := range c.ids {
		exactlyOnce(t, c.part(id), acked)
	}
	c.sameLogs(c.ids...)
}
