package partition

import (
	"bytes"
	"testing"
	"time"
)

// The catch-up from whole segments: a follower stopped while its leader's retention passed
// its end comes back with the leader's segment files from the leader's log start up to the
// snapshot, byte for byte, and can lead and serve everything from the log start.

// catchUpCase runs the scenario; cut, when not 0, cuts the first segment stream after about
// that many bytes (the follower resumes it); late, when not 0, is how many times the
// leader's transport answers that the restarted follower's features are not known yet (a
// new connection whose announcement has not come).
func catchUpCase(t *testing.T, cut int64, late int) {
	c := newCluster(t, 40, 3, func(cfg *Config) {
		cfg.Log.SegmentBytes = 4 << 10
		cfg.Log.RetentionBytes = 24 << 10
		cfg.RetentionCheck = 10 * time.Millisecond
		cfg.CheckpointInterval = 50 * time.Millisecond
	})
	l := c.leader()
	acked, err := newWorkload(40, 600, 3, 20).run(c, 4)
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
	more, err := newWorkload(41, 700, 3, 60).run(c, 4)
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
	if cut > 0 {
		c.faults.CutSegmentStream(cut)
	}
	lg := c.nodes[c.leader()].gate
	lg.mu.Lock()
	lg.lateFeatures = late
	lg.mu.Unlock()
	began := time.Now()
	c.start(f)
	c.quiet()
	fp := c.part(f)
	st := fp.CatchUps()
	if st.Done == 0 || st.Bytes == 0 {
		t.Fatalf("follower %d caught up without the segments: %+v", f, st)
	}
	if cut > 0 && st.Attempts < 2 {
		t.Fatalf("the cut stream was not resumed: %+v", st)
	}
	lg.mu.Lock()
	left := lg.lateFeatures
	lg.mu.Unlock()
	if left != 0 {
		t.Fatalf("the leader asked for the follower's features %d times, fewer than the %d it was not told them", late-left, late)
	}
	// The counters an operator reads: the follower's catch-up and what it received, the
	// leader's snapshot (version 2: the follower announced the feature) and what it sent.
	fc, lc := fp.Status().Counts, lead.Status().Counts
	t.Logf("follower's counts %+v; leader's %+v", fc, lc)
	switch {
	case fc.CatchUpsStarted < 1 || fc.CatchUpsDone != int64(st.Done) || fc.CatchUpsTimedOut != 0:
		t.Fatalf("follower's catch-up counts: %+v (CatchUps %+v)", fc, st)
	case fc.SegmentBytesReceived < st.Bytes || fc.SegmentsReceived < 1:
		t.Fatalf("follower received %d bytes in %d segments; it installed %d bytes", fc.SegmentBytesReceived, fc.SegmentsReceived, st.Bytes)
	case fc.SnapshotsReceived < 1 || fc.SnapshotsApplied < 1:
		t.Fatalf("follower's snapshots: %d received, %d applied", fc.SnapshotsReceived, fc.SnapshotsApplied)
	case lc.SnapshotsSent[1] < 1 || lc.SnapshotsSent[0] != 0:
		t.Fatalf("leader sent %d snapshots of version 1 and %d of version 2, want version 2 only", lc.SnapshotsSent[0], lc.SnapshotsSent[1])
	case lc.SegmentBytesSent < st.Bytes || lc.SegmentsSent < fc.SegmentsReceived:
		t.Fatalf("leader sent %d bytes in %d segments; the follower installed %d bytes, received %d segments", lc.SegmentBytesSent, lc.SegmentsSent, st.Bytes, fc.SegmentsReceived)
	}

	t.Logf("follower %d (stopped at offset %d): %d bytes of segments in %v (%d streams), caught up in %v; the log holds [%d, %d), the leader's [%d, %d)",
		f, behind, st.Bytes, st.Last, st.Attempts, time.Since(began).Round(time.Millisecond),
		fp.Log().StartOffset(), fp.Log().NextOffset(), lead.Log().StartOffset(), lead.Log().NextOffset())

	// Retention settles (nothing is produced): then both hold the same segments.
	waitFor(t, "retention to settle on the leader and the follower", func() bool {
		return fp.Log().StartOffset() == lead.Log().StartOffset()
	})
	c.sameLogs(c.ids...)
	fa, fb := segmentFiles(t, lead.Log().Dir()), segmentFiles(t, fp.Log().Dir())
	for name, x := range fa {
		if y, ok := fb[name]; !ok || !bytes.Equal(x, y) {
			t.Fatalf("segment %s of the leader: the follower's is missing or differs (%d and %d bytes)", name, len(x), len(y))
		}
	}
	if len(fa) != len(fb) {
		t.Fatalf("the leader holds %d segment files, the follower %d", len(fa), len(fb))
	}

	// As the leader, it serves everything from the log start.
	start, hw := lead.Log().StartOffset(), lead.HighWatermark()
	want := readRange(t, lead, start, hw)
	lead.Replica().TransferLeadership(f)
	waitFor(t, "the caught-up follower to lead", func() bool { st := c.part(f).Status(); return st.IsLeader && st.Ready })
	fp = c.part(f)
	if got := readRange(t, fp, fp.Log().StartOffset(), hw); fp.Log().StartOffset() != start || !bytes.Equal(got, want) {
		t.Fatalf("the new leader's log from %d (its start %d) differs from its predecessor's: %d and %d bytes", start, fp.Log().StartOffset(), len(got), len(want))
	}
	for k, base := range acked {
		if base < start {
			delete(acked, k) // deleted by retention everywhere
		}
	}
	exactlyOnce(t, fp, acked)
}

func TestSegmentCatchUp(t *testing.T) { catchUpCase(t, 0, 0) }

// TestSegmentCatchUpCut: the first segment stream is cut mid-way (the connection drops);
// the follower goes on from its last whole batch, and ends byte-identical all the same.
func TestSegmentCatchUpCut(t *testing.T) { catchUpCase(t, 6000, 0) }

// TestSegmentCatchUpFeaturesLate: the leader's snapshots for the restarted follower are
// made while its features are not known yet (its new connection's announcement had not
// come, when the leader used to take it for a previous-release broker and empty its log
// with a version 1 snapshot); the leader holds them back until it knows, then sends
// version 2 only.
func TestSegmentCatchUpFeaturesLate(t *testing.T) { catchUpCase(t, 0, 3) }

// TestSnapshotToOldFollower: a follower whose transport announces no features (a broker of
// the previous release, which refuses snapshot data version 2) is sent the previous
// release's snapshot (version 1, at the leader's raft log start) and catches up as before:
// its log starts at that snapshot's offset, no segment stream, and the leader's counters say
// version 1. Restarted announcing them, it is sent version 2 the next time.
func TestSnapshotToOldFollower(t *testing.T) {
	c := newCluster(t, 45, 3, func(cfg *Config) {
		cfg.Log.SegmentBytes = 4 << 10
		cfg.Log.RetentionBytes = 24 << 10
		cfg.RetentionCheck = 10 * time.Millisecond
		cfg.CheckpointInterval = 50 * time.Millisecond
	})
	l := c.leader()
	f := c.ids[0]
	if f == l {
		f = c.ids[1]
	}
	behind := c.part(f).Log().NextOffset()
	c.stop(f)
	acked, err := newWorkload(45, 700, 3, 60).run(c, 4)
	if err != nil {
		t.Fatal(err)
	}
	lead := c.part(l)
	waitFor(t, "the leader's retention to pass the stopped follower", func() bool {
		return lead.Log().StartOffset() > behind
	})
	c.nodes[f].old = true
	c.start(f)
	c.quiet()
	fp := c.part(f)
	fc, lc := fp.Status().Counts, lead.Status().Counts
	t.Logf("old follower %d: log [%d, %d), counts %+v; leader's log [%d, %d), counts %+v", f,
		fp.Log().StartOffset(), fp.Log().NextOffset(), fc, lead.Log().StartOffset(), lead.Log().NextOffset(), lc)
	switch {
	case lc.SnapshotsSent[0] < 1 || lc.SnapshotsSent[1] != 0:
		t.Fatalf("leader sent %d snapshots of version 1 and %d of version 2 to a follower without the feature", lc.SnapshotsSent[0], lc.SnapshotsSent[1])
	case fc.SnapshotsApplied < 1 || fc.CatchUpsStarted != 0 || fc.SegmentBytesReceived != 0 || lc.SegmentBytesSent != 0:
		t.Fatalf("the old follower fetched segments: its counts %+v, the leader's %+v", fc, lc)
	case fp.Log().StartOffset() <= behind:
		t.Fatalf("the old follower's log starts at %d, at or below where it stopped (%d)", fp.Log().StartOffset(), behind)
	}
	exactlyOnce(t, fp, retained(acked, fp.Log().StartOffset()))

	// Upgraded: its next snapshot is version 2, with the segments.
	c.stop(f)
	behind = lead.Log().NextOffset()
	more, err := newWorkload(46, 800, 3, 60).run(c, 4)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range more {
		acked[k] = v
	}
	waitFor(t, "the leader's retention to pass the stopped follower again", func() bool {
		return lead.Log().StartOffset() > behind
	})
	c.nodes[f].old = false
	c.start(f)
	c.quiet()
	fp = c.part(f)
	if c.leader() != l {
		t.Skipf("node %d lost the leadership (a spurious election on a loaded machine)", l)
	}
	fc, lc2 := fp.Status().Counts, lead.Status().Counts
	if lc2.SnapshotsSent[1] < 1 || lc2.SnapshotsSent[0] != lc.SnapshotsSent[0] || fc.CatchUpsDone < 1 {
		t.Fatalf("after the upgrade: the leader's counts %+v, the follower's %+v", lc2, fc)
	}
	c.sameLogs(c.ids...)
	exactlyOnce(t, fp, retained(acked, lead.Log().StartOffset()))
}
