package meta

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/cluster/transport"
)

// A single-member group needs no network: its Sender never has anything to send.
type nopSender struct{}

func (nopSender) Send(uint64, ...transport.Envelope) bool { return false }

func openSingle(t *testing.T, dir string, config func(*Config)) *Store {
	t.Helper()
	cfg := Config{Dir: dir, NodeID: 1, Peers: []uint64{1}, Sender: nopSender{}, Tick: testTick, Logf: t.Logf}
	if config != nil {
		config(&cfg)
	}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func proposeOn(t *testing.T, s *Store, cmd Command) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := s.Propose(ctx, cmd)
	if err != nil {
		t.Fatalf("%T: %v", cmd, err)
	}
	return res
}

// TestSingleMemberRestart: a one-broker cluster applies, snapshots, compacts and restarts to
// the same state.
func TestSingleMemberRestart(t *testing.T) {
	dir := t.TempDir()
	s := openSingle(t, dir, compacting)
	proposeOn(t, s, addBroker(1))
	for i := range 30 {
		proposeOn(t, s, &CreateUser{Name: string(rune('a'+i%26)) + string(rune('a'+i/26)), Hash: []byte("h")})
	}
	before := s.State()
	first, _ := s.stor.FirstIndex()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if first < 10 {
		t.Fatalf("the log starts at %d: not compacted", first)
	}
	s = openSingle(t, dir, compacting)
	defer s.Close()
	waitFor(t, "the replay", func() bool { return s.State().Index() >= before.Index() })
	if !s.State().Equal(before) {
		t.Fatal("another state after the restart")
	}
	proposeOn(t, s, &DeleteUser{Name: "aa"})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// TestOpenFinishesSnapshotInstall: a crash after a snapshot from the leader was saved and
// before the log was emptied leaves a snapshot file past the log; Open empties the log there
// and starts from the snapshot.
func TestOpenFinishesSnapshotInstall(t *testing.T) {
	dir := t.TempDir()
	s := openSingle(t, dir, nil)
	proposeOn(t, s, addBroker(1))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// What ApplySnapshot had saved of a leader's snapshot at 100 (the membership this member's).
	leader := sampleState(t).at(100)
	snap := raftpb.Snapshot{Data: appendState(nil, leader), Metadata: raftpb.SnapshotMetadata{Index: 100, Term: 7,
		ConfState: raftpb.ConfState{Voters: []uint64{1}}}}
	if err := writeSnapFile(dir, snap); err != nil {
		t.Fatal(err)
	}
	s = openSingle(t, dir, nil)
	defer s.Close()
	if !s.State().Equal(leader) {
		t.Fatalf("state at %d after the restart, want the snapshot's", s.State().Index())
	}
	if first, _ := s.stor.FirstIndex(); first != 101 {
		t.Fatalf("the log starts at %d, want 101", first)
	}
	if hs, _, _ := s.stor.InitialState(); hs.Commit < 100 {
		t.Fatalf("commit %d below the snapshot", hs.Commit)
	}
	res := proposeOn(t, s, &CreateUser{Name: "new", Hash: []byte("h")})
	if res.Index <= 100 {
		t.Fatalf("applied at %d", res.Index)
	}
}

// TestOpenRefusesLostSnapshot: a log compacted past a snapshot file that is gone (or
// damaged) is refused, never opened as an empty state.
func TestOpenRefusesLostSnapshot(t *testing.T) {
	dir := t.TempDir()
	s := openSingle(t, dir, compacting)
	proposeOn(t, s, addBroker(1))
	for i := range 30 {
		proposeOn(t, s, &SetCoordinator{Group: "g" + string(rune('a'+i)), Node: 1})
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, SnapshotFileName)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	good[len(good)-1] ^= 1
	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{Dir: dir, NodeID: 1, Sender: nopSender{}}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a damaged snapshot file: %v", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{Dir: dir, NodeID: 1, Sender: nopSender{}}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a lost snapshot file: %v", err)
	}
}

func TestOpenConfig(t *testing.T) {
	if _, err := Open(Config{NodeID: 1, Sender: nopSender{}}); err == nil {
		t.Fatal("no Dir")
	}
	if _, err := Open(Config{Dir: t.TempDir(), NodeID: 1}); err == nil {
		t.Fatal("no Sender")
	}
	if _, err := Open(Config{Dir: t.TempDir(), NodeID: 1, Sender: nopSender{}}); err == nil {
		t.Fatal("an empty Dir without Peers or Join")
	}
	s := openSingle(t, t.TempDir(), nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	if _, err := s.Propose(context.Background(), addBroker(1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Propose after Close: %v", err)
	}
}
