package broker

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	cmeta "github.com/lightq/lightq/cluster/meta"
)

// groupMember reports whether broker i's replica of the partition leads it and counts node
// among the group's voters (voter) or learners (present, not voter).
func (tc *testCluster) groupMember(i int, topic string, partition int, node uint64) (leads, present, voter bool) {
	rp := tc.replica(i, topic, partition)
	if rp == nil || !rp.leads() {
		return false, false, false
	}
	prs := rp.part.Load().Replica().Progress()
	if prs == nil {
		return false, false, false
	}
	for _, pr := range prs {
		if pr.ID == node {
			return true, true, pr.Voter
		}
	}
	return true, false, false
}

// TestClusterHealsRemovedReplica: a partition's leader removes a replica to bring it up again
// (the first of a reset's two changes: cluster/replica resetMember) and loses its leadership
// before it adds the replica back, so the group lacks a replica the metadata lists. Whichever
// broker leads next (the one the leadership went to, or the old leader restarted, the other
// replica waiting for it: the group's two voters are its quorum) adds it back as a learner
// and then a voter once caught up. The replica ends with the same committed bytes as the
// others, and every acknowledged batch is there once. Without healing the replica stays out
// of the group for good.
func TestClusterHealsRemovedReplica(t *testing.T) {
	for _, change := range []string{"leadership transferred", "leader restarted"} {
		t.Run(change, func(t *testing.T) {
			tc := startCluster(t, 3)
			tc.createWithRF(0, "orders", 1, 3)
			p := tc.startProducer("orders", 0)
			p.waitAcked(20)

			li := tc.leading("orders", 0)
			victim, other := (li+1)%3, (li+2)%3
			node := uint64(victim + 1)
			rep := tc.replica(li, "orders", 0).part.Load().Replica()
			remove := raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeRemoveNode, NodeID: node}}}
			if err := rep.ProposeConfChange(remove); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, fmt.Sprintf("broker %d's group without node %d", li+1, node), func() bool {
				leads, present, _ := tc.groupMember(li, "orders", 0, node)
				return leads && !present
			})
			// At once, the leadership changes.
			switch change {
			case "leadership transferred":
				tc.makeLeader(other, "orders", 0) // a transfer, asked again until it happens
			case "leader restarted":
				tc.mu.Lock()
				s := tc.brokers[li]
				tc.brokers[li] = nil
				tc.mu.Unlock()
				if err := s.Shutdown(t.Context()); err != nil {
					t.Fatal(err)
				}
				s = startWith(t, tc.cfgs[li])
				tc.mu.Lock()
				tc.brokers[li] = s
				tc.mu.Unlock()
				tc.wire()
			}

			var healer int
			waitUntil(t, fmt.Sprintf("node %d a voter of the group again", node), func() bool {
				for i := range tc.brokers {
					if leads, _, voter := tc.groupMember(i, "orders", 0, node); leads && voter {
						healer = i
						return true
					}
				}
				return false
			})
			t.Logf("broker %d leads the group with node %d a voter again (it led before: broker %d)", healer+1, node, li+1)
			p.waitAcked(20) // the producer goes on
			acked := p.finish()

			checkExactlyOnce(t, acked, tc.values("orders", 0))
			var hw int64
			waitUntil(t, "the replicas agree on the high watermark", func() bool {
				hw = tc.replica(healer, "orders", 0).part.Load().HighWatermark()
				for i := range tc.brokers {
					if tc.replica(i, "orders", 0).part.Load().HighWatermark() != hw {
						return false
					}
				}
				return true
			})
			want, _ := tc.committedLog(healer, "orders", 0)
			for i := range tc.brokers {
				if got, ghw := tc.committedLog(i, "orders", 0); ghw != hw || !bytes.Equal(got, want) {
					t.Fatalf("broker %d's committed log (%d bytes to offset %d) differs from the leader's, broker %d (%d bytes to offset %d)",
						i+1, len(got), ghw, healer+1, len(want), hw)
				}
			}
			var voters []uint64
			for _, pr := range tc.replica(healer, "orders", 0).part.Load().Replica().Progress() {
				if pr.Voter {
					voters = append(voters, pr.ID)
				}
			}
			slices.Sort(voters)
			if !slices.Equal(voters, []uint64{1, 2, 3}) {
				t.Fatalf("voters %v", voters)
			}
			t.Logf("%d batches acknowledged; the three replicas hold the same %d bytes up to offset %d", len(acked), len(want), hw)
		})
	}
}

// metaLeader is the broker whose metadata replica leads, or -1.
func (tc *testCluster) metaLeader() int {
	for i, s := range tc.brokers {
		if s != nil && s.cluster.meta.Replica().Status().IsLeader {
			return i
		}
	}
	return -1
}

// metaVoter reports whether broker i leads the metadata group and counts node among its
// voters (voter) or learners (present, not voter).
func (tc *testCluster) metaVoter(i int, node uint64) (leads, present, voter bool) {
	rep := tc.brokers[i].cluster.meta.Replica()
	if !rep.Status().IsLeader {
		return false, false, false
	}
	for _, pr := range rep.Progress() {
		if pr.ID == node {
			return true, true, pr.Voter
		}
	}
	return true, false, false
}

// TestClusterHealsRemovedMetadataMember: the metadata group's leader removes a member to
// bring it up again (the first of a reset's two changes, cluster/replica resetMember, which
// runs in the metadata group's replicas as in any) and loses its leadership before it adds
// the member back: the broker stays listed, active, in the metadata, but is out of the group
// that carries it, and would learn of no change again (before the metadata group was healed,
// cluster/replica addBack left it to an operator). Whichever broker leads next adds it back as a learner,
// then a voter once caught up, and the broker receives the metadata again: a topic created
// afterwards gets to it.
func TestClusterHealsRemovedMetadataMember(t *testing.T) {
	tc := startCluster(t, 3)
	var li int
	waitUntil(t, "a metadata leader", func() bool { li = tc.metaLeader(); return li >= 0 })
	victim, other := (li+1)%3, (li+2)%3
	node := uint64(victim + 1)
	remove := raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeRemoveNode, NodeID: node}}}
	if err := tc.brokers[li].cluster.meta.Replica().ProposeConfChange(remove); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, fmt.Sprintf("broker %d's metadata group without node %d", li+1, node), func() bool {
		leads, present, _ := tc.metaVoter(li, node)
		return leads && !present
	})
	// At once, the leadership goes to the other voter (asked again until it does).
	waitUntil(t, fmt.Sprintf("broker %d leads the metadata group", other+1), func() bool {
		if tc.brokers[other].cluster.meta.Replica().Status().IsLeader {
			return true
		}
		if l := tc.metaLeader(); l >= 0 {
			tc.brokers[l].cluster.meta.Replica().TransferLeadership(uint64(other + 1))
		}
		return false
	})
	var healer int
	waitUntil(t, fmt.Sprintf("node %d a voter of the metadata group again", node), func() bool {
		for i := range tc.brokers {
			if leads, _, voter := tc.metaVoter(i, node); leads && voter {
				healer = i
				return true
			}
		}
		return false
	})
	t.Logf("broker %d leads the metadata group with node %d a voter again (broker %d removed it)", healer+1, node, li+1)
	if b, _ := tc.brokers[healer].cluster.meta.State().Broker(node); b.State != cmeta.BrokerActive {
		t.Fatalf("broker %d is %v in the metadata after the heal", node, b.State)
	}
	tc.createWithRF(healer, "after", 1, 3) // waits until every broker, the healed one too, has it
}

// TestClusterRemoveBrokerNotHealedBack: REMOVE_BROKER marks the broker removing before it
// takes it out of the metadata group, so a removal interrupted between its steps (out of the
// group, still listed) is not undone by the metadata group's heal, while an active broker
// the group lacks meanwhile is healed back (which shows that the heal ran).
func TestClusterRemoveBrokerNotHealedBack(t *testing.T) {
	tc := startCluster(t, 3)
	var li int
	waitUntil(t, "a metadata leader", func() bool { li = tc.metaLeader(); return li >= 0 })
	victim, other := (li+1)%3, (li+2)%3
	node := uint64(victim + 1)
	n := tc.brokers[li].cluster
	// removeBroker's first two steps, not its last (RemoveBroker): as if the broker that
	// took REMOVE_BROKER stopped there.
	if err := n.change(&cmeta.DrainBroker{ID: node}); err != nil {
		t.Fatal(err)
	}
	if err := n.meta.RemoveMember(t.Context(), node); err != nil {
		t.Fatal(err)
	}
	// And an active broker taken out as a reset does.
	remove := raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeRemoveNode, NodeID: uint64(other + 1)}}}
	waitUntil(t, fmt.Sprintf("node %d out of the metadata group", other+1), func() bool {
		if _, present, _ := tc.metaVoter(li, uint64(other+1)); !present {
			return true
		}
		_ = n.meta.Replica().ProposeConfChange(remove) // again while a change is pending
		return false
	})
	waitUntil(t, fmt.Sprintf("node %d healed back", other+1), func() bool {
		_, _, voter := tc.metaVoter(li, uint64(other+1))
		return voter
	})
	if _, present, _ := tc.metaVoter(li, node); present {
		t.Fatalf("node %d, being removed, was added back to the metadata group", node)
	}
	if b, ok := n.meta.State().Broker(node); !ok || b.State != cmeta.BrokerRemoving {
		t.Fatalf("broker %d: %+v %v, want listed, removing", node, b, ok)
	}
}
