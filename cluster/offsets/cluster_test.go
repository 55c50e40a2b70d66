package offsets

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lightq/lightq/cluster/replica"
	"github.com/lightq/lightq/cluster/transport"
)

// An in-process offsets partition for the Store's tests: each replica a transport on
// 127.0.0.1:0 (all sharing one Faults), a router, and a Store in its own directory, which a
// test may close and open again.

var secret = []byte("offsets tests' cluster secret 32")

const (
	testTick  = 20 * time.Millisecond
	testGroup = 7
)

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
}

func newTestCluster(t *testing.T, n int, config func(*Config)) *testCluster {
	t.Helper()
	c := &testCluster{t: t, faults: transport.NewFaults(1), members: map[uint64]*member{}, config: config}
	t.Cleanup(c.faults.Stop)
	for i := range n {
		id := uint64(i + 1)
		m := &member{id: id, dir: filepath.Join(t.TempDir(), fmt.Sprint(id)), router: replica.NewRouter()}
		tr, err := transport.New(transport.Config{NodeID: id, Listen: "127.0.0.1:0", Secret: secret,
			Handler: m.router.Handle, Unreachable: m.router.Unreachable, Faults: c.faults,
			RedialMin: time.Millisecond, RedialMax: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		m.tr = tr
		for oid, o := range c.members {
			o.tr.SetPeer(id, tr.Addr().String())
			tr.SetPeer(oid, o.tr.Addr().String())
		}
		c.members[id] = m
		c.ids = append(c.ids, id)
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

func (c *testCluster) start(id uint64) {
	c.t.Helper()
	m := c.members[id]
	cfg := Config{Dir: m.dir, NodeID: id, Group: testGroup, Peers: c.ids, Sender: m.tr, Tick: testTick,
		Logf: func(f string, args ...any) { c.t.Logf("member %d: "+f, append([]any{id}, args...)...) }}
	if c.config != nil {
		c.config(&cfg)
	}
	st, err := Open(cfg)
	if err != nil {
		c.t.Fatalf("member %d: %v", id, err)
	}
	m.st = st
	m.router.Add(testGroup, st.Replica())
}

func (c *testCluster) stop(id uint64) {
	c.t.Helper()
	m := c.members[id]
	m.router.Remove(testGroup)
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

// leader waits for a running member that leads and is ready, and returns it and its term.
func (c *testCluster) leader() (*member, uint64) {
	c.t.Helper()
	var l *member
	var term uint64
	c.waitUntil("a ready leader", func() bool {
		for _, id := range c.ids {
			if m := c.members[id]; m.st != nil {
				if tm, ready := m.st.Leading(); ready {
					l, term = m, tm
					return true
				}
			}
		}
		return false
	})
	return l, term
}

// commit commits on the current ready leader until one takes it, and waits for the answer.
func (c *testCluster) commit(k Key, off int64) {
	c.t.Helper()
	for attempt := 0; ; attempt++ {
		l, term := c.leader()
		done := make(chan error, 1)
		err := l.st.Commit(term, k, off, func(err error) { done <- err })
		if err == nil {
			err = <-done
		}
		if err == nil {
			return
		}
		if attempt > 100 {
			c.t.Fatalf("commit %+v = %d: %v", k, off, err)
		}
	}
}

func key(p uint32) Key { return Key{Topic: "orders", Created: 1, Group: "billing", Partition: p} }

// converged waits until every running member holds offset off for k.
func (c *testCluster) converged(k Key, off int64) {
	c.t.Helper()
	c.waitUntil(fmt.Sprintf("every replica to hold %+v = %d", k, off), func() bool {
		for _, m := range c.members {
			if m.st == nil {
				continue
			}
			if got, ok := m.st.Get(k); !ok || got != off {
				return false
			}
		}
		return true
	})
}

// TestCommitOnLeader: a ready leader takes commits and answers once they are applied; a
// follower, and a leader asked for another term, refuse them without storing anything;
// every replica applies the same state.
func TestCommitOnLeader(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l, term := c.leader()
	done := make(chan error, 1)
	if err := l.st.Commit(term, key(0), 42, func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if off, ok := l.st.Get(key(0)); !ok || off != 42 {
		t.Fatalf("the leader holds %d, %v after the answer", off, ok)
	}
	var nl *replica.NotLeaderError
	for _, m := range c.members {
		if m == l {
			continue
		}
		// A quorum answered the commit; this follower may not have heard from the leader yet.
		c.waitUntil("a follower that knows its leader", func() bool { return m.st.Leader() == l.id })
		err := m.st.Commit(term, key(1), 1, func(error) { t.Error("a refused commit was answered") })
		if !errors.As(err, &nl) || nl.Leader != l.id {
			t.Fatalf("commit on follower %d: %v, want NOT_LEADER naming %d", m.id, err, l.id)
		}
	}
	if err := l.st.Commit(term+1, key(1), 1, func(error) { t.Error("a refused commit was answered") }); !errors.As(err, &nl) {
		t.Fatalf("commit for another term: %v", err)
	}
	if err := l.st.Commit(term, Key{Topic: "orders", Group: ""}, 1, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("an empty group: %v", err)
	}
	if err := l.st.Commit(term, key(1), -1, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a negative offset: %v", err)
	}
	c.commit(key(0), 43)
	c.converged(key(0), 43)
	for _, m := range c.members {
		if _, ok := m.st.Get(key(1)); ok || m.st.Len() != 1 {
			t.Fatalf("member %d holds %d keys", m.id, m.st.Len())
		}
	}
}

// TestFailoverKeepsCommits: every answered commit is held by the leader elected after the old
// one stops, which takes commits; the old one, restarted, catches up.
func TestFailoverKeepsCommits(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	for p := range uint32(20) {
		c.commit(key(p), int64(100+p))
	}
	old, oldTerm := c.leader()
	c.stop(old.id)
	l, term := c.leader()
	if l == old || term <= oldTerm {
		t.Fatalf("leader %d in term %d after %d of term %d stopped", l.id, term, old.id, oldTerm)
	}
	for p := range uint32(20) {
		if off, ok := l.st.Get(key(p)); !ok || off != int64(100+p) {
			t.Fatalf("the new leader holds %d, %v for partition %d", off, ok, p)
		}
	}
	c.commit(key(0), 200)
	// A group session is replicated as a commit is, and kept by a new leader.
	ref := GroupRef{Topic: "orders", Created: 1, Group: "billing"}
	done := make(chan error, 1)
	if err := l.st.SetSession(term, ref, 2500*time.Millisecond+1, func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d, ok := l.st.Session(ref); !ok || d != 2501*time.Millisecond {
		t.Fatalf("session %v, %v; want 2.501s (rounded up)", d, ok)
	}
	c.start(old.id)
	c.converged(key(0), 200)
	if n := c.members[old.id].st.Len(); n != 20 {
		t.Fatalf("the restarted replica holds %d keys", n)
	}
	c.waitUntil("the restarted replica to hold the session", func() bool {
		d, ok := c.members[old.id].st.Session(ref)
		return ok && d == 2501*time.Millisecond
	})
}

// TestIsolatedLeaderCannotCommit: a leader cut off from the others cannot answer a commit
// stored: it is answered ErrMaybeStored when the leader steps down (check-quorum) or its wait
// ends, and the group goes on once the network heals.
func TestIsolatedLeaderCannotCommit(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.ProposalTimeout = 2 * time.Second })
	c.commit(key(0), 1)
	l, term := c.leader()
	c.faults.Isolate(l.id)
	done := make(chan error, 1)
	if err := l.st.Commit(term, key(0), 2, func(err error) { done <- err }); err != nil {
		t.Fatalf("the isolated leader refused at once: %v", err)
	}
	if err := <-done; !errors.Is(err, ErrMaybeStored) {
		t.Fatalf("the isolated leader's commit: %v, want ErrMaybeStored", err)
	}
	c.faults.Heal()
	c.commit(key(0), 3)
	c.converged(key(0), 3)
}

// TestSnapshotsCompactAndCatchUp: with small snapshots, the log behind each snapshot goes;
// a replica stopped meanwhile catches up from the leader's snapshot (its log no longer has
// what the replica lacks), a restart starts from the snapshot file, and every replica ends
// with the same state; a topic drop removes its keys everywhere.
func TestSnapshotsCompactAndCatchUp(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.SnapshotBytes = 16 << 10; cfg.SegmentBytes = 8 << 10 })
	c.commit(key(0), 0)
	c.converged(key(0), 0)
	l, _ := c.leader()
	var lagger uint64
	for _, id := range c.ids {
		if id != l.id {
			lagger = id
			break
		}
	}
	c.stop(lagger)
	const n = 600
	for i := range n {
		c.commit(Key{Topic: "orders", Created: 1, Group: fmt.Sprint("g", i%50), Partition: uint32(i % 7)}, int64(i))
	}
	c.commit(Key{Topic: "gone", Created: 9, Group: "g", Partition: 0}, 5)
	if _, err := os.Stat(filepath.Join(l.dir, SnapshotFileName)); err != nil {
		t.Fatalf("no snapshot file on the leader: %v", err)
	}
	segs, _ := filepath.Glob(filepath.Join(l.dir, LogDirName, "*.log"))
	if len(segs) > 4 {
		t.Fatalf("the leader keeps %d segments behind its snapshots", len(segs))
	}
	c.start(lagger)
	last := Key{Topic: "gone", Created: 9, Group: "g", Partition: 0}
	c.converged(last, 5)
	if l.st.snapshots.Load() == 0 || c.members[lagger].st.installed.Load() == 0 {
		t.Fatalf("the leader took %d snapshots, the replica that was stopped installed %d", l.st.snapshots.Load(), c.members[lagger].st.installed.Load())
	}
	for _, id := range c.ids {
		c.stop(id)
		c.start(id)
	}
	c.converged(last, 5)
	ref := c.members[1].st
	for _, m := range c.members {
		if m.st.Len() != ref.Len() {
			t.Fatalf("member %d holds %d keys, member 1 %d", m.id, m.st.Len(), ref.Len())
		}
		ref.Range(func(k Key, off int64) {
			if got, ok := m.st.Get(k); !ok || got != off {
				t.Fatalf("member %d: %+v = %d, %v; member 1 has %d", m.id, k, got, ok, off)
			}
		})
	}
	for {
		l, term := c.leader()
		done := make(chan error, 1)
		err := l.st.DropTopic(term, TopicRef{Topic: "gone", Created: 9}, func(err error) { done <- err })
		if err == nil {
			err = <-done
		}
		if err == nil {
			break
		}
	}
	c.waitUntil("the dropped topic's keys to go everywhere", func() bool {
		for _, m := range c.members {
			if _, ok := m.st.Get(last); ok || len(m.st.Topics()) != 1 {
				return false
			}
		}
		return true
	})
}

// TestLimit: past MaxEntries a new key is refused; a held key still takes commits.
func TestLimit(t *testing.T) {
	c := newTestCluster(t, 1, func(cfg *Config) { cfg.MaxEntries = 3 })
	for p := range uint32(3) {
		c.commit(key(p), 1)
	}
	l, term := c.leader()
	var le *LimitError
	if err := l.st.Commit(term, key(3), 1, func(error) { t.Error("a refused commit was answered") }); !errors.As(err, &le) || le.Max != 3 {
		t.Fatalf("a fourth key: %v", err)
	}
	c.commit(key(2), 9)
	c.converged(key(2), 9)
}
