package partition

import (
	"testing"
	"time"
)

// TestSnapshotCatchUp: a follower stopped while the leader's retention deleted the entries
// it needs comes back by a raft snapshot without the catch-up from whole segments
// (Config.Segments nil, as a broker of the release before): its log starts again at the
// leader's offset, it
// holds the same bytes as the leader from there on, its producer state is the leader's
// (carried in the snapshot) and survives its restart, and it deduplicates as a leader.
func TestSnapshotCatchUp(t *testing.T) {
	c := newCluster(t, 30, 3, func(cfg *Config) {
		cfg.Log.SegmentBytes = 4 << 10
		cfg.Log.RetentionBytes = 12 << 10
		cfg.RetentionCheck = 10 * time.Millisecond
		cfg.CheckpointInterval = 50 * time.Millisecond
		cfg.Segments = nil
	})
	l := c.leader()
	w1 := newWorkload(30, 600, 3, 20)
	acked, err := w1.run(c, 4)
	if err != nil {
		t.Fatal(err)
	}
	c.quiet()
	var f uint64
	for _, id := range c.ids {
		if id != l {
			f = id
			break
		}
	}
	behind := c.part(f).Log().NextOffset()
	c.stop(f)
	w2 := newWorkload(31, 700, 3, 40)
	more, err := w2.run(c, 4)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range more {
		acked[k] = v
	}
	lead := c.part(c.leader())
	waitFor(t, "the leader's retention to pass the stopped follower", func() bool {
		return lead.Log().StartOffset() > behind
	})
	t.Logf("follower %d stopped at offset %d; the leader's log now starts at %d", f, behind, lead.Log().StartOffset())

	c.start(f)
	c.quiet()
	fp := c.part(f)
	if st := fp.st.State(); st.SnapIndex == 0 || fp.Log().StartOffset() <= behind {
		t.Fatalf("follower %d caught up without a snapshot: state %+v, log start %d", f, st, fp.Log().StartOffset())
	}
	t.Logf("follower %d: log starts at %d (a snapshot at entry %d)", f, fp.Log().StartOffset(), fp.st.State().SnapIndex)
	c.sameLogs(c.ids...)
	want := tables(lead)
	if got := tables(fp); got != want {
		t.Fatalf("the follower's producer state after the snapshot:\n%s\nthe leader's:\n%s", got, want)
	}
	// It serves the same batches at the same offsets, and takes new ones like the others.
	w3 := newWorkload(32, 800, 2, 10)
	more, err = w3.run(c, 4)
	if err != nil {
		t.Fatal(err)
	}
	c.quiet()
	c.sameLogs(c.ids...)
	for k, base := range more {
		found := false
		for _, s := range committed(t, fp) {
			if s.pid == k.pid && s.seq == k.seq {
				found = s.base == base
			}
		}
		if !found {
			t.Fatalf("follower %d does not hold producer %d sequence %d at %d", f, k.pid, k.seq, base)
		}
	}
	// Restarted, it keeps the state the snapshot brought (checkpointed when installed).
	c.stop(f)
	c.start(f)
	c.quiet()
	if got, want := tables(c.part(f)), tables(c.part(c.leader())); got != want {
		t.Fatalf("the follower's producer state after its restart:\n%s\nthe leader's:\n%s", got, want)
	}
	// As the leader, it answers the producers' retries with their original offsets.
	c.part(c.leader()).Replica().TransferLeadership(f)
	waitFor(t, "the snapshot's receiver to lead", func() bool { st := c.part(f).Status(); return st.IsLeader && st.Ready })
	checkDedup(t, c, w2, acked)
}
