package partition

import (
	"fmt"
	"testing"
)

// TestStatusLeaderChanges: every replica counts the terms in which it learned of a leader:
// one once the first leader is known, at least one more after the leader stops and another
// is elected (never more than the terms that passed), and a restarted replica counts again
// from its Open.
func TestStatusLeaderChanges(t *testing.T) {
	c := newCluster(t, 7, 3, nil)
	l := c.leader()
	first := c.part(l).Status().Term
	before := map[uint64]uint64{}
	for _, id := range c.ids {
		waitFor(t, fmt.Sprintf("node %d to know the leader", id), func() bool { return c.part(id).Status().Leader == l })
		st := c.part(id).Status()
		if st.LeaderChanges < 1 || st.LeaderChanges > st.Term {
			t.Fatalf("node %d: %d leader changes in term %d", id, st.LeaderChanges, st.Term)
		}
		before[id] = st.LeaderChanges
	}
	if err := c.stop(l); err != nil {
		t.Fatal(err)
	}
	nl := c.leader()
	second := c.part(nl).Status().Term
	for _, id := range c.live() {
		waitFor(t, fmt.Sprintf("node %d to know the new leader", id), func() bool { return c.part(id).Status().Leader == nl })
		st := c.part(id).Status()
		if got := st.LeaderChanges - before[id]; st.LeaderChanges < before[id]+1 || got > second-first {
			t.Fatalf("node %d: %d leader changes, %d before the leader stopped, terms %d to %d", id, st.LeaderChanges, before[id], first, second)
		}
	}
	c.start(l)
	waitFor(t, "the restarted node to know the leader", func() bool { return c.part(l).Status().Leader != 0 })
	// One, unless elections went on meanwhile (a loaded machine): never more than the terms
	// since the one it rejoined in.
	if st := c.part(l).Status(); st.LeaderChanges < 1 || st.LeaderChanges > st.Term-second+1 {
		t.Fatalf("restarted node %d: %d leader changes since its Open (leader %d, term %d; %d when it stopped)", l, st.LeaderChanges, st.Leader, st.Term, second)
	}
}
