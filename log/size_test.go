package log

import (
	"math/rand/v2"
	"testing"
)

// TestSize: Size is the bytes of the batches held, across rolls, after retention deleted the
// oldest segments, after a reopen, and after Close.
func TestSize(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(21, 22))
	opts := Options{SegmentBytes: 4 << 10, RetentionBytes: 12 << 10}
	l := mustOpen(t, dir, opts)
	if n := l.Size(); n != 0 {
		t.Fatalf("empty log: Size %d", n)
	}
	sum := func(bs []stored) (n int64) {
		for _, b := range bs {
			n += int64(len(b.data))
		}
		return n
	}
	want := appendN(t, l, rng, 100, 3, 100, 0)
	if got := l.Size(); got != sum(want) {
		t.Fatalf("after 100 appends: Size %d, want %d", got, sum(want))
	}
	if err := l.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	var kept []stored
	for _, b := range want {
		if b.base >= l.StartOffset() {
			kept = append(kept, b)
		}
	}
	if len(kept) == len(want) {
		t.Fatal("retention deleted nothing")
	}
	if got := l.Size(); got != sum(kept) {
		t.Fatalf("after retention: Size %d, want %d", got, sum(kept))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := l.Size(); got != sum(kept) {
		t.Fatalf("after Close: Size %d, want %d", got, sum(kept))
	}
	l = mustOpen(t, dir, opts)
	defer l.Close()
	if got := l.Size(); got != sum(kept) {
		t.Fatalf("reopened: Size %d, want %d", got, sum(kept))
	}
}
