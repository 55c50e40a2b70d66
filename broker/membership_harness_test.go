package broker

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/lightq/lightq/wire"
)

// What the membership tests share: a broker joining a running test cluster, admin requests
// of the membership ops, and an idempotent producer that follows the partition's leader and
// retries each batch until it is acknowledged, recording what was acknowledged.

const testClusterSecret = "a-test-cluster-secret"

// join starts the next broker (node id len(brokers)+1) with cluster-join, its peers the
// running brokers' cluster ports, and adds it through ADD_BROKER sent to broker via; it
// returns once every running broker's metadata has it and it has the metadata.
func (tc *testCluster) join(via int) *Server {
	t := tc.t
	t.Helper()
	id := len(tc.brokers) + 1
	peers := map[uint64]string{uint64(id): "127.0.0.1:0"}
	for i, b := range tc.brokers {
		if b != nil {
			peers[uint64(i+1)] = b.cluster.tr.Addr().String()
		}
	}
	cfg := testConfig(t)
	cfg.NodeID = uint32(id)
	cfg.Cluster = ClusterConfig{Peers: peers, Secret: []byte(testClusterSecret), Join: true, ScrubBytesPerSecond: -1}
	s := startWith(t, cfg)
	tc.mu.Lock()
	tc.cfgs = append(tc.cfgs, cfg)
	tc.brokers = append(tc.brokers, s)
	tc.mu.Unlock()
	admin := login(t, tc.brokers[via].Addr(), testAdminUser, testAdminPass)
	defer admin.conn.Close()
	m := wire.AddBroker{NodeID: uint32(id), Addr: s.Addr(), ClusterAddr: s.cluster.tr.Addr().String()}
	admin.expectResponse(wire.OpAddBroker, admin.send(wire.OpAddBroker, m.AppendTo(nil)))
	want := 0
	for _, b := range tc.brokers {
		if b != nil {
			want++
		}
	}
	for i, b := range tc.brokers {
		if b == nil {
			continue
		}
		waitUntil(t, fmt.Sprintf("broker %d knows the %d brokers", i+1, want), func() bool { return len(b.cluster.meta.State().Brokers()) == want })
	}
	return s
}

// admin logs in to broker i as the admin.
func (tc *testCluster) admin(i int) *rawClient {
	tc.t.Helper()
	return login(tc.t, tc.brokers[i].Addr(), testAdminUser, testAdminPass)
}

// createWithRF creates a durable topic with replication factor rf through broker i and
// waits until every running broker has it.
func (tc *testCluster) createWithRF(i int, name string, partitions uint32, rf int) {
	tc.t.Helper()
	a := tc.admin(i)
	defer a.conn.Close()
	ct := wire.CreateTopic{Name: name, Kind: wire.KindDurable, Partitions: partitions, User: "app", Password: "app-secret",
		Options: []wire.Option{{Key: wire.OptionReplicationFactor, Value: fmt.Sprint(rf)}}}
	a.expectResponse(wire.OpCreateTopic, a.send(wire.OpCreateTopic, ct.AppendTo(nil)))
	for j, b := range tc.brokers {
		if b != nil {
			waitUntil(tc.t, fmt.Sprintf("broker %d has topic %s", j+1, name), func() bool { return (*b.topics.Load())[name] != nil })
		}
	}
}

// membership asks broker i for MEMBERSHIP (every page).
func (tc *testCluster) membership(i int, req wire.Membership) wire.MembershipResponse {
	tc.t.Helper()
	a := tc.admin(i)
	defer a.conn.Close()
	var all wire.MembershipResponse
	for {
		var resp wire.MembershipResponse
		if err := resp.Decode(a.expectResponse(wire.OpMembership, a.send(wire.OpMembership, req.AppendTo(nil)))); err != nil {
			tc.t.Fatal(err)
		}
		resp.Partitions = append(all.Partitions, resp.Partitions...)
		all = resp
		if !resp.More {
			return all
		}
		last := resp.Partitions[len(resp.Partitions)-1]
		req.AfterTopic, req.AfterPartition = last.Topic, last.Partition
	}
}

// waitMoved waits until no partition is moving, as broker i's metadata says.
func (tc *testCluster) waitMoved(i int) {
	tc.t.Helper()
	waitUntil(tc.t, "every move finished", func() bool { return len(tc.brokers[i].cluster.meta.State().Moving()) == 0 })
}

// replica is broker i's replica of a partition, nil when it holds none.
func (tc *testCluster) replica(i int, topic string, partition int) *replPart {
	t := (*tc.brokers[i].topics.Load())[topic]
	if t == nil || partition >= len(t.parts) || t.parts[partition].repl == nil || t.parts[partition].repl.part.Load() == nil {
		return nil
	}
	return t.parts[partition].repl
}

// makeLeader makes broker i lead the partition (leadership transfer from the leader it has).
func (tc *testCluster) makeLeader(i int, topic string, partition int) {
	tc.t.Helper()
	waitUntil(tc.t, fmt.Sprintf("broker %d leads %s/%d", i+1, topic, partition), func() bool {
		rp := tc.replica(i, topic, partition)
		if rp == nil {
			return false
		}
		if rp.leads() {
			return true
		}
		if l := rp.leader(); l != 0 && tc.brokers[l-1] != nil {
			if lp := tc.replica(int(l-1), topic, partition); lp != nil && lp.leads() {
				lp.part.Load().Replica().TransferLeadership(uint64(i + 1))
			}
		}
		return false
	})
}

// committedLog is the bytes of broker i's replica's log from its start up to its high
// watermark, and that high watermark.
func (tc *testCluster) committedLog(i int, topic string, partition int) ([]byte, int64) {
	tc.t.Helper()
	rp := tc.replica(i, topic, partition)
	if rp == nil {
		tc.t.Fatalf("broker %d holds no replica of %s/%d", i+1, topic, partition)
	}
	part := rp.part.Load()
	l, hw := part.Log(), part.HighWatermark()
	var out []byte
	for off := l.StartOffset(); off < hw; {
		chunk, err := l.Read(off, hw, 1<<20)
		if err != nil || chunk == nil {
			tc.t.Fatalf("broker %d: read %s/%d at %d below %d: %v", i+1, topic, partition, off, hw, err)
		}
		buf := make([]byte, chunk.Len)
		if _, err := chunk.File.ReadAt(buf, chunk.Pos); err != nil {
			tc.t.Fatal(err)
		}
		chunk.Release()
		out = append(out, buf...)
		off = chunk.NextOffset
	}
	return out, hw
}

// leading waits until a running broker's replica leads the partition, and returns its index.
func (tc *testCluster) leading(topic string, partition int) int {
	tc.t.Helper()
	li := -1
	waitUntil(tc.t, fmt.Sprintf("a leader of %s/%d", topic, partition), func() bool {
		for i, b := range tc.brokers {
			if b != nil && tc.replica(i, topic, partition) != nil && tc.replica(i, topic, partition).leads() {
				li = i
				return true
			}
		}
		return false
	})
	return li
}

// values fetches the partition from its leader, from offset 0 to the high watermark, and
// returns every record's value in offset order.
func (tc *testCluster) values(topic string, partition int) []string {
	tc.t.Helper()
	li := tc.leading(topic, partition)
	c := login(tc.t, tc.brokers[li].Addr(), "app", "app-secret")
	defer c.conn.Close()
	var out []string
	for off := int64(0); ; {
		f := wire.Fetch{Topic: topic, Partition: uint32(partition), Offset: off, MaxBytes: 1 << 20}
		var fr wire.FetchResponse
		if err := fr.Decode(c.expectResponse(wire.OpFetch, c.send(wire.OpFetch, f.AppendTo(nil)))); err != nil {
			tc.t.Fatal(err)
		}
		if len(fr.Batches) == 0 {
			if off < fr.HighWatermark {
				tc.t.Fatalf("fetch at %d: no batches below the high watermark %d", off, fr.HighWatermark)
			}
			return out
		}
		for rest := fr.Batches; len(rest) > 0; {
			n := wire.BatchSize(rest)
			bt, err := wire.ParseBatch(rest[:n], 1<<20)
			if err != nil {
				tc.t.Fatal(err)
			}
			rest = rest[n:]
			off = bt.NextOffset()
			if bt.IsControl() {
				continue
			}
			it := wire.NewRecordIter(bt.Records, bt.RecordCount, bt.BaseOffset, bt.FirstTimestamp)
			var rec wire.Record
			for it.Next(&rec) {
				out = append(out, string(rec.Value))
			}
			if err := it.Err(); err != nil {
				tc.t.Fatal(err)
			}
		}
	}
}

// testProducer is an idempotent producer of one partition, as the Go client's is meant to
// behave across a leader change: it asks METADATA which broker leads, sends one batch at a
// time with its producer id and sequence, and on NOT_LEADER, REPLICATION_TIMEOUT,
// RESOURCE_LIMIT or a lost connection sends the same batch again (to the leader it then
// finds) until it is acknowledged. It runs on its own goroutine: failures are recorded, not
// reported with t.
type testProducer struct {
	tc        *testCluster
	topic     string
	partition int32
	stop      chan struct{}
	done      chan struct{}

	mu      sync.Mutex
	acked   []string // acknowledged values, in order
	retries int
	err     error
}

// startProducer starts a producer of the partition; stop it with finish.
func (tc *testCluster) startProducer(topic string, partition int32) *testProducer {
	p := &testProducer{tc: tc, topic: topic, partition: partition, stop: make(chan struct{}), done: make(chan struct{})}
	go p.run()
	return p
}

// ackedCount is how many batches were acknowledged so far.
func (p *testProducer) ackedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.acked)
}

// waitAcked waits until n more batches than now are acknowledged (or the producer failed).
func (p *testProducer) waitAcked(n int) {
	p.tc.t.Helper()
	target := p.ackedCount() + n
	waitUntil(p.tc.t, fmt.Sprintf("%d batches of %s/%d acknowledged", target, p.topic, p.partition), func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.acked) >= target || p.err != nil
	})
	if err := p.failure(); err != nil {
		p.tc.t.Fatal(err)
	}
}

func (p *testProducer) failure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// finish stops the producer after its batch in flight is acknowledged, and returns what was
// acknowledged.
func (p *testProducer) finish() []string {
	p.tc.t.Helper()
	close(p.stop)
	select {
	case <-p.done:
	case <-time.After(90 * time.Second):
		p.tc.t.Fatal("the producer did not stop within 90 s")
	}
	if err := p.failure(); err != nil {
		p.tc.t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tc.t.Logf("producer of %s/%d: %d batches acknowledged, %d sends retried", p.topic, p.partition, len(p.acked), p.retries)
	return append([]string(nil), p.acked...)
}

// maxProduced bounds a test producer's batches, so that no run is unbounded.
const maxProduced = 20000

func (p *testProducer) run() {
	defer close(p.done)
	fail := func(err error) {
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
	}
	var pc *prodConn
	defer func() {
		if pc != nil {
			pc.close()
		}
	}()
	id, epoch := int64(-1), int16(-1)
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for seq := int32(0); seq < maxProduced; seq++ {
		select {
		case <-p.stop:
			return
		default:
		}
		value := fmt.Sprintf("%s-%d-%06d", p.topic, p.partition, seq)
		deadline := time.Now().Add(60 * time.Second)
		for attempt := 0; ; attempt++ {
			if time.Now().After(deadline) {
				fail(fmt.Errorf("batch %q not acknowledged within 60 s (%d attempts)", value, attempt))
				return
			}
			if attempt > 0 {
				p.mu.Lock()
				p.retries++
				p.mu.Unlock()
				<-poll.C // an election or a transfer: ask again in a moment
			}
			if pc == nil {
				var err error
				if pc, err = p.connect(); err != nil {
					pc = nil
					continue
				}
				if id < 0 {
					if id, epoch, err = pc.initProducer(); err != nil {
						pc.close()
						pc = nil
						continue
					}
				}
			}
			code, err := pc.produce(p.topic, p.partition, idempotentBatch(id, epoch, seq, value))
			switch {
			case err != nil || code == wire.CodeNotLeader || code == wire.CodeReplicationTimeout || code == wire.CodeResourceLimit || code == wire.CodeShuttingDown:
				pc.close()
				pc = nil
				continue
			case code != 0:
				fail(fmt.Errorf("batch %q: %v", value, code))
				return
			}
			p.mu.Lock()
			p.acked = append(p.acked, value)
			p.mu.Unlock()
			break
		}
	}
}

// connect finds the partition's leader through METADATA of a running broker that holds a
// replica (one that holds none can only name the preferred leader) and logs in to it.
func (p *testProducer) connect() (*prodConn, error) {
	for _, b := range p.tc.liveBrokers() {
		pc, err := dialProd(b.Addr())
		if err != nil {
			continue
		}
		leader, addr, err := pc.leaderOf(p.topic, uint32(p.partition))
		if err != nil || leader == 0 || addr == "" {
			pc.close()
			continue
		}
		if addr == b.Addr() {
			return pc, nil
		}
		pc.close()
		return dialProd(addr)
	}
	return nil, errors.New("no broker named a leader")
}

// liveBrokers are the running brokers (a snapshot, under tc.mu: the test goroutine changes
// the slice under it while producers run).
func (tc *testCluster) liveBrokers() []*Server {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	var out []*Server
	for _, b := range tc.brokers {
		if b != nil {
			out = append(out, b)
		}
	}
	return out
}

// idempotentBatch is a format-2 batch of one value from producer id (epoch) at sequence seq.
func idempotentBatch(id int64, epoch int16, seq int32, value string) []byte {
	var b wire.BatchBuilder
	b.SetMagic(wire.BatchMagic2)
	b.Append(time.Now().UnixMilli(), nil, []byte(value), nil)
	b.SetProducer(id, epoch, seq)
	out, err := b.Finish(wire.CodecNone, nil)
	if err != nil {
		panic(err)
	}
	return bytes.Clone(out)
}

// prodConn is a logged-in connection of a test producer, read and written by its goroutine
// only, with deadlines on every read.
type prodConn struct {
	conn net.Conn
	r    *bufio.Reader
	corr uint32
}

func dialProd(addr string) (*prodConn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	pc := &prodConn{conn: c, r: bufio.NewReader(c)}
	hello := wire.Hello{ClientName: "membership-test", ClientVersion: "1"}
	if _, err := pc.call(wire.OpHello, hello.AppendTo(nil)); err != nil {
		pc.close()
		return nil, err
	}
	auth := wire.Auth{User: "app", Password: "app-secret"}
	if _, err := pc.call(wire.OpAuth, auth.AppendTo(nil)); err != nil {
		pc.close()
		return nil, err
	}
	return pc, nil
}

func (pc *prodConn) close() { pc.conn.Close() }

// call sends one request and reads its answer: the body, or an error (a *wire.Error for an
// ERROR frame).
func (pc *prodConn) call(op wire.Op, body []byte) ([]byte, error) {
	pc.corr++
	_ = pc.conn.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := pc.conn.Write(wire.AppendFrame(nil, op, 0, pc.corr, body)); err != nil {
		return nil, err
	}
	head := make([]byte, wire.HeaderSize)
	if _, err := io.ReadFull(pc.r, head); err != nil {
		return nil, err
	}
	n, err := wire.FrameSize(head, 64<<20)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, n)
	copy(buf, head)
	if _, err := io.ReadFull(pc.r, buf[wire.HeaderSize:]); err != nil {
		return nil, err
	}
	h, b, err := wire.ParseFrame(buf)
	switch {
	case err != nil:
		return nil, err
	case h.Corr != pc.corr && h.Corr != 0:
		return nil, fmt.Errorf("answer to corr %d, want %d", h.Corr, pc.corr)
	case h.Op == wire.OpError:
		var eb wire.ErrorBody
		if err := eb.Decode(b); err != nil {
			return nil, err
		}
		return nil, &wire.Error{Code: eb.Code, Message: eb.Message}
	}
	return b, nil
}

func (pc *prodConn) initProducer() (int64, int16, error) {
	m := wire.InitProducer{PreviousID: wire.NoProducer, PreviousEpoch: wire.NoProducer}
	b, err := pc.call(wire.OpInitProducer, m.AppendTo(nil))
	if err != nil {
		return 0, 0, err
	}
	var resp wire.InitProducerResponse
	if err := resp.Decode(b); err != nil {
		return 0, 0, err
	}
	return resp.ProducerID, resp.ProducerEpoch, nil
}

// produce sends one batch with acks 1: code 0 when acknowledged, the ERROR's code, or a
// connection error.
func (pc *prodConn) produce(topic string, partition int32, batch []byte) (wire.Code, error) {
	_, err := pc.call(wire.OpProduce, produceBody(topic, partition, wire.AcksWritten, batch))
	var we *wire.Error
	if errors.As(err, &we) {
		return we.Code, nil
	}
	return 0, err
}

// leaderOf asks METADATA (cluster layout) who leads the partition, and where clients reach it.
func (pc *prodConn) leaderOf(topic string, partition uint32) (uint32, string, error) {
	req := wire.MetadataRequest{Topics: []string{topic}, Cluster: true}
	b, err := pc.call(wire.OpMetadata, req.AppendTo(nil))
	if err != nil {
		return 0, "", err
	}
	resp := wire.MetadataResponse{Cluster: true}
	if err := resp.Decode(b); err != nil {
		return 0, "", err
	}
	if len(resp.Topics) != 1 || int(partition) >= len(resp.Topics[0].Partitions) {
		return 0, "", fmt.Errorf("metadata without %s/%d", topic, partition)
	}
	pm := resp.Topics[0].Partitions[partition]
	if !slices.Contains(pm.Replicas, resp.NodeID) {
		return 0, "", nil // not a replica: its leader is a guess
	}
	leader := pm.Leader
	for _, br := range resp.Brokers {
		if br.NodeID == leader {
			return leader, br.Addr, nil
		}
	}
	return 0, "", nil
}

// checkExactlyOnce checks that every acknowledged value is in values exactly once, and that
// no value is there twice.
func checkExactlyOnce(t *testing.T, acked, values []string) {
	t.Helper()
	seen := map[string]int{}
	for _, v := range values {
		seen[v]++
	}
	var dup []string
	for v, n := range seen {
		if n > 1 {
			dup = append(dup, v)
		}
	}
	sort.Strings(dup)
	var lost []string
	for _, v := range acked {
		if seen[v] == 0 {
			lost = append(lost, v)
		}
	}
	if len(dup) > 0 || len(lost) > 0 {
		t.Fatalf("%d acknowledged, %d stored: %d lost (%.10v), %d stored more than once (%.10v)", len(acked), len(values), len(lost), lost, len(dup), dup)
	}
}
