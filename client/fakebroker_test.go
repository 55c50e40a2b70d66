package client_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/lightq/lightq/wire"
)

// fakeBroker speaks the LightQ protocol well enough to exercise the client: HELLO/AUTH with
// fixed credentials, topics in memory, PRODUCE storing each batch as received (base offset
// rewritten, like the real broker), SUBSCRIBE pushing stored batches while credit lasts, and
// hooks to hold answers, inject errors and drop connections. startFake listens on a loopback
// port; startPipeFake has no listener and serves the in-memory connections Pipe makes, which
// lets a test run the client and the fake in a testing/synctest bubble.
type fakeBroker struct {
	ln      net.Listener // nil for a pipe fake
	user    string
	pass    string
	limits  wire.Limits
	silent  bool // accept connections, never answer
	legacy  bool // a broker from before replication: METADATA's cluster flag is invalid
	discard bool // do not keep produced batches (benchmarks)
	refuse  bool // close new connections at once (guarded by mu), as a stopped broker's port

	mu     sync.Mutex
	cond   *sync.Cond
	topics map[string]*fakeTopic
	conns  map[*fakeConn]struct{}
	closed bool
	nextID uint32
	frozen map[uint32]bool // nodes that read nothing more, as SIGSTOPped brokers (fakefreeze_test.go)

	// Hooks and observations, guarded by mu.
	// produceHook may refuse a PRODUCE (nothing is stored); a code that closes the connection
	// (SHUTTING_DOWN) closes it after the answer, as the broker does. n counts PRODUCEs from 1.
	produceHook  func(n int, p *wire.Produce) *wire.Error
	accepted     int // connections served
	produces     int
	holdAcks     bool
	heldAcks     []func()
	holdMetadata int // answer METADATA in reverse order once this many are waiting
	heldMeta     []func()
	metadataReqs int // METADATA requests received
	nextDropped  uint64
	violation    string // first credit-window violation seen
	credits      int    // CREDIT frames received
	pings        int    // PING frames received
	unsubscribes int
	delivered    int64 // bytes of batches pushed
	// fetchAnswer, when set, serves FETCH (the body it returns) and LIST_OFFSETS (offset 0)
	// for a durable topic made with AddDurable; fetches counts the FETCHes.
	fetchAnswer func(m *wire.Fetch) []byte
	fetches     int
	// Idempotent produce (PROTOCOL.md section 15): noIdem makes INIT_PRODUCER an unknown op;
	// window is its answer's window (default 8); producers holds the dedup state per
	// (producer id, topic, partition); inits counts INIT_PRODUCERs.
	noIdem    bool
	window    uint16
	nextPID   int64
	inits     []wire.InitProducer
	producers map[fakePKey]*fakePState
	// The cluster these brokers form (fakecluster_test.go); nil: one broker, node 1, which
	// answers the cluster flag as a cluster of one.
	cluster *fakeCluster
	// opHook, when set, sees every frame first (called without mu) and handles it when it
	// returns true: a test's own answers to requests the fake does not serve (groups).
	opHook func(fc *fakeConn, h wire.Header, body []byte) bool
	wg     sync.WaitGroup
}

type fakePKey struct {
	id    int64
	topic string
	part  int
}

// fakePState is one producer's state in one partition: its epoch, the next base sequence it
// expects and the last batches stored (base sequence, record count, base offset).
type fakePState struct {
	epoch  int16
	next   int32
	recent [][3]int64
}

type fakeTopic struct {
	kind    wire.Kind
	batches [][][]byte // per partition, each batch with its base offset set
	next    []int64
	rr      int
}

type fakeConn struct {
	fb   *fakeBroker
	node uint32 // the node whose listener accepted it
	nc   net.Conn
	wmu  sync.Mutex
	subs map[uint32]*fakeSub // guarded by fb.mu
	dead bool                // guarded by fb.mu
}

type fakeSub struct {
	id      uint32
	topic   *fakeTopic
	part    int32
	window  int64
	credit  int64
	cursor  []int
	closed  bool
	lastPar int
}

const (
	fakeUser = "admin"
	fakePass = "secret"
)

// startFake starts a fake broker on 127.0.0.1:0; t.Cleanup stops it.
func startFake(t testing.TB) *fakeBroker {
	t.Helper()
	fb, err := newFake()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fb.Close)
	return fb
}

// startPipeFake starts a fake broker without a listener: dialPipe connects to it through
// Pipe. Started inside a synctest bubble, all its goroutines live in the bubble.
func startPipeFake(t testing.TB) *fakeBroker {
	t.Helper()
	fb := newFakeOn(nil)
	t.Cleanup(fb.Close)
	return fb
}

func newFake() (*fakeBroker, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return newFakeOn(ln), nil
}

// newFakeOn makes a fake broker that accepts connections on ln, if not nil.
func newFakeOn(ln net.Listener) *fakeBroker {
	fb := &fakeBroker{
		ln: ln, user: fakeUser, pass: fakePass, limits: wire.DefaultLimits(),
		topics: make(map[string]*fakeTopic), conns: make(map[*fakeConn]struct{}),
	}
	fb.cond = sync.NewCond(&fb.mu)
	if ln != nil {
		fb.wg.Add(1)
		go fb.accept()
	}
	return fb
}

func (fb *fakeBroker) Addr() string { return fb.ln.Addr().String() }

// Pipe connects a client to the fake in memory: it serves one end of a net.Pipe and returns
// the other.
func (fb *fakeBroker) Pipe() net.Conn {
	client, server := net.Pipe()
	if !fb.serve(server) {
		_ = client.Close()
	}
	return client
}

// DialPipe is Pipe as a dial function, which fails while the fake refuses connections.
func (fb *fakeBroker) DialPipe(context.Context) (net.Conn, error) {
	fb.mu.Lock()
	refuse := fb.refuse
	fb.mu.Unlock()
	if refuse {
		return nil, errors.New("fake broker: connection refused")
	}
	return fb.Pipe(), nil
}

// Conns is the number of connections open now.
func (fb *fakeBroker) Conns() int {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return len(fb.conns)
}

// Close stops the listener and every connection and waits for the goroutines.
func (fb *fakeBroker) Close() {
	fb.mu.Lock()
	fb.closed = true
	fb.cond.Broadcast()
	fb.mu.Unlock()
	if fb.ln != nil {
		_ = fb.ln.Close()
	}
	fb.DropConns()
	fb.wg.Wait()
}

// waitUntil waits until cond, called with fb.mu held, holds. Every change cond can observe
// broadcasts fb.cond.
func (fb *fakeBroker) waitUntil(cond func(fb *fakeBroker) bool) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	for !cond(fb) {
		fb.cond.Wait()
	}
}

// DropConns closes every connection abruptly.
func (fb *fakeBroker) DropConns() {
	fb.mu.Lock()
	for fc := range fb.conns {
		fc.dead = true
		_ = fc.nc.Close()
	}
	fb.cond.Broadcast()
	fb.mu.Unlock()
}

// AddTopic creates a topic directly.
func (fb *fakeBroker) AddTopic(name string, partitions int) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	fb.topics[name] = &fakeTopic{kind: wire.KindTransient, batches: make([][][]byte, partitions), next: make([]int64, partitions)}
}

// AddDurable creates a durable topic of one partition directly, whose FETCHes fetch answers.
func (fb *fakeBroker) AddDurable(name string, fetch func(m *wire.Fetch) []byte) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	fb.topics[name] = &fakeTopic{kind: wire.KindDurable, batches: make([][][]byte, 1), next: make([]int64, 1)}
	fb.fetchAnswer = fetch
}

// Store stores batches as they are (no check) in a partition, setting their base offsets:
// a subscription delivers them as if they had been produced.
func (fb *fakeBroker) Store(topic string, part int, batches ...[]byte) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	t := fb.topics[topic]
	for _, b := range batches {
		stored := append([]byte(nil), b...)
		wire.SetBaseOffset(stored, t.next[part])
		t.batches[part] = append(t.batches[part], stored)
		t.next[part] += int64(wire.PeekBatchHeaderUnchecked(stored).RecordCount)
	}
	fb.cond.Broadcast()
}

// Batches returns copies of the batches stored for a partition.
func (fb *fakeBroker) Batches(topic string, part int) [][]byte {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	var out [][]byte
	for _, b := range fb.topics[topic].batches[part] {
		out = append(out, append([]byte(nil), b...))
	}
	return out
}

// ReleaseAcks stops holding PRODUCE answers and sends the held ones.
func (fb *fakeBroker) ReleaseAcks() {
	fb.mu.Lock()
	fb.holdAcks = false
	held := fb.heldAcks
	fb.heldAcks = nil
	fb.mu.Unlock()
	for _, f := range held {
		f()
	}
}

func (fb *fakeBroker) set(f func(fb *fakeBroker)) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	f(fb)
	fb.cond.Broadcast()
}

func (fb *fakeBroker) get(f func(fb *fakeBroker)) { fb.set(f) }

func (fb *fakeBroker) accept() {
	defer fb.wg.Done()
	for {
		nc, err := fb.ln.Accept()
		if err != nil {
			return
		}
		if !fb.serveOn(nc, 1) {
			return
		}
	}
}

// serve starts serving nc, unless the fake is closed (false; nc is closed).
func (fb *fakeBroker) serve(nc net.Conn) bool { return fb.serveOn(nc, 1) }

// serveOn serves nc as node id's connection.
func (fb *fakeBroker) serveOn(nc net.Conn, id uint32) bool {
	fc := &fakeConn{fb: fb, node: id, nc: nc, subs: make(map[uint32]*fakeSub)}
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if fb.closed {
		_ = nc.Close()
		return false
	}
	if fb.refuse || fb.cluster.down(id) {
		_ = nc.Close()
		return true
	}
	fb.accepted++
	fb.cond.Broadcast()
	fb.conns[fc] = struct{}{}
	fb.wg.Add(1)
	go fc.serve()
	return true
}

func (fc *fakeConn) write(op wire.Op, flags uint16, corr uint32, body []byte) {
	fc.wmu.Lock()
	defer fc.wmu.Unlock()
	_, _ = fc.nc.Write(wire.AppendFrame(nil, op, flags, corr, body))
}

func (fc *fakeConn) reply(op wire.Op, corr uint32, body []byte) {
	fc.write(op, wire.FlagResponse, corr, body)
}

func (fc *fakeConn) fail(corr uint32, code wire.Code, msg string) {
	eb := wire.ErrorBody{Code: code, Message: msg}
	fc.write(wire.OpError, 0, corr, eb.AppendTo(nil))
}

func (fc *fakeConn) serve() {
	fb := fc.fb
	defer fb.wg.Done()
	defer func() {
		fb.mu.Lock()
		fc.dead = true
		delete(fb.conns, fc)
		fb.cond.Broadcast()
		fb.mu.Unlock()
		_ = fc.nc.Close()
	}()
	br := bufio.NewReader(fc.nc)
	var frame []byte // reused: handlers copy what they keep
	for {
		hdr, err := br.Peek(wire.HeaderSize)
		if err != nil {
			return
		}
		n, err := wire.FrameSize(hdr, fb.limits.MaxFrame)
		if err != nil {
			fc.fail(0, wire.CodeOf(err), err.Error())
			return
		}
		if cap(frame) < n {
			frame = make([]byte, n)
		}
		frame = frame[:n]
		if _, err := io.ReadFull(br, frame); err != nil {
			return
		}

		if !fc.admit() { // silent, or frozen (fakefreeze_test.go)
			continue
		}
		h, body, err := wire.ParseFrame(frame)
		if err != nil {
			return
		}
		fc.handle(h, body)
	}
}

func (fc *fakeConn) handle(h wire.Header, body []byte) {
	fb := fc.fb
	fb.mu.Lock()
	hook := fb.opHook
	fb.mu.Unlock()
	if hook != nil && hook(fc, h, body) {
		return
	}
	switch h.Op {
	case wire.OpHello:
		resp := wire.HelloResponse{ProtocolVersion: wire.Version, BrokerVersion: "fake", Limits: fb.limits}
		fc.reply(h.Op, h.Corr, resp.AppendTo(nil))
	case wire.OpAuth:
		var a wire.Auth
		fb.mu.Lock()
		user, pass := fb.user, fb.pass
		fb.mu.Unlock()
		if err := a.Decode(body); err != nil || a.User != user || a.Password != pass {
			fc.fail(h.Corr, wire.CodeAuthFailed, "bad user or password")
			return
		}
		resp := wire.AuthResponse{Role: wire.RoleAdmin}
		fc.reply(h.Op, h.Corr, resp.AppendTo(nil))
	case wire.OpPing:
		fc.fb.set(func(fb *fakeBroker) { fb.pings++ })
		fc.reply(h.Op, h.Corr, nil)
	case wire.OpCreateTopic:
		var m wire.CreateTopic
		if err := m.Decode(body); err != nil {
			fc.fail(h.Corr, wire.CodeInvalidRequest, err.Error())
			return
		}
		fb.mu.Lock()
		_, exists := fb.topics[m.Name]
		if !exists {
			fb.topics[m.Name] = &fakeTopic{kind: m.Kind, batches: make([][][]byte, m.Partitions), next: make([]int64, m.Partitions)}
		}
		fb.mu.Unlock()
		if exists {
			fc.fail(h.Corr, wire.CodeTopicExists, m.Name)
			return
		}
		fc.reply(h.Op, h.Corr, nil)
	case wire.OpDeleteTopic:
		var m wire.TopicName
		_ = m.Decode(body)
		fb.mu.Lock()
		_, exists := fb.topics[m.Name]
		delete(fb.topics, m.Name)
		fb.mu.Unlock()
		if !exists {
			fc.fail(h.Corr, wire.CodeUnknownTopic, m.Name)
			return
		}
		fc.reply(h.Op, h.Corr, nil)
	case wire.OpMetadata:
		fc.metadata(h, body)
	case wire.OpStats:
		var m wire.TopicName
		_ = m.Decode(body)
		var resp wire.StatsResponse
		fb.mu.Lock()
		for name, t := range fb.topics {
			if m.Name != "" && m.Name != name {
				continue
			}
			var msgs uint64
			for _, n := range t.next {
				msgs += uint64(n)
			}
			resp.Topics = append(resp.Topics, wire.TopicStats{Name: name, Counters: []wire.Counter{{Name: "messages", Value: msgs}}})
		}
		fb.mu.Unlock()
		fc.reply(h.Op, h.Corr, resp.AppendTo(nil))
	case wire.OpInitProducer:
		var m wire.InitProducer
		fb := fc.fb
		fb.mu.Lock()
		if fb.noIdem || m.Decode(body) != nil {
			fb.mu.Unlock()
			fc.fail(h.Corr, wire.CodeUnknownOpcode, h.Op.String())
			return
		}
		fb.inits = append(fb.inits, m)
		resp := wire.InitProducerResponse{ProducerID: m.PreviousID, ProducerEpoch: m.PreviousEpoch + 1,
			Window: fb.window, ExpiryMs: 1000}
		if m.PreviousID == wire.NoProducer {
			fb.nextPID++
			resp.ProducerID, resp.ProducerEpoch = fb.nextPID, 0
		}
		if resp.Window == 0 {
			resp.Window = 8
		}
		fb.mu.Unlock()
		fc.reply(h.Op, h.Corr, resp.AppendTo(nil))
	case wire.OpProduce:
		fc.produce(h, body)
	case wire.OpSubscribe:
		fc.subscribe(h, body)
	case wire.OpCredit:
		var m wire.Credit
		if err := m.Decode(body); err != nil {
			fc.fail(h.Corr, wire.CodeInvalidRequest, err.Error())
			return
		}
		fb.mu.Lock()
		fb.credits++
		s := fc.subs[m.SubscriptionID]
		if s != nil {
			s.credit += int64(m.Bytes)
			if s.credit > s.window && fb.violation == "" {
				fb.violation = fmt.Sprintf("credit %d over window %d", s.credit, s.window)
			}
			fb.cond.Broadcast()
		}
		fb.mu.Unlock()
		if s == nil {
			fc.fail(h.Corr, wire.CodeUnknownSubscription, "")
		}
	case wire.OpUnsubscribe:
		var m wire.Unsubscribe
		_ = m.Decode(body)
		fb.mu.Lock()
		fb.unsubscribes++
		s := fc.subs[m.SubscriptionID]
		if s != nil {
			s.closed = true
			delete(fc.subs, m.SubscriptionID)
			fb.cond.Broadcast()
		}
		fb.mu.Unlock()
		if s == nil {
			fc.fail(h.Corr, wire.CodeUnknownSubscription, "")
			return
		}
		fc.reply(h.Op, h.Corr, nil)
	case wire.OpFetch, wire.OpListOffsets, wire.OpCommitOffset, wire.OpFetchCommitted:
		if fc.fetchStored(h, body) || fc.group(h, body) {
			return
		}
		fb.mu.Lock()
		answer := fb.fetchAnswer
		if h.Op == wire.OpFetch {
			fb.fetches++
			fb.cond.Broadcast()
		}
		fb.mu.Unlock()
		var m wire.Fetch
		switch {
		case answer == nil || h.Op == wire.OpCommitOffset || h.Op == wire.OpFetchCommitted:
			fc.fail(h.Corr, wire.CodeNotSupported, "transient topics only")
		case h.Op == wire.OpListOffsets:
			resp := wire.OffsetResponse{Offset: 0}
			fc.reply(h.Op, h.Corr, resp.AppendTo(nil))
		case m.Decode(body) != nil:
			fc.fail(h.Corr, wire.CodeInvalidRequest, "FETCH body")
		default:
			fc.reply(h.Op, h.Corr, answer(&m))
		}
	default:
		if !fc.group(h, body) {
			fc.fail(h.Corr, wire.CodeUnknownOpcode, h.Op.String())
		}
	}
}

func (fc *fakeConn) metadata(h wire.Header, body []byte) {
	fb := fc.fb
	var m wire.MetadataRequest
	fb.set(func(fb *fakeBroker) { fb.metadataReqs++ })
	if err := m.Decode(body); err != nil || m.Cluster && fb.legacy {
		fc.fail(h.Corr, wire.CodeInvalidRequest, fmt.Sprint("METADATA: ", err))
		return
	}
	resp := wire.MetadataResponse{Cluster: m.Cluster}
	fb.mu.Lock()
	for _, name := range m.Topics {
		t, ok := fb.topics[name]
		if !ok {
			fb.mu.Unlock()
			fc.fail(h.Corr, wire.CodeUnknownTopic, name)
			return
		}
		tm := wire.TopicMetadata{Name: name, Kind: t.kind, User: fb.user}
		for i, n := range t.next {
			tm.Partitions = append(tm.Partitions, wire.PartitionMetadata{ID: uint32(i), EndOffset: n})
		}
		resp.Topics = append(resp.Topics, tm)
	}
	if m.Cluster {
		fb.describeCluster(fc, &resp)
	}
	answer := func() { fc.reply(h.Op, h.Corr, resp.AppendTo(nil)) }
	var release []func()
	if fb.holdMetadata > 0 {
		fb.heldMeta = append(fb.heldMeta, answer)
		fb.cond.Broadcast()
		if len(fb.heldMeta) == fb.holdMetadata {
			release, fb.heldMeta, fb.holdMetadata = fb.heldMeta, nil, 0
		}
		fb.mu.Unlock()
		for i := len(release) - 1; i >= 0; i-- {
			release[i]()
		}
		return
	}
	fb.mu.Unlock()
	answer()
}

func (fc *fakeConn) produce(h wire.Header, body []byte) {
	fb := fc.fb
	var m wire.Produce
	if err := m.Decode(body); err != nil {
		fc.fail(h.Corr, wire.CodeInvalidRequest, err.Error())
		return
	}
	bt, err := wire.ParseBatch(m.Batch, fb.limits.MaxBatch)
	if err != nil {
		fc.fail(h.Corr, wire.CodeOf(err), err.Error())
		return
	}
	fb.mu.Lock()
	fb.produces++
	if fb.produceHook != nil {
		if werr := fb.produceHook(fb.produces, &m); werr != nil {
			refuse := func() {
				fc.fail(h.Corr, werr.Code, werr.Message)
				if werr.Code.Fatal() {
					_ = fc.nc.Close()
				}
			}
			if fb.holdAcks && !werr.Code.Fatal() {
				fb.heldAcks = append(fb.heldAcks, refuse) // answered in order with the acks
				fb.cond.Broadcast()
				fb.mu.Unlock()
				return
			}
			fb.mu.Unlock()
			refuse()
			return
		}
	}
	t := fb.topics[string(m.Topic)]
	if t == nil {
		fb.mu.Unlock()
		fc.fail(h.Corr, wire.CodeUnknownTopic, string(m.Topic))
		return
	}
	part := int(m.Partition)
	if fb.refuseNotLeader(fc, h.Corr, string(m.Topic), part) {
		return
	}
	if m.Partition == wire.PartitionAny {
		part = t.rr % len(t.next)
		t.rr++
	}
	if part < 0 || part >= len(t.next) {
		fb.mu.Unlock()
		fc.fail(h.Corr, wire.CodeUnknownPartition, "")
		return
	}
	base := t.next[part]
	if bt.ProducerID != wire.NoProducer {
		dup, werr := fb.checkSequence(fakePKey{bt.ProducerID, string(m.Topic), part}, &bt.BatchHeader, base)
		if werr != nil || dup >= 0 {
			answer := func() {
				if werr != nil {
					fc.fail(h.Corr, werr.Code, werr.Message)
					return
				}
				resp := wire.ProduceResponse{Partition: uint32(part), BaseOffset: dup}
				fc.reply(h.Op, h.Corr, resp.AppendTo(nil))
			}
			if fb.holdAcks {
				fb.heldAcks = append(fb.heldAcks, answer) // answered in order with the acks
				fb.cond.Broadcast()
				fb.mu.Unlock()
				return
			}
			fb.mu.Unlock()
			answer()
			return
		}
	}
	if !fb.discard {
		stored := append([]byte(nil), m.Batch...)
		wire.SetBaseOffset(stored, base)
		t.batches[part] = append(t.batches[part], stored)
	}
	t.next[part] += int64(bt.RecordCount)
	fb.cond.Broadcast()
	resp := wire.ProduceResponse{Partition: uint32(part), BaseOffset: base}
	answer := func() { fc.reply(h.Op, h.Corr, resp.AppendTo(nil)) }
	if fb.cluster.replicationTimeout() { // stored, but the answer says the outcome is unknown
		answer = func() { fc.fail(h.Corr, wire.CodeReplicationTimeout, "no quorum in time") }
	}
	if m.Acks == wire.AcksNone {
		fb.mu.Unlock()
		return
	}
	if fb.holdAcks {
		fb.heldAcks = append(fb.heldAcks, answer)
		fb.cond.Broadcast()
		fb.mu.Unlock()
		return
	}
	fb.mu.Unlock()
	answer()
}

// checkSequence applies PROTOCOL.md section 15's table to a batch with a producer id that
// would be stored at base: it returns the original base offset of a duplicate, or a refusal,
// or (-1, nil) after recording the batch as stored. fb.mu is held.
func (fb *fakeBroker) checkSequence(k fakePKey, h *wire.BatchHeader, base int64) (int64, *wire.Error) {
	if fb.producers == nil {
		fb.producers = map[fakePKey]*fakePState{}
	}
	st := fb.producers[k]
	switch {
	case st == nil && h.BaseSequence != 0:
		return -1, &wire.Error{Code: wire.CodeUnknownProducer, Message: "no state"}
	case st == nil || h.ProducerEpoch > st.epoch && h.BaseSequence == 0:
		st = &fakePState{epoch: h.ProducerEpoch}
		fb.producers[k] = st
	case h.ProducerEpoch < st.epoch:
		return -1, &wire.Error{Code: wire.CodeProducerFenced, Message: "fenced"}
	case h.ProducerEpoch > st.epoch:
		return -1, &wire.Error{Code: wire.CodeOutOfOrderSequence, Message: "a new epoch starts at 0"}
	case h.BaseSequence != st.next:
		for _, r := range st.recent {
			if r[0] == int64(h.BaseSequence) && r[1] == int64(h.RecordCount) {
				return r[2], nil
			}
		}
		return -1, &wire.Error{Code: wire.CodeOutOfOrderSequence, Message: fmt.Sprintf("base sequence %d, expected %d", h.BaseSequence, st.next)}
	}
	st.recent = append(st.recent, [3]int64{int64(h.BaseSequence), int64(h.RecordCount), base})
	if len(st.recent) > 8 {
		st.recent = st.recent[1:]
	}
	st.next = wire.NextSequence(h.BaseSequence, h.RecordCount)
	return -1, nil
}

// ForgetProducers drops every producer state, as a transient topic's restart does.
func (fb *fakeBroker) ForgetProducers() { fb.set(func(fb *fakeBroker) { fb.producers = nil }) }

func (fc *fakeConn) subscribe(h wire.Header, body []byte) {
	fb := fc.fb
	var m wire.Subscribe
	if err := m.Decode(body); err != nil {
		fc.fail(h.Corr, wire.CodeInvalidRequest, err.Error())
		return
	}
	fb.mu.Lock()
	t := fb.topics[m.Topic]
	if t == nil {
		fb.mu.Unlock()
		fc.fail(h.Corr, wire.CodeUnknownTopic, m.Topic)
		return
	}
	fb.nextID++
	s := &fakeSub{id: fb.nextID, topic: t, part: m.Partition, window: int64(m.Credit), credit: int64(m.Credit), cursor: make([]int, len(t.next))}
	fc.subs[s.id] = s
	n := len(t.next)
	if m.Partition != wire.PartitionAny {
		n = 1
	}
	fb.mu.Unlock()
	resp := wire.SubscribeResponse{SubscriptionID: s.id, Partitions: uint32(n)}
	fc.reply(h.Op, h.Corr, resp.AppendTo(nil))
	fb.wg.Add(1)
	go fc.pump(s)
}

// pump pushes the subscription's batches while it has credit, subtracting each batch's size.
func (fc *fakeConn) pump(s *fakeSub) {
	fb := fc.fb
	defer fb.wg.Done()
	fb.mu.Lock()
	defer fb.mu.Unlock()
	for {
		if s.closed || fc.dead || fb.closed {
			return
		}
		sent := false
		if s.credit > 0 {
			np := len(s.cursor)
			for i := 0; i < np && !sent; i++ {
				p := (s.lastPar + 1 + i) % np
				if s.part != wire.PartitionAny && int32(p) != s.part {
					continue
				}
				if p >= len(s.topic.batches) || s.cursor[p] >= len(s.topic.batches[p]) {
					continue
				}
				batch := s.topic.batches[p][s.cursor[p]]
				s.cursor[p]++
				s.lastPar = p
				s.credit -= int64(len(batch))
				fb.delivered += int64(len(batch))
				d := wire.Deliver{Partition: uint32(p), Dropped: fb.nextDropped, Batch: batch}
				fb.nextDropped = 0
				frame := d.AppendTo(nil)
				fb.mu.Unlock()
				fc.write(wire.OpDeliver, 0, s.id, frame)
				fb.mu.Lock()
				sent = true
			}
		}
		if !sent {
			fb.cond.Wait()
		}
	}
}
