package replica

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/cluster/transport"
)

var secret = []byte("replica tests' cluster secret")

// member is one broker of an in-process test cluster: a transport, a router, one replica of
// group 1 over raft's MemoryStorage, and what it applied.
type member struct {
	id      uint64
	tr      *transport.Transport
	router  *Router
	storage *raft.MemoryStorage
	rep     *Replica

	mu      sync.Mutex
	applied [][]byte
}

func (m *member) apply(e raftpb.Entry) {
	m.mu.Lock()
	m.applied = append(m.applied, bytes.Clone(e.Data))
	m.mu.Unlock()
}

func (m *member) appliedData() [][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([][]byte(nil), m.applied...)
}

type testCluster struct {
	t       *testing.T
	faults  *transport.Faults
	members map[uint64]*member
}

const testTick = 20 * time.Millisecond

func newCluster(t *testing.T, seed uint64, ids ...uint64) *testCluster {
	t.Helper()
	c := &testCluster{t: t, faults: transport.NewFaults(seed), members: map[uint64]*member{}}
	t.Cleanup(c.faults.Stop)
	for _, id := range ids {
		m := &member{id: id, router: NewRouter(), storage: raft.NewMemoryStorage()}
		tr, err := transport.New(transport.Config{NodeID: id, Listen: "127.0.0.1:0", Secret: secret,
			Handler: m.router.Handle, Unreachable: m.router.Unreachable, Faults: c.faults,
			RedialMin: time.Millisecond, RedialMax: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		m.tr = tr
		c.members[id] = m
	}
	for _, a := range c.members {
		for id, b := range c.members {
			a.tr.SetPeer(id, b.tr.Addr().String())
		}
	}
	for _, m := range c.members {
		rep, err := Start(Config{ID: m.id, Group: 1, Peers: ids, Storage: m.storage, Sender: m.tr, Apply: m.apply, Tick: testTick})
		if err != nil {
			t.Fatal(err)
		}
		m.rep = rep
		m.router.Add(1, rep)
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			m.rep.Stop()
			_ = m.tr.Close()
		}
	})
	return c
}

// waitUntil polls cond every tick until it holds or a deadline generous for a loaded machine
// passes.
func (c *testCluster) waitUntil(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// leader waits for one live member that leads, among those in among (all when empty).
func (c *testCluster) leader(among ...uint64) *member {
	c.t.Helper()
	if len(among) == 0 {
		for id := range c.members {
			among = append(among, id)
		}
	}
	var l *member
	c.waitUntil("a leader", func() bool {
		for _, id := range among {
			if m := c.members[id]; m.rep.Status().IsLeader {
				l = m
				return true
			}
		}
		return false
	})
	return l
}

func await(t *testing.T, p *Proposal) error {
	t.Helper()
	select {
	case <-p.Done():
		return p.Err
	case <-time.After(30 * time.Second):
		t.Fatalf("proposal %q never finished", p.Data)
		return nil
	}
}

// proposeAll proposes n entries "prefix-i" on the current leader, retrying at the new leader
// on NotLeader, and waits until each is stored.
func (c *testCluster) proposeAll(prefix string, n int, among ...uint64) {
	c.t.Helper()
	for i := 0; i < n; {
		l := c.leader(among...)
		p, err := l.rep.Propose(fmt.Appendf(nil, "%s-%d", prefix, i))
		var nl *NotLeaderError
		if errors.As(err, &nl) || errors.Is(err, ErrBusy) {
			continue
		}
		if err != nil {
			c.t.Fatal(err)
		}
		if err := await(c.t, p); err != nil {
			if errors.As(err, &nl) || errors.Is(err, ErrReplaced) {
				continue // not stored: propose it again
			}
			c.t.Fatal(err)
		}
		i++
	}
}

// converged waits until the members named applied the same entries, and checks their logs
// are identical entry for entry.
func (c *testCluster) converged(ids ...uint64) [][]byte {
	c.t.Helper()
	var want [][]byte
	c.waitUntil("every member to apply the same entries", func() bool {
		want = c.members[ids[0]].appliedData()
		for _, id := range ids[1:] {
			got := c.members[id].appliedData()
			if len(got) != len(want) {
				return false
			}
		}
		return true
	})
	for _, id := range ids[1:] {
		got := c.members[id].appliedData()
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				c.t.Fatalf("member %d applied %q at %d, member %d %q", id, got[i], i, ids[0], want[i])
			}
		}
	}
	first, _ := c.members[ids[0]].storage.FirstIndex()
	last, _ := c.members[ids[0]].storage.LastIndex()
	ref, err := c.members[ids[0]].storage.Entries(first, last+1, 1<<62)
	if err != nil {
		c.t.Fatal(err)
	}
	for _, id := range ids[1:] {
		got, err := c.members[id].storage.Entries(first, last+1, 1<<62)
		if err != nil {
			c.t.Fatalf("member %d: %v", id, err)
		}
		for i := range ref {
			if got[i].Term != ref[i].Term || got[i].Index != ref[i].Index || !bytes.Equal(got[i].Data, ref[i].Data) {
				c.t.Fatalf("member %d's log differs from member %d's at index %d", id, ids[0], ref[i].Index)
			}
		}
	}
	return want
}

func exactlyOnce(t *testing.T, applied [][]byte, prefix string, n int) {
	t.Helper()
	seen := map[string]int{}
	for _, d := range applied {
		seen[string(d)]++
	}
	for i := range n {
		if k := fmt.Sprintf("%s-%d", prefix, i); seen[k] != 1 {
			t.Fatalf("%s stored %d times, want once", k, seen[k])
		}
	}
}

func TestReplicateAndConverge(t *testing.T) {
	c := newCluster(t, 1, 1, 2, 3)
	c.proposeAll("a", 300)
	exactlyOnce(t, c.converged(1, 2, 3), "a", 300)
}

func TestFollowerSaysWhoLeads(t *testing.T) {
	c := newCluster(t, 2, 1, 2, 3)
	l := c.leader()
	c.proposeAll("x", 1) // every member has heard from the leader once this commits
	c.converged(1, 2, 3)
	for id, m := range c.members {
		if id == l.id {
			continue
		}
		_, err := m.rep.Propose([]byte("nope"))
		var nl *NotLeaderError
		if !errors.As(err, &nl) || nl.Leader != l.id {
			t.Fatalf("follower %d: %v, want NotLeader naming %d", id, err, l.id)
		}
	}
}

// TestLeaderStopsFailover: the leader's process goes away (replica and transport); the other
// two elect a leader that takes proposals, within a bound the test reports.
func TestLeaderStopsFailover(t *testing.T) {
	c := newCluster(t, 3, 1, 2, 3)
	c.proposeAll("before", 50)
	old := c.leader()
	start := time.Now()
	old.rep.Stop()
	_ = old.tr.Close()
	var rest []uint64
	for id := range c.members {
		if id != old.id {
			rest = append(rest, id)
		}
	}
	c.proposeAll("after", 1, rest...)
	took := time.Since(start)
	t.Logf("a new leader stored a proposal %v after the old one stopped (election timeout %v-%v)", took, 10*testTick, 20*testTick)
	c.proposeAll("after2", 50, rest...)
	applied := c.converged(rest...)
	exactlyOnce(t, applied, "before", 50)
	exactlyOnce(t, applied, "after2", 50)
}

// TestPartitionedLeaderCannotCommit: a leader cut off from the others cannot store anything;
// the majority elects a new leader and goes on; after the heal, the old leader's proposal is
// reported replaced and every log is the same.
func TestPartitionedLeaderCannotCommit(t *testing.T) {
	c := newCluster(t, 4, 1, 2, 3)
	c.proposeAll("before", 20)
	old := c.leader()
	c.faults.Isolate(old.id)
	stale, err := old.rep.Propose([]byte("from the isolated leader"))
	if err != nil {
		t.Fatalf("the isolated leader refused at once (%v); it should not know yet", err)
	}
	var rest []uint64
	for id := range c.members {
		if id != old.id {
			rest = append(rest, id)
		}
	}
	c.proposeAll("majority", 30, rest...)
	// check-quorum: the isolated leader steps down within an election timeout.
	c.waitUntil("the isolated leader to step down", func() bool { return !old.rep.Status().IsLeader })
	select {
	case <-stale.Done():
		if stale.Err == nil {
			t.Fatal("a proposal of an isolated leader was stored")
		}
	default:
	}
	c.faults.Heal()
	if err := await(t, stale); !errors.Is(err, ErrReplaced) {
		t.Fatalf("the isolated leader's proposal ended with %v, want ErrReplaced", err)
	}
	applied := c.converged(1, 2, 3)
	exactlyOnce(t, applied, "majority", 30)
	for _, d := range applied {
		if string(d) == "from the isolated leader" {
			t.Fatal("the isolated leader's entry was applied")
		}
	}
}

// TestFaultyNetwork: drops, duplicates and delays (so reordering) on every link, from a seed;
// every stored proposal is applied exactly once, in the same order everywhere.
func TestFaultyNetwork(t *testing.T) {
	c := newCluster(t, 5, 1, 2, 3)
	c.faults.SetDrop(0.05)
	c.faults.SetDuplicate(0.05)
	c.faults.SetDelay(0.1, 3*testTick)
	c.proposeAll("f", 200)
	c.faults.Heal()
	applied := c.converged(1, 2, 3)
	exactlyOnce(t, applied, "f", 200)
	if c.faults.Dropped == 0 || c.faults.Duplicated == 0 || c.faults.Delayed == 0 {
		t.Fatalf("faults did not happen: %d dropped, %d duplicated, %d delayed", c.faults.Dropped, c.faults.Duplicated, c.faults.Delayed)
	}
}

func TestStopFailsWaiting(t *testing.T) {
	c := newCluster(t, 6, 1, 2, 3)
	l := c.leader()
	c.faults.Isolate(l.id) // nothing can commit
	p, err := l.rep.Propose([]byte("pending"))
	if err != nil {
		t.Fatal(err)
	}
	l.rep.Stop()
	if err := await(t, p); !errors.Is(err, ErrStopped) {
		t.Fatalf("waiting proposal ended with %v, want ErrStopped", err)
	}
	if _, err := l.rep.Propose([]byte("late")); !errors.Is(err, ErrStopped) {
		t.Fatalf("Propose after Stop: %v", err)
	}
}
