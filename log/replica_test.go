package log

// What a replica needs of the log besides TruncateFrom: no deduplication, retention that
// records the new start before it moves and stops at a limit, and Reset.

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lightq/lightq/log/vfs/crashfs"
	"github.com/lightq/lightq/wire"
)

// idemBatch is a magic-2 batch of n records from producer id (epoch 0), first sequence seq.
func idemBatch(t *testing.T, id int64, seq int32, n int) []byte {
	t.Helper()
	var bb wire.BatchBuilder
	bb.SetMagic(wire.BatchMagic2)
	for i := range n {
		bb.Append(1000+int64(i), nil, []byte("v"), nil)
	}
	bb.SetProducer(id, 0, seq)
	b, err := bb.Finish(wire.CodecNone, nil)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(b)
}

// TestProducersDisabled: a log without deduplication stores a duplicate and a batch out of
// sequence as any other, writes no producer snapshots at its rolls, and opens again.
func TestProducersDisabled(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 200, Producers: ProducerOptions{Disabled: true}}
	l := mustOpen(t, dir, opts)
	for i, b := range [][]byte{
		idemBatch(t, 7, 0, 2),
		idemBatch(t, 7, 0, 2),  // a duplicate
		idemBatch(t, 7, 10, 1), // a gap
		idemBatch(t, 8, 5, 1),  // an unknown producer starting past 0
	} {
		base, err := l.Append(b, wire.PeekBatchHeaderUnchecked(b).RecordCount)
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		if want := []int64{0, 2, 4, 5}[i]; base != want {
			t.Fatalf("batch %d at %d, want %d", i, base, want)
		}
	}
	if l.ProducerStates() != 0 {
		t.Fatalf("%d producer states kept", l.ProducerStates())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if snaps, _ := filepath.Glob(filepath.Join(dir, "*"+producersSuffix)); len(snaps) != 0 || len(segFiles(t, dir)) < 2 {
		t.Fatalf("snapshots %v, segments %v", snaps, segFiles(t, dir))
	}
	l = mustOpen(t, dir, opts)
	defer l.Close()
	if l.NextOffset() != 6 || l.ProducerStates() != 0 {
		t.Fatalf("reopened: next %d, %d producer states", l.NextOffset(), l.ProducerStates())
	}
	// The same log with deduplication refuses the duplicate it now learns of.
	l.Close()
	l = mustOpen(t, dir, Options{SegmentBytes: 200})
	if _, err := l.Append(idemBatch(t, 8, 6, 1), 1); err != nil {
		t.Fatalf("next batch of producer 8: %v", err)
	}
	if _, err := l.Append(idemBatch(t, 8, 6, 1), 1); err != ErrDuplicate {
		t.Fatalf("a duplicate with deduplication on: %v", err)
	}
}

// TestEnforceRetentionBelow: before sees the new start while the segments are still there and
// can stop their removal; limit keeps the segments that end above it.
func TestEnforceRetentionBelow(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 1 << 10, RetentionBytes: 1})
	defer l.Close()
	batches := appendN(t, l, rand.New(rand.NewPCG(5, 6)), 40, 3, 200, 1000)
	if len(l.segs) < 5 {
		t.Fatalf("%d segments", len(l.segs))
	}
	bases := make([]int64, len(l.segs))
	for i, s := range l.segs {
		bases[i] = s.base
	}
	// A failing before deletes nothing.
	veto := errors.New("not yet")
	if err := l.EnforceRetentionBelow(1<<62, func(int64) error { return veto }); err != veto {
		t.Fatalf("vetoed retention: %v", err)
	}
	if l.StartOffset() != 0 || len(segFiles(t, dir)) != len(bases) {
		t.Fatalf("a vetoed retention moved the start to %d", l.StartOffset())
	}
	// A limit inside the third segment keeps it and what follows.
	var seen []int64
	before := func(start int64) error {
		seen = append(seen, start)
		if l.StartOffset() >= start {
			return fmt.Errorf("before called after the start moved to %d", l.StartOffset())
		}
		// The segments are still there and readable.
		c, err := l.Read(l.StartOffset(), l.NextOffset(), 1)
		if err != nil {
			return err
		}
		c.Release()
		return nil
	}
	if err := l.EnforceRetentionBelow(bases[2]+1, before); err != nil {
		t.Fatal(err)
	}
	if l.StartOffset() != bases[2] || len(seen) != 1 || seen[0] != bases[2] {
		t.Fatalf("start %d, before saw %v; want %d", l.StartOffset(), seen, bases[2])
	}
	// A limit at a segment's end lets that segment go.
	if err := l.EnforceRetentionBelow(bases[4], before); err != nil {
		t.Fatal(err)
	}
	if l.StartOffset() != bases[4] || len(seen) != 2 || seen[1] != bases[4] {
		t.Fatalf("start %d, before saw %v; want %d", l.StartOffset(), seen, bases[4])
	}
	// Nothing to delete below the limit: before is not called.
	if err := l.EnforceRetentionBelow(bases[4], before); err != nil || len(seen) != 2 {
		t.Fatalf("%v, before called %d times", err, len(seen))
	}
	var keep []stored
	for _, b := range batches {
		if b.base >= bases[4] {
			keep = append(keep, b)
		}
	}
	sameBatches(t, readAll(t, l), keep)
}

// TestReset: the log starts again, empty, at any offset, above or below what it held; appends
// continue there; it opens again as it was left.
func TestReset(t *testing.T) {
	for _, at := range []int64{0, 3, 1000} {
		dir := t.TempDir()
		opts := Options{SegmentBytes: 1 << 10, CheckpointInterval: -1}
		l := mustOpen(t, dir, opts)
		rng := rand.New(rand.NewPCG(uint64(at), 1))
		appendN(t, l, rng, 30, 3, 200, 1000)
		c, err := l.Read(0, l.NextOffset(), 1) // a chunk held across the reset stays readable
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Reset(at); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, c.Len)
		if _, err := c.File.ReadAt(buf, c.Pos); err != nil {
			t.Fatalf("chunk held across the reset: %v", err)
		}
		c.Release()
		if l.StartOffset() != at || l.NextOffset() != at || l.DurableOffset() != at || len(segFiles(t, dir)) != 1 {
			t.Fatalf("reset at %d: start %d next %d durable %d, segments %v", at, l.StartOffset(), l.NextOffset(), l.DurableOffset(), segFiles(t, dir))
		}
		after := appendN(t, l, rng, 10, 3, 200, 2000)
		if after[0].base != at {
			t.Fatalf("first batch after the reset at %d, want %d", after[0].base, at)
		}
		if _, err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l = mustOpen(t, dir, opts)
		sameBatches(t, readAll(t, l), after)
		l.Close()
	}
}

// TestResetCrash: power cut at every point of a Reset: the log opens as the old one, a prefix
// of it, empty at 0 or empty at the new offset; Reset again finishes the job.
func TestResetCrash(t *testing.T) {
	const at = 5000
	rng := rand.New(rand.NewPCG(9, 9))
	kinds := map[string]int{}
	for kill := 1; ; kill++ {
		dir := t.TempDir()
		fsys := crashfs.New()
		opts := Options{FS: fsys, SegmentBytes: 1 << 10, CheckpointInterval: -1}
		l := mustOpen(t, dir, opts)
		old := appendN(t, l, rng, 20, 3, 200, 1000)
		if _, err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		fsys.KillAfter(kill)
		err := l.Reset(at)
		finished := err == nil
		if err != nil && !errors.Is(err, crashfs.ErrKilled) {
			if dead, _, _ := fsys.Killed(); !dead {
				t.Fatalf("kill %d: %v", kill, err)
			}
		}
		if err := fsys.Crash(rng); err != nil {
			t.Fatal(err)
		}
		l2, err := Open(dir, Options{FS: fsys})
		if err != nil {
			t.Fatalf("kill %d: open after the crash: %v", kill, err)
		}
		got := readAll(t, l2)
		switch {
		case l2.StartOffset() == at && l2.NextOffset() == at:
			kinds["new"]++
		case len(got) == 0 && l2.StartOffset() == 0 && l2.NextOffset() == 0:
			kinds["empty at 0"]++
		case len(got) > 0 && len(got) <= len(old):
			sameBatches(t, got, old[:len(got)])
			kinds["prefix of the old"]++
		default:
			t.Fatalf("kill %d: the log holds %d batches from %d to %d", kill, len(got), l2.StartOffset(), l2.NextOffset())
		}
		if finished && l2.NextOffset() != at {
			t.Fatalf("kill %d: Reset returned, but the log opens at %d", kill, l2.NextOffset())
		}
		if err := l2.Reset(at); err != nil {
			t.Fatal(err)
		}
		if l2.NextOffset() != at || len(readAll(t, l2)) != 0 {
			t.Fatalf("kill %d: Reset again: next %d", kill, l2.NextOffset())
		}
		l2.Close()
		if finished {
			break
		}
		if kill > 200 {
			t.Fatal("Reset never finished")
		}
	}
	t.Logf("what a power cut in Reset left: %v", kinds)
	if kinds["prefix of the old"] == 0 || kinds["new"] == 0 {
		t.Fatalf("the kill points missed the middle of Reset: %v", kinds)
	}
}

// TestChunkPath names the segment file.
func TestChunkPath(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	defer l.Close()
	appendN(t, l, rand.New(rand.NewPCG(1, 1)), 1, 1, 10, 0)
	c, err := l.Read(0, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if !strings.HasSuffix(c.Path(), string(os.PathSeparator)+segmentName(0, logSuffix)) {
		t.Fatalf("Path %q", c.Path())
	}
}
