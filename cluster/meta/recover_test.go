package meta

import (
	"context"
	"errors"
	"testing"
	"time"

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
