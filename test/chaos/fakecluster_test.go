package chaos

import (
	"bufio"
	"context"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lightq/lightq/wire"
)

// Fake cluster members, to test what the harness does with a cluster's answers (leaders,
// failover probes, caught-up followers) on a build whose broker refuses cluster settings.
// Each answers HELLO, AUTH, METADATA with the cluster flag from a shared layout, PRODUCE
// (stored when it leads the partition, else NOT_LEADER) and LIST_OFFSETS (the high
// watermark). Nothing else: these are test doubles of the protocol's answers, not a broker.

type fakeLayout struct {
	mu       sync.Mutex
	leader   map[int32]uint32            // the partitions' leaders
	view     map[uint32]map[int32]uint32 // what a node reports instead, when set
	refuse   map[uint32]int              // PRODUCEs a node answers NOT_LEADER before it accepts
	hw       map[int32]int64
	unknown  map[uint32]bool // nodes that answer METADATA of the topic with UNKNOWN_TOPIC
	metaAsks int
	onMeta   func(asks int) // called (under mu) at each METADATA
	produced map[uint32]int // PRODUCEs accepted per node
}

func newFakeLayout(parts int, leaders ...uint32) *fakeLayout {
	f := &fakeLayout{leader: map[int32]uint32{}, view: map[uint32]map[int32]uint32{}, refuse: map[uint32]int{},
		hw: map[int32]int64{}, produced: map[uint32]int{}}
	for p := 0; p < parts; p++ {
		f.leader[int32(p)] = leaders[p%len(leaders)]
	}
	return f
}

// serveFake runs fake member id on 127.0.0.1:0 until the test ends.
func serveFake(t *testing.T, f *fakeLayout, id uint32, topic string, nodes int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer nc.Close()
				br := bufio.NewReader(nc)
				for {
					h, body, err := ReadFrame(br, MaxAnswer)
					if err != nil {
						return
					}
					op, resp := f.answer(id, topic, nodes, h.Op, body)
					flags := wire.FlagResponse
					if op == wire.OpError {
						flags = 0
					}
					if _, err := nc.Write(wire.AppendFrame(nil, op, flags, h.Corr, resp)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func errorBody(code wire.Code, msg string) (wire.Op, []byte) {
	e := wire.ErrorBody{Code: code, Message: msg}
	return wire.OpError, e.AppendTo(nil)
}

func (f *fakeLayout) answer(id uint32, topic string, nodes int, op wire.Op, body []byte) (wire.Op, []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch op {
	case wire.OpHello:
		r := wire.HelloResponse{ProtocolVersion: wire.Version, BrokerVersion: "fake", Limits: wire.DefaultLimits()}
		return op, r.AppendTo(nil)
	case wire.OpAuth:
		r := wire.AuthResponse{Role: 1}
		return op, r.AppendTo(nil)
	case wire.OpMetadata:
		if f.unknown[id] {
			return errorBody(wire.CodeUnknownTopic, "unknown topic")
		}
		f.metaAsks++
		if f.onMeta != nil {
			f.onMeta(f.metaAsks)
		}
		var all []uint32
		resp := wire.MetadataResponse{Cluster: true, NodeID: id}
		for n := 1; n <= nodes; n++ {
			all = append(all, uint32(n))
			resp.Brokers = append(resp.Brokers, wire.BrokerMetadata{NodeID: uint32(n)})
		}
		tm := wire.TopicMetadata{Name: topic, Kind: wire.KindDurable}
		for p := int32(0); p < int32(len(f.leader)); p++ {
			l := f.leader[p]
			if v, ok := f.view[id][p]; ok {
				l = v
			}
			tm.Partitions = append(tm.Partitions, wire.PartitionMetadata{ID: uint32(p), EndOffset: f.hw[p], Leader: l, Replicas: all})
		}
		resp.Topics = []wire.TopicMetadata{tm}
		return op, resp.AppendTo(nil)
	case wire.OpProduce:
		var m wire.Produce
		if err := m.Decode(body); err != nil {
			return errorBody(wire.CodeInvalidRequest, err.Error())
		}
		if f.leader[m.Partition] != id || f.refuse[id] > 0 {
			f.refuse[id]--
			return errorBody(wire.CodeNotLeader, "not the leader")
		}
		f.produced[id]++
		r := wire.ProduceResponse{Partition: uint32(m.Partition), BaseOffset: f.hw[m.Partition]}
		f.hw[m.Partition]++
		return op, r.AppendTo(nil)
	case wire.OpListOffsets:
		var m wire.ListOffsets
		if err := m.Decode(body); err != nil {
			return errorBody(wire.CodeInvalidRequest, err.Error())
		}
		return op, wire.AppendI64(nil, f.hw[int32(m.Partition)])
	}
	return errorBody(wire.CodeNotSupported, "fake member")
}

// fakeCluster is a cluster of n fake members behind client proxies, every node up.
func fakeCluster(t *testing.T, f *fakeLayout, n, parts int) *cluster {
	t.Helper()
	c := &cluster{t: t, faults: NewFaults(), clustered: true, topic: "fake", parts: parts, replWait: time.Second}
	readyz := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(readyz.Close)
	for i := 1; i <= n; i++ {
		p, err := NewProxy(ProxyConfig{})
		if err != nil {
			t.Fatal(err)
		}
		p.SetBackend(serveFake(t, f, uint32(i), c.topic, n))
		c.nodes = append(c.nodes, &node{id: uint32(i), dir: t.TempDir(), client: p, proc: &brokerProc{exited: make(chan struct{}), httpAddr: readyz.Listener.Addr().String()}})
	}
	t.Cleanup(func() {
		for _, nd := range c.nodes {
			if nd.raw != nil {
				nd.raw.Close()
			}
			nd.client.Close()
		}
	})
	return c
}

// down marks a fake node's process as gone.
func down(n *node) { close(n.proc.exited) }

func TestLeadersFromLayouts(t *testing.T) {
	ctx := context.Background()
	f := newFakeLayout(3, 1, 2, 3)
	c := fakeCluster(t, f, 3, 3)
	got, ok := c.leadersNow(ctx, true)
	if !ok || got[0] != 1 || got[1] != 2 || got[2] != 3 {
		t.Fatalf("leaders %v %v", got, ok)
	}
	if l := ledBy(got, 2); len(l) != 1 || l[0] != 1 {
		t.Fatalf("ledBy(2) = %v", l)
	}

	// Node 3 still thinks node 1 leads partition 1: no agreement on it, but node 2 claims it.
	f.mu.Lock()
	f.view[3] = map[int32]uint32{1: 1}
	f.mu.Unlock()
	if got, ok := c.leadersNow(ctx, true); ok || got[1] != 0 || got[0] != 1 {
		t.Fatalf("disagreement: %v %v", got, ok)
	}
	if got, ok := c.leadersNow(ctx, false); !ok || got[1] != 2 {
		t.Fatalf("self-claims: %v %v", got, ok)
	}
	// Avoiding node 1: partition 0 has no other claimant.
	if _, err := c.waitLeaders(ctx, 100*time.Millisecond, false, 1); err == nil || !strings.Contains(err.Error(), "avoiding [1]") {
		t.Fatalf("waitLeaders avoiding the only leader: %v", err)
	}
	// A node that does not answer (here: does not know the topic) leaves no agreement.
	f.mu.Lock()
	f.view[3] = nil
	f.unknown = map[uint32]bool{3: true}
	f.mu.Unlock()
	if got, ok := c.leadersNow(ctx, true); ok || len(got) != 0 {
		t.Fatalf("node 3 answering UNKNOWN_TOPIC: %v %v", got, ok)
	}
	if _, err := c.waitLeaders(ctx, 100*time.Millisecond, true); err == nil || !strings.Contains(err.Error(), "UNKNOWN_TOPIC") {
		t.Fatalf("waitLeaders does not say which node does not know the topic: %v", err)
	}
	f.mu.Lock()
	f.unknown = nil
	f.view[3] = map[int32]uint32{1: 1}
	f.mu.Unlock()

	// A node that is down is not asked: node 3's stale view goes with it.
	down(c.nodes[2])
	if got, ok := c.leadersNow(ctx, true); ok || got[1] != 2 || got[2] != 0 {
		t.Fatalf("node 3 down: %v %v (its partition has no leader up)", got, ok)
	}
}

// TestProbeFailover: node 1 leads partitions 0 and 2 and is down; after a few METADATA
// answers the layout names node 2 and 3, and node 3 refuses its first produce: each
// partition gets one time and one acknowledged probe, stored by the new leader.
func TestProbeFailover(t *testing.T) {
	f := newFakeLayout(3, 1, 2)
	c := fakeCluster(t, f, 3, 3)
	down(c.nodes[0])
	f.refuse[3] = 1
	f.onMeta = func(asks int) {
		if asks == 6 {
			f.leader[0], f.leader[2] = 2, 3
		}
	}
	r := newChaosRun(c, nil, 1, wire.AcksWritten)
	start := time.Now()
	ds, err := r.probeFailover(context.Background(), []int32{0, 2}, 1, start)
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	if len(ds) != 2 || ds[0] <= 0 || ds[1] <= 0 || ds[0] > elapsed || ds[1] > elapsed {
		t.Fatalf("failover times %v (elapsed %v)", ds, elapsed)
	}
	f.mu.Lock()
	produced := f.produced
	f.mu.Unlock()
	if produced[2] != 1 || produced[3] != 1 || produced[1] != 0 {
		t.Fatalf("produced per node %v, want one on 2 and one on 3", produced)
	}
	if len(r.probes) != 2 || !r.probes[0].Probe {
		t.Fatalf("acked probes %+v", r.probes)
	}

	// No new leader ever: an error naming the partition.
	f2 := newFakeLayout(1, 1)
	c2 := fakeCluster(t, f2, 3, 1)
	down(c2.nodes[0])
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := newChaosRun(c2, nil, 1, wire.AcksWritten).probeFailover(ctx, []int32{0}, 1, time.Now()); err == nil || !strings.Contains(err.Error(), "partition 0") {
		t.Fatalf("no leader: %v", err)
	}
}

// TestWaitReplicated: the followers' files must reach the leader's high watermark.
func TestWaitReplicated(t *testing.T) {
	f := newFakeLayout(1, 1)
	f.hw[0] = 4
	c := fakeCluster(t, f, 3, 1)
	log := buildLog(t, []batchSpec{{ids: []MsgID{{1, 0}, {1, 1}}}, {control: true}, {ids: []MsgID{{1, 2}}}}) // offsets 0-3
	write := func(n *node, batches [][]byte) {
		dir := PartitionDir(n.dir, c.topic, 0)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "00000000000000000000.log"), concat(batches), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range c.nodes {
		write(n, log)
	}
	write(c.nodes[2], log[:2]) // node 3 holds offsets 0-2
	err := c.waitHealthy(context.Background())
	if err == nil || !strings.Contains(err.Error(), "node 3 partition 0 at 3 of 4") {
		t.Fatalf("a follower behind: %v", err)
	}
	write(c.nodes[2], log)
	if err := c.waitHealthy(context.Background()); err != nil {
		t.Fatal(err)
	}
	down(c.nodes[1])
	if err := c.waitHealthy(context.Background()); err == nil || !strings.Contains(err.Error(), "node 2 is down") {
		t.Fatalf("a node down: %v", err)
	}
}

// TestFollowerChoice: a follower leading nothing is preferred; otherwise any non-leader.
func TestFollowerChoice(t *testing.T) {
	c := &cluster{nodes: []*node{{id: 1}, {id: 2}, {id: 3}}}
	r := &chaosRun{c: c, rng: rand.New(rand.NewPCG(1, 1))}
	for i := 0; i < 20; i++ {
		if f := r.follower(map[int32]uint32{0: 1, 1: 2, 2: 1}, 0); f.id != 3 {
			t.Fatalf("picked node %d; node 3 leads nothing", f.id)
		}
		if f := r.follower(map[int32]uint32{0: 1, 1: 2, 2: 3}, 0); f.id == 1 {
			t.Fatal("picked the leader")
		}
	}
}

// TestDamage: flipBit changes exactly one bit, never in a leader epoch unless asked to, and
// then always there; truncateSegment shortens the newest segment with data.
func TestDamage(t *testing.T) {
	log := buildLog(t, []batchSpec{{ids: []MsgID{{1, 0}, {1, 1}}}, {control: true}, {ids: []MsgID{{1, 2}}}})
	dir := t.TempDir()
	seg := filepath.Join(dir, "00000000000000000000.log")
	orig := concat(log)
	rng := rand.New(rand.NewPCG(3, 4))
	starts := []int{0, len(log[0]), len(log[0]) + len(log[1])}
	for i := 0; i < 100; i++ {
		if err := os.WriteFile(seg, orig, 0o644); err != nil {
			t.Fatal(err)
		}
		epoch := i%2 == 1
		what, err := flipBit(dir, rng, epoch)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(seg)
		diff := -1
		for k := range got {
			if got[k] != orig[k] {
				if diff >= 0 {
					t.Fatalf("%s: more than one byte changed", what)
				}
				diff = k
			}
		}
		if diff < 0 {
			t.Fatalf("%s: nothing changed", what)
		}
		if x := got[diff] ^ orig[diff]; x&(x-1) != 0 {
			t.Fatalf("%s: %#x is more than one bit", what, x)
		}
		inEpoch := false
		for _, s := range starts {
			inEpoch = inEpoch || diff >= s+20 && diff < s+24
		}
		if inEpoch != epoch {
			t.Fatalf("%s: in a leader epoch %v, asked for %v", what, inEpoch, epoch)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "00000000000000000004.log"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	what, err := truncateSegment(dir, rng)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(seg)
	if fi.Size() >= int64(len(orig)) || !strings.Contains(what, "00000000000000000000.log") {
		t.Fatalf("%s: %d bytes", what, fi.Size())
	}
	if _, err := flipBit(t.TempDir(), rng, false); err == nil {
		t.Fatal("flipBit in an empty dir")
	}
	if _, err := truncateSegment(t.TempDir(), rng); err == nil {
		t.Fatal("truncateSegment in an empty dir")
	}
}
