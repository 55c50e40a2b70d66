package partition

import (
	"errors"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/log"
	"github.com/lightq/lightq/wire"
)

// Tests that hold the leader's appends back (its heartbeats go on, so it keeps leading), so
// that its proposals stay uncommitted as long as the test needs.

// produceAsync calls Produce and returns the channel its answer arrives on.
func produceAsync(p *Partition, batch []byte) <-chan outcome {
	ch := make(chan outcome, 1)
	h, _ := wire.PeekBatchHeader(batch)
	p.Produce(batch, h.RecordCount, func(base int64, err error) { ch <- outcome{base, err} })
	return ch
}

func await(t *testing.T, ch <-chan outcome) outcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(30 * time.Second):
		t.Fatal("no answer")
		return outcome{}
	}
}

func notYet(t *testing.T, what string, chs ...<-chan outcome) {
	t.Helper()
	for _, ch := range chs {
		select {
		case o := <-ch:
			t.Fatalf("%s answered before its commit: %+v", what, o)
		default:
		}
	}
}

// TestRetryWhileInFlight: a batch sent again while the first copy is uncommitted waits for
// that copy's outcome and is answered with its offset; the batch after it is checked as if
// the ones in flight were stored; nothing is stored twice.
func TestRetryWhileInFlight(t *testing.T) {
	c := newCluster(t, 3, 3, func(cfg *Config) { cfg.MaxPending = 4 })
	l := c.leader()
	p := c.part(l)
	c.produceAcked(plainBatch(wire.BatchMagic2, "warm-up"))
	c.quiet()
	c.nodes[l].gate.holdWhile(isAppend)

	pr := newProducer(11)
	b0, b1 := pr.next(2, 10), pr.next(3, 10)
	first := produceAsync(p, b0)
	retry := produceAsync(p, b0)
	second := produceAsync(p, b1)
	fenced := newProducer(12)
	fenced.epoch = 1
	f1 := produceAsync(p, fenced.next(1, 10))
	notYet(t, "a held batch", first, retry, second, f1)
	if st := p.Status(); st.Pending != 3 {
		t.Fatalf("%d batches pending, want 3 (the retry joins the first)", st.Pending)
	}
	// Checked against what is in flight: a gap after b1, an old epoch, a new epoch not at 0.
	gap := newProducer(11)
	gap.seq = 99
	if o := await(t, produceAsync(p, gap.next(1, 10))); !errors.Is(o.err, wire.ErrOutOfOrderSequence) {
		t.Fatalf("a gap after the batches in flight: %v", o.err)
	}
	old := newProducer(12)
	if o := await(t, produceAsync(p, old.next(1, 10))); !errors.Is(o.err, wire.ErrProducerFenced) {
		t.Fatalf("an older epoch than the one in flight: %v", o.err)
	}
	newer := newProducer(12)
	newer.epoch, newer.seq = 2, 5
	if o := await(t, produceAsync(p, newer.next(1, 10))); !errors.Is(o.err, wire.ErrOutOfOrderSequence) {
		t.Fatalf("a new epoch not starting at 0: %v", o.err)
	}
	// The bound: four batches may wait.
	plain := produceAsync(p, plainBatch(wire.BatchMagic, "fourth"))
	if o := await(t, produceAsync(p, plainBatch(wire.BatchMagic2, "fifth"))); !errors.Is(o.err, ErrBusy) {
		t.Fatalf("a fifth batch waiting: %v, want ErrBusy", o.err)
	}
	notYet(t, "a held batch", first, retry, second, f1, plain)

	c.nodes[l].gate.release()
	o0, or, o1 := await(t, first), await(t, retry), await(t, second)
	if o0.err != nil || o1.err != nil || !errors.Is(or.err, log.ErrDuplicate) || or.base != o0.base || o1.base != o0.base+2 {
		t.Fatalf("first %+v, retry %+v, second %+v", o0, or, o1)
	}
	if o := await(t, f1); o.err != nil {
		t.Fatalf("the fenced producer's own batch: %v", o.err)
	}
	if o := await(t, plain); o.err != nil {
		t.Fatalf("the plain batch: %v", o.err)
	}
	// Settled now: the same retry is a duplicate from the table.
	if o := await(t, produceAsync(p, b0)); !errors.Is(o.err, log.ErrDuplicate) || o.base != o0.base {
		t.Fatalf("a retry after the commit: %+v", o)
	}
	c.quiet()
	for _, id := range c.ids {
		exactlyOnce(t, c.part(id), map[batchKey]int64{{11, 0, 0}: o0.base, {11, 0, 2}: o1.base})
	}
	c.sameLogs(c.ids...)
}

// TestProposalTimeout: a batch that does not commit in ProposalTimeout is answered
// ErrMaybeStored; it commits later, and its retry is answered with the offset it got.
func TestProposalTimeout(t *testing.T) {
	c := newCluster(t, 4, 3, func(cfg *Config) { cfg.ProposalTimeout = 200 * time.Millisecond })
	l := c.leader()
	p := c.part(l)
	c.nodes[l].gate.holdWhile(isAppend)
	pr := newProducer(21)
	b := pr.next(1, 10)
	if o := await(t, produceAsync(p, b)); !errors.Is(o.err, ErrMaybeStored) {
		t.Fatalf("an uncommitted batch after its timeout: %v", o.err)
	}
	joined := produceAsync(p, b) // still in flight: joins it
	notYet(t, "a retry of a held batch", joined)
	c.nodes[l].gate.release()
	o := await(t, joined)
	if !errors.Is(o.err, log.ErrDuplicate) {
		t.Fatalf("the retry: %+v", o)
	}
	if base, dup := c.produceAcked(b); !dup || base != o.base {
		t.Fatalf("another retry: %d %v, want a duplicate at %d", base, dup, o.base)
	}
	c.quiet()
	for _, id := range c.ids {
		exactlyOnce(t, c.part(id), map[batchKey]int64{{21, 0, 0}: o.base})
	}
}

// TestNewLeaderNotReady: a new leader whose first entry is not committed yet takes plain
// batches but answers idempotent ones ErrNotReady: its producer state may miss what its
// predecessor committed. Once that entry is applied, it takes them.
func TestNewLeaderNotReady(t *testing.T) {
	c := newCluster(t, 5, 3, nil)
	old := c.leader()
	pr := newProducer(31)
	c.produceAcked(pr.next(1, 10))
	c.quiet()
	t0 := c.part(old).Status().Term
	laterAppends := func(_ uint64, m *raftpb.Message) bool { return m.Type == raftpb.MsgApp && m.Term > t0 }
	for _, id := range c.ids {
		c.nodes[id].gate.holdWhile(laterAppends)
	}
	c.stop(old)
	var p *Partition
	waitFor(t, "a new leader", func() bool {
		for _, id := range c.live() {
			if q := c.part(id); q.Status().IsLeader {
				p = q
				return true
			}
		}
		return false
	})
	if st := p.Status(); st.Ready {
		t.Fatalf("a new leader whose first entry cannot commit is ready: %+v", st)
	}
	b := pr.next(1, 10)
	if o := await(t, produceAsync(p, b)); !errors.Is(o.err, ErrNotReady) || !errors.Is(o.err, ErrBusy) {
		t.Fatalf("an idempotent batch to a new leader: %v, want ErrNotReady", o.err)
	}
	plain := produceAsync(p, plainBatch(wire.BatchMagic2, "plain"))
	notYet(t, "a plain batch to a leader whose appends are held", plain)
	for _, id := range c.live() {
		c.nodes[id].gate.release()
	}
	if o := await(t, plain); o.err != nil {
		t.Fatalf("the plain batch: %v", o.err)
	}
	waitFor(t, "the new leader to be ready", func() bool { return p.Status().Ready })
	if o := await(t, produceAsync(p, b)); o.err != nil {
		t.Fatalf("the idempotent batch once ready: %v", o.err)
	}
}
