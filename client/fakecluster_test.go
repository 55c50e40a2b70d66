package client_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lightq/lightq/wire"
)

// fakeCluster makes one fakeBroker the brokers of a cluster (PROTOCOL.md section 16): one
// listener and node id per broker, sharing the fake's topics, stored batches and producer
// states, which is what the replicas of a partition agree on: any leader holds every stored
// batch and deduplicates a re-sent one. Each partition has a leader (0: an election), which
// tests move; PRODUCE, FETCH and LIST_OFFSETS of a partition sent to another broker are
// answered NOT_LEADER, as a replicated partition's are. Guarded by fakeBroker.mu.
type fakeCluster struct {
	nodes   []*fakeNode
	leaders map[string][]uint32 // per topic and partition; a topic not in it: node 1
	// replTimeouts: answer this many of the next stored batches REPLICATION_TIMEOUT.
	replTimeouts int
	notLeaders   map[wire.Op]int   // NOT_LEADER answers sent, by request
	served       map[[2]uint32]int // requests served, by op and node
	committed    map[string]int64  // group offsets, by "group/topic/partition"
	// cutOff: nodes cut off from the others, which know no leader (their METADATA names
	// none), as a broker partitioned away from its peers after its leadership lapsed.
	cutOff map[uint32]bool
}

// fakeNode is one broker of the cluster.
type fakeNode struct {
	id   uint32
	ln   net.Listener
	down bool // refuses connections, as a stopped broker's port
}

// startFakeCluster starts a fake of n brokers, nodes 1 to n, on loopback ports; t.Cleanup
// stops it.
func startFakeCluster(t testing.TB, n int) *fakeBroker {
	t.Helper()
	fb := newFakeOn(nil)
	fb.cluster = &fakeCluster{leaders: make(map[string][]uint32), notLeaders: make(map[wire.Op]int), served: make(map[[2]uint32]int),
		committed: make(map[string]int64)}
	for i := 1; i <= n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		nd := &fakeNode{id: uint32(i), ln: ln}
		fb.cluster.nodes = append(fb.cluster.nodes, nd)
		fb.wg.Add(1)
		go func() {
			defer fb.wg.Done()
			for {
				nc, err := ln.Accept()
				if err != nil || !fb.serveOn(nc, nd.id) {
					return
				}
			}
		}()
	}
	t.Cleanup(func() {
		for _, nd := range fb.cluster.nodes {
			_ = nd.ln.Close()
		}
		fb.Close()
	})
	return fb
}

// NodeAddr is the address of node id.
func (fb *fakeBroker) NodeAddr(id uint32) string { return fb.cluster.nodes[id-1].ln.Addr().String() }

// Seeds lists the nodes' addresses for Dial, in the order given.
func (fb *fakeBroker) Seeds(ids ...uint32) string {
	var addrs []string
	for _, id := range ids {
		addrs = append(addrs, fb.NodeAddr(id))
	}
	return strings.Join(addrs, ",")
}

// SetLeader makes node id (0: none, an election) the leader of a partition.
func (fb *fakeBroker) SetLeader(topic string, part int, id uint32) {
	fb.set(func(fb *fakeBroker) {
		ls := fb.cluster.leaders[topic]
		for len(ls) <= part {
			ls = append(ls, 1)
		}
		ls[part] = id
		fb.cluster.leaders[topic] = ls
	})
}

// SetDown makes node id refuse new connections (down) or accept them again.
func (fb *fakeBroker) SetDown(id uint32, down bool) {
	fb.set(func(fb *fakeBroker) { fb.cluster.nodes[id-1].down = down })
}

// SetCutOff makes node id know no leader (cut off from the others) or know them again.
func (fb *fakeBroker) SetCutOff(id uint32, cut bool) {
	fb.set(func(fb *fakeBroker) {
		if fb.cluster.cutOff == nil {
			fb.cluster.cutOff = make(map[uint32]bool)
		}
		fb.cluster.cutOff[id] = cut
	})
}

// DropNode closes every connection of node id abruptly.
func (fb *fakeBroker) DropNode(id uint32) {
	fb.set(func(fb *fakeBroker) {
		for fc := range fb.conns {
			if fc.node == id {
				fc.dead = true
				_ = fc.nc.Close()
			}
		}
	})
}

// NodeConns counts the open connections of node id.
func (fb *fakeBroker) NodeConns(id uint32) int {
	n := 0
	fb.get(func(fb *fakeBroker) {
		for fc := range fb.conns {
			if fc.node == id && !fc.dead {
				n++
			}
		}
	})
	return n
}

// NotLeaders is how many NOT_LEADER answers op got.
func (fb *fakeBroker) NotLeaders(op wire.Op) (n int) {
	fb.get(func(fb *fakeBroker) { n = fb.cluster.notLeaders[op] })
	return n
}

// Served is how many requests op node id answered as the leader.
func (fb *fakeBroker) Served(op wire.Op, id uint32) (n int) {
	fb.get(func(fb *fakeBroker) { n = fb.cluster.served[[2]uint32{uint32(op), id}] })
	return n
}

// refuseNotLeader answers a PRODUCE that reached a broker not leading its partition with
// NOT_LEADER (held with the acks while they are held, so that answers keep their order) and
// reports true; fb.mu is held, and released when it reports true.
func (fb *fakeBroker) refuseNotLeader(fc *fakeConn, corr uint32, topic string, part int) bool {
	werr := fb.cluster.notLeader(wire.OpProduce, fc.node, topic, part)
	if werr == nil {
		fb.cluster.count(wire.OpProduce, fc.node)
		return false
	}
	refuse := func() { fc.fail(corr, werr.Code, werr.Message) }
	if fb.holdAcks {
		fb.heldAcks = append(fb.heldAcks, refuse)
		fb.cond.Broadcast()
		fb.mu.Unlock()
		return true
	}
	fb.mu.Unlock()
	refuse()
	return true
}

// count notes a request served by node as the leader.
func (c *fakeCluster) count(op wire.Op, node uint32) {
	if c != nil {
		c.served[[2]uint32{uint32(op), node}]++
	}
}

// replicationTimeout reports whether the batch just stored is to be answered
// REPLICATION_TIMEOUT, and counts it.
func (c *fakeCluster) replicationTimeout() bool {
	if c == nil || c.replTimeouts == 0 {
		return false
	}
	c.replTimeouts--
	return true
}

// down reports whether node id refuses connections; false without a cluster.
func (c *fakeCluster) down(id uint32) bool {
	return c != nil && c.nodes[id-1].down
}

// leader is a partition's leader.
func (c *fakeCluster) leader(topic string, part int) uint32 {
	if ls := c.leaders[topic]; part < len(ls) {
		return ls[part]
	}
	return 1
}

// notLeader is the NOT_LEADER refusal of a partition's request op that reached node (and
// counts it), or nil when node leads it (always, without a cluster).
func (c *fakeCluster) notLeader(op wire.Op, node uint32, topic string, part int) *wire.Error {
	if c == nil {
		return nil
	}
	id := c.leader(topic, part)
	if id == node {
		return nil
	}
	c.notLeaders[op]++
	msg := fmt.Sprintf("partition %d of %s: this broker (node %d) is not its leader", part, topic, node)
	if id != 0 {
		msg += fmt.Sprintf("; node %d is", id)
	}
	return &wire.Error{Code: wire.CodeNotLeader, Message: msg}
}

// describeCluster fills METADATA's cluster layout: without a cluster, a broker without
// cluster settings (node 1 leads everything, at the address the client used); with one,
// every node at its address, each partition's leader and all nodes as its replicas. fb.mu
// is held.
func (fb *fakeBroker) describeCluster(fc *fakeConn, resp *wire.MetadataResponse) {
	c := fb.cluster
	resp.NodeID = fc.node
	if c == nil {
		resp.Brokers = []wire.BrokerMetadata{{NodeID: 1}}
	}
	var all []uint32
	if c != nil {
		for _, nd := range c.nodes {
			all = append(all, nd.id)
			resp.Brokers = append(resp.Brokers, wire.BrokerMetadata{NodeID: nd.id, Addr: nd.ln.Addr().String()})
		}
	}
	for i := range resp.Topics {
		t := &resp.Topics[i]
		for j := range t.Partitions {
			p := &t.Partitions[j]
			if c == nil {
				p.Leader, p.Replicas = 1, []uint32{1}
				continue
			}
			p.Leader, p.Replicas = c.leader(t.Name, j), all
			if c.cutOff[fc.node] {
				p.Leader = 0
			}
		}
	}
}

// fetchStored serves FETCH and LIST_OFFSETS of a durable topic from its stored batches when
// no fetchAnswer is set (a FETCH at the end waits for a batch up to its max wait); it
// reports false to leave the request to the fixed answers.
func (fc *fakeConn) fetchStored(h wire.Header, body []byte) bool {
	fb := fc.fb
	var topic string
	var part int
	var f wire.Fetch
	var lo wire.ListOffsets
	switch h.Op {
	case wire.OpFetch:
		if f.Decode(body) != nil {
			return false
		}
		topic, part = f.Topic, int(f.Partition)
	case wire.OpListOffsets:
		if lo.Decode(body) != nil {
			return false
		}
		topic, part = lo.Topic, int(lo.Partition)
	default:
		return false
	}
	fb.mu.Lock()
	t := fb.topics[topic]
	if fb.fetchAnswer != nil || t == nil || t.kind != wire.KindDurable || part >= len(t.next) {
		fb.mu.Unlock()
		return false
	}
	if h.Op == wire.OpFetch {
		fb.fetches++
		fb.cond.Broadcast()
	}
	if werr := fb.cluster.notLeader(h.Op, fc.node, topic, part); werr != nil {
		fb.mu.Unlock()
		fc.fail(h.Corr, werr.Code, werr.Message)
		return true
	}
	fb.cluster.count(h.Op, fc.node)
	if h.Op == wire.OpListOffsets {
		off := int64(0)
		if lo.Mode == wire.OffsetLatest {
			off = t.next[part]
		}
		fb.mu.Unlock()
		resp := wire.OffsetResponse{Offset: off}
		fc.reply(h.Op, h.Corr, resp.AppendTo(nil))
		return true
	}
	fb.mu.Unlock()
	fb.wg.Add(1)
	go fc.answerFetch(h.Corr, t, part, f) // a long poll must not hold up the connection
	return true
}

// answerFetch answers a FETCH of a stored durable partition: the batches from the one
// holding f.Offset, up to f.MaxBytes (at least one), or nothing after the max wait.
func (fc *fakeConn) answerFetch(corr uint32, t *fakeTopic, part int, f wire.Fetch) {
	fb := fc.fb
	defer fb.wg.Done()
	deadline := time.Now().Add(time.Duration(f.MaxWaitMs) * time.Millisecond)
	timer := time.AfterFunc(time.Duration(f.MaxWaitMs)*time.Millisecond, func() { fb.set(func(*fakeBroker) {}) })
	defer timer.Stop()
	fb.mu.Lock()
	for t.next[part] <= f.Offset && time.Now().Before(deadline) && !fc.dead && !fb.closed {
		fb.cond.Wait()
	}
	if f.Offset > t.next[part] {
		fb.mu.Unlock()
		fc.fail(corr, wire.CodeOffsetOutOfRange, fmt.Sprintf("offset %d, end %d", f.Offset, t.next[part]))
		return
	}
	resp := wire.FetchResponse{Partition: uint32(part), HighWatermark: t.next[part]}
	for _, b := range t.batches[part] {
		h := wire.PeekBatchHeaderUnchecked(b)
		if h.BaseOffset+int64(h.RecordCount) <= f.Offset {
			continue
		}
		if len(resp.Batches) > 0 && len(resp.Batches)+len(b) > int(f.MaxBytes) {
			break
		}
		resp.Batches = append(resp.Batches, b...)
	}
	fb.mu.Unlock()
	fc.reply(wire.OpFetch, corr, resp.AppendTo(nil))
}

// AddDurableTopic creates a durable topic whose FETCHes read what is stored in it.
func (fb *fakeBroker) AddDurableTopic(name string, partitions int) {
	fb.set(func(fb *fakeBroker) {
		fb.topics[name] = &fakeTopic{kind: wire.KindDurable, batches: make([][][]byte, partitions), next: make([]int64, partitions)}
	})
}

// group serves the group requests of a cluster fake, for one member at a time, wherever
// they are sent (they are counted by node): JOIN_GROUP gives the member every partition in
// generation 1, a HEARTBEAT is held for its max wait and answered the same, GROUP_COMMIT
// and FETCH_COMMITTED keep the group's offsets, LEAVE_GROUP is answered. It reports false
// for any other op, and without a cluster (the fake then has no groups).
func (fc *fakeConn) group(h wire.Header, body []byte) bool {
	fb := fc.fb
	switch h.Op {
	case wire.OpJoinGroup, wire.OpHeartbeat, wire.OpGroupCommit, wire.OpFetchCommitted, wire.OpLeaveGroup:
	default:
		return false
	}
	if fb.cluster == nil {
		return false
	}
	key := func(group, topic string, part uint32) string { return fmt.Sprintf("%s/%s/%d", group, topic, part) }
	all := func(topic string) []uint32 {
		var ps []uint32
		if t := fb.topics[topic]; t != nil {
			for i := range t.next {
				ps = append(ps, uint32(i))
			}
		}
		return ps
	}
	fb.mu.Lock()
	fb.cluster.count(h.Op, fc.node)
	fb.mu.Unlock()
	switch h.Op {
	case wire.OpJoinGroup:
		var m wire.JoinGroup
		if err := m.Decode(body); err != nil {
			fc.fail(h.Corr, wire.CodeInvalidRequest, err.Error())
			return true
		}
		fb.mu.Lock()
		resp := wire.JoinGroupResponse{Generation: 1, SessionTimeoutMs: 10000, HeartbeatIntervalMs: 100, Partitions: all(m.Topic)}
		fb.mu.Unlock()
		fc.reply(h.Op, h.Corr, resp.AppendTo(nil))
	case wire.OpHeartbeat:
		var m wire.Heartbeat
		if err := m.Decode(body); err != nil {
			fc.fail(h.Corr, wire.CodeInvalidRequest, err.Error())
			return true
		}
		fb.wg.Add(1)
		go func() { // held for its max wait, as the broker holds it
			defer fb.wg.Done()
			wait := time.Duration(m.MaxWaitMs) * time.Millisecond
			deadline := time.Now().Add(wait)
			timer := time.AfterFunc(wait, func() { fb.set(func(*fakeBroker) {}) })
			defer timer.Stop()
			fb.mu.Lock()
			for time.Now().Before(deadline) && !fc.dead && !fb.closed {
				fb.cond.Wait()
			}
			resp := wire.HeartbeatResponse{Generation: 1, HeartbeatIntervalMs: 100, Partitions: all(m.Topic)}
			fb.mu.Unlock()
			fc.reply(h.Op, h.Corr, resp.AppendTo(nil))
		}()
	case wire.OpGroupCommit:
		var m wire.GroupCommit
		if err := m.Decode(body); err != nil {
			fc.fail(h.Corr, wire.CodeInvalidRequest, err.Error())
			return true
		}
		fb.set(func(fb *fakeBroker) { fb.cluster.committed[key(m.Group, m.Topic, m.Partition)] = m.Offset })
		fc.reply(h.Op, h.Corr, nil)
	case wire.OpFetchCommitted:
		var m wire.FetchCommitted
		if err := m.Decode(body); err != nil {
			fc.fail(h.Corr, wire.CodeInvalidRequest, err.Error())
			return true
		}
		resp := wire.OffsetResponse{Offset: -1}
		fb.get(func(fb *fakeBroker) {
			if off, ok := fb.cluster.committed[key(m.Group, m.Topic, m.Partition)]; ok {
				resp.Offset = off
			}
		})
		fc.reply(h.Op, h.Corr, resp.AppendTo(nil))
	case wire.OpLeaveGroup:
		fc.reply(h.Op, h.Corr, nil)
	}
	return true
}
