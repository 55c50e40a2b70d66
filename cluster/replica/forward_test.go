package replica

import (
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/cluster/raftlog"
)

// TestForwardProposals: with Config.ForwardProposals every member takes proposals; a
// follower's reach the leader, each is applied once everywhere, and the Proposal ends as soon
// as raft took it (no index: the caller finds its entries when they are applied).
func TestForwardProposals(t *testing.T) {
	forEachStorage(t, func(t *testing.T, kind storageKind) {
		c := newClusterWith(t, kind, 7, func(cfg *Config) { cfg.ForwardProposals = true }, 1, 2, 3)
		l := c.leader()
		c.proposeAll("warm", 1) // with forwarding this returns before the entry is stored
		c.appliedAll(1)         // every follower has heard from the leader
		const n = 20
		for id, m := range c.members {
			for i := range n {
				p, err := m.rep.Propose(kind.propose(fmt.Sprintf("from-%d-%d", id, i)))
				if err != nil {
					t.Fatalf("member %d (leader %d): %v", id, l.id, err)
				}
				if err := await(t, p); err != nil || p.Index != 0 || p.Term != 0 {
					t.Fatalf("member %d: proposal ended with %v at index %d term %d, want nil with no index", id, err, p.Index, p.Term)
				}
			}
		}
		c.appliedAll(1 + 3*n) // proposals end before they are stored: wait for all of them
		applied := c.converged(1, 2, 3)
		for id := range c.members {
			exactlyOnce(t, applied, fmt.Sprintf("from-%d", id), n)
		}
	})
}

// TestForwardWithoutLeader: with forwarding, a member that knows no leader (every member cut
// off from the others, so each is a pre-candidate) refuses at once: raft would drop it.
func TestForwardWithoutLeader(t *testing.T) {
	c := newClusterWith(t, storageKinds[0], 8, func(cfg *Config) { cfg.ForwardProposals = true }, 1, 2, 3)
	c.proposeAll("warm", 1)
	c.appliedAll(1)
	c.faults.Partition([]uint64{1}, []uint64{2}, []uint64{3})
	for id, m := range c.members {
		c.waitUntil(fmt.Sprintf("member %d to know no leader", id), func() bool { st := m.rep.Status(); return st.Leader == 0 && !st.IsLeader })
		_, err := m.rep.Propose([]byte("nobody leads"))
		var nl *NotLeaderError
		if !errors.As(err, &nl) || nl.Leader != 0 {
			t.Fatalf("member %d: %v, want NotLeader with no leader", id, err)
		}
	}
}

// appliedAll waits until every member applied n entries.
func (c *testCluster) appliedAll(n int) {
	c.t.Helper()
	for id, m := range c.members {
		c.waitUntil(fmt.Sprintf("member %d to apply %d entries", id, n), func() bool { return len(m.appliedData()) == n })
	}
}

// TestJoinByConfChange: a fourth member starts empty with Join (no bootstrap), the leader
// adds it with ProposeConfChange, and it receives the whole log and takes part: with one of
// the first three stopped, proposals commit on three of four, and those three converge.
func TestJoinByConfChange(t *testing.T) {
	forEachStorage(t, func(t *testing.T, kind storageKind) {
		c := newClusterWith(t, kind, 9, func(cfg *Config) {
			cfg.Peers = []uint64{1, 2, 3}
			cfg.Join = cfg.ID == 4
		}, 1, 2, 3, 4)
		c.proposeAll("before", 10, 1, 2, 3)
		if st := c.members[4].rep.Status(); st.Commit != 0 || len(c.members[4].appliedData()) != 0 {
			t.Fatalf("the joining member has commit %d before it was added", st.Commit)
		}
		l := c.leader(1, 2, 3)
		cc := raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeAddNode, NodeID: 4}}}
		if err := l.rep.ProposeConfChange(cc); err != nil {
			t.Fatal(err)
		}
		c.waitUntil("member 4 to apply the log", func() bool { return len(c.members[4].appliedData()) == 10 })
		var stopped uint64 = 1
		if l.id == stopped {
			stopped = 2
		}
		c.members[stopped].rep.Stop()
		var rest []uint64
		for _, id := range []uint64{1, 2, 3, 4} {
			if id != stopped {
				rest = append(rest, id)
			}
		}
		c.proposeAll("after", 10, rest...)
		applied := c.converged(rest...)
		exactlyOnce(t, applied, "before", 10)
		exactlyOnce(t, applied, "after", 10)
		if s, ok := c.members[4].storage.(*raftlog.Storage); ok {
			if cs := s.State().ConfState; len(cs.Voters) != 4 {
				t.Fatalf("member 4's membership: %+v", cs)
			}
		}
	})
}

// TestProposeConfChangeNotLeader: without forwarding a follower refuses a membership change.
func TestProposeConfChangeNotLeader(t *testing.T) {
	c := newCluster(t, storageKinds[0], 10, 1, 2, 3)
	l := c.leader()
	c.proposeAll("x", 1)
	c.converged(1, 2, 3)
	for id, m := range c.members {
		if id == l.id {
			continue
		}
		var nl *NotLeaderError
		if err := m.rep.ProposeConfChange(raftpb.ConfChangeV2{}); !errors.As(err, &nl) || nl.Leader != l.id {
			t.Fatalf("follower %d: %v", id, err)
		}
	}
	l.rep.Stop()
	if err := l.rep.ProposeConfChange(raftpb.ConfChangeV2{}); !errors.Is(err, ErrStopped) {
		t.Fatalf("after Stop: %v", err)
	}
}
