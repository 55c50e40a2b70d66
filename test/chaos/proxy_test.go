package chaos

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// helloFrom is the start of the cluster handshake a broker with node id from sends to node
// to (cluster/transport/handshake.go), what ClusterHello reads.
func helloFrom(from, to uint64) []byte {
	b := append([]byte("LQRC"), 1)
	b = binary.BigEndian.AppendUint64(b, from)
	b = binary.BigEndian.AppendUint64(b, to)
	return append(b, make([]byte, 16)...) // the nonce
}

func newTestProxy(t *testing.T, cfg ProxyConfig, backend string) *Proxy {
	t.Helper()
	p, err := NewProxy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.SetBackend(backend)
	t.Cleanup(func() { p.Close() })
	return p
}

func dialProxy(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// dialAs dials p as broker from (to p's node 1) and checks that its hello is echoed.
func dialAs(t *testing.T, p *Proxy, from uint64) net.Conn {
	t.Helper()
	c := dialProxy(t, p)
	if err := roundTrip(c, string(helloFrom(from, 1))); err != nil {
		t.Fatalf("hello from node %d: %v", from, err)
	}
	return c
}

// expectClosed checks that the proxy ends c (EOF or a reset) rather than carrying bytes.
func expectClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = c.Write([]byte("x")) // may fail already: the reset came first
	var b [1]byte
	n, err := c.Read(b[:])
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("%s: read %d bytes, err %v; want the connection closed", what, n, err)
	}
}

func TestClusterHello(t *testing.T) {
	good := helloFrom(7, 1)
	cases := []struct {
		name string
		b    []byte
		id   uint64
		ok   bool
	}{
		{"hello", good, 7, true},
		{"prefix only", good[:21], 7, true},
		{"short", good[:20], 0, false},
		{"wrong magic", append([]byte("LQRX"), good[4:]...), 0, false},
		{"wrong version", append(append([]byte("LQRC"), 2), good[5:]...), 0, false},
		{"node 0", helloFrom(0, 1), 0, false},
		{"client frame", []byte{0, 0, 0, 12, 0x4c, 0x51, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0}, 0, false},
	}
	for _, tc := range cases {
		id, ok := ClusterHello.Parse(tc.b)
		if id != tc.id || ok != tc.ok {
			t.Errorf("%s: Parse = %d, %v; want %d, %v", tc.name, id, ok, tc.id, tc.ok)
		}
	}
}

func TestProxyForwardsAndFollowsBackend(t *testing.T) {
	e1, e2 := startEcho(t), startEcho(t)
	p := newTestProxy(t, ProxyConfig{}, e1.addr())
	c := dialProxy(t, p)
	if err := roundTrip(c, "hello"); err != nil {
		t.Fatal(err)
	}
	p.SetBackend(e2.addr())
	if err := roundTrip(c, "same backend"); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(dialProxy(t, p), "second"); err != nil {
		t.Fatal(err)
	}
	if e1.accepted.Load() != 1 || e2.accepted.Load() != 1 {
		t.Fatalf("backends accepted %d and %d connections, want 1 each", e1.accepted.Load(), e2.accepted.Load())
	}
	// Forwarded counts a chunk after its write returns, which may be after the client read it.
	want := int64(2 * len("hellosame backendsecond"))
	waitFor(t, 10*time.Second, "every byte counted", func() bool { return p.Forwarded() >= want })
	if got := p.Forwarded(); got != want {
		t.Errorf("Forwarded = %d, want %d", got, want)
	}
	p.SetBackend("")
	expectClosed(t, dialProxy(t, p), "no backend")
	p.CutAll()
	expectClosed(t, c, "after CutAll")
	waitFor(t, 10*time.Second, "every connection closed", func() bool { return p.Open() == 0 })
}

// TestProxyBlackhole cuts node 1 (the proxy's) off under Blackhole: a connection open before
// the cut carries nothing until the heal, then delivers what was held, in order; a connection
// made during the cut reaches the backend only at the heal.
func TestProxyBlackhole(t *testing.T) {
	e := startEcho(t)
	f := NewFaults()
	p := newTestProxy(t, ProxyConfig{Node: 1, Faults: f, Identify: &ClusterHello}, e.addr())
	c := dialAs(t, p, 2)

	f.Isolate(Blackhole, 1)
	if !f.Cut() {
		t.Fatal("Cut() false after Isolate")
	}
	before := e.read.Load()
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the chunk held", func() bool { return p.Held() == 1 })
	if got := e.read.Load(); got != before {
		t.Fatalf("backend read %d bytes during the cut", got-before)
	}

	c2 := dialProxy(t, p)
	if _, err := c2.Write(helloFrom(3, 1)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the new connection held", func() bool { return p.Held() == 2 })
	if n := e.accepted.Load(); n != 1 {
		t.Fatalf("backend accepted %d connections during the cut, want only the one before it", n)
	}

	f.Heal()
	got := make([]byte, 4)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "held" {
		t.Fatalf("after the heal read %q, %v; want the held bytes", got, err)
	}
	hello := make([]byte, len(helloFrom(3, 1)))
	_ = c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c2, hello); err != nil {
		t.Fatalf("connection made during the cut, after the heal: %v", err)
	}
	if err := roundTrip(c, "after"); err != nil {
		t.Fatal(err)
	}
	if p.Held() != 0 {
		t.Errorf("Held = %d after the heal", p.Held())
	}
}

// TestProxyCutsByDialer: a connection is cut when its dialer (named by its hello) and the
// proxy's node are on different sides, whichever of them is isolated.
func TestProxyCutsByDialer(t *testing.T) {
	e := startEcho(t)
	f := NewFaults()
	p := newTestProxy(t, ProxyConfig{Node: 1, Faults: f, Identify: &ClusterHello}, e.addr())
	from2, from3 := dialAs(t, p, 2), dialAs(t, p, 3)

	f.Isolate(Reset, 3)
	expectClosed(t, from3, "dialer 3 isolated")
	if err := roundTrip(from2, "2 is on 1's side"); err != nil {
		t.Fatalf("dialer 2 while 3 is isolated: %v", err)
	}
	expectClosed(t, dialAs0(t, p, 3), "new connection from isolated 3")
	if err := roundTrip(dialAs(t, p, 2), "new from 2"); err != nil {
		t.Fatal(err)
	}

	// Two groups: {1, 3} and {2}.
	f.Partition(Reset, []uint64{1, 3}, []uint64{2})
	expectClosed(t, from2, "dialer 2 on the other side")
	if err := roundTrip(dialAs(t, p, 3), "3 with 1"); err != nil {
		t.Fatal(err)
	}

	f.Heal()
	if f.Cut() {
		t.Fatal("Cut() true after Heal")
	}
	if err := roundTrip(dialAs(t, p, 2), "healed"); err != nil {
		t.Fatal(err)
	}
	if n := p.Unidentified(); n != 0 {
		t.Errorf("Unidentified = %d, every dialer sent a hello", n)
	}
}

// dialAs0 dials p and sends node from's hello without waiting for its echo.
func dialAs0(t *testing.T, p *Proxy, from uint64) net.Conn {
	t.Helper()
	c := dialProxy(t, p)
	if _, err := c.Write(helloFrom(from, 1)); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestProxyUnidentified: a dialer that sends no hello counts as unidentified and sits on
// the unnamed side: cut when the proxy's node is isolated, not when another node is.
func TestProxyUnidentified(t *testing.T) {
	e := startEcho(t)
	f := NewFaults()
	p := newTestProxy(t, ProxyConfig{Node: 1, Faults: f, Identify: &ClusterHello}, e.addr())
	c := dialProxy(t, p)
	msg := "not a cluster hello, 21+"
	if err := roundTrip(c, msg); err != nil {
		t.Fatal(err)
	}
	if p.Unidentified() != 1 {
		t.Fatalf("Unidentified = %d, want 1", p.Unidentified())
	}
	f.Isolate(Reset, 2)
	if err := roundTrip(c, "2 isolated"); err != nil {
		t.Fatal(err)
	}
	f.Isolate(Reset, 1)
	expectClosed(t, c, "the proxy's node isolated")
}

// TestProxyIdentifyTimeout: a dialer that sends fewer bytes than the prefix is forwarded
// after the timeout, unidentified.
func TestProxyIdentifyTimeout(t *testing.T) {
	e := startEcho(t)
	p := newTestProxy(t, ProxyConfig{Node: 1, Faults: NewFaults(), Identify: &ClusterHello,
		IdentifyTimeout: 50 * time.Millisecond}, e.addr())
	if err := roundTrip(dialProxy(t, p), "short"); err != nil {
		t.Fatal(err)
	}
	if p.Unidentified() != 1 {
		t.Fatalf("Unidentified = %d, want 1", p.Unidentified())
	}
}

func TestProxyConfigErrors(t *testing.T) {
	if _, err := NewProxy(ProxyConfig{Identify: &Identify{}}); err == nil {
		t.Error("Identify without PrefixLen and Parse accepted")
	}
	if _, err := NewProxy(ProxyConfig{Listen: "256.0.0.1:0"}); err == nil {
		t.Error("bad listen address accepted")
	}
}
