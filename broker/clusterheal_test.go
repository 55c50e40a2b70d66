package broker

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
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
