package partition

import (
	"errors"
	"testing"
	"time"

	"github.com/lightq/lightq/log/producerstate"
	"github.com/lightq/lightq/wire"
)

func hdr(pid int64, epoch int16, seq int32, count uint32) wire.BatchHeader {
	return wire.BatchHeader{ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq, RecordCount: count}
}

// TestDedupCheck: the verdicts on a batch given the committed state (producer 1 stored
// sequences 0-9 as two batches at offsets 100 and 105) and the batches in flight (producer 1
// sequences 10-12 and 13-14 in term 3; producer 2 sequence 0 in term 2, which a term-3 leader
// ignores: the replica refuses proposals of a term it no longer leads in).
func TestDedupCheck(t *testing.T) {
	newState := func() *dedup {
		d := newDedup(producerstate.New(producerstate.Config{Expiry: time.Hour, MaxProducers: 100}), "p")
		for i, h := range []wire.BatchHeader{hdr(1, 0, 0, 5), hdr(1, 0, 5, 5)} {
			h.BaseOffset = 100 + int64(i)*5
			d.apply(uint64(10+i), &h, 1)
		}
		d.add(&pending{term: 3, pid: 1, epoch: 0, seq: 10, count: 3})
		d.add(&pending{term: 3, pid: 1, epoch: 0, seq: 13, count: 2})
		d.add(&pending{term: 2, pid: 2, epoch: 0, seq: 0, count: 1})
		return d
	}
	tests := []struct {
		name string
		h    wire.BatchHeader
		want verdict
		base int64
		err  error
		seq  int32 // join: the sequence of the batch joined
	}{
		{"the next after those in flight", hdr(1, 0, 15, 1), store, 0, nil, 0},
		{"a batch in flight again", hdr(1, 0, 10, 3), join, 0, nil, 10},
		{"the newest in flight again", hdr(1, 0, 13, 2), join, 0, nil, 13},
		{"a committed batch again", hdr(1, 0, 5, 5), duplicate, 105, nil, 0},
		{"the oldest committed batch again", hdr(1, 0, 0, 5), duplicate, 100, nil, 0},
		{"a gap after those in flight", hdr(1, 0, 16, 1), store, 0, wire.ErrOutOfOrderSequence, 0},
		{"the next after the committed ones (in flight already)", hdr(1, 0, 10, 1), store, 0, wire.ErrOutOfOrderSequence, 0},
		{"a new epoch at 0", hdr(1, 1, 0, 1), store, 0, nil, 0},
		{"a new epoch not at 0", hdr(1, 1, 3, 1), store, 0, wire.ErrOutOfOrderSequence, 0},
		{"a flight of an earlier term is not counted", hdr(2, 0, 1, 1), store, 0, wire.ErrUnknownProducer, 0},
		{"its batch again: not joined, checked as new", hdr(2, 0, 0, 1), store, 0, nil, 0},
		{"an unknown producer at 0", hdr(9, 0, 0, 1), store, 0, nil, 0},
		{"an unknown producer past 0", hdr(9, 0, 4, 1), store, 0, wire.ErrUnknownProducer, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newState()
			v, base, in, err := d.check(&tt.h, 3, 2)
			if v != tt.want || base != tt.base || !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
				t.Fatalf("verdict %d base %d err %v, want %d %d %v", v, base, err, tt.want, tt.base, tt.err)
			}
			if v == join && in.seq != tt.seq {
				t.Fatalf("joined the batch at sequence %d, want %d", in.seq, tt.seq)
			}
		})
	}
	// An epoch older than one in flight is fenced.
	d := newState()
	d.add(&pending{term: 3, pid: 4, epoch: 2, seq: 0, count: 1})
	if _, _, _, err := d.check(&wire.BatchHeader{ProducerID: 4, ProducerEpoch: 1, RecordCount: 1}, 3, 2); !errors.Is(err, wire.ErrProducerFenced) {
		t.Fatalf("an older epoch than the one in flight: %v", err)
	}
}

// TestDedupFlights: settled batches leave their producer's flight in any order; entries the
// table reflects are not recorded again.
func TestDedupFlights(t *testing.T) {
	d := newDedup(producerstate.New(producerstate.Config{Expiry: time.Hour, MaxProducers: 10}), "p")
	a := &pending{term: 1, pid: 1, seq: 0, count: 1}
	b := &pending{term: 1, pid: 1, seq: 1, count: 1}
	d.add(a)
	d.add(b)
	d.remove(b)
	if h := hdr(1, 0, 1, 1); func() verdict { v, _, _, _ := d.check(&h, 1, 0); return v }() != store {
		t.Fatal("after the newest left, the batch after the oldest is not the next")
	}
	d.remove(a)
	if len(d.flights) != 0 || len(d.free) != 1 {
		t.Fatalf("flights %v free %d", d.flights, len(d.free))
	}
	h := hdr(1, 0, 0, 1)
	h.BaseOffset = 7
	d.apply(5, &h, 0)
	h2 := hdr(1, 0, 0, 1)
	h2.BaseOffset = 99
	d.apply(5, &h2, 0) // the same entry again (a snapshot's state reflects it): ignored
	d.advance(9)
	d.apply(8, &h2, 0)
	if v, base, _, _ := d.check(&h, 1, 0); v != duplicate || base != 7 || d.index != 9 {
		t.Fatalf("verdict %d base %d index %d", v, base, d.index)
	}
}
