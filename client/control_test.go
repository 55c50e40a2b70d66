package client_test

// Control batches (PROTOCOL.md section 7) in a partition's log: a replicated partition's raft
// entries without messages. They are written into a stopped broker's log (PRODUCE refuses
// them) and read after a restart: every reader of FETCH answers skips them, and the
// consumer's position passes their offsets.

import (
	"fmt"
	"slices"
	"testing"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/internal/poisontest"
	"github.com/lightq/lightq/log"
	"github.com/lightq/lightq/wire"
)

// controlLog is: control 0, records a0 a1 at 1-2, control 3, record b0 at 4, control 5 (the
// end of the log: a new leader's first entry with nothing after it yet).
func controlLog(t *testing.T, opts log.Options) func(dir string) {
	return func(dir string) {
		bases := poisontest.Append(t, dir, opts,
			wire.AppendControlBatch(nil, wire.ControlEmptyEntry, nil),
			poisontest.Batch(1000, "a0", "a1"),
			wire.AppendControlBatch(nil, wire.ControlConfChange, []byte{8, 0, 16, 3}),
			poisontest.Batch(2000, "b0"),
			wire.AppendControlBatch(nil, wire.ControlEmptyEntry, nil),
		)
		if !slices.Equal(bases, []int64{0, 1, 3, 4, 5}) {
			t.Fatalf("base offsets %v", bases)
		}
	}
}

// TestConsumerSkipsControlBatches: a Consumer delivers the records only, at their offsets,
// from any start (a control batch's offset included) and with one batch per FETCH as with
// many; its position passes a trailing control batch, so a group commits the end of the log.
// BatchIter passes over them without an error.
func TestConsumerSkipsControlBatches(t *testing.T) {
	t.Parallel()
	for _, segBytes := range []int64{0, 1} { // one segment; a segment per batch
		t.Run(fmt.Sprintf("segment-bytes=%d", segBytes), func(t *testing.T) {
			c := poisonBroker(t, controlLog(t, log.Options{SegmentBytes: segBytes}))
			for _, tc := range []struct {
				start   int64
				offsets []int64
				values  []string
			}{
				{0, []int64{1, 2, 4}, []string{"a0", "a1", "b0"}},
				{3, []int64{4}, []string{"b0"}},
				{5, nil, nil},
			} {
				for _, maxBytes := range []int{0, 1} {
					name := fmt.Sprintf("start=%d/maxbytes=%d", tc.start, maxBytes)
					group := fmt.Sprintf("g-%d-%d-%d", segBytes, tc.start, maxBytes)
					var bad []*client.CorruptBatchError
					k := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur", Group: group, AutoCommit: -1, MaxBytes: maxBytes,
						Start:          client.AtOffset(tc.start),
						OnCorruptBatch: func(e *client.CorruptBatchError) error { bad = append(bad, e); return nil }})
					offsets, values, err := eachUntil(t, k, len(tc.offsets))
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if !slices.Equal(offsets, tc.offsets) || !slices.Equal(values, tc.values) {
						t.Fatalf("%s: delivered %v %q, want %v %q", name, offsets, values, tc.offsets, tc.values)
					}
					eachUntilPosition(t, k, 6) // past the trailing control batch
					ckNoMore(t, k)
					if len(bad) != 0 {
						t.Fatalf("%s: control batches reported as corrupt: %v", name, bad[0])
					}
					if err := k.Commit(itCtx(t)); err != nil {
						t.Fatalf("%s: commit: %v", name, err)
					}
					if got := committed(t, c, group); got != 6 {
						t.Fatalf("%s: committed %d, want 6 (the end of the log)", name, got)
					}
				}
			}

			// BatchIter: the record batches only, Err nil, from any offset.
			for from, want := range map[int64][]int64{0: {1, 4}, 2: {1, 4}, 3: {4}, 5: nil} {
				var bases []int64
				for off := from; off < 6; {
					res, err := c.Fetch(itCtx(t), wire.Fetch{Topic: "dur", Offset: off, MaxBytes: 1})
					if err != nil {
						t.Fatal(err)
					}
					it := res.Iter()
					for it.Next() {
						bases = append(bases, it.Batch().BaseOffset)
						if _, err := it.Records(nil, nil); err != nil {
							t.Fatal(err)
						}
					}
					if it.Err() != nil {
						t.Fatalf("BatchIter from %d: %v", off, it.Err())
					}
					h := wire.PeekBatchHeaderUnchecked(res.Batches) // one batch per answer (max bytes 1)
					if wire.BatchSize(res.Batches) != len(res.Batches) {
						t.Fatalf("FETCH with max bytes 1 answered %d bytes", len(res.Batches))
					}
					off = h.NextOffset()
				}
				if !slices.Equal(bases, want) {
					t.Fatalf("BatchIter from %d: batches at %v, want %v", from, bases, want)
				}
			}
		})
	}
}

// committed is the group's committed offset of partition 0 of "dur".
func committed(t *testing.T, c *client.Conn, group string) int64 {
	t.Helper()
	off, err := c.FetchCommitted(itCtx(t), wire.FetchCommitted{Topic: "dur", Group: group, Partition: 0})
	if err != nil {
		t.Fatal(err)
	}
	return off
}
