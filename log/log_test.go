package log

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lightq/lightq/wire"
)

func TestEmptyLog(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	defer l.Close()
	if l.StartOffset() != 0 || l.NextOffset() != 0 || l.DurableOffset() != 0 {
		t.Fatalf("offsets %d %d %d", l.StartOffset(), l.NextOffset(), l.DurableOffset())
	}
	c, err := l.Read(0, l.NextOffset(), 100)
	if c != nil || err != nil {
		t.Fatalf("Read on empty log: %v %v", c, err)
	}
	if _, err := l.Read(1, 10, 100); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("Read past end: %v", err)
	}
}

// A Read outside the log fails with a *RangeError that says where the log is and names no
// file: the broker passes its text to clients.
func TestReadOutOfRange(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	defer l.Close()
	appendN(t, l, rand.New(rand.NewPCG(3, 4)), 2, 1, 10, 0)
	for _, off := range []int64{-1, l.NextOffset() + 1} {
		_, err := l.Read(off, l.NextOffset(), 100)
		var re *RangeError
		if !errors.As(err, &re) || !errors.Is(err, ErrOffsetOutOfRange) {
			t.Fatalf("Read(%d): %v, want a *RangeError wrapping ErrOffsetOutOfRange", off, err)
		}
		if *re != (RangeError{Offset: off, Start: 0, Next: l.NextOffset()}) {
			t.Fatalf("Read(%d): %+v", off, *re)
		}
		if strings.Contains(err.Error(), dir) {
			t.Fatalf("Read(%d): %q names the log's directory", off, err)
		}
	}
}

func TestAppendReadAcrossRolls(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	opts := Options{SegmentBytes: 8 << 10, IndexIntervalBytes: 512}
	l := mustOpen(t, dir, opts)
	want := appendN(t, l, rng, 300, 5, 100, 1_000_000)
	if n := len(segFiles(t, dir)); n < 10 {
		t.Fatalf("only %d segments", n)
	}
	sameBatches(t, readAll(t, l), want)

	// Read at every offset, including inside batches.
	for _, b := range want {
		for off := b.base; off < b.next(); off++ {
			c, err := l.Read(off, l.NextOffset(), 1) // maxBytes < one batch: still one batch
			if err != nil {
				t.Fatalf("Read(%d): %v", off, err)
			}
			if c.BaseOffset != b.base || c.NextOffset != b.next() || c.Len != int64(len(b.data)) {
				t.Fatalf("Read(%d): chunk [%d,%d) %d bytes, want batch [%d,%d) %d bytes", off, c.BaseOffset, c.NextOffset, c.Len, b.base, b.next(), len(b.data))
			}
			got := make([]byte, c.Len)
			if _, err := c.File.ReadAt(got, c.Pos); err != nil || !bytes.Equal(got, b.data) {
				t.Fatalf("Read(%d): bytes differ (%v)", off, err)
			}
			c.Release()
			c.Release() // idempotent
		}
	}
	// limit is respected: a chunk never holds a batch ending past it.
	for i := 0; i < len(want)-3; i += 7 {
		limit := want[i+2].next()
		c, err := l.Read(want[i].base, limit, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if c.NextOffset > limit || c.BaseOffset != want[i].base {
			t.Fatalf("limit %d: chunk [%d,%d)", limit, c.BaseOffset, c.NextOffset)
		}
		c.Release()
	}
	if c, err := l.Read(want[5].base, want[5].base, 100); c != nil || err != nil {
		t.Fatalf("offset == limit: %v %v", c, err)
	}
	next := l.NextOffset()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopen: the same batches, the indexes loaded from disk, offsets continue.
	l = mustOpen(t, dir, opts)
	defer l.Close()
	if l.NextOffset() != next || l.DurableOffset() != next {
		t.Fatalf("reopened at next %d durable %d, want %d", l.NextOffset(), l.DurableOffset(), next)
	}
	sameBatches(t, readAll(t, l), want)
	more := appendN(t, l, rng, 5, 3, 50, 2_000_000)
	if more[0].base != next {
		t.Fatalf("next append at %d, want %d", more[0].base, next)
	}
	if cs, err := Verify(dir, nil, 0); err != nil || len(cs) != 0 {
		t.Fatalf("Verify: %v %v", cs, err)
	}
}

func TestMaxBytesAndSegmentBoundary(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(3, 4))
	l := mustOpen(t, dir, Options{SegmentBytes: 4 << 10})
	defer l.Close()
	want := appendN(t, l, rng, 60, 3, 200, 0)
	for i, b := range want {
		c, err := l.Read(b.base, l.NextOffset(), 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		// The chunk ends at the segment end: the next read starts a new segment.
		if c.Pos+c.Len > 4<<10+1<<20 {
			t.Fatalf("chunk past segment")
		}
		st, _ := c.File.Stat()
		if c.Pos+c.Len != st.Size() && c.NextOffset != l.NextOffset() {
			t.Fatalf("batch %d: chunk ends at %d, segment at %d", i, c.Pos+c.Len, st.Size())
		}
		c.Release()
	}
}

func TestConcurrentAppendRead(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 16 << 10, IndexIntervalBytes: 256, RetentionBytes: 64 << 10})
	defer l.Close()
	var wg sync.WaitGroup
	var mu sync.Mutex
	all := map[int64][]byte{}
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for range 150 {
				n := 1 + rng.IntN(4)
				b := makeBatch(rng, n, 80, 5)
				base, err := l.Append(b, uint32(n))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				all[base] = b
				mu.Unlock()
			}
		}()
	}
	done := make(chan struct{})
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 10))
			for {
				select {
				case <-done:
					return
				default:
				}
				next := l.NextOffset()
				if next == 0 {
					continue
				}
				off := l.StartOffset() + rng.Int64N(next-l.StartOffset()+1)
				c, err := l.Read(off, next, rng.IntN(8<<10))
				if errors.Is(err, ErrOffsetOutOfRange) {
					continue // retention moved the start
				}
				if err != nil {
					t.Error(err)
					return
				}
				if c == nil {
					continue
				}
				buf := make([]byte, c.Len)
				if _, err := c.File.ReadAt(buf, c.Pos); err != nil {
					t.Error(err)
				}
				for len(buf) > 0 {
					if _, err := wire.ParseBatch(buf[:wire.BatchSize(buf)], 1<<20); err != nil {
						t.Error(err)
						break
					}
					buf = buf[wire.BatchSize(buf):]
				}
				c.Release()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := l.Sync(); err != nil {
				t.Error(err)
			}
			if err := l.EnforceRetention(); err != nil {
				t.Error(err)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	time.Sleep(300 * time.Millisecond)
	close(done)
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, b := range readAll(t, l) {
		if !bytes.Equal(all[b.base], b.data) {
			t.Fatalf("batch %d differs", b.base)
		}
	}
}

// batchForTime finds the first batch whose max timestamp reaches ts, through the time index,
// before and after a reopen.
func TestBatchForTime(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(5, 6))
	opts := Options{SegmentBytes: 4 << 10, IndexIntervalBytes: 300}
	l := mustOpen(t, dir, opts)
	// Timestamps mostly increasing, with some going backwards.
	var want []stored
	var maxTS []int64
	for i := range 200 {
		ts := int64(1000 + i*10)
		if i%7 == 3 {
			ts -= 500
		}
		n := 1 + rng.IntN(3)
		b := makeBatch(rng, n, 60, ts)
		base, err := l.Append(b, uint32(n))
		if err != nil {
			t.Fatal(err)
		}
		bt, _ := wire.ParseBatch(b, 1<<20)
		want = append(want, stored{base: base, count: uint32(n), data: b})
		maxTS = append(maxTS, bt.MaxTimestamp)
	}
	check := func(l *Log) {
		for ts := int64(0); ts < 3200; ts += 37 {
			expect := l.NextOffset()
			for i := range want {
				if maxTS[i] >= ts {
					expect = want[i].base
					break
				}
			}
			hit, err := l.batchForTime(ts)
			got := hit.next
			if hit.seg != nil {
				got = hit.hdr.BaseOffset
				hit.seg.release()
			}
			if err != nil || got != expect {
				t.Fatalf("batchForTime(%d) = %d, %v; want %d", ts, got, err, expect)
			}
		}
	}
	check(l)
	l.Close()
	l = mustOpen(t, dir, opts) // sealed segments' time indexes from disk
	defer l.Close()
	check(l)
}

func TestRollByAge(t *testing.T) {
	dir := t.TempDir()
	now := time.Unix(1000, 0)
	l := mustOpen(t, dir, Options{SegmentAge: time.Minute, Now: func() time.Time { return now }})
	defer l.Close()
	rng := rand.New(rand.NewPCG(7, 8))
	appendN(t, l, rng, 3, 2, 50, 0)
	now = now.Add(59 * time.Second)
	appendN(t, l, rng, 1, 2, 50, 0)
	if n := len(segFiles(t, dir)); n != 1 {
		t.Fatalf("%d segments before the age", n)
	}
	now = now.Add(2 * time.Second)
	b := appendN(t, l, rng, 1, 2, 50, 0)
	if n := len(segFiles(t, dir)); n != 2 {
		t.Fatalf("%d segments after the age", n)
	}
	if l.segs[1].base != b[0].base {
		t.Fatalf("new segment base %d, want %d", l.segs[1].base, b[0].base)
	}
}

func TestAppendRejects(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{MaxBatch: 4096})
	defer l.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	big := makeBatch(rng, 10, 1000, 0)
	if _, err := l.Append(big, 10); !errors.Is(err, wire.ErrBatchTooLarge) {
		t.Fatalf("big batch: %v", err)
	}
	b := makeBatch(rng, 2, 10, 0)
	if _, err := l.Append(b, 3); !errors.Is(err, wire.ErrCorruptBatch) {
		t.Fatalf("wrong count: %v", err)
	}
	if _, err := l.Append(b[:len(b)-1], 2); !errors.Is(err, wire.ErrCorruptBatch) {
		t.Fatalf("short batch: %v", err)
	}
	l.Close()
	if _, err := l.Append(b, 2); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
	if _, err := l.Read(0, 1, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}
}
