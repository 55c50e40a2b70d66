package partition

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/cluster/replica"
	"github.com/lightq/lightq/cluster/transport"
	"github.com/lightq/lightq/log"
	"github.com/lightq/lightq/log/vfs"
	"github.com/lightq/lightq/wire"
)

// An in-process cluster of brokers on loopback, each with a transport, a router and one
// replica of partition group 1, in its own directory; nodes stop (partition and transport,
// as a process would) and start again from their directories.

var secret = []byte("partition tests' cluster secret")

const (
	testGroup = 1
	testTick  = 10 * time.Millisecond
)

type node struct {
	id     uint64
	dir    string
	router *replica.Router
	gate   *gate
	tr     *transport.Transport
	p      *Partition // nil while stopped
	// old makes the node's next transport announce no features, as a broker of the
	// previous release (transport.Config.NoFeatures).
	old bool
}

type cluster struct {
	t      testing.TB
	ids    []uint64
	faults *transport.Faults
	fsys   vfs.FS
	// tune adjusts each node's Config before it opens.
	tune func(*Config)
	// abort, if set, ends pipeline with errAborted when it reports true (a simulated power
	// cut stops the producers).
	abort func() bool

	mu    sync.Mutex // guards nodes' p and tr (tests stop and start nodes under load)
	nodes map[uint64]*node
}

// newCluster starts n nodes whose transports share a fault injector seeded with seed (seed
// 0: none, for benchmarks), each Config adjusted by tune.
func newCluster(t testing.TB, seed uint64, n int, tune func(*Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, tune: tune, nodes: map[uint64]*node{}}
	if seed != 0 {
		c.faults = transport.NewFaults(seed)
		t.Cleanup(c.faults.Stop)
	}
	for i := 1; i <= n; i++ {
		c.ids = append(c.ids, uint64(i))
		c.nodes[uint64(i)] = &node{id: uint64(i), dir: t.TempDir(), router: replica.NewRouter(), gate: &gate{}}
	}
	t.Cleanup(func() {
		for _, id := range c.ids {
			c.stop(id)
		}
	})
	for _, id := range c.ids {
		c.start(id)
	}
	return c
}

// config is node id's partition Config.
func (c *cluster) config(nd *node) Config {
	cfg := Config{
		Dir: nd.dir, NodeID: nd.id, Group: testGroup, Peers: c.ids, Sender: nd.gate, Segments: nd.gate, Fsync: FsyncNever,
		Log:  log.Options{SegmentBytes: 64 << 10, FS: c.fsys},
		Tick: testTick, ElectionTicks: 10, ProposalTimeout: 10 * time.Second,
		Logf: func(f string, a ...any) { c.t.Logf("node %d: "+f, append([]any{nd.id}, a...)...) },
	}
	if c.tune != nil {
		c.tune(&cfg)
	}
	return cfg
}

// start opens node id's partition and a new transport (a new port), and tells every other
// node where it is.
func (c *cluster) start(id uint64) {
	c.t.Helper()
	nd := c.nodes[id]
	tr, err := transport.New(transport.Config{NodeID: id, Listen: "127.0.0.1:0", Secret: secret, NoFeatures: nd.old,
		Handler: nd.router.Handle, Unreachable: nd.router.Unreachable, Faults: c.faults,
		RedialMin: time.Millisecond, RedialMax: 20 * time.Millisecond,
		Segments: func(g uint64) transport.SegmentSource {
			if p := c.part(id); p != nil && g == testGroup {
				return p.SegmentSource()
			}
			return nil
		}})
	if err != nil {
		c.t.Fatal(err)
	}
	nd.gate.setNext(tr)
	p, err := Open(c.config(nd))
	if err != nil {
		tr.Close()
		c.t.Fatalf("node %d: Open: %v", id, err)
	}
	nd.router.Add(testGroup, p.Replica())
	c.mu.Lock()
	nd.tr, nd.p = tr, p
	for _, o := range c.nodes {
		if o.tr == nil {
			continue
		}
		for _, x := range c.nodes {
			if x.tr != nil {
				o.tr.SetPeer(x.id, x.tr.Addr().String())
			}
		}
	}
	c.mu.Unlock()
}

// stop closes node id's partition and transport (a stopped process); it returns Close's
// error.
func (c *cluster) stop(id uint64) error {
	nd := c.nodes[id]
	c.mu.Lock()
	p, tr := nd.p, nd.tr
	nd.p, nd.tr = nil, nil
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	nd.router.Remove(testGroup)
	err := p.Close()
	_ = tr.Close()
	return err
}

// part is node id's partition, nil while it is stopped.
func (c *cluster) part(id uint64) *Partition {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id].p
}

// live lists the running nodes.
func (c *cluster) live() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []uint64
	for _, id := range c.ids {
		if c.nodes[id].p != nil {
			out = append(out, id)
		}
	}
	return out
}

// leader waits for a running node that leads and is ready for idempotent batches.
func (c *cluster) leader() uint64 {
	c.t.Helper()
	var l uint64
	defer c.logStatusIfFailed()
	waitFor(c.t, "a ready leader", func() bool {
		for _, id := range c.live() {
			if p := c.part(id); p != nil {
				if st := p.Status(); st.IsLeader && st.Ready {
					l = id
					return true
				}
			}
		}
		return false
	})
	return l
}

// waitFor polls cond until it holds, failing the test after a deadline generous for a
// loaded machine.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(25 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// outcome is what a Produce answered.
type outcome struct {
	base int64
	err  error
}

// produceWait calls Produce on p and waits for its answer (safe from any goroutine).
func produceWait(p *Partition, batch []byte) outcome {
	ch := make(chan outcome, 1)
	h, _ := wire.PeekBatchHeader(batch)
	p.Produce(batch, h.RecordCount, func(base int64, err error) { ch <- outcome{base, err} })
	select {
	case o := <-ch:
		return o
	case <-time.After(30 * time.Second):
		return outcome{err: errors.New("Produce never answered")}
	}
}

// retriable reports whether a producer sends the batch again after err (to the leader).
func retriable(err error) bool {
	var nl *replica.NotLeaderError
	return errors.As(err, &nl) || errors.Is(err, ErrMaybeStored) || errors.Is(err, ErrBusy) || errors.Is(err, ErrClosed)
}

// send sends batch to the leader until it is stored (or found stored before), as a producer
// does, and returns its base offset and whether the final answer was a duplicate. Safe from
// any goroutine.
func (c *cluster) send(batch []byte) (int64, bool, error) {
	deadline := time.Now().Add(25 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		for _, id := range c.live() {
			p := c.part(id)
			if p == nil || !p.Status().IsLeader {
				continue
			}
			o := produceWait(p, batch)
			switch {
			case o.err == nil:
				return o.base, false, nil
			case errors.Is(o.err, log.ErrDuplicate):
				return o.base, true, nil
			case !retriable(o.err):
				return 0, false, fmt.Errorf("node %d refused a batch: %w", id, o.err)
			}
		}
		<-tick.C
	}
	return 0, false, errors.New("no leader stored the batch in time")
}

// produceAcked is send on the test's goroutine, failing the test on an error.
func (c *cluster) produceAcked(batch []byte) (int64, bool) {
	c.t.Helper()
	base, dup, err := c.send(batch)
	if err != nil {
		c.t.Fatal(err)
	}
	return base, dup
}

// pipeline sends batches (one producer's, in sequence order) to the leader with up to window
// in flight, as a producer does: in order; after a failure it lets what is in flight be
// answered and sends the unacked ones again, in order, to whoever leads then. A refusal is
// an error only when every batch before it is acked (else it is the consequence of an
// earlier failure). It returns each batch's acked base offset (-1: not acked, when it fails).
// Safe from any goroutine.
func (c *cluster) pipeline(batches [][]byte, window int) ([]int64, error) {
	type res struct {
		i int
		o outcome
	}
	base := make([]int64, len(batches))
	for i := range base {
		base[i] = -1
	}
	acked := make([]bool, len(batches))
	first := 0 // the first batch not acked
	deadline := time.Now().Add(25 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	ch := make(chan res, window)
	for first < len(batches) {
		if c.abort != nil && c.abort() {
			return base, errAborted
		}
		if time.Now().After(deadline) {
			return base, fmt.Errorf("batch %d of %d not acked in time", first, len(batches))
		}
		var p *Partition
		for _, id := range c.live() {
			if q := c.part(id); q != nil && q.Status().IsLeader {
				p = q
			}
		}
		if p == nil {
			<-tick.C
			continue
		}
		failed, outstanding := false, 0
		for i := first; i < len(batches) || outstanding > 0; {
			for !failed && outstanding < window && i < len(batches) {
				if !acked[i] {
					h, _ := wire.PeekBatchHeader(batches[i])
					j := i
					p.Produce(batches[i], h.RecordCount, func(b int64, err error) { ch <- res{j, outcome{b, err}} })
					outstanding++
				}
				i++
			}
			if outstanding == 0 {
				break
			}
			var r res
			select {
			case r = <-ch:
			case <-time.After(30 * time.Second):
				return base, errors.New("Produce never answered")
			}
			outstanding--
			if r.o.err == nil || errors.Is(r.o.err, log.ErrDuplicate) {
				acked[r.i], base[r.i] = true, r.o.base
				continue
			}
			if !retriable(r.o.err) && !slices.Contains(acked[:r.i], false) {
				return base, fmt.Errorf("batch %d refused: %w", r.i, r.o.err)
			}
			failed = true
		}
		for first < len(batches) && acked[first] {
			first++
		}
		if failed {
			<-tick.C
		}
	}
	return base, nil
}

var errAborted = errors.New("aborted")

// producer is an idempotent producer of one partition: its id, epoch and next sequence.
type producer struct {
	id    int64
	epoch int16
	seq   int32
	bb    wire.BatchBuilder
}

func newProducer(id int64) *producer {
	pr := &producer{id: id}
	pr.bb.SetMagic(wire.BatchMagic2)
	return pr
}

// next seals the producer's next batch of n records, of size bytes each, and numbers it.
func (pr *producer) next(n, size int) []byte {
	pr.bb.Reset()
	for i := range n {
		v := fmt.Appendf(nil, "p%d-e%d-s%d", pr.id, pr.epoch, wire.NextSequence(pr.seq, uint32(i)))
		if len(v) < size {
			v = append(v, bytes.Repeat([]byte{'.'}, size-len(v))...)
		}
		pr.bb.Append(1_700_000_000_000+int64(i), nil, v, nil)
	}
	pr.bb.SetProducer(pr.id, pr.epoch, pr.seq)
	b, err := pr.bb.Finish(wire.CodecNone, nil)
	if err != nil {
		panic(err)
	}
	pr.seq = wire.NextSequence(pr.seq, uint32(n))
	return bytes.Clone(b)
}

// plainBatch is a batch without a producer, of the given magic.
func plainBatch(magic uint8, values ...string) []byte {
	var bb wire.BatchBuilder
	bb.SetMagic(magic)
	for i, v := range values {
		bb.Append(1_700_000_000_000+int64(i), nil, []byte(v), nil)
	}
	b, err := bb.Finish(wire.CodecNone, nil)
	if err != nil {
		panic(err)
	}
	return bytes.Clone(b)
}

// gate is a replica.Sender that can hold back the messages a rule picks (until release),
// in front of the node's transport.
type gate struct {
	mu   sync.Mutex
	next replica.Sender
	hold func(to uint64, m *raftpb.Message) bool
	held []heldMsg
	// onChunk, if set, is called before each chunk of a segment stream reaches the
	// catch-up (on the fetching goroutine: it may block there).
	onChunk func()
	// refuse, if set, fails every segment fetch at once (as a refused dial would).
	refuse bool
	// lateFeatures, while above 0, makes PeerFeatures answer "not known yet" (counting down).
	lateFeatures int
}

type heldMsg struct {
	to  uint64
	env transport.Envelope
}

func (g *gate) setNext(s replica.Sender) {
	g.mu.Lock()
	g.next = s
	g.mu.Unlock()
}

// PeerFeatures are the node's current transport's, after lateFeatures answers of "not known".
func (g *gate) PeerFeatures(node uint64) (uint64, bool) {
	g.mu.Lock()
	next := g.next
	if g.lateFeatures > 0 {
		g.lateFeatures--
		g.mu.Unlock()
		return 0, false
	}
	g.mu.Unlock()
	return next.(*transport.Transport).PeerFeatures(node)
}

// FetchSegments fetches through the node's current transport.
func (g *gate) FetchSegments(ctx context.Context, node, group uint64, from, to int64, roundDown bool, sink transport.SegmentSink, progress func(int)) (int64, error) {
	g.mu.Lock()
	next, on, refuse := g.next, g.onChunk, g.refuse
	g.mu.Unlock()
	if refuse {
		return 0, errors.New("segment stream refused (test)")
	}
	if on != nil {
		inner := sink
		sink = func(base, pos int64, data []byte) error { on(); return inner(base, pos, data) }
	}
	return next.(*transport.Transport).FetchSegments(ctx, node, group, from, to, roundDown, sink, progress)
}

func (g *gate) Send(to uint64, envs ...transport.Envelope) bool {
	g.mu.Lock()
	next, hold := g.next, g.hold
	if hold == nil {
		g.mu.Unlock()
		return next.Send(to, envs...)
	}
	ok := true
	for _, e := range envs {
		if hold(to, &e.Msg) {
			g.held = append(g.held, heldMsg{to, e})
		} else if !next.Send(to, e) {
			ok = false
		}
	}
	g.mu.Unlock()
	return ok
}

// holdWhile holds back the messages rule picks from now on.
func (g *gate) holdWhile(rule func(to uint64, m *raftpb.Message) bool) {
	g.mu.Lock()
	g.hold = rule
	g.mu.Unlock()
}

// release drops the rule and sends what was held, in order.
func (g *gate) release() {
	g.mu.Lock()
	held, next := g.held, g.next
	g.hold, g.held = nil, nil
	for _, h := range held {
		next.Send(h.to, h.env)
	}
	g.mu.Unlock()
}

// isAppend picks the messages that carry entries (and so commits): raft's appends.
func isAppend(_ uint64, m *raftpb.Message) bool { return m.Type == raftpb.MsgApp }
