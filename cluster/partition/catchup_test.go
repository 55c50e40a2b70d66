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
// that many bytes (the follower resumes it).
func catchUpCase(t *testing.T, cut int64) {
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

func TestSegmentCatchUp(t *testing.T) { catchUpCase(t, 0) }

// TestSegmentCatchUpCut: the first segment stream is cut mid-way (the connection drops);
// the follower goes on from its last whole batch, and ends byte-identical all the same.
func TestSegmentCatchUpCut(t *testing.T) { catchUpCase(t, 6000) }
