package meta

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/lightq/lightq/cluster/replica"
	"github.com/lightq/lightq/cluster/transport"
)

// An in-process cluster for the Store's tests: each member a transport on 127.0.0.1:0 (all
// sharing one Faults), a router, and a Store in its own directory, which a test may close and
// open again (the transport stays, as a restarted broker's address would).

var secret = []byte("meta tests' cluster secret, 32 B")

const testTick = 20 * time.Millisecond

type member struct {
	id     uint64
	dir    string
	tr     *transport.Transport
	router *replica.Router
	st     *Store // nil while stopped
}

type testCluster struct {
	t       *testing.T
	faults  *transport.Faults
	members map[uint64]*member
	ids     []uint64
	config  func(*Config)
	join    map[uint64]bool // members started with Join (added after the group began)
}

func newTestCluster(t *testing.T, seed uint64, n int, config func(*Config)) *testCluster {
	t.Helper()
	c := &testCluster{t: t, faults: transport.NewFaults(seed), members: map[uint64]*member{}, config: config, join: map[uint64]bool{}}
	t.Cleanup(c.faults.Stop)
	for i := range n {
		c.newMember(uint64(i + 1))
		c.ids = append(c.ids, uint64(i+1))
	}
	for _, id := range c.ids {
		c.start(id)
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			if m.st != nil {
				if err := m.st.Close(); err != nil {
					t.Errorf("member %d: close: %v", m.id, err)
				}
			}
			_ = m.tr.Close()
		}
	})
	return c
}

// newMember makes member id's transport and router, and introduces it to every member.
func (c *testCluster) newMember(id uint64) {
	c.t.Helper()
	m := &member{id: id, dir: filepath.Join(c.t.TempDir(), fmt.Sprint(id)), router: replica.NewRouter()}
	tr, err := transport.New(transport.Config{NodeID: id, Listen: "127.0.0.1:0", Secret: secret,
		Handler: m.router.Handle, Unreachable: m.router.Unreachable, Faults: c.faults,
		RedialMin: time.Millisecond, RedialMax: 50 * time.Millisecond})
	if err != nil {
		c.t.Fatal(err)
	}
	m.tr = tr
	c.members[id] = m
	for oid, o := range c.members {
		o.tr.SetPeer(id, tr.Addr().String())
		tr.SetPeer(oid, o.tr.Addr().String())
	}
}

// addMember starts a new member, empty, with Join: it is no voter until AddMember.
func (c *testCluster) addMember(id uint64) {
	c.t.Helper()
	c.newMember(id)
	c.join[id] = true
	c.ids = append(c.ids, id)
	c.start(id)
}

// start opens member id's store (new, or from what it left) and routes to it.
func (c *testCluster) start(id uint64) {
	c.t.Helper()
	m := c.members[id]
	cfg := Config{Dir: m.dir, NodeID: id, Peers: c.ids, Join: c.join[id], Sender: m.tr, Tick: testTick,
		Logf: func(f string, args ...any) { c.t.Logf("member %d: "+f, append([]any{id}, args...)...) }}
	if c.config != nil {
		c.config(&cfg)
	}
	st, err := Open(cfg)
	if err != nil {
		c.t.Fatalf("member %d: %v", id, err)
	}
	m.st = st
	m.router.Add(Group, st.Replica())
}

// stop closes member id's store, as a broker that stops.
func (c *testCluster) stop(id uint64) {
	c.t.Helper()
	m := c.members[id]
	m.router.Remove(Group)
	if err := m.st.Close(); err != nil {
		c.t.Fatalf("member %d: close: %v", id, err)
	}
	m.st = nil
}

func (c *testCluster) waitUntil(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// leader waits for a running member that leads, among ids (all running ones when empty).
func (c *testCluster) leader(among ...uint64) *member {
	c.t.Helper()
	if len(among) == 0 {
		among = c.ids
	}
	var l *member
	c.waitUntil("a leader", func() bool {
		for _, id := range among {
			if m := c.members[id]; m.st != nil && m.st.Status().IsLeader {
				l = m
				return true
			}
		}
		return false
	})
	return l
}

// propose proposes cmd on member id and waits (generously) for its outcome.
func (c *testCluster) propose(id uint64, cmd Command) (Result, error) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return c.members[id].st.Propose(ctx, cmd)
}

func (c *testCluster) mustPropose(id uint64, cmd Command) Result {
	c.t.Helper()
	res, err := c.propose(id, cmd)
	if err != nil {
		c.t.Fatalf("member %d: %T: %v", id, cmd, err)
	}
	return res
}

// converged waits until the running members among ids (all when empty) hold equal states,
// and returns one.
func (c *testCluster) converged(ids ...uint64) *State {
	c.t.Helper()
	if len(ids) == 0 {
		ids = c.ids
	}
	var st *State
	c.waitUntil(fmt.Sprintf("members %v to hold the same state", ids), func() bool {
		st = c.members[ids[0]].st.State()
		for _, id := range ids[1:] {
			if !c.members[id].st.State().Equal(st) {
				return false
			}
		}
		return true
	})
	return st
}

func addBroker(id uint64) *AddBroker {
	return &AddBroker{ID: id, ClientAddr: fmt.Sprintf("127.0.0.%d:7070", id), ClusterAddr: fmt.Sprintf("127.0.0.%d:7071", id)}
}

// TestProposeOnAnyMember: commands proposed on the leader and on each follower are applied
// on the proposer by the time Propose returns, and on every member in the same order.
func TestProposeOnAnyMember(t *testing.T) {
	c := newTestCluster(t, 1, 3, nil)
	l := c.leader()
	for _, id := range c.ids {
		res := c.mustPropose(id, addBroker(id))
		st := c.members[id].st.State()
		if _, ok := st.Broker(id); !ok || st.Index() < res.Index {
			t.Fatalf("member %d (leader %d): the state after Propose lacks its broker (index %d, result at %d)", id, l.id, st.Index(), res.Index)
		}
	}
	c.converged() // a member's own commands are in its state; the others' may not be yet
	for _, id := range c.ids {
		st := c.members[id].st.State()
		pl, err := Place(st, 3, 3)
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("from-%d", id)
		res := c.mustPropose(id, &CreateTopic{Name: name, Kind: 2, CreatedAt: time.Now().UnixMilli(), Placement: pl})
		tp, ok := c.members[id].st.State().Topic(name)
		if !ok || len(res.Groups) != 3 || tp.Partitions[0].Group != res.Groups[0] {
			t.Fatalf("member %d: topic %+v, result %+v", id, tp, res)
		}
		if _, err := c.propose(id, &CreateTopic{Name: name, Kind: 2, Placement: pl}); !errors.Is(err, ErrTopicExists) {
			t.Fatalf("member %d: creating %s again: %v", id, name, err)
		}
	}
	st := c.converged()
	if st.TopicCount() != 3 || len(st.Brokers()) != 3 || st.NextGroup() != FirstPartitionGroup+9 {
		t.Fatalf("%d topics, %d brokers, next group %d", st.TopicCount(), len(st.Brokers()), st.NextGroup())
	}
	if _, err := c.propose(1, &CreateUser{Name: "x"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("an invalid command: %v", err)
	}
}

// TestConcurrentCreateTopic: every member creates the same topic at once, with placements of
// its own; exactly one wins, the same one everywhere.
func TestConcurrentCreateTopic(t *testing.T) {
	c := newTestCluster(t, 2, 3, nil)
	for _, id := range c.ids {
		c.mustPropose(id, addBroker(id))
	}
	const perMember = 4
	type answer struct {
		placement []uint64
		err       error
	}
	answers := make(chan answer, perMember*len(c.ids))
	for _, id := range c.ids {
		for k := range perMember {
			placement := []uint64{id, uint64(k%3 + 1)}
			if placement[0] == placement[1] {
				placement = placement[:1]
			}
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				_, err := c.members[id].st.Propose(ctx, &CreateTopic{Name: "contended", Kind: 2, Placement: [][]uint64{placement}})
				answers <- answer{placement, err}
			}()
		}
	}
	var winner []uint64
	for range perMember * len(c.ids) {
		a := <-answers
		switch {
		case a.err == nil && winner != nil:
			t.Fatalf("two winners: %v and %v", winner, a.placement)
		case a.err == nil:
			winner = a.placement
		case !errors.Is(a.err, ErrTopicExists):
			t.Fatalf("a loser: %v", a.err)
		}
	}
	if winner == nil {
		t.Fatal("no winner")
	}
	st := c.converged()
	tp, _ := st.Topic("contended")
	if !slices.Equal(tp.Partitions[0].Replicas, winner) {
		t.Fatalf("the topic's replicas %v, the winner's %v", tp.Partitions[0].Replicas, winner)
	}
}

// TestWatch: the Watch channel is closed by the next applied command.
func TestWatch(t *testing.T) {
	c := newTestCluster(t, 3, 3, nil)
	c.leader()
	c.converged() // the bootstrap's membership changes are applied (they move the state too)
	m := c.members[2]
	ch := m.st.Watch()
	select {
	case <-ch:
		t.Fatal("closed before any change")
	default:
	}
	c.mustPropose(1, addBroker(1))
	c.waitUntil("member 2's watch to fire", func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	})
	if _, ok := m.st.State().Broker(1); !ok {
		t.Fatal("woken before the state changed")
	}
}
