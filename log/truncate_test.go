package log

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/lightq/lightq/log/vfs/crashfs"
	"github.com/lightq/lightq/wire"
)

func TestTruncateFrom(t *testing.T) {
	cases := []struct {
		name string
		at   func(b []stored) int // index of the first batch cut (len(b): none)
	}{
		{"nothing", func(b []stored) int { return len(b) }},
		{"last batch", func(b []stored) int { return len(b) - 1 }},
		{"inside the active segment", func(b []stored) int { return len(b) - 3 }},
		{"inside a sealed segment", func(b []stored) int { return len(b) / 2 }},
		{"everything", func(b []stored) int { return 0 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{SegmentBytes: 8 << 10, IndexIntervalBytes: 512}
			l := mustOpen(t, dir, opts)
			rng := rand.New(rand.NewPCG(1, 2))
			batches := appendN(t, l, rng, 60, 5, 200, 1000)
			if len(l.segs) < 3 {
				t.Fatalf("want several segments, have %d", len(l.segs))
			}
			cut := tc.at(batches)
			offset := l.NextOffset()
			if cut < len(batches) {
				offset = batches[cut].base
			}
			if err := l.TruncateFrom(offset); err != nil {
				t.Fatal(err)
			}
			keep := batches[:cut]
			check := func(l *Log, what string) {
				t.Helper()
				if l.NextOffset() != offset {
					t.Fatalf("%s: NextOffset %d, want %d", what, l.NextOffset(), offset)
				}
				got := readAll(t, l)
				if len(got) != len(keep) {
					t.Fatalf("%s: %d batches, want %d", what, len(got), len(keep))
				}
				for i := range got {
					if got[i].base != keep[i].base || !bytes.Equal(got[i].data, keep[i].data) {
						t.Fatalf("%s: batch %d differs", what, i)
					}
				}
			}
			check(l, "after the cut")
			if l.DurableOffset() > offset {
				t.Fatalf("DurableOffset %d above the cut %d", l.DurableOffset(), offset)
			}
			more := appendN(t, l, rng, 20, 5, 200, 5000)
			if more[0].base != offset {
				t.Fatalf("the next append got offset %d, want %d", more[0].base, offset)
			}
			keep = append(keep, more...)
			offset = l.NextOffset()
			check(l, "after appending again")
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = mustOpen(t, dir, opts)
			defer l.Close()
			check(l, "after reopening")
		})
	}
}

func TestTruncateFromRefuses(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{})
	defer l.Close()
	batches := appendN(t, l, rand.New(rand.NewPCG(3, 4)), 5, 5, 50, 0)
	for _, off := range []int64{-1, l.NextOffset() + 1} {
		if err := l.TruncateFrom(off); !errors.Is(err, ErrOffsetOutOfRange) {
			t.Fatalf("TruncateFrom(%d) = %v, want ErrOffsetOutOfRange", off, err)
		}
	}
	for _, b := range batches {
		if b.count < 2 {
			continue // no offset inside a batch of one record
		}
		if err := l.TruncateFrom(b.base + 1); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("TruncateFrom inside a batch = %v, want ErrCorrupt", err)
		}
	}
	if l.NextOffset() != batches[4].next() {
		t.Fatal("a refused truncation changed the log")
	}
}

// TestTruncateFromPowerLoss kills the process at every step of a truncation across segments
// and cuts the power: the log opens, is continuous, and holds every batch below the cut and
// either all the batches after it or a prefix of them.
func TestTruncateFromPowerLoss(t *testing.T) {
	rounds := 60
	if long {
		rounds = 600
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for round := range rounds {
		fsys := crashfs.New()
		dir := t.TempDir()
		opts := Options{FS: fsys, SegmentBytes: 4 << 10, IndexIntervalBytes: 512}
		l := mustOpen(t, dir, opts)
		batches := appendN(t, l, rng, 40, 4, 150, 0)
		if _, err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		cut := 1 + rng.IntN(len(batches)-1)
		fsys.KillAfter(1 + rng.IntN(10))
		_ = l.TruncateFrom(batches[cut].base) // may be killed part way
		if err := fsys.Crash(rng); err != nil {
			t.Fatal(err)
		}
		l2, err := Open(dir, Options{FS: fsys, SegmentBytes: 4 << 10, IndexIntervalBytes: 512})
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		got := readAll(t, l2)
		if len(got) < cut {
			t.Fatalf("round %d: %d batches after the crash; the %d below the cut must stay", round, len(got), cut)
		}
		for i := range got {
			if got[i].base != batches[i].base || !bytes.Equal(got[i].data, batches[i].data) {
				t.Fatalf("round %d: batch %d differs after the crash", round, i)
			}
		}
		l2.Close()
	}
}

// TestTruncateThenAppendPowerLoss: a replica cuts its tail and appends the new leader's
// batches over the same bytes, then the power fails before they are all synced. The
// checkpoint, which recorded the old tail as durable, must move back with the cut: else a
// torn new batch followed by one that reached the disk looks like damage to confirmed data
// and the log is refused. After the crash the log opens and holds the batches below the cut,
// then a prefix of the new ones.
func TestTruncateThenAppendPowerLoss(t *testing.T) {
	rounds := 100
	if long {
		rounds = 1000
	}
	rng := rand.New(rand.NewPCG(15, 16))
	for round := range rounds {
		fsys := crashfs.New()
		dir := t.TempDir()
		opts := Options{FS: fsys, SegmentBytes: 64 << 10, CheckpointInterval: -1}
		l := mustOpen(t, dir, opts)
		old := appendN(t, l, rng, 30, 3, 300, 0)
		if _, err := l.Sync(); err != nil { // the checkpoint now says all of it is durable
			t.Fatal(err)
		}
		cut := 1 + rng.IntN(len(old)-1)
		if err := l.TruncateFrom(old[cut].base); err != nil {
			t.Fatal(err)
		}
		fsys.KillAfter(1 + rng.IntN(12))
		var appended []stored
		for i := 0; i < 10; i++ {
			n := 1 + rng.IntN(3)
			b := makeBatch(rng, n, 300, 9000)
			base, err := l.Append(b, uint32(n))
			if err != nil {
				break
			}
			appended = append(appended, stored{base: base, count: uint32(n), data: b})
			if rng.IntN(3) == 0 {
				if _, err := l.Sync(); err != nil {
					break
				}
			}
		}
		if err := fsys.Crash(rng); err != nil {
			t.Fatal(err)
		}
		l2, err := Open(dir, Options{FS: fsys, SegmentBytes: 64 << 10})
		if err != nil {
			t.Fatalf("round %d: reopen after a cut at batch %d and %d appends: %v", round, cut, len(appended), err)
		}
		got := readAll(t, l2)
		if len(got) < cut {
			t.Fatalf("round %d: %d batches after the crash; the %d below the cut must stay", round, len(got), cut)
		}
		sameBatches(t, got[:cut], old[:cut])
		if len(got)-cut > len(appended) {
			t.Fatalf("round %d: %d batches after the cut, %d were appended", round, len(got)-cut, len(appended))
		}
		sameBatches(t, got[cut:], appended[:len(got)-cut])
		l2.Close()
	}
}

// TestTruncateAtSegmentStart: a cut at a segment's base offset removes that segment and
// makes the one before it active again, and so does a cut at the end of a log whose active
// segment is empty: the batches appended next split into segments as in a log that never
// held the cut ones, byte for byte.
func TestTruncateAtSegmentStart(t *testing.T) {
	opts := Options{SegmentBytes: 8 << 10, IndexIntervalBytes: 512}
	rng := rand.New(rand.NewPCG(3, 4))
	var batches [][]byte
	for range 80 {
		batches = append(batches, makeBatch(rng, 1+rng.IntN(5), 200, 1000))
	}
	// ref never holds the tail; cut appends it, and cuts it at the first segment boundary
	// inside it.
	ref, cut := mustOpen(t, t.TempDir(), opts), mustOpen(t, t.TempDir(), opts)
	defer ref.Close()
	at := -1
	for i, b := range batches {
		before := len(cut.segs)
		if _, err := cut.Append(bytes.Clone(b), uint32(mustHeader(t, b).RecordCount)); err != nil {
			t.Fatal(err)
		}
		if i > 0 && len(cut.segs) > before && at < 0 && i < 60 {
			at = i
		}
		if at < 0 {
			if _, err := ref.Append(bytes.Clone(b), uint32(mustHeader(t, b).RecordCount)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if at < 0 {
		t.Fatal("no roll among the first 60 batches")
	}
	if err := cut.TruncateFrom(ref.NextOffset()); err != nil {
		t.Fatal(err)
	}
	if got, want := segFiles(t, cut.dir), segFiles(t, ref.dir); len(got) != len(want) {
		t.Fatalf("after the cut at a segment's start: segments %v, want %v", got, want)
	}
	for _, b := range batches[at:] {
		for _, l := range []*Log{ref, cut} {
			if _, err := l.Append(bytes.Clone(b), uint32(mustHeader(t, b).RecordCount)); err != nil {
				t.Fatal(err)
			}
		}
	}
	sameSegments(t, ref, cut)

	// An empty active segment (a crash after the roll created it): the cut at the end
	// removes it.
	dir := cut.dir
	next := cut.NextOffset()
	if err := cut.Close(); err != nil {
		t.Fatal(err)
	}
	writeEmpty(t, dir, segmentName(next, logSuffix))
	cut = mustOpen(t, dir, opts)
	defer cut.Close()
	n := len(cut.segs)
	if cut.active().size != 0 || cut.NextOffset() != next {
		t.Fatalf("the empty segment did not open as the active one")
	}
	if err := cut.TruncateFrom(next); err != nil {
		t.Fatal(err)
	}
	if len(cut.segs) != n-1 || cut.NextOffset() != next {
		t.Fatalf("%d segments (had %d), next %d (want %d)", len(cut.segs), n, cut.NextOffset(), next)
	}
	b := makeBatch(rng, 1, 10, 1000)
	for _, l := range []*Log{ref, cut} {
		if _, err := l.Append(bytes.Clone(b), 1); err != nil {
			t.Fatal(err)
		}
	}
	sameSegments(t, ref, cut)
}

func mustHeader(t testing.TB, b []byte) wire.BatchHeader {
	t.Helper()
	h, err := wire.PeekBatchHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// sameSegments checks that a and b have the same segment files with the same bytes.
func sameSegments(t testing.TB, a, b *Log) {
	t.Helper()
	fa, fb := segFiles(t, a.dir), segFiles(t, b.dir)
	if len(fa) != len(fb) {
		t.Fatalf("segments %v and %v", fa, fb)
	}
	for i := range fa {
		if filepath.Base(fa[i]) != filepath.Base(fb[i]) {
			t.Fatalf("segments %v and %v", fa, fb)
		}
		x, _ := os.ReadFile(fa[i])
		y, _ := os.ReadFile(fb[i])
		if !bytes.Equal(x, y) {
			t.Fatalf("segment %s differs (%d and %d bytes)", fa[i], len(x), len(y))
		}
	}
}

func writeEmpty(t testing.TB, dir, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}
