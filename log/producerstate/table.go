package producerstate

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lightq/lightq/wire"
)

// Window is how many of a producer's most recent batches per partition a Table remembers: a
// batch sent again among them is answered with its original offsets. Producers keep at most
// this many batches in flight per partition (INIT_PRODUCER announces it).
const Window = 8

// ErrTooManyProducers: a batch would start a new producer state past a cap.
var ErrTooManyProducers = errors.New("too many producer states")

// Budget caps the states of every Table that shares it (the broker-wide cap). Safe for
// concurrent use. A nil *Budget is no cap.
type Budget struct {
	used atomic.Int64
	max  int64
}

// NewBudget returns a budget of max states.
func NewBudget(max int) *Budget { return &Budget{max: int64(max)} }

// Used is the number of states counted now.
func (b *Budget) Used() int {
	if b == nil {
		return 0
	}
	return int(b.used.Load())
}

// Max is the cap.
func (b *Budget) Max() int {
	if b == nil {
		return 0
	}
	return int(b.max)
}

func (b *Budget) full() bool { return b != nil && b.used.Load() >= b.max }

func (b *Budget) add(n int) {
	if b != nil {
		b.used.Add(int64(n))
	}
}

// Config are a Table's limits.
type Config struct {
	Expiry       time.Duration // drop a state idle this long (> 0)
	MaxProducers int           // states in this table (> 0)
	Budget       *Budget       // shared cap; nil: none
	// Label names the table's partition in error messages, e.g. "partition 3 of orders".
	Label string
}

// Table is the producer state of one partition. See the package doc.
type Table struct {
	cfg  Config
	m    map[int64]*entry
	head *entry // most recently seen
	tail *entry // least recently seen: the next to expire
	free *entry // dropped entries, linked through next, reused by Record
}

// entry is one producer's state.
type entry struct {
	id       int64
	epoch    int16
	n        uint8 // batches held, 1..Window
	newest   uint8 // index in batches of the newest
	lastSeen int64 // unix ms
	batches  [Window]batchRec
	prev     *entry // towards head
	next     *entry // towards tail
}

type batchRec struct {
	first int32 // base sequence
	count uint32
	base  int64 // base offset
}

// New returns an empty table.
func New(cfg Config) *Table {
	if cfg.MaxProducers <= 0 {
		cfg.MaxProducers = 1
	}
	return &Table{cfg: cfg, m: map[int64]*entry{}}
}

// Len is the number of producer states held.
func (t *Table) Len() int { return len(t.m) }

// Result is the verdict of Check on a batch it did not refuse.
type Result struct {
	// Duplicate: the batch was stored before, at Base; answer it with that offset and do not
	// store it again. Otherwise store it and Record it.
	Duplicate bool
	Base      int64
}

// Check decides what to do with a batch whose header h (ParseBatch-checked, with a producer
// id) arrives at now (unix ms): see the package doc and PROTOCOL.md section 15. Errors wrap
// wire.ErrUnknownProducer, wire.ErrProducerFenced, wire.ErrOutOfOrderSequence or
// ErrTooManyProducers and say why; they allocate, the verdicts do not.
func (t *Table) Check(h *wire.BatchHeader, now int64) (Result, error) {
	e := t.m[h.ProducerID]
	if e == nil {
		if h.BaseSequence != 0 {
			return Result{}, fmt.Errorf("%w: producer %d epoch %d in %s: base sequence %d, but the broker holds no state of this producer here (never seen, expired, or lost in a restart); a producer starts at sequence 0: nothing stored",
				wire.ErrUnknownProducer, h.ProducerID, h.ProducerEpoch, t.cfg.Label, h.BaseSequence)
		}
		if len(t.m) >= t.cfg.MaxProducers || t.cfg.Budget.full() {
			t.Expire(now)
		}
		switch {
		case len(t.m) >= t.cfg.MaxProducers:
			return Result{}, fmt.Errorf("%w: %s holds %d producer states, its limit (states expire after %v idle): nothing stored",
				ErrTooManyProducers, t.cfg.Label, len(t.m), t.cfg.Expiry)
		case t.cfg.Budget.full():
			return Result{}, fmt.Errorf("%w: the broker holds %d producer states, its limit (states expire after %v idle): nothing stored",
				ErrTooManyProducers, t.cfg.Budget.Used(), t.cfg.Expiry)
		}
		return Result{}, nil
	}
	switch {
	case h.ProducerEpoch < e.epoch:
		return Result{}, fmt.Errorf("%w: producer %d epoch %d in %s: epoch %d has written here since: nothing stored",
			wire.ErrProducerFenced, h.ProducerID, h.ProducerEpoch, t.cfg.Label, e.epoch)
	case h.ProducerEpoch > e.epoch:
		if h.BaseSequence != 0 {
			return Result{}, fmt.Errorf("%w: producer %d epoch %d in %s: base sequence %d, but a new epoch starts at sequence 0: nothing stored",
				wire.ErrOutOfOrderSequence, h.ProducerID, h.ProducerEpoch, t.cfg.Label, h.BaseSequence)
		}
		return Result{}, nil
	}
	next := e.nextSequence()
	if h.BaseSequence == next {
		return Result{}, nil
	}
	for i := uint8(0); i < e.n; i++ {
		if b := &e.batches[i]; b.first == h.BaseSequence && b.count == h.RecordCount {
			return Result{Duplicate: true, Base: b.base}, nil
		}
	}
	if before(h.BaseSequence, next) {
		return Result{}, fmt.Errorf("%w: producer %d epoch %d in %s: base sequence %d, expected %d: already stored, and not as one of the last %d batches (its offsets are no longer known): nothing stored",
			wire.ErrOutOfOrderSequence, h.ProducerID, h.ProducerEpoch, t.cfg.Label, h.BaseSequence, next, Window)
	}
	return Result{}, fmt.Errorf("%w: producer %d epoch %d in %s: base sequence %d, expected %d (a gap): nothing stored",
		wire.ErrOutOfOrderSequence, h.ProducerID, h.ProducerEpoch, t.cfg.Label, h.BaseSequence, next)
}

// before reports whether sequence s comes before next in the wrapping order of sequence
// numbers: within the 2^30 numbers before it.
func before(s, next int32) bool {
	d := (uint32(next) - uint32(s)) & wire.MaxSequence
	return d != 0 && d <= 1<<30
}

func (e *entry) nextSequence() int32 {
	b := &e.batches[e.newest]
	return wire.NextSequence(b.first, b.count)
}

// Record notes that the batch with header h (one Check let through, or one found in the log
// during recovery) was stored at base offset base, at now (unix ms). It also drops up to two
// states past their expiry.
func (t *Table) Record(h *wire.BatchHeader, base, now int64) {
	t.record(h, base, now, true)
}

// record is Record; expire false leaves expired states alone (loading a snapshot, whose
// states need not be in last-seen order).
func (t *Table) record(h *wire.BatchHeader, base, now int64, expire bool) {
	e := t.m[h.ProducerID]
	if e == nil {
		e = t.alloc(h.ProducerID)
		e.epoch = h.ProducerEpoch
	} else {
		t.unlink(e)
	}
	if h.ProducerEpoch != e.epoch {
		e.epoch, e.n = h.ProducerEpoch, 0
	}
	e.push(batchRec{first: h.BaseSequence, count: h.RecordCount, base: base})
	e.lastSeen = now
	t.pushHead(e)
	for i := 0; expire && i < 2 && t.tail != nil && t.tail != e && t.expired(t.tail, now); i++ {
		t.drop(t.tail)
	}
	for len(t.m) > t.cfg.MaxProducers {
		t.drop(t.tail)
	}
}

func (e *entry) push(b batchRec) {
	if e.n == 0 {
		e.n, e.newest = 1, 0
	} else {
		e.newest = (e.newest + 1) % Window
		if e.n < Window {
			e.n++
		}
	}
	e.batches[e.newest] = b
}

func (t *Table) expired(e *entry, now int64) bool {
	return now-e.lastSeen >= t.cfg.Expiry.Milliseconds()
}

// Expire drops every state idle for Config.Expiry at now (unix ms) and returns how many.
func (t *Table) Expire(now int64) int {
	n := 0
	for t.tail != nil && t.expired(t.tail, now) {
		t.drop(t.tail)
		n++
	}
	return n
}

// Release drops every state, giving its share of the Budget back: call it when the table's
// partition goes away (its topic deleted, its log closed).
func (t *Table) Release() {
	for t.tail != nil {
		t.drop(t.tail)
	}
	t.free = nil
}

func (t *Table) alloc(id int64) *entry {
	e := t.free
	if e != nil {
		t.free = e.next
		*e = entry{}
	} else {
		e = &entry{}
	}
	e.id = id
	t.m[id] = e
	t.cfg.Budget.add(1)
	return e
}

func (t *Table) drop(e *entry) {
	t.unlink(e)
	delete(t.m, e.id)
	t.cfg.Budget.add(-1)
	e.next = t.free
	t.free = e
}

func (t *Table) unlink(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		t.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		t.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (t *Table) pushHead(e *entry) {
	e.next = t.head
	if t.head != nil {
		t.head.prev = e
	}
	t.head = e
	if t.tail == nil {
		t.tail = e
	}
}

// State is one producer's state as Producers reports it, for tests and tools.
type State struct {
	ProducerID int64
	Epoch      int16
	LastSeen   int64   // unix ms
	Batches    []Batch // oldest first
}

// Batch is one remembered batch.
type Batch struct {
	BaseSequence int32
	RecordCount  uint32
	BaseOffset   int64
}

// Producers lists the states, least recently seen first. It allocates.
func (t *Table) Producers() []State {
	var out []State
	for e := t.tail; e != nil; e = e.prev {
		s := State{ProducerID: e.id, Epoch: e.epoch, LastSeen: e.lastSeen}
		e.each(func(b *batchRec) {
			s.Batches = append(s.Batches, Batch{BaseSequence: b.first, RecordCount: b.count, BaseOffset: b.base})
		})
		out = append(out, s)
	}
	return out
}

// each calls fn on the held batches, oldest first.
func (e *entry) each(fn func(*batchRec)) {
	start := (int(e.newest) - int(e.n) + 1 + Window) % Window
	for i := 0; i < int(e.n); i++ {
		fn(&e.batches[(start+i)%Window])
	}
}
