package broker

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lightq/lightq/wire"
)

// testCluster is n brokers of one cluster in this process, on loopback ports the kernel
// picked: each cluster port listens on 127.0.0.1:0, and once all are up every broker is told
// where the others are (transport.SetPeer), as cluster-peers would have said.
type testCluster struct {
	t       testing.TB
	mu      sync.Mutex // guards brokers and cfgs while producers run (they read brokers)
	brokers []*Server
	cfgs    []Config
}

func startCluster(t testing.TB, n int) *testCluster {
	t.Helper()
	return startClusterWith(t, n, nil)
}

// startClusterWith is startCluster with each broker's Config changed by mutate (may be nil).
func startClusterWith(t testing.TB, n int, mutate func(*Config)) *testCluster {
	t.Helper()
	tc := &testCluster{t: t}
	peers := map[uint64]string{}
	for i := 1; i <= n; i++ {
		peers[uint64(i)] = "127.0.0.1:0"
	}
	for i := 1; i <= n; i++ {
		cfg := testConfig(t)
		cfg.NodeID = uint32(i)
		cfg.Cluster = ClusterConfig{Peers: peers, Secret: []byte(testClusterSecret), ScrubBytesPerSecond: -1}
		if mutate != nil {
			mutate(&cfg)
		}
		tc.cfgs = append(tc.cfgs, cfg)
		tc.brokers = append(tc.brokers, startWith(t, cfg))
	}
	tc.wire()
	for i, s := range tc.brokers {
		waitUntil(t, fmt.Sprintf("broker %d knows the %d brokers", i+1, n), func() bool { return len(s.cluster.meta.State().Brokers()) == n })
	}
	return tc
}

// wire tells every running broker where the others' cluster ports are.
func (tc *testCluster) wire() {
	for _, a := range tc.brokers {
		if a == nil {
			continue
		}
		for j, b := range tc.brokers {
			if b != nil && a != b {
				a.cluster.tr.SetPeer(uint64(j+1), b.cluster.tr.Addr().String())
			}
		}
	}
}

// metadata asks broker i for the cluster layout of topic.
func (tc *testCluster) metadata(i int, topic string) wire.MetadataResponse {
	tc.t.Helper()
	c := login(tc.t, tc.brokers[i].Addr(), testAdminUser, testAdminPass)
	defer c.conn.Close()
	resp := wire.MetadataResponse{Cluster: true}
	req := wire.MetadataRequest{Topics: []string{topic}, Cluster: true}
	if err := resp.Decode(c.expectResponse(wire.OpMetadata, c.send(wire.OpMetadata, req.AppendTo(nil)))); err != nil {
		tc.t.Fatal(err)
	}
	return resp
}

// leader waits until broker i names a leader for the partition, and returns its index.
func (tc *testCluster) leader(i int, topic string, partition uint32) int {
	tc.t.Helper()
	var leader uint32
	waitUntil(tc.t, fmt.Sprintf("a leader of %s/%d", topic, partition), func() bool {
		if tc.brokers[i] == nil {
			return false
		}
		if _, ok := (*tc.brokers[i].topics.Load())[topic]; !ok {
			return false
		}
		md := tc.metadata(i, topic)
		leader = md.Topics[0].Partitions[partition].Leader
		return leader != 0 && tc.brokers[leader-1] != nil && tc.brokers[leader-1].cluster.serves(topic, partition)
	})
	return int(leader - 1)
}

// serves reports whether this broker leads the partition now.
func (n *clusterNode) serves(topic string, partition uint32) bool {
	t := (*n.srv.topics.Load())[topic]
	return t != nil && int(partition) < len(t.parts) && t.parts[partition].repl.leads()
}

// TestClusterReplicatedTopic: a durable topic created on one broker of three with
// replication.factor 3 appears on all of them; METADATA names its leaders and replicas;
// PRODUCE to the leader is answered once a quorum has the batch, and to a follower with
// NOT_LEADER naming the leader; FETCH from the leader returns the batch; when the leader
// stops, another takes over and takes produce, and every replica holds the same batches.
func TestClusterReplicatedTopic(t *testing.T) {
	tc := startCluster(t, 3)
	admin := login(t, tc.brokers[1].Addr(), testAdminUser, testAdminPass)
	ct := wire.CreateTopic{Name: "orders", Kind: wire.KindDurable, Partitions: 2, User: "app", Password: "app-secret",
		Options: []wire.Option{{Key: wire.OptionReplicationFactor, Value: "3"}}}
	admin.expectResponse(wire.OpCreateTopic, admin.send(wire.OpCreateTopic, ct.AppendTo(nil)))
	for i := range tc.brokers {
		waitUntil(t, fmt.Sprintf("broker %d has the topic", i+1), func() bool { return (*tc.brokers[i].topics.Load())["orders"] != nil })
	}
	md := tc.metadata(2, "orders")
	if len(md.Brokers) != 3 || len(md.Topics) != 1 || len(md.Topics[0].Partitions) != 2 {
		t.Fatalf("metadata: %+v", md)
	}
	for _, p := range md.Topics[0].Partitions {
		if len(p.Replicas) != 3 {
			t.Fatalf("partition %d replicas %v, want 3", p.ID, p.Replicas)
		}
	}

	li := tc.leader(0, "orders", 0)
	fi := (li + 1) % 3
	leader := login(t, tc.brokers[li].Addr(), "app", "app-secret")
	follower := login(t, tc.brokers[fi].Addr(), "app", "app-secret")
	for i := range 20 {
		resp := leader.produce("orders", 0, testBatch(t, fmt.Sprintf("m%d", i)))
		if resp.Partition != 0 {
			t.Fatalf("ack for partition %d", resp.Partition)
		}
	}
	e := follower.expectError(follower.send(wire.OpProduce, produceBody("orders", 0, wire.AcksWritten, testBatch(t, "x"))), wire.CodeNotLeader)
	if !bytes.Contains([]byte(e.Message), []byte(tc.brokers[li].Addr())) {
		t.Errorf("NOT_LEADER %q does not name the leader's address %s", e.Message, tc.brokers[li].Addr())
	}
	f := wire.Fetch{Topic: "orders", Partition: 0, Offset: 0, MaxBytes: 1 << 20}
	follower.expectError(follower.send(wire.OpFetch, f.AppendTo(nil)), wire.CodeNotLeader)
	var fr wire.FetchResponse
	if err := fr.Decode(leader.expectResponse(wire.OpFetch, leader.send(wire.OpFetch, f.AppendTo(nil)))); err != nil {
		t.Fatal(err)
	}
	if fr.HighWatermark < 20 || len(fr.Batches) == 0 {
		t.Fatalf("fetch: high watermark %d, %d bytes of batches", fr.HighWatermark, len(fr.Batches))
	}
	leader.conn.Close()
	follower.conn.Close()

	// The leader stops: another replica takes over within a few election timeouts.
	stopped := tc.brokers[li]
	tc.brokers[li] = nil
	if err := stopped.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	nl := tc.leader((li+1)%3, "orders", 0)
	if nl == li {
		t.Fatalf("the stopped broker is still named leader")
	}
	c := login(t, tc.brokers[nl].Addr(), "app", "app-secret")
	c.produce("orders", 0, testBatch(t, "after"))
	t.Logf("new leader node %d took produce %v after the old one stopped", nl+1, time.Since(start).Round(time.Millisecond))
	c.conn.Close()

	// The old leader comes back: it rebuilds the topic from its metadata replica and its
	// replica catches up, to the same bytes as the leader's.
	tc.brokers[li] = startWith(t, tc.cfgs[li])
	if (*tc.brokers[li].topics.Load())["orders"] == nil {
		t.Fatal("the restarted broker started serving before it replayed its metadata: no topic orders")
	}
	tc.wire()
	lead := (*tc.brokers[nl].topics.Load())["orders"].parts[0].dlog()
	back := func() *durablePart {
		t := (*tc.brokers[li].topics.Load())["orders"]
		if t == nil {
			return nil
		}
		return t.parts[0].dlog()
	}
	waitUntil(t, "the restarted broker's replica caught up", func() bool {
		d := back()
		return d != nil && d.repl != nil && d.repl.HighWatermark() == lead.repl.HighWatermark() && d.log.NextOffset() == lead.log.NextOffset()
	})
	if a, b := segmentBytes(t, partitionDir(tc.cfgs[nl].DataDir, "orders", 0)), segmentBytes(t, partitionDir(tc.cfgs[li].DataDir, "orders", 0)); !bytes.Equal(a, b) {
		t.Fatalf("the restarted replica's log (%d bytes) differs from the leader's (%d bytes)", len(b), len(a))
	}
}

// segmentBytes reads a partition's segment files, in order.
func segmentBytes(t *testing.T, dir string) []byte {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	return all
}
