package transport

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

var testSecret = []byte("a cluster secret for tests only")

// inbox collects what a transport's handler receives.
type inbox struct {
	mu   sync.Mutex
	got  map[uint64][]Envelope // by sender
	more chan struct{}
}

func newInbox() *inbox { return &inbox{got: map[uint64][]Envelope{}, more: make(chan struct{}, 1)} }

func (in *inbox) handle(from uint64, envs []Envelope) {
	in.mu.Lock()
	in.got[from] = append(in.got[from], envs...)
	in.mu.Unlock()
	select {
	case in.more <- struct{}{}:
	default:
	}
}

func (in *inbox) from(node uint64) []Envelope {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]Envelope(nil), in.got[node]...)
}

// waitFor waits until cond holds on what arrived, or fails after a deadline generous enough
// for a loaded machine. cond is evaluated on every arrival and every few milliseconds, so a
// cond that also sends (to retry what a restarting link dropped, as raft would) is retried.
func (in *inbox) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-in.more:
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

type node struct {
	tr  *Transport
	in  *inbox
	log *logLines
}

type logLines struct {
	mu    sync.Mutex
	lines []string
	more  chan struct{}
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, strings.TrimSpace(fmt.Sprintf(format, args...)))
	l.mu.Unlock()
	select {
	case l.more <- struct{}{}:
	default:
	}
}

func (l *logLines) waitFor(t *testing.T, sub string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		l.mu.Lock()
		for _, s := range l.lines {
			if strings.Contains(s, sub) {
				l.mu.Unlock()
				return
			}
		}
		l.mu.Unlock()
		select {
		case <-l.more:
		case <-deadline:
			t.Fatalf("no log line containing %q", sub)
		}
	}
}

func startNode(t *testing.T, id uint64, secret []byte, faults *Faults, listen string) *node {
	t.Helper()
	n := &node{in: newInbox(), log: &logLines{more: make(chan struct{}, 1)}}
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	tr, err := New(Config{NodeID: id, Listen: listen, Secret: secret, Handler: n.in.handle, Logf: n.log.logf, Faults: faults,
		RedialMin: time.Millisecond, RedialMax: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	n.tr = tr
	t.Cleanup(func() { _ = tr.Close() })
	return n
}

func cluster(t *testing.T, faults *Faults, ids ...uint64) map[uint64]*node {
	t.Helper()
	nodes := map[uint64]*node{}
	for _, id := range ids {
		nodes[id] = startNode(t, id, testSecret, faults, "")
	}
	for _, a := range nodes {
		for id, b := range nodes {
			a.tr.SetPeer(id, b.tr.Addr().String())
		}
	}
	return nodes
}

func heartbeat(group, seq uint64) Envelope {
	return Envelope{Group: group, Msg: raftpb.Message{Type: raftpb.MsgHeartbeat, Index: seq}}
}

// TestDeliversInOrder: every node sends to every other node; each stream arrives whole and
// in order (the first message of a stream may be dropped while the connection comes up, so
// the sender repeats until the first one is through, as raft would).
func TestDeliversInOrder(t *testing.T) {
	nodes := cluster(t, nil, 1, 2, 3)
	const n = 2000
	for from, a := range nodes {
		for to := range nodes {
			if to == from {
				continue
			}
			b := nodes[to]
			b.in.waitFor(t, "the first message", func() bool {
				a.tr.Send(to, heartbeat(from, 0))
				return len(b.in.from(from)) > 0
			})
			for i := uint64(1); i <= n; i++ {
				if !a.tr.Send(to, heartbeat(from, i)) {
					t.Fatalf("send %d from %d to %d dropped on a clean network", i, from, to)
				}
			}
		}
	}
	for from := range nodes {
		for to, b := range nodes {
			if to == from {
				continue
			}
			b.in.waitFor(t, "every message", func() bool {
				got := b.in.from(from)
				return len(got) > 0 && got[len(got)-1].Msg.Index == n
			})
			var last uint64
			for _, e := range b.in.from(from) {
				if e.Group != from {
					t.Fatalf("group %d in a stream from %d", e.Group, from)
				}
				if e.Msg.Index != 0 && e.Msg.Index != last+1 {
					t.Fatalf("stream %d->%d: message %d after %d", from, to, e.Msg.Index, last)
				}
				if e.Msg.Index != 0 {
					last = e.Msg.Index
				}
			}
		}
	}
}

func TestWrongSecretRefused(t *testing.T) {
	good := startNode(t, 1, testSecret, nil, "")
	var unreachable sync.WaitGroup
	unreachable.Add(1)
	var once sync.Once
	in := newInbox()
	logs := &logLines{more: make(chan struct{}, 1)}
	bad, err := New(Config{NodeID: 2, Secret: []byte("another secret, 16+ bytes"), Handler: in.handle, Logf: logs.logf,
		Unreachable: func(uint64) { once.Do(unreachable.Done) }})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	bad.SetPeer(1, good.tr.Addr().String())
	bad.Send(1, heartbeat(1, 1))
	good.log.waitFor(t, "refused")
	logs.waitFor(t, "does not know the cluster secret")
	unreachable.Wait()
	if got := good.in.from(2); len(got) != 0 {
		t.Fatalf("a peer with the wrong secret delivered %d messages", len(got))
	}
}

func TestHandshakeCases(t *testing.T) {
	cases := []struct {
		name       string
		dialSecret []byte
		to         uint64
		dialErr    error
		acceptErr  error
	}{
		{"ok", testSecret, 1, nil, nil},
		{"wrong secret", []byte("not the secret at all"), 1, ErrAuth, ErrAuth},
		{"wrong node", testSecret, 9, ErrWrongNode, ErrWrongNode},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			done := make(chan error, 1)
			var from uint64
			go func() {
				ss, err := acceptHandshake(b, testSecret, 1)
				from = ss.h.from
				if err != nil {
					_ = b.Close() // the dialer's pending read ends
				}
				done <- err
			}()
			_, dialErr := dialHandshake(a, tc.dialSecret, 5, tc.to)
			if tc.dialErr == nil && dialErr != nil || tc.dialErr != nil && !errors.Is(dialErr, tc.dialErr) {
				t.Fatalf("dialer: %v, want %v", dialErr, tc.dialErr)
			}
			if dialErr != nil {
				_ = a.Close() // the listener's pending read ends
			}
			acceptErr := <-done
			if tc.acceptErr == nil && acceptErr != nil || tc.acceptErr != nil && !errors.Is(acceptErr, tc.acceptErr) {
				t.Fatalf("listener: %v, want %v", acceptErr, tc.acceptErr)
			}
			if acceptErr == nil && from != 5 {
				t.Fatalf("listener saw node %d, want 5", from)
			}
		})
	}
	if _, err := parseHello([]byte("GET / HTTP/1.1\r\nHost: example.org\r\n\r\n")[:helloSize]); !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "not a LightQ cluster peer") {
		t.Fatalf("HTTP bytes: %v", err)
	}
}

func TestPartitionAndHeal(t *testing.T) {
	faults := NewFaults(1)
	defer faults.Stop()
	nodes := cluster(t, faults, 1, 2, 3)
	faults.Isolate(1)
	for i := uint64(1); i <= 100; i++ {
		if nodes[1].tr.Send(2, heartbeat(1, i)) {
			t.Fatal("a message left an isolated node")
		}
		nodes[2].tr.Send(1, heartbeat(2, i))
	}
	nodes[3].in.waitFor(t, "2->3 across the healthy side", func() bool {
		nodes[2].tr.Send(3, heartbeat(2, 1))
		return len(nodes[3].in.from(2)) > 0
	})
	if len(nodes[1].in.from(2)) != 0 || len(nodes[2].in.from(1)) != 0 {
		t.Fatal("messages crossed the partition")
	}
	faults.Heal()
	nodes[2].in.waitFor(t, "1->2 after the heal", func() bool {
		nodes[1].tr.Send(2, heartbeat(1, 1))
		return len(nodes[2].in.from(1)) > 0
	})
	if faults.Cut < 200 {
		t.Fatalf("Cut = %d, want at least 200", faults.Cut)
	}
}

func TestDuplicateDelayDrop(t *testing.T) {
	faults := NewFaults(42)
	defer faults.Stop()
	nodes := cluster(t, faults, 1, 2)
	nodes[2].in.waitFor(t, "a connection", func() bool {
		nodes[1].tr.Send(2, heartbeat(1, 0))
		return len(nodes[2].in.from(1)) > 0
	})
	faults.SetDuplicate(1)
	nodes[1].tr.Send(2, heartbeat(1, 1))
	nodes[2].in.waitFor(t, "both copies", func() bool { return count(nodes[2].in.from(1), 1) == 2 })

	faults.SetDuplicate(0)
	faults.SetDelay(1, 30*time.Millisecond)
	for i := uint64(10); i < 60; i++ {
		nodes[1].tr.Send(2, heartbeat(1, i))
	}
	nodes[2].in.waitFor(t, "every delayed message", func() bool {
		got := nodes[2].in.from(1)
		for i := uint64(10); i < 60; i++ {
			if count(got, i) != 1 {
				return false
			}
		}
		return true
	})
	faults.SetDelay(0, 0)
	faults.SetDrop(1)
	if nodes[1].tr.Send(2, heartbeat(1, 99)) {
		t.Fatal("Send reported a dropped message as sent")
	}
	if faults.Duplicated != 1 || faults.Delayed != 50 || faults.Dropped != 1 {
		t.Fatalf("counters: duplicated %d delayed %d dropped %d", faults.Duplicated, faults.Delayed, faults.Dropped)
	}
}

func count(envs []Envelope, seq uint64) int {
	n := 0
	for _, e := range envs {
		if e.Msg.Index == seq {
			n++
		}
	}
	return n
}

// TestRedialAfterRestart: the receiver goes away and comes back on the same address; the
// sender's messages flow again without anyone telling it.
func TestRedialAfterRestart(t *testing.T) {
	a := startNode(t, 1, testSecret, nil, "")
	b := startNode(t, 2, testSecret, nil, "")
	addr := b.tr.Addr().String()
	a.tr.SetPeer(2, addr)
	b.in.waitFor(t, "first delivery", func() bool {
		a.tr.Send(2, heartbeat(1, 1))
		return len(b.in.from(1)) > 0
	})
	if err := b.tr.Close(); err != nil {
		t.Fatal(err)
	}
	b2 := startNode(t, 2, testSecret, nil, addr)
	b2.in.waitFor(t, "delivery after the restart", func() bool {
		a.tr.Send(2, heartbeat(1, 2))
		return len(b2.in.from(1)) > 0
	})
}

func TestSendToUnknownPeer(t *testing.T) {
	var got []uint64
	tr, err := New(Config{NodeID: 1, Secret: testSecret, Handler: func(uint64, []Envelope) {}, Unreachable: func(n uint64) { got = append(got, n) }})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if tr.Send(7, heartbeat(1, 1)) || len(got) != 1 || got[0] != 7 {
		t.Fatalf("send to an unknown peer: unreachable %v", got)
	}
	for _, c := range []Config{{NodeID: 0, Secret: testSecret, Handler: func(uint64, []Envelope) {}}, {NodeID: 1, Secret: []byte("short"), Handler: func(uint64, []Envelope) {}}, {NodeID: 1, Secret: testSecret}} {
		if _, err := New(c); err == nil {
			t.Fatalf("New(%+v) accepted a bad config", c)
		}
	}
}

// TestPeerStats: what reaches a peer is counted as sent (messages and frame bytes) with the
// connection up; what cannot reach a dead address is counted as dropped, with the failed
// dials; a new address keeps a peer's counts, and RemovePeer forgets them.
func TestPeerStats(t *testing.T) {
	nodes := cluster(t, nil, 1, 2)
	nodes[2].in.waitFor(t, "ten messages from 1", func() bool {
		if len(nodes[2].in.from(1)) < 10 {
			nodes[1].tr.Send(2, heartbeat(1, 1))
		}
		return len(nodes[2].in.from(1)) >= 10
	})
	// The writer counts a frame once its Write returned, which may be after the receiver
	// has it: wait for the count to cover what arrived.
	got := uint64(len(nodes[2].in.from(1)))
	var st []PeerStats
	nodes[2].in.waitFor(t, "the sent count to cover what arrived", func() bool {
		st = nodes[1].tr.PeerStats()
		return len(st) == 1 && st[0].Sent >= got
	})
	if st[0].Node != 2 || st[0].Addr != nodes[2].tr.Addr().String() || !st[0].Connected || st[0].SentBytes < st[0].Sent*frameHeaderSize {
		t.Fatalf("stats %+v: want node 2 at %s, connected, %d or more sent in frames", st, nodes[2].tr.Addr(), got)
	}

	// A peer whose address nobody listens on: every message is dropped, every dial fails.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	nodes[1].tr.SetPeer(3, dead)
	var s3 PeerStats
	// The inbox's wait polls cond every few milliseconds: each turn sends one more, as
	// raft's ticks would.
	nodes[1].in.waitFor(t, "drops and failed dials towards a dead address", func() bool {
		nodes[1].tr.Send(3, heartbeat(1, 2))
		st = nodes[1].tr.PeerStats()
		if len(st) != 2 || st[1].Node != 3 {
			t.Fatalf("stats %+v: want nodes 2 and 3", st)
		}
		s3 = st[1]
		return s3.Dropped >= 3 && s3.DialFailures >= 2
	})
	if s3.Connected || s3.Sent != 0 || s3.Addr != dead {
		t.Fatalf("node 3 at a dead address: %+v", s3)
	}

	// Node 2 moves: the counts stay with it.
	nodes[1].tr.SetPeer(2, dead)
	if st := nodes[1].tr.PeerStats(); st[0].Node != 2 || st[0].Addr != dead || st[0].Sent < got {
		t.Fatalf("after a new address: %+v", st[0])
	}
	nodes[1].tr.RemovePeer(3)
	nodes[1].tr.SetPeer(3, dead)
	if st := nodes[1].tr.PeerStats(); st[1].Node != 3 || st[1].Dropped != 0 || st[1].DialFailures != 0 {
		t.Fatalf("a removed peer added again starts from zero: %+v", st[1])
	}
}
