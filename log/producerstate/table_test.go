package producerstate

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lightq/lightq/wire"
)

// step is one batch offered to a table, and what must happen to it.
type step struct {
	id    int64
	epoch int16
	seq   int32
	count uint32
	at    int64 // unix ms; 0: the previous step's time

	want    outcome
	dupBase int64  // for dup: the original base offset
	msg     string // for refusals: a part of the error text
}

type outcome int

const (
	stored outcome = iota
	dup
	gap     // ErrOutOfOrderSequence
	fenced  // ErrProducerFenced
	unknown // ErrUnknownProducer
	tooMany // ErrTooManyProducers
)

func hdr(id int64, epoch int16, seq int32, count uint32) wire.BatchHeader {
	return wire.BatchHeader{Magic: wire.BatchMagic2, ProducerID: id, ProducerEpoch: epoch, BaseSequence: seq, RecordCount: count}
}

// run offers each step to t; a stored batch gets the next base offset of a log that starts
// at 100.
func run(t *testing.T, tb *Table, steps []step) {
	t.Helper()
	next, now := int64(100), int64(1_000_000)
	for i, s := range steps {
		if s.at != 0 {
			now = s.at
		}
		h := hdr(s.id, s.epoch, s.seq, s.count)
		res, err := tb.Check(&h, now)
		var got outcome
		switch {
		case errors.Is(err, wire.ErrOutOfOrderSequence):
			got = gap
		case errors.Is(err, wire.ErrProducerFenced):
			got = fenced
		case errors.Is(err, wire.ErrUnknownProducer):
			got = unknown
		case errors.Is(err, ErrTooManyProducers):
			got = tooMany
		case err != nil:
			t.Fatalf("step %d: unexpected error %v", i, err)
		case res.Duplicate:
			got = dup
		}
		if got != s.want {
			t.Fatalf("step %d (%+v): outcome %d (%v, %+v), want %d", i, s, got, err, res, s.want)
		}
		if got == dup && res.Base != s.dupBase {
			t.Fatalf("step %d: duplicate of base %d, want %d", i, res.Base, s.dupBase)
		}
		if err != nil && !strings.Contains(err.Error(), s.msg) {
			t.Fatalf("step %d: error %q does not say %q", i, err, s.msg)
		}
		if got == stored {
			tb.Record(&h, next, now)
			next += int64(s.count)
		}
	}
}

func TestTable(t *testing.T) {
	const day = 24 * 60 * 60 * 1000
	tests := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{"in order", Config{}, []step{
			{id: 1, seq: 0, count: 3}, {id: 1, seq: 3, count: 2}, {id: 1, seq: 5, count: 1},
		}},
		{"first batch must start at 0", Config{}, []step{
			{id: 1, seq: 4, count: 1, want: unknown, msg: "holds no state"},
			{id: 1, seq: 0, count: 1},
		}},
		{"gap", Config{}, []step{
			{id: 1, seq: 0, count: 3},
			{id: 1, seq: 4, count: 1, want: gap, msg: "base sequence 4, expected 3 (a gap)"},
			{id: 1, seq: 3, count: 1},
			{id: 1, seq: 4, count: 1},
		}},
		{"duplicate in the window gets the original base", Config{}, []step{
			{id: 1, seq: 0, count: 3}, {id: 1, seq: 3, count: 2}, {id: 1, seq: 5, count: 4},
			{id: 1, seq: 3, count: 2, want: dup, dupBase: 103},
			{id: 1, seq: 0, count: 3, want: dup, dupBase: 100},
			{id: 1, seq: 5, count: 4, want: dup, dupBase: 105},
			{id: 1, seq: 9, count: 1},
		}},
		{"a duplicate with another count is not one", Config{}, []step{
			{id: 1, seq: 0, count: 3}, {id: 1, seq: 3, count: 2},
			{id: 1, seq: 3, count: 1, want: gap, msg: "already stored"},
			{id: 1, seq: 0, count: 4, want: gap, msg: "already stored"},
		}},
		{"duplicate older than the window", Config{}, func() []step {
			var s []step
			for i := range Window + 1 {
				s = append(s, step{id: 1, seq: int32(i), count: 1})
			}
			return append(s,
				step{id: 1, seq: 1, count: 1, want: dup, dupBase: 101},          // the oldest held
				step{id: 1, seq: 0, count: 1, want: gap, msg: "already stored"}, // pushed out
			)
		}()},
		{"producers are independent", Config{}, []step{
			{id: 1, seq: 0, count: 2}, {id: 2, seq: 0, count: 5}, {id: 1, seq: 2, count: 1},
			{id: 2, seq: 0, count: 5, want: dup, dupBase: 102},
			{id: 2, seq: 2, count: 1, want: gap},
		}},
		{"fencing", Config{}, []step{
			{id: 1, epoch: 0, seq: 0, count: 2},
			{id: 1, epoch: 1, seq: 3, count: 1, want: gap, msg: "new epoch starts at sequence 0"},
			{id: 1, epoch: 1, seq: 0, count: 1},
			{id: 1, epoch: 0, seq: 2, count: 1, want: fenced, msg: "epoch 1 has written here"},
			{id: 1, epoch: 0, seq: 0, count: 2, want: fenced}, // even a duplicate of the old epoch
			{id: 1, epoch: 1, seq: 1, count: 1},
			{id: 1, epoch: 1, seq: 0, count: 1, want: dup, dupBase: 102},
		}},
		{"expiry", Config{Expiry: time.Hour}, []step{
			{id: 1, seq: 0, count: 2, at: 1_000_000},
			{id: 2, seq: 0, count: 1, at: 1_000_000 + 3_600_000 - 1},
			{id: 1, seq: 2, count: 1, at: 1_000_000 + 3_600_000 - 1}, // not yet
			{id: 3, seq: 0, count: 1, at: 1_000_000 + 2*3_600_000},   // expires 1 and 2 (Record drops two)
			{id: 1, seq: 3, count: 1, want: unknown},
			{id: 2, seq: 1, count: 1, want: unknown},
			{id: 1, seq: 0, count: 1},
		}},
		{"cap per table", Config{MaxProducers: 2, Expiry: time.Hour}, []step{
			{id: 1, seq: 0, count: 1, at: 1_000_000}, {id: 2, seq: 0, count: 1},
			{id: 3, seq: 0, count: 1, want: tooMany, msg: "holds 2 producer states, its limit"},
			{id: 1, seq: 1, count: 1, at: 1_000_010}, // existing producers go on
			{id: 3, seq: 0, count: 1, at: 1_000_000 + 3_600_000 - 1, want: tooMany},
			{id: 3, seq: 0, count: 1, at: 1_000_000 + 3_600_000}, // 2 expired, 1 was seen later
			{id: 4, seq: 0, count: 1, want: tooMany},
		}},
		{"unknown producer long idle", Config{Expiry: 7 * 24 * time.Hour}, []step{
			{id: 9, seq: 0, count: 1, at: day},
			{id: 9, seq: 1, count: 1, at: 8 * day},
			{id: 9, seq: 2, count: 1, at: 15*day + 1, want: stored}, // seen at 8 days: 7 days since
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			if cfg.Expiry == 0 {
				cfg.Expiry = 24 * time.Hour
			}
			if cfg.MaxProducers == 0 {
				cfg.MaxProducers = 100
			}
			cfg.Label = "partition 0"
			run(t, New(cfg), tt.steps)
		})
	}
}

func TestSequenceWraps(t *testing.T) {
	tb := New(Config{Expiry: time.Hour, MaxProducers: 10})
	h := hdr(1, 0, 0, 1)
	tb.Record(&h, 0, 1)
	// Move the producer to the end of the numbers through a snapshot-free shortcut: record
	// batches as the log would after a long life.
	h = hdr(1, 1, 0, 1)
	tb.Record(&h, 1, 1)
	e := tb.m[1]
	e.batches[e.newest] = batchRec{first: wire.MaxSequence - 2, count: 2, base: 1}
	run(t, tb, []step{
		{id: 1, epoch: 1, seq: wire.MaxSequence, count: 3}, // MaxSequence, 0, 1
		{id: 1, epoch: 1, seq: 2, count: 1},
		{id: 1, epoch: 1, seq: wire.MaxSequence, count: 3, want: dup, dupBase: 100},
		{id: 1, epoch: 1, seq: wire.MaxSequence - 2, count: 2, want: dup, dupBase: 1},
		{id: 1, epoch: 1, seq: 5, count: 1, want: gap, msg: "a gap"},
		{id: 1, epoch: 1, seq: wire.MaxSequence - 10, count: 1, want: gap, msg: "already stored"},
	})
}

func TestBudget(t *testing.T) {
	b := NewBudget(3)
	cfg := Config{Expiry: time.Hour, MaxProducers: 10, Budget: b, Label: "p"}
	t1, t2 := New(cfg), New(cfg)
	run(t, t1, []step{{id: 1, seq: 0, count: 1}, {id: 2, seq: 0, count: 1}})
	run(t, t2, []step{
		{id: 1, seq: 0, count: 1},
		{id: 5, seq: 0, count: 1, want: tooMany, msg: "the broker holds 3 producer states"},
	})
	if b.Used() != 3 {
		t.Fatalf("budget used %d", b.Used())
	}
	t1.Release()
	if b.Used() != 1 || t1.Len() != 0 {
		t.Fatalf("after Release: budget used %d, table %d", b.Used(), t1.Len())
	}
	run(t, t2, []step{{id: 5, seq: 0, count: 1}})
	// Expire gives the budget back too.
	if n := t2.Expire(1_000_000 + time.Hour.Milliseconds()); n != 2 || b.Used() != 0 {
		t.Fatalf("Expire dropped %d, budget used %d", n, b.Used())
	}
}

// Check and Record of known producers allocate nothing.
func TestNoAllocation(t *testing.T) {
	tb := New(Config{Expiry: time.Hour, MaxProducers: 10})
	h := hdr(7, 0, 0, 10)
	tb.Record(&h, 0, 1)
	base := int64(10)
	if a := testing.AllocsPerRun(1000, func() {
		h.BaseSequence = wire.NextSequence(h.BaseSequence, h.RecordCount)
		if _, err := tb.Check(&h, 2); err != nil {
			t.Fatal(err)
		}
		tb.Record(&h, base, 2)
		base += 10
		if res, err := tb.Check(&h, 2); err != nil || !res.Duplicate {
			t.Fatal(err, res)
		}
	}); a != 0 {
		t.Fatalf("%v allocations per batch", a)
	}
}

func TestProducersOrder(t *testing.T) {
	tb := New(Config{Expiry: time.Hour, MaxProducers: 10})
	run(t, tb, []step{{id: 1, seq: 0, count: 1, at: 5}, {id: 2, seq: 0, count: 2, at: 6}, {id: 1, seq: 1, count: 1, at: 7}})
	ps := tb.Producers()
	if len(ps) != 2 || ps[0].ProducerID != 2 || ps[1].ProducerID != 1 || len(ps[1].Batches) != 2 ||
		ps[1].Batches[1] != (Batch{BaseSequence: 1, RecordCount: 1, BaseOffset: 103}) || ps[1].LastSeen != 7 {
		t.Fatalf("%+v", ps)
	}
}
