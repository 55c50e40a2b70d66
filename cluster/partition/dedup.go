package partition

import (
	"fmt"

	"github.com/lightq/lightq/log/producerstate"
	"github.com/lightq/lightq/wire"
)

// dedup is a replica's deduplication of idempotent batches: the producer state of the
// committed log (table, which every replica builds by applying committed entries), and, on
// the leader, the batches it proposed that are not settled yet (flights), so that a batch is
// checked as if those were already stored.
//
// Concurrency: not safe for concurrent use; the Partition's mu guards it.
type dedup struct {
	table *producerstate.Table
	label string
	// index is the raft index the table reflects: every committed entry up to it is in it
	// (applied, or brought by a snapshot or a checkpoint). Entries at or below it are not
	// recorded again.
	index uint64
	// flights holds, per producer id, its idempotent proposals not yet settled, in the order
	// they were proposed (the order of the log). Each carries the term it was proposed in;
	// only those of the current term count.
	flights map[int64]*flight
	free    []*flight
}

// flight is one producer's unsettled proposals, oldest first.
type flight struct{ recs []*pending }

func newDedup(t *producerstate.Table, label string) *dedup {
	return &dedup{table: t, label: label, flights: map[int64]*flight{}}
}

// verdict is what check decided about a batch it did not refuse.
type verdict int

const (
	store     verdict = iota // propose it
	duplicate                // stored before at base: answer that
	join                     // the same batch is in flight: wait for its outcome
)

// check decides about the idempotent batch with header h arriving at now (unix ms), on the
// leader of term, whose table is complete (it applied every entry of earlier terms). It
// returns the in-flight proposal to join for a retry of a batch not settled yet, the base
// offset of a duplicate, or a refusal that wraps wire.ErrOutOfOrderSequence,
// wire.ErrProducerFenced, wire.ErrUnknownProducer or producerstate.ErrTooManyProducers, as
// the single broker gives them.
func (d *dedup) check(h *wire.BatchHeader, term uint64, now int64) (verdict, int64, *pending, error) {
	var last *pending
	n := 0
	if f := d.flights[h.ProducerID]; f != nil {
		for _, r := range f.recs {
			if r.term != term {
				continue // proposed in an earlier term and refused by the replica: never stored
			}
			if r.epoch == h.ProducerEpoch && r.seq == h.BaseSequence && r.count == h.RecordCount {
				return join, 0, r, nil
			}
			last = r
			n++
		}
	}
	if last == nil {
		res, err := d.table.Check(h, now)
		switch {
		case err != nil:
			return store, 0, nil, err
		case res.Duplicate:
			return duplicate, res.Base, nil, nil
		}
		return store, 0, nil, nil
	}
	// Decide as the table will once the batches in flight are recorded.
	switch {
	case h.ProducerEpoch < last.epoch:
		return store, 0, nil, fmt.Errorf("%w: producer %d epoch %d in %s: epoch %d has %d batches in flight here: nothing stored",
			wire.ErrProducerFenced, h.ProducerID, h.ProducerEpoch, d.label, last.epoch, n)
	case h.ProducerEpoch > last.epoch:
		if h.BaseSequence != 0 {
			return store, 0, nil, fmt.Errorf("%w: producer %d epoch %d in %s: base sequence %d, but a new epoch starts at sequence 0: nothing stored",
				wire.ErrOutOfOrderSequence, h.ProducerID, h.ProducerEpoch, d.label, h.BaseSequence)
		}
		return store, 0, nil, nil
	}
	next := wire.NextSequence(last.seq, last.count)
	if h.BaseSequence == next {
		return store, 0, nil, nil
	}
	// A batch stored before those in flight (still in the table's window) is a duplicate.
	if res, err := d.table.Check(h, now); err == nil && res.Duplicate {
		return duplicate, res.Base, nil, nil
	}
	return store, 0, nil, fmt.Errorf("%w: producer %d epoch %d in %s: base sequence %d, expected %d (after its %d batches in flight): nothing stored",
		wire.ErrOutOfOrderSequence, h.ProducerID, h.ProducerEpoch, d.label, h.BaseSequence, next, n)
}

// add notes r, an idempotent batch just proposed.
func (d *dedup) add(r *pending) {
	f := d.flights[r.pid]
	if f == nil {
		if n := len(d.free); n > 0 {
			f, d.free = d.free[n-1], d.free[:n-1]
		} else {
			f = &flight{}
		}
		d.flights[r.pid] = f
	}
	f.recs = append(f.recs, r)
}

// remove forgets r, settled.
func (d *dedup) remove(r *pending) {
	f := d.flights[r.pid]
	if f == nil {
		return
	}
	for i, x := range f.recs {
		if x == r {
			copy(f.recs[i:], f.recs[i+1:])
			f.recs[len(f.recs)-1] = nil
			f.recs = f.recs[:len(f.recs)-1]
			break
		}
	}
	if len(f.recs) == 0 {
		delete(d.flights, r.pid)
		if len(d.free) < 1024 {
			d.free = append(d.free, f)
		}
	}
}

// apply records the committed entry at index, whose batch has header h, unless the table
// already reflects it. now is the replica's clock (unix ms), the producer's last-seen time.
func (d *dedup) apply(index uint64, h *wire.BatchHeader, now int64) {
	if index <= d.index {
		return
	}
	d.index = index
	if h.HasProducer() {
		d.table.Record(h, h.BaseOffset, now)
	}
}

// advance notes that every entry up to applied is applied (entries without producer fields
// included).
func (d *dedup) advance(applied uint64) { d.index = max(d.index, applied) }

// replace makes t, which reflects every entry up to index, the table (a snapshot).
func (d *dedup) replace(t *producerstate.Table, index uint64) {
	d.table.Release()
	d.table, d.index = t, index
}
