package raftlog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/log"
	"github.com/lightq/lightq/log/vfs"
	"github.com/lightq/lightq/log/vfs/crashfs"
)

// leaderLog is a leader's storage of entries 1-200 in small segments, its retention past the
// first ones, and its snapshot at entry 200 (data version 2, source node 1).
func leaderLog(t *testing.T) (*Storage, raftpb.Snapshot) { return leaderLogRetained(t, 8<<10) }

// leaderLogRetained is leaderLog with retention at retention bytes (0: none).
func leaderLogRetained(t *testing.T, retention int64) (*Storage, raftpb.Snapshot) {
	t.Helper()
	s := mustOpen(t, t.TempDir(), Options{Log: log.Options{SegmentBytes: 2 << 10, RetentionBytes: retention}})
	t.Cleanup(func() { s.Close() })
	mustAppend(t, s, mixedEntries(1, 200, 1, 40))
	if err := s.SetHardState(raftpb.HardState{Term: 5, Commit: 200}); err != nil {
		t.Fatal(err)
	}
	if err := s.EnforceRetention(200); err != nil {
		t.Fatal(err)
	}
	if retention > 0 && s.Log().StartOffset() == 0 {
		t.Fatal("the leader's retention removed nothing")
	}
	snap, err := s.SnapshotAt(200, 1)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Metadata.Index != 200 {
		t.Fatalf("snapshot at %d, want 200", snap.Metadata.Index)
	}
	return s, snap
}

// stream feeds c the leader's log from offset from to c.To(), each chunk in two writes (so
// batches split across writes), with mutate applied to each chunk's bytes.
func stream(t *testing.T, l *log.Log, c *CatchUp, from int64, mutate func(off int64, b []byte)) error {
	t.Helper()
	for off := from; off < c.To(); {
		ch, err := l.Read(off, c.To(), 1500)
		if err != nil || ch == nil {
			t.Fatalf("read the leader's log at %d: %v", off, err)
		}
		b := make([]byte, ch.Len)
		if _, err := ch.File.ReadAt(b, ch.Pos); err != nil {
			t.Fatal(err)
		}
		if mutate != nil {
			mutate(off, b)
		}
		half := len(b) / 3
		err = c.Write(ch.SegmentBase(), ch.Pos, b[:half])
		if err == nil {
			err = c.Write(ch.SegmentBase(), ch.Pos+int64(half), b[half:])
		}
		off = ch.NextOffset
		ch.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// segFiles reads the .log files of dir.
func segFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, p := range m {
		out[filepath.Base(p)] = readFile(t, p)
	}
	return out
}

// sameSegments checks that dir holds exactly the leader's segment files, byte for byte.
func sameSegments(t *testing.T, leader *Storage, dir string) {
	t.Helper()
	a, b := segFiles(t, leader.Dir()), segFiles(t, dir)
	if len(a) != len(b) {
		t.Fatalf("the leader has %d segment files, the follower %d", len(a), len(b))
	}
	for name, x := range a {
		if !bytes.Equal(x, b[name]) {
			t.Fatalf("segment %s differs (%d and %d bytes)", name, len(x), len(b[name]))
		}
	}
}

// TestCatchUpInstall: a follower with a few entries of its own, all below the leader's log
// start, gets the leader's segments and installs them: its files equal the leader's, its
// raft state starts after the snapshot, and it reopens so.
func TestCatchUpInstall(t *testing.T) {
	leader, snap := leaderLog(t)
	dir := t.TempDir()
	opts := Options{Log: log.Options{SegmentBytes: 2 << 10}}
	f := mustOpen(t, dir, opts)
	mustAppend(t, f, mixedEntries(1, 10, 1, 40))
	c, err := f.NewCatchUp(snap)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream(t, leader.Log(), c, leader.Log().StartOffset(), nil); err != nil {
		t.Fatal(err)
	}
	if f.CanKeepBelow(c.From()) {
		t.Fatal("the follower's own entries end below the leader's start, yet CanKeepBelow")
	}
	if err := c.Finish(false); err != nil {
		t.Fatal(err)
	}
	if err := f.InstallSnapshot(snap, c); err != nil {
		t.Fatal(err)
	}
	check := func(f *Storage) {
		t.Helper()
		sameSegments(t, leader, dir)
		if fi, _ := f.FirstIndex(); fi != 201 {
			t.Fatalf("first index %d, want 201", fi)
		}
		if li, _ := f.LastIndex(); li != 200 {
			t.Fatalf("last index %d, want 200", li)
		}
		if term, err := f.Term(200); err != nil || term != snap.Metadata.Term {
			t.Fatalf("term of 200: %d %v, want %d", term, err, snap.Metadata.Term)
		}
		if f.Log().StartOffset() != leader.Log().StartOffset() || f.Log().NextOffset() != leader.Log().NextOffset() {
			t.Fatalf("the follower's log holds [%d, %d), the leader's [%d, %d)", f.Log().StartOffset(), f.Log().NextOffset(), leader.Log().StartOffset(), leader.Log().NextOffset())
		}
		if _, err := os.Stat(filepath.Join(dir, CatchUpDir)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s left after the install: %v", CatchUpDir, err)
		}
	}
	check(f)
	// It goes on appending where the leader does.
	mustAppend(t, f, mixedEntries(201, 210, 5, 0))
	mustAppend(t, leader, mixedEntries(201, 210, 5, 0))
	sameSegments(t, leader, dir)
	f.Close()
	f = mustOpen(t, dir, opts)
	defer f.Close()
	if li, _ := f.LastIndex(); li != 210 {
		t.Fatalf("reopened: last index %d, want 210", li)
	}
}

// TestCatchUpKeepsOwn: a follower whose committed entries reach into the leader's log keeps
// its own segments below the one holding its end and gets the rest: the files all equal the
// leader's.
func TestCatchUpKeepsOwn(t *testing.T) {
	leader, snap := leaderLogRetained(t, 0)
	dir := t.TempDir()
	f := mustOpen(t, dir, Options{Log: log.Options{SegmentBytes: 2 << 10}})
	defer f.Close()
	mustAppend(t, f, mixedEntries(1, 150, 1, 40))
	mustAppend(t, f, []raftpb.Entry{dataEntry(151, 9, 3)}) // uncommitted, not the leader's
	if err := f.SetHardState(raftpb.HardState{Term: 4, Commit: 120}); err != nil {
		t.Fatal(err)
	}
	end := f.CommittedEnd()
	ch, err := leader.Log().Read(end, leader.Log().NextOffset(), 1)
	if err != nil {
		t.Fatal(err)
	}
	from := ch.SegmentBase()
	ch.Release()
	if from == 0 || !f.CanKeepBelow(from) {
		t.Fatalf("cannot keep the segments below %d (committed end %d)", from, end)
	}
	c, err := f.NewCatchUp(snap)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream(t, leader.Log(), c, from, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Finish(true); err != nil {
		t.Fatal(err)
	}
	if err := f.InstallSnapshot(snap, c); err != nil {
		t.Fatal(err)
	}
	sameSegments(t, leader, dir)
	if f.Log().StartOffset() != 0 || c.Received() >= leader.Log().Size() {
		t.Fatalf("the follower's log starts at %d after receiving %d of the leader's %d bytes", f.Log().StartOffset(), c.Received(), leader.Log().Size())
	}
	t.Logf("kept [0, %d), received %d of %d bytes", from, c.Received(), leader.Log().Size())
}

// TestCatchUpRefuses: bytes that are not the log the snapshot describes are refused.
func TestCatchUpRefuses(t *testing.T) {
	leader, snap := leaderLog(t)
	start := leader.Log().StartOffset()
	for _, tc := range []struct {
		name   string
		from   int64
		mutate func(off int64, b []byte)
		stop   int64 // stream up to here only (0: all)
		want   string
	}{
		{name: "flipped bit", from: start, mutate: func(off int64, b []byte) {
			if off > start {
				b[len(b)/2] ^= 0x10
			}
		}, want: "CRC"},
		{name: "not a segment start", from: start + 1, want: "segment"},
		{name: "ends early", from: start, stop: offsetAfter(t, leader, 190), want: "ended at offset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := mustOpen(t, t.TempDir(), Options{Log: log.Options{SegmentBytes: 2 << 10}})
			defer f.Close()
			c, err := f.NewCatchUp(snap)
			if err != nil {
				t.Fatal(err)
			}
			if tc.stop != 0 {
				c.to = tc.stop
			}
			from := tc.from
			if from != start { // a chunk from the middle of a batch's segment
				ch, _ := leader.Log().Read(from, c.To(), 1500)
				from = ch.NextOffset
				ch.Release()
			}
			err = stream(t, leader.Log(), c, from, tc.mutate)
			if tc.stop != 0 {
				c.to, _ = decodeSnapshotData(snap.Data) // Finish checks against the snapshot
				if err == nil {
					err = c.Finish(false)
				}
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrCorrupt naming %q", err, tc.want)
			}
			if err := c.Abandon(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCatchUpKilled: the follower's process dies at every mutating file operation of a
// catch-up and its install in turn (crashfs); reopened, it is either as before (the
// catch-up's files gone: it starts clean and is sent a snapshot again) or installed, its
// segments the leader's byte for byte.
func TestCatchUpKilled(t *testing.T) {
	leader, snap := leaderLog(t)
	var before, after int
	for k := 1; k < 5000; k++ {
		dir := t.TempDir()
		fsys := crashfs.New()
		opts := Options{Log: log.Options{SegmentBytes: 2 << 10, FS: fsys}}
		f := mustOpen(t, dir, opts)
		mustAppend(t, f, mixedEntries(1, 10, 1, 40))
		fsys.KillAfter(k)
		err := func() error {
			c, err := f.NewCatchUp(snap)
			if err != nil {
				return err
			}
			if err := stream(t, leader.Log(), c, leader.Log().StartOffset(), nil); err != nil {
				return err
			}
			if err := c.Finish(false); err != nil {
				return err
			}
			return f.InstallSnapshot(snap, c)
		}()
		dead, op, path := fsys.Killed()
		f.Close()
		if !dead {
			if err != nil {
				t.Fatalf("kill point %d: not killed, but %v", k, err)
			}
			t.Logf("%d kill points: %d came back as before, %d installed", k-1, before, after)
			return
		}
		g, err := Open(dir, Options{Log: log.Options{SegmentBytes: 2 << 10, FS: vfs.OS}})
		if err != nil {
			t.Fatalf("kill point %d: reopen: %v", k, err)
		}
		if _, err := os.Stat(filepath.Join(dir, CatchUpDir)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("kill point %d (%s %s): %s left after Open: %v", k, op, path, CatchUpDir, err)
		}
		switch li, _ := g.LastIndex(); li {
		case 10:
			before++
		case 200:
			after++
			sameSegments(t, leader, dir)
			if fi, _ := g.FirstIndex(); fi != 201 {
				t.Fatalf("kill point %d: first index %d", k, fi)
			}
		default:
			t.Fatalf("kill point %d: last index %d, want 10 or 200", k, li)
		}
		g.Close()
	}
	t.Fatal("the catch-up was still killed after 5000 operations")
}

func offsetAfter(t *testing.T, s *Storage, i uint64) int64 {
	t.Helper()
	off, err := s.OffsetAfter(i)
	if err != nil {
		t.Fatal(err)
	}
	return off
}

// FuzzCatchUpWrite: bytes from a segment stream, whatever they are, are refused with
// ErrCorrupt or taken (never a panic, never past the snapshot's offset), and what was taken
// is whole verified batches only.
func FuzzCatchUpWrite(f *testing.F) {
	leader, snap := leaderLog(&testing.T{})
	start := leader.Log().StartOffset()
	ch, err := leader.Log().Read(start, leader.Log().NextOffset(), 3000)
	if err != nil {
		f.Fatal(err)
	}
	good := make([]byte, ch.Len)
	_, _ = ch.File.ReadAt(good, ch.Pos)
	ch.Release()
	f.Add(good, uint16(len(good)/2))
	f.Add(good[:50], uint16(10))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, uint16(0))
	dir := f.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	f.Fuzz(func(t *testing.T, b []byte, cut uint16) {
		c, err := s.NewCatchUp(snap)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Abandon()
		k := min(int(cut), len(b))
		err = c.Write(start, 0, b[:k])
		if err == nil {
			err = c.Write(start, int64(k), b[k:])
		}
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error %v does not wrap ErrCorrupt", err)
		}
		if c.Next() > c.To() || c.Next() < start {
			t.Fatalf("took up to offset %d, outside [%d, %d]", c.Next(), start, c.To())
		}
		if c.Received() > int64(len(b)) {
			t.Fatalf("received %d of %d bytes", c.Received(), len(b))
		}
	})
}
