package broker

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/lightq/lightq/wire"
)

// TestClusterJoinBroker: a fourth broker started with cluster-join becomes a member of a
// running three-broker cluster through ADD_BROKER: it gets the metadata (the topics created
// before it joined), votes in the metadata group, is reached by the others at the address it
// was added with, and serves METADATA; a topic created afterwards may be placed on it.
func TestClusterJoinBroker(t *testing.T) {
	tc := startCluster(t, 3)
	tc.createWithRF(0, "before", 1, 3)
	b4 := tc.join(1)
	waitUntil(t, "broker 4 has the topic created before it joined", func() bool { return (*b4.topics.Load())["before"] != nil })
	for i := range 4 {
		waitUntil(t, fmt.Sprintf("broker %d sees 4 voters in the metadata group", i+1), func() bool {
			return len(tc.brokers[i].cluster.meta.Members().Voters) == 4
		})
	}
	st := tc.membership(3, wire.Membership{})
	if len(st.Brokers) != 4 || st.NodeID != 4 || st.MetaLeader == 0 {
		t.Fatalf("status from broker 4: %+v", st)
	}
	for _, b := range st.Brokers {
		if b.Meta != wire.MetaVoter || b.State != wire.BrokerActive {
			t.Errorf("broker %d: %v, %v in the metadata group", b.NodeID, b.State, b.Meta)
		}
	}
	if b := st.Brokers[3]; b.ClusterAddr != b4.cluster.tr.Addr().String() || b.Addr != b4.Addr() {
		t.Errorf("broker 4's addresses: %+v", b)
	}
	md := tc.metadata(3, "before")
	if len(md.Brokers) != 4 || md.Topics[0].Partitions[0].Leader == 0 {
		t.Fatalf("METADATA from broker 4: %+v", md)
	}
	// A replication factor of 4 needs broker 4: the others reach it at its added address.
	tc.createWithRF(2, "after", 1, 4)
	waitUntil(t, "broker 4 holds a replica of the new topic", func() bool { return tc.replica(3, "after", 0) != nil })
	li := tc.leading("after", 0)
	c := login(t, tc.brokers[li].Addr(), "app", "app-secret")
	c.produce("after", 0, testBatch(t, "to four replicas"))
	c.conn.Close()
	waitUntil(t, "broker 4's replica has the batch", func() bool { return tc.replica(3, "after", 0).part.Load().HighWatermark() > 0 })

	// Broker 4 restarts on another cluster port: its data directory holds the metadata now
	// (cluster-join no longer matters). The others cannot reach it at its old address, nor
	// it tell them (no leader reaches it), until ADD_BROKER gives its new addresses; then its
	// replica catches up with what was produced while it was down.
	tc.mu.Lock()
	tc.brokers[3] = nil
	tc.mu.Unlock()
	if err := b4.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	li = tc.leading("after", 0)
	c = login(t, tc.brokers[li].Addr(), "app", "app-secret")
	c.produce("after", 0, testBatch(t, "while broker 4 is down"))
	c.conn.Close()
	b4 = startWith(t, tc.cfgs[3])
	tc.mu.Lock()
	tc.brokers[3] = b4
	tc.mu.Unlock()
	a := tc.admin(0)
	m := wire.AddBroker{NodeID: 4, Addr: b4.Addr(), ClusterAddr: b4.ClusterAddr()}
	a.expectResponse(wire.OpAddBroker, a.send(wire.OpAddBroker, m.AppendTo(nil)))
	a.conn.Close()
	waitUntil(t, "the others have broker 4's new cluster address", func() bool {
		for i := range 3 {
			if b, _ := tc.brokers[i].cluster.meta.State().Broker(4); b.ClusterAddr != b4.ClusterAddr() {
				return false
			}
		}
		return true
	})
	lead := tc.replica(li, "after", 0).part.Load()
	waitUntil(t, "broker 4's replica caught up after its restart", func() bool {
		rp := tc.replica(3, "after", 0)
		return rp != nil && rp.part.Load().HighWatermark() == lead.HighWatermark()
	})
}

// TestClusterMoveReplicas: a partition's replicas move from {1,2,3} to {2,3,4} while an
// idempotent producer keeps producing to it, with broker 1, the leader, leaving: the new
// replica joins as a learner and is promoted, broker 1 hands over its leadership and is
// removed, and once the move finished broker 1 closes its replica and removes its data.
// Every acknowledged batch is stored exactly once, and the new replica's committed log is
// byte-identical to the others' up to the high watermark.
func TestClusterMoveReplicas(t *testing.T) {
	tc := startCluster(t, 3)
	tc.createWithRF(0, "orders", 1, 3)
	tc.join(0)
	tc.makeLeader(0, "orders", 0)
	p := tc.startProducer("orders", 0)
	p.waitAcked(20)

	a := tc.admin(1)
	m := wire.MoveReplicas{Topic: "orders", Partition: 0, Replicas: []uint32{2, 3, 4}}
	a.expectResponse(wire.OpMoveReplicas, a.send(wire.OpMoveReplicas, m.AppendTo(nil)))
	a.conn.Close()
	// While the move is under way, MEMBERSHIP shows it: the new replicas and the old.
	if st := tc.membership(2, wire.Membership{Topic: "orders"}); len(st.Partitions) != 1 || !slices.Equal(st.Partitions[0].Replicas, []uint32{2, 3, 4}) {
		t.Fatalf("status after MOVE_REPLICAS: %+v", st.Partitions)
	}
	tc.waitMoved(0)
	p.waitAcked(20) // the producer goes on after the move
	acked := p.finish()

	for i := range 4 {
		waitUntil(t, fmt.Sprintf("broker %d applied the end of the move", i+1), func() bool { return len(tc.brokers[i].cluster.meta.State().Moving()) == 0 })
	}
	waitUntil(t, "broker 1 closed its replica", func() bool { return tc.replica(0, "orders", 0) == nil })
	if _, err := os.Stat(partitionDir(tc.cfgs[0].DataDir, "orders", 0)); !os.IsNotExist(err) {
		t.Errorf("broker 1's replica directory is still there: %v", err)
	}
	// Broker 4's replica applies the group's last change (broker 1 removed) on its own
	// schedule: the metadata may have the end of the move first.
	var cp wire.MemberPartition
	waitUntil(t, "broker 4's replica sees the voters 2, 3, 4", func() bool {
		cp = tc.membership(3, wire.Membership{Topic: "orders"}).Partitions[0]
		return slices.Equal(sorted32(cp.Voters), []uint32{2, 3, 4})
	})
	if len(cp.Previous) != 0 || !cp.Held || len(cp.Learners) != 0 {
		t.Fatalf("broker 4's view after the move: %+v", cp)
	}
	if li := tc.leading("orders", 0); li == 0 {
		t.Fatal("broker 1 still leads")
	}

	checkExactlyOnce(t, acked, tc.values("orders", 0))
	// The committed logs of the three replicas are the same bytes.
	var hw int64
	waitUntil(t, "the replicas agree on the high watermark", func() bool {
		hw = tc.replica(1, "orders", 0).part.Load().HighWatermark()
		return tc.replica(2, "orders", 0).part.Load().HighWatermark() == hw && tc.replica(3, "orders", 0).part.Load().HighWatermark() == hw
	})
	want, _ := tc.committedLog(1, "orders", 0)
	for _, i := range []int{2, 3} {
		got, ghw := tc.committedLog(i, "orders", 0)
		if ghw != hw || !bytes.Equal(got, want) {
			t.Fatalf("broker %d's committed log (%d bytes to offset %d) differs from broker 2's (%d bytes to offset %d)", i+1, len(got), ghw, len(want), hw)
		}
	}
	t.Logf("%d batches acknowledged; the three replicas hold the same %d bytes up to offset %d", len(acked), len(want), hw)
}

func sorted32(ids []uint32) []uint32 {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

// TestClusterRemoveBroker: a broker that leads partitions is drained and removed while
// producers write to those partitions: REMOVE_BROKER is refused until the drain's moves
// finished, the leadership moves off the broker, the producers go on, and afterwards the
// cluster has three brokers and a three-member metadata group.
func TestClusterRemoveBroker(t *testing.T) {
	tc := startCluster(t, 3)
	tc.createWithRF(0, "orders", 2, 3)
	tc.join(0)
	tc.makeLeader(2, "orders", 0)
	tc.makeLeader(2, "orders", 1)
	p0, p1 := tc.startProducer("orders", 0), tc.startProducer("orders", 1)
	p0.waitAcked(10)
	p1.waitAcked(10)

	a := tc.admin(0)
	defer a.conn.Close()
	remove := wire.BrokerID{NodeID: 3}
	e := a.expectError(a.send(wire.OpRemoveBroker, remove.AppendTo(nil)), wire.CodeBrokerInUse)
	if !strings.Contains(e.Message, "drain it first") {
		t.Errorf("REMOVE_BROKER of a broker with replicas: %q", e.Message)
	}
	self := tc.admin(2)
	self.expectError(self.send(wire.OpRemoveBroker, remove.AppendTo(nil)), wire.CodeInvalidRequest)
	self.conn.Close()

	// Broker 3 holds both partitions of orders and some of the offsets topic's: all move.
	held := tc.brokers[0].cluster.meta.State().HeldBy(3).Replicas
	var dr wire.DrainBrokerResponse
	if err := dr.Decode(a.expectResponse(wire.OpDrainBroker, a.send(wire.OpDrainBroker, remove.AppendTo(nil)))); err != nil || int(dr.Moves) != held || held < 2 {
		t.Fatalf("DRAIN_BROKER: %+v, %v; broker 3 held %d partitions", dr, err, held)
	}
	if st := tc.membership(0, wire.Membership{}); st.Brokers[2].State != wire.BrokerRemoving {
		t.Fatalf("broker 3 after DRAIN_BROKER: %+v", st.Brokers[2])
	}
	// The moves go to broker 4, the only broker not yet a replica.
	tc.waitMoved(0)
	for i := range 2 {
		waitUntil(t, fmt.Sprintf("broker 3 closed its replica of orders/%d", i), func() bool { return tc.replica(2, "orders", i) == nil })
		if l := tc.leading("orders", i); l == 2 {
			t.Fatalf("broker 3 still leads orders/%d", i)
		}
	}
	a.expectResponse(wire.OpRemoveBroker, a.send(wire.OpRemoveBroker, remove.AppendTo(nil)))
	p0.waitAcked(10)
	p1.waitAcked(10)
	acked0, acked1 := p0.finish(), p1.finish()

	for _, i := range []int{0, 1, 3} {
		waitUntil(t, fmt.Sprintf("broker %d sees 3 brokers and 3 metadata voters", i+1), func() bool {
			st := tc.brokers[i].cluster.meta.State()
			_, has3 := st.Broker(3)
			return len(st.Brokers()) == 3 && !has3 && len(tc.brokers[i].cluster.meta.Members().Voters) == 3
		})
	}
	a.expectError(a.send(wire.OpRemoveBroker, remove.AppendTo(nil)), wire.CodeUnknownBroker)
	stopped := tc.brokers[2]
	tc.mu.Lock()
	tc.brokers[2] = nil
	tc.mu.Unlock()
	if err := stopped.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The cluster goes on without it.
	checkExactlyOnce(t, acked0, tc.values("orders", 0))
	checkExactlyOnce(t, acked1, tc.values("orders", 1))
	li := tc.leading("orders", 0)
	c := login(t, tc.brokers[li].Addr(), "app", "app-secret")
	c.produce("orders", 0, testBatch(t, "after the removal"))
	c.conn.Close()
}

// TestClusterRemoveDeadBroker: a broker that led a partition stops for good; its partition
// elects another leader, and the stopped broker is drained and removed without it: the new
// replica catches up from the new leader, the dead replica is removed from the group, and the
// metadata group drops it, all with a quorum of the others, while a producer goes on.
func TestClusterRemoveDeadBroker(t *testing.T) {
	tc := startCluster(t, 3)
	tc.createWithRF(0, "orders", 1, 3)
	tc.join(0)
	tc.makeLeader(2, "orders", 0)
	p := tc.startProducer("orders", 0)
	p.waitAcked(10)
	dead := tc.brokers[2]
	tc.mu.Lock()
	tc.brokers[2] = nil
	tc.mu.Unlock()
	if err := dead.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	p.waitAcked(10) // a new leader took over

	a := tc.admin(1)
	defer a.conn.Close()
	node := wire.BrokerID{NodeID: 3}
	held := tc.brokers[1].cluster.meta.State().HeldBy(3).Replicas // orders/0 and offsets partitions
	var dr wire.DrainBrokerResponse
	if err := dr.Decode(a.expectResponse(wire.OpDrainBroker, a.send(wire.OpDrainBroker, node.AppendTo(nil)))); err != nil || int(dr.Moves) != held {
		t.Fatalf("DRAIN_BROKER of the stopped broker: %+v, %v; it held %d partitions", dr, err, held)
	}
	tc.waitMoved(1) // as the broker asked to remove it sees it
	a.expectResponse(wire.OpRemoveBroker, a.send(wire.OpRemoveBroker, node.AppendTo(nil)))
	p.waitAcked(10)
	acked := p.finish()
	for _, i := range []int{0, 1, 3} {
		waitUntil(t, fmt.Sprintf("broker %d sees 3 brokers and 3 metadata voters", i+1), func() bool {
			return len(tc.brokers[i].cluster.meta.State().Brokers()) == 3 && len(tc.brokers[i].cluster.meta.Members().Voters) == 3
		})
	}
	var st wire.MemberPartition
	waitUntil(t, "broker 4's replica sees the voters 1, 2, 4", func() bool {
		st = tc.membership(3, wire.Membership{Topic: "orders"}).Partitions[0]
		return slices.Equal(sorted32(st.Voters), []uint32{1, 2, 4})
	})
	if !slices.Equal(sorted32(st.Replicas), []uint32{1, 2, 4}) {
		t.Fatalf("after removing broker 3: %+v", st)
	}
	checkExactlyOnce(t, acked, tc.values("orders", 0))
}

// TestClusterMembershipRefusals: the membership requests refuse what cannot be done, with the
// code and a message that says why, and change nothing.
func TestClusterMembershipRefusals(t *testing.T) {
	tc := startCluster(t, 3)
	tc.createWithRF(0, "orders", 2, 3)
	a := tc.admin(1)
	defer a.conn.Close()
	refuse := func(op wire.Op, body []byte, code wire.Code, says string) {
		t.Helper()
		e := a.expectError(a.send(op, body), code)
		if !strings.Contains(e.Message, says) {
			t.Errorf("%v: %q does not say %q", op, e.Message, says)
		}
	}
	move := func(topic string, partition uint32, replicas ...uint32) []byte {
		return (&wire.MoveReplicas{Topic: topic, Partition: partition, Replicas: replicas}).AppendTo(nil)
	}
	refuse(wire.OpMoveReplicas, move("orders", 0, 1, 2, 9), wire.CodeUnknownBroker, "no broker 9")
	refuse(wire.OpMoveReplicas, move("nope", 0, 1, 2, 3), wire.CodeUnknownTopic, `no topic "nope"`)
	refuse(wire.OpMoveReplicas, move("orders", 2, 1, 2, 3), wire.CodeUnknownPartition, "partitions 0-1")
	refuse(wire.OpMoveReplicas, move("orders", 0, 1, 2, 2), wire.CodeInvalidRequest, "listed twice")
	refuse(wire.OpMoveReplicas, move("orders", 0), wire.CodeInvalidRequest, "0 replicas")
	refuse(wire.OpRemoveBroker, (&wire.BrokerID{NodeID: 3}).AppendTo(nil), wire.CodeBrokerInUse, "drain it first")
	refuse(wire.OpRemoveBroker, (&wire.BrokerID{NodeID: 7}).AppendTo(nil), wire.CodeUnknownBroker, "no broker 7")
	refuse(wire.OpDrainBroker, (&wire.BrokerID{NodeID: 7}).AppendTo(nil), wire.CodeUnknownBroker, "no broker 7")
	// Three brokers, three replicas each: a drain has nowhere to go, and changes nothing.
	refuse(wire.OpDrainBroker, (&wire.BrokerID{NodeID: 3}).AppendTo(nil), wire.CodeInvalidRequest, "add a broker first")
	if b, _ := tc.brokers[1].cluster.meta.State().Broker(3); b.State.String() != "active" {
		t.Fatalf("broker 3 after a refused drain: %v", b.State)
	}
	add := wire.AddBroker{NodeID: 4, Addr: "not-an-address", ClusterAddr: "127.0.0.1:1"}
	refuse(wire.OpAddBroker, add.AppendTo(nil), wire.CodeInvalidRequest, "not host:port")
	refuse(wire.OpMembership, (&wire.Membership{Topic: "nope"}).AppendTo(nil), wire.CodeUnknownTopic, "nope")
	if n := len(tc.brokers[0].cluster.meta.State().Moving()); n != 0 {
		t.Fatalf("%d partitions moving after refusals", n)
	}
	// A move of the replicas to themselves is no move.
	cur := tc.membership(0, wire.Membership{Topic: "orders"}).Partitions[0].Replicas
	a.expectResponse(wire.OpMoveReplicas, a.send(wire.OpMoveReplicas, move("orders", 0, cur...)))
	if n := len(tc.brokers[1].cluster.meta.State().Moving()); n != 0 {
		t.Fatalf("a move to the same replicas left %d partitions moving", n)
	}
}
