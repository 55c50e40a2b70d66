package replica

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/cluster/raftlog"
	"github.com/lightq/lightq/cluster/transport"
	qlog "github.com/lightq/lightq/log"
	"github.com/lightq/lightq/wire"
)

var secret = []byte("replica tests' cluster secret")

// member is one broker of an in-process test cluster: a transport, a router, one replica of
// group 1 over the storage of the cluster's kind, and what it applied.
type member struct {
	id      uint64
	tr      *transport.Transport
	router  *Router
	storage Storage
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

// storageKind is what a test cluster's members keep their raft state in, and what their
// proposals are: raft's MemoryStorage with proposals of plain bytes, or the partition's
// segment log (raftlog.Storage, each member its own directory), whose proposals are format-2
// record batches.
type storageKind struct {
	name string
	open func(t *testing.T, id uint64) Storage
	// propose is the proposal that carries payload; payload reads it back from applied data.
	propose func(payload string) []byte
	payload func(t *testing.T, data []byte) string
	// files returns the segment files of a member's storage (name -> bytes); nil when the
	// storage has none.
	files func(t *testing.T, s Storage) map[string][]byte
}

var storageKinds = []storageKind{
	{
		name:    "memory",
		open:    func(*testing.T, uint64) Storage { return raft.NewMemoryStorage() },
		propose: func(p string) []byte { return []byte(p) },
		payload: func(_ *testing.T, d []byte) string { return string(d) },
	},
	{
		name: "segment-log",
		open: func(t *testing.T, id uint64) Storage {
			s, err := raftlog.Open(t.TempDir(), raftlog.Options{Window: 64, SyncEachAppend: true, Log: qlog.Options{SegmentBytes: 8 << 10}})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		propose: func(p string) []byte {
			var bb wire.BatchBuilder
			bb.SetMagic(wire.BatchMagic2)
			bb.Append(1_700_000_000_000, nil, []byte(p), nil)
			b, err := bb.Finish(wire.CodecNone, nil)
			if err != nil {
				panic(err)
			}
			return bytes.Clone(b)
		},
		payload: func(t *testing.T, d []byte) string {
			bt, err := wire.ParseBatch(d, 1<<20)
			if err != nil {
				t.Fatalf("applied entry: %v", err)
			}
			it := wire.NewRecordIter(bt.Records, bt.RecordCount, bt.BaseOffset, bt.FirstTimestamp)
			var rec wire.Record
			if !it.Next(&rec) {
				t.Fatalf("applied entry: %v", it.Err())
			}
			return string(rec.Value)
		},
		files: func(t *testing.T, s Storage) map[string][]byte {
			dir := s.(*raftlog.Storage).Dir()
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			out := map[string][]byte{}
			for _, e := range ents {
				if strings.HasSuffix(e.Name(), ".log") {
					b, err := os.ReadFile(filepath.Join(dir, e.Name()))
					if err != nil {
						t.Fatal(err)
					}
					out[e.Name()] = b
				}
			}
			return out
		},
	},
}

// forEachStorage runs test once per storage kind.
func forEachStorage(t *testing.T, test func(t *testing.T, kind storageKind)) {
	for _, kind := range storageKinds {
		t.Run(kind.name, func(t *testing.T) { test(t, kind) })
	}
}

type testCluster struct {
	t       *testing.T
	kind    storageKind
	faults  *transport.Faults
	members map[uint64]*member
}

const testTick = 20 * time.Millisecond

func newCluster(t *testing.T, kind storageKind, seed uint64, ids ...uint64) *testCluster {
	t.Helper()
	return newClusterWith(t, kind, seed, func(*Config) {}, ids...)
}

// newClusterWith is newCluster with each member's Config changed by config before it starts.
func newClusterWith(t *testing.T, kind storageKind, seed uint64, config func(*Config), ids ...uint64) *testCluster {
	t.Helper()
	c := &testCluster{t: t, kind: kind, faults: transport.NewFaults(seed), members: map[uint64]*member{}}
	t.Cleanup(c.faults.Stop)
	for _, id := range ids {
		m := &member{id: id, router: NewRouter(), storage: kind.open(t, id)}
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
		cfg := Config{ID: m.id, Group: 1, Peers: ids, Storage: m.storage, Sender: m.tr, Apply: m.apply, Tick: testTick}
		config(&cfg)
		rep, err := Start(cfg)
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
			if cl, ok := m.storage.(interface{ Close() error }); ok {
				if err := cl.Close(); err != nil {
					t.Errorf("member %d: close its storage: %v", m.id, err)
				}
			}
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
		p, err := l.rep.Propose(c.kind.propose(fmt.Sprintf("%s-%d", prefix, i)))
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

// converged waits until the members named applied the same entries and hold the same log
// up to the same commit index, and checks their logs are identical entry for entry, and, for
// a storage with segment files, byte for byte. It returns the payloads applied.
func (c *testCluster) converged(ids ...uint64) []string {
	c.t.Helper()
	var want [][]byte
	c.waitUntil("every member to apply the same entries", func() bool {
		want = c.members[ids[0]].appliedData()
		ref := c.members[ids[0]].rep.Status()
		for _, id := range ids[1:] {
			st := c.members[id].rep.Status()
			if len(c.members[id].appliedData()) != len(want) || st.Commit != ref.Commit || st.LastIndex != ref.LastIndex {
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
			if got[i].Term != ref[i].Term || got[i].Index != ref[i].Index || got[i].Type != ref[i].Type || !bytes.Equal(got[i].Data, ref[i].Data) {
				c.t.Fatalf("member %d's log differs from member %d's at index %d", id, ids[0], ref[i].Index)
			}
		}
	}
	if c.kind.files != nil {
		c.sameFiles(ids...)
	}
	out := make([]string, len(want))
	for i, d := range want {
		out[i] = c.kind.payload(c.t, d)
	}
	return out
}

// sameFiles checks that the members' segment files are byte-identical: the same files, the
// same bytes.
func (c *testCluster) sameFiles(ids ...uint64) {
	c.t.Helper()
	ref := c.kind.files(c.t, c.members[ids[0]].storage)
	total := 0
	for name, b := range ref {
		total += len(b)
		if len(b) == 0 && len(ref) > 1 {
			c.t.Errorf("member %d: empty segment %s", ids[0], name)
		}
	}
	for _, id := range ids[1:] {
		got := c.kind.files(c.t, c.members[id].storage)
		if len(got) != len(ref) {
			c.t.Fatalf("member %d has %d segment files, member %d %d", id, len(got), ids[0], len(ref))
		}
		for name, b := range ref {
			if !bytes.Equal(got[name], b) {
				c.t.Fatalf("segment %s of member %d differs from member %d's (%d and %d bytes)", name, id, ids[0], len(got[name]), len(b))
			}
		}
	}
	c.t.Logf("members %v: %d segment files, %d bytes, byte-identical", ids, len(ref), total)
}

func exactlyOnce(t *testing.T, applied []string, prefix string, n int) {
	t.Helper()
	seen := map[string]int{}
	for _, d := range applied {
		seen[d]++
	}
	for i := range n {
		if k := fmt.Sprintf("%s-%d", prefix, i); seen[k] != 1 {
			t.Fatalf("%s stored %d times, want once", k, seen[k])
		}
	}
}

func TestReplicateAndConverge(t *testing.T) {
	forEachStorage(t, func(t *testing.T, kind storageKind) {
		c := newCluster(t, kind, 1, 1, 2, 3)
		c.proposeAll("a", 300)
		exactlyOnce(t, c.converged(1, 2, 3), "a", 300)
		if kind.files == nil {
			return
		}
		// Every member recorded the membership it applied (the bootstrap's three voters).
		for id, m := range c.members {
			if st := m.storage.(*raftlog.Storage).State(); len(st.ConfState.Voters) != 3 || st.ConfIndex != 3 {
				t.Fatalf("member %d: membership %+v at %d, want voters 1-3 at index 3", id, st.ConfState, st.ConfIndex)
			}
		}
	})
}

func TestFollowerSaysWhoLeads(t *testing.T) {
	forEachStorage(t, func(t *testing.T, kind storageKind) {
		c := newCluster(t, kind, 2, 1, 2, 3)
		l := c.leader()
		c.proposeAll("x", 1) // every member has heard from the leader once this commits
		c.converged(1, 2, 3)
		for id, m := range c.members {
			if id == l.id {
				continue
			}
			_, err := m.rep.Propose(kind.propose("nope"))
			var nl *NotLeaderError
			if !errors.As(err, &nl) || nl.Leader != l.id {
				t.Fatalf("follower %d: %v, want NotLeader naming %d", id, err, l.id)
			}
		}
	})
}

// TestLeaderStopsFailover: the leader's process goes away (replica and transport); the other
// two elect a leader that takes proposals, within a bound the test reports.
func TestLeaderStopsFailover(t *testing.T) {
	forEachStorage(t, func(t *testing.T, kind storageKind) {
		c := newCluster(t, kind, 3, 1, 2, 3)
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
	})
}

// TestPartitionedLeaderCannotCommit: a leader cut off from the others cannot store anything;
// the majority elects a new leader and goes on; after the heal, the old leader's proposal is
// reported replaced and every log is the same (the old leader's uncommitted tail replaced).
func TestPartitionedLeaderCannotCommit(t *testing.T) {
	forEachStorage(t, func(t *testing.T, kind storageKind) {
		c := newCluster(t, kind, 4, 1, 2, 3)
		c.proposeAll("before", 20)
		old := c.leader()
		c.faults.Isolate(old.id)
		stale, err := old.rep.Propose(kind.propose("from the isolated leader"))
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
			if d == "from the isolated leader" {
				t.Fatal("the isolated leader's entry was applied")
			}
		}
	})
}

// TestFaultyNetwork: drops, duplicates and delays (so reordering) on every link, from a seed;
// every stored proposal is applied exactly once, in the same order everywhere.
func TestFaultyNetwork(t *testing.T) {
	forEachStorage(t, func(t *testing.T, kind storageKind) {
		c := newCluster(t, kind, 5, 1, 2, 3)
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
	})
}

func TestStopFailsWaiting(t *testing.T) {
	forEachStorage(t, func(t *testing.T, kind storageKind) {
		c := newCluster(t, kind, 6, 1, 2, 3)
		l := c.leader()
		c.faults.Isolate(l.id) // nothing can commit
		p, err := l.rep.Propose(kind.propose("pending"))
		if err != nil {
			t.Fatal(err)
		}
		l.rep.Stop()
		if err := await(t, p); !errors.Is(err, ErrStopped) {
			t.Fatalf("waiting proposal ended with %v, want ErrStopped", err)
		}
		if _, err := l.rep.Propose(kind.propose("late")); !errors.Is(err, ErrStopped) {
			t.Fatalf("Propose after Stop: %v", err)
		}
	})
}

// TestProposeNotify: a notified proposal for the leader's term is stored and reported once
// on the replica's goroutine; one for another term is refused at once, as NotLeader.
func TestProposeNotify(t *testing.T) {
	forEachStorage(t, func(t *testing.T, kind storageKind) {
		c := newCluster(t, kind, 7, 1, 2, 3)
		l := c.leader()
		st := l.rep.Status()
		got := make(chan *Proposal, 2)
		p := &Proposal{Data: kind.propose("notified")}
		if err := l.rep.ProposeNotify(p, st.Term, func(p *Proposal) { got <- p }); err != nil {
			t.Fatalf("ProposeNotify: %v", err)
		}
		select {
		case q := <-got:
			if q != p || q.Err != nil || q.Index == 0 || q.Term != st.Term {
				t.Fatalf("notified %p (want %p): index %d term %d err %v", q, p, q.Index, q.Term, q.Err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("never notified")
		}
		var nl *NotLeaderError
		if err := l.rep.ProposeNotify(&Proposal{Data: kind.propose("stale")}, st.Term+1, func(*Proposal) { t.Error("notified a refused proposal") }); !errors.As(err, &nl) {
			t.Fatalf("ProposeNotify for another term: %v, want NotLeader", err)
		}
		select {
		case q := <-got:
			t.Fatalf("notified twice: %v", q.Err)
		default:
		}
	})
}

// TestTermStartAndProgress: the leader reports the first index of its term, which it
// applies, and every member's progress; followers report neither.
func TestTermStartAndProgress(t *testing.T) {
	c := newCluster(t, storageKinds[1], 8, 1, 2, 3)
	c.proposeAll("p", 5)
	l := c.leader()
	c.waitUntil("the leader to apply its term's first entry", func() bool {
		st := l.rep.Status()
		return st.TermStart > 0 && st.Applied >= st.TermStart
	})
	st := l.rep.Status()
	if got, _ := l.storage.Term(st.TermStart); got != st.Term {
		t.Fatalf("term start %d has term %d, the leader's is %d", st.TermStart, got, st.Term)
	}
	if prev, _ := l.storage.Term(st.TermStart - 1); prev >= st.Term {
		t.Fatalf("the entry before term start %d has term %d, not an earlier one", st.TermStart, prev)
	}
	c.waitUntil("every member to match the leader", func() bool {
		ps := l.rep.Progress()
		if len(ps) != 3 {
			return false
		}
		for _, p := range ps {
			if !p.Voter || p.Match < st.TermStart {
				return false
			}
		}
		return true
	})
	for id, m := range c.members {
		if id == l.id {
			continue
		}
		if s := m.rep.Status(); s.TermStart != 0 || m.rep.Progress() != nil {
			t.Fatalf("follower %d reports term start %d and progress %v", id, s.TermStart, m.rep.Progress())
		}
	}
}

// TestTransferLeadership: the leader hands its leadership to the member named, which then
// takes proposals.
func TestTransferLeadership(t *testing.T) {
	c := newCluster(t, storageKinds[1], 9, 1, 2, 3)
	c.proposeAll("t", 3)
	l := c.leader()
	to := l.id%3 + 1
	l.rep.TransferLeadership(to)
	c.waitUntil("the transfer", func() bool { return c.members[to].rep.Status().IsLeader })
	c.proposeAll("after", 3, to)
	exactlyOnce(t, c.converged(1, 2, 3), "after", 3)
}

// TestStaleLearnerChangeRefused: a change that would make a voter a learner (a view of the
// group older than the group: a mover adding back a member the group re-added meanwhile) is
// refused, and the voters stay; adding a node that is not a voter as a learner is taken.
func TestStaleLearnerChangeRefused(t *testing.T) {
	c := newCluster(t, storageKinds[1], 10, 1, 2, 3)
	c.proposeAll("s", 3)
	l := c.leader()
	voter := l.id%3 + 1
	demote := raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeAddLearnerNode, NodeID: voter}}}
	if err := l.rep.ProposeConfChange(demote); !errors.Is(err, ErrStaleChange) {
		t.Fatalf("making voter %d a learner: %v, want ErrStaleChange", voter, err)
	}
	learner := raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeAddLearnerNode, NodeID: 9}}}
	if err := l.rep.ProposeConfChange(learner); err != nil {
		t.Fatalf("adding node 9 as a learner: %v", err)
	}
	c.waitUntil("node 9 a learner", func() bool {
		for _, p := range l.rep.Progress() {
			if p.ID == 9 {
				return !p.Voter
			}
		}
		return false
	})
	voters := 0
	for _, p := range l.rep.Progress() {
		if p.Voter {
			voters++
		}
	}
	if voters != 3 {
		t.Fatalf("%d voters after the refused change", voters)
	}
}
