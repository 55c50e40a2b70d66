package log

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

func TestRetentionByBytes(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(11, 12))
	l := mustOpen(t, dir, Options{SegmentBytes: 4 << 10, RetentionBytes: 12 << 10, Logf: t.Logf})
	defer l.Close()
	want := appendN(t, l, rng, 100, 3, 100, 0)
	before := len(segFiles(t, dir))

	// A chunk held on the oldest segment survives its deletion.
	held, err := l.Read(0, l.NextOffset(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	after := len(segFiles(t, dir))
	if after >= before || after < 3 {
		t.Fatalf("segments %d -> %d", before, after)
	}
	var total int64
	for _, s := range l.segs {
		total += s.size
	}
	if total > 12<<10+4<<10 || l.segs[len(l.segs)-1].next != l.NextOffset() {
		t.Fatalf("%d bytes left", total)
	}
	got := make([]byte, held.Len)
	if _, err := held.File.ReadAt(got, held.Pos); err != nil || !bytes.HasPrefix(got, want[0].data) {
		t.Fatalf("held chunk unreadable after deletion: %v", err)
	}
	held.Release()

	start := l.StartOffset()
	if start == 0 || start != l.segs[0].base {
		t.Fatalf("start %d", start)
	}
	if _, err := l.Read(start-1, l.NextOffset(), 100); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read below start: %v", err)
	}
	var kept []stored
	for _, b := range want {
		if b.base >= start {
			kept = append(kept, b)
		}
	}
	sameBatches(t, readAll(t, l), kept)
}

func TestRetentionByAgeNeverActive(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(13, 14))
	now := time.UnixMilli(1_000_000)
	opts := Options{SegmentBytes: 2 << 10, RetentionAge: time.Hour, Now: func() time.Time { return now }}
	l := mustOpen(t, dir, opts)
	defer l.Close()
	appendN(t, l, rng, 30, 2, 100, 1_000_000) // timestamps ~1e6 ms
	if err := l.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	if len(l.segs) < 3 {
		t.Fatalf("young segments deleted: %d left", len(l.segs))
	}
	now = now.Add(2 * time.Hour)
	if err := l.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	if len(l.segs) != 1 || len(segFiles(t, dir)) != 1 {
		t.Fatalf("%d segments left, want only the active one", len(l.segs))
	}
	if l.StartOffset() != l.segs[0].base || l.NextOffset() <= l.StartOffset() {
		t.Fatalf("start %d next %d", l.StartOffset(), l.NextOffset())
	}
	readAll(t, l)
}
