package replica

import (
	"errors"
	"fmt"
	"testing"
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
