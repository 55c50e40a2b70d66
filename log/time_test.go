package log

import (
	"fmt"
	"testing"

	"github.com/lightq/lightq/wire"
)

// OffsetForTime answers with the first record at or after the time, not the first batch:
// inside batches, across compressed ones and records out of time order, before the first
// record and after the last, in one segment or one segment per batch, live and reopened.
func TestOffsetForTime(t *testing.T) {
	batches := []struct {
		codec wire.Codec
		ts    []int64 // record timestamps; offsets follow on from the previous batch
	}{
		{wire.CodecNone, []int64{100, 105, 110}}, // offsets 0-2
		{wire.CodecS2, []int64{200, 150, 250}},   // 3-5: out of order inside the batch
		{wire.CodecZstd, []int64{300, 310}},      // 6-7
		{wire.CodecNone, []int64{290, 400}},      // 8-9: starts below the previous maximum
	}
	cases := []struct {
		ts   int64
		want int64
	}{
		{0, 0},     // before everything
		{100, 0},   // exactly the first record
		{101, 1},   // inside the first batch
		{110, 2},   // its last record
		{111, 3},   // between batches: the next batch's first record
		{151, 3},   // 200 is the first record at or after 151
		{201, 5},   // inside a compressed batch, past a record out of order
		{250, 5},   // the compressed batch's maximum
		{251, 6},   // the zstd batch
		{305, 7},   // inside it
		{311, 9},   // a batch whose first record is older than the time
		{400, 9},   // the last record
		{401, 10},  // after everything: NextOffset
		{1e12, 10}, // far after
	}
	var comp wire.Compressor
	defer comp.Close()
	for _, shape := range []struct {
		name string
		opts Options
	}{
		{"one segment", Options{IndexIntervalBytes: 1}},
		{"segment per batch", Options{SegmentBytes: 100, IndexIntervalBytes: 1}},
	} {
		t.Run(shape.name, func(t *testing.T) {
			dir := t.TempDir()
			l := mustOpen(t, dir, shape.opts)
			for _, bs := range batches {
				var b wire.BatchBuilder
				for _, ts := range bs.ts {
					b.Append(ts, nil, fmt.Appendf(nil, "at %d", ts), nil)
				}
				data, err := b.Finish(bs.codec, &comp)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := l.Append(data, uint32(len(bs.ts))); err != nil {
					t.Fatal(err)
				}
			}
			check := func(when string) {
				for _, c := range cases {
					if got, err := l.OffsetForTime(c.ts); err != nil || got != c.want {
						t.Errorf("%s: OffsetForTime(%d) = %d, %v; want %d", when, c.ts, got, err, c.want)
					}
				}
			}
			check("live")
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := l.OffsetForTime(0); err != ErrClosed {
				t.Errorf("after Close: %v, want ErrClosed", err)
			}
			l = mustOpen(t, dir, shape.opts) // sealed segments' time indexes from disk
			defer l.Close()
			check("reopened")
		})
	}
}
