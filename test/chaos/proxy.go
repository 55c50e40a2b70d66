package chaos

import (
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// CutMode is how a network partition treats the connections that cross it.
type CutMode int

const (
	// Blackhole holds every connection across the cut open and carries no byte in either
	// direction until Heal; the bytes already read are delivered then, in order. This is a
	// network that drops packets while TCP keeps retransmitting: the peers see nothing
	// fail, only silence (and their writes block once the socket buffers fill).
	Blackhole CutMode = iota
	// Reset closes every connection across the cut with an RST, and every new one at once,
	// until Heal: a network that answers with "connection refused" or resets.
	Reset
)

func (m CutMode) String() string {
	if m == Reset {
		return "reset"
	}
	return "blackhole"
}

// Faults is the network between the brokers of one cluster, as their proxies see it: which
// nodes are cut off from which. A connection from node A to node B (dialed at B's proxy)
// crosses the cut when A and B are on different sides. Nodes named in no group of the
// current partition are on the side of everything unnamed, as is a dialer the proxy could
// not identify.
//
// Safe for concurrent use.
type Faults struct {
	mu      sync.Mutex
	side    map[uint64]int // node -> side of the cut; absent: side 0
	mode    CutMode
	changed chan struct{} // closed and replaced at every change, to wake held pipes
	proxies []*Proxy
}

// NewFaults returns a healed network.
func NewFaults() *Faults {
	return &Faults{side: map[uint64]int{}, changed: make(chan struct{})}
}

// Partition splits the network: each group is a side of its own, and every node not named
// is on one more side with the rest. Connections across a side boundary are then treated
// as mode says. A second Partition replaces the first.
func (f *Faults) Partition(mode CutMode, groups ...[]uint64) {
	f.mu.Lock()
	f.side = map[uint64]int{}
	for i, g := range groups {
		for _, id := range g {
			f.side[id] = i + 1
		}
	}
	f.mode = mode
	close(f.changed)
	f.changed = make(chan struct{})
	proxies := slices.Clone(f.proxies)
	f.mu.Unlock()
	if mode == Reset {
		for _, p := range proxies {
			p.resetCrossing()
		}
	}
}

// Isolate cuts the nodes named off from all the others.
func (f *Faults) Isolate(mode CutMode, nodes ...uint64) { f.Partition(mode, nodes) }

// Heal removes the partition: held connections carry their bytes again.
func (f *Faults) Heal() { f.Partition(Blackhole) }

// Cut reports whether the network is partitioned now.
func (f *Faults) Cut() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.side) > 0
}

// state says whether a connection from node from to node to crosses the cut, in which mode,
// and returns the channel closed at the next change.
func (f *Faults) state(from, to uint64) (blocked bool, mode CutMode, changed <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.side[from] != f.side[to], f.mode, f.changed
}

func (f *Faults) add(p *Proxy) {
	f.mu.Lock()
	f.proxies = append(f.proxies, p)
	f.mu.Unlock()
}

// Identify learns, from the first bytes a dialer sends, which node dialed: PrefixLen bytes
// are read before the backend is dialed, given to Parse, and then forwarded.
type Identify struct {
	PrefixLen int
	Parse     func(prefix []byte) (node uint64, ok bool)
}

// ClusterHello identifies a broker dialing a peer's cluster port by the first 21 bytes of
// the cluster handshake (cluster/transport/handshake.go): magic "LQRC", version 1, the
// dialer's node id (u64, big-endian), the listener's. The bytes are only read, never changed:
// the handshake's MACs cover them.
var ClusterHello = Identify{PrefixLen: 4 + 1 + 8 + 8, Parse: func(b []byte) (uint64, bool) {
	if len(b) < 21 || string(b[:4]) != "LQRC" || b[4] != 1 {
		return 0, false
	}
	var id uint64
	for _, c := range b[5:13] {
		id = id<<8 | uint64(c)
	}
	return id, id != 0
}}

// ProxyConfig configures a Proxy.
type ProxyConfig struct {
	// Listen is the address to listen on ("127.0.0.1:0" when empty).
	Listen string
	// Node is the node id of the broker behind the proxy; Faults decides which connections
	// to it cross a cut. Nil Faults: the proxy only forwards.
	Node   uint64
	Faults *Faults
	// Identify, when set, names the dialer of each connection from its first bytes.
	Identify *Identify
	// IdentifyTimeout bounds the wait for those bytes (default 10s).
	IdentifyTimeout time.Duration
}

// Proxy forwards the TCP connections made to its listener to a backend address, and applies
// Faults to them. The backend may change (SetBackend): a restarted broker on a new port, or
// none while it is down (new connections are closed at once, as a closed port refuses).
//
// Safe for concurrent use. Each connection costs two goroutines and two 32 KiB buffers.
type Proxy struct {
	cfg ProxyConfig
	ln  net.Listener
	wg  sync.WaitGroup

	mu      sync.Mutex
	backend string
	conns   map[*proxyConn]struct{}
	closed  bool

	accepted     atomic.Int64
	unidentified atomic.Int64
	held         atomic.Int64 // chunks and connections waiting for a heal, now
	forwarded    atomic.Int64 // bytes written to either side
}

// proxyConn is one forwarded connection.
type proxyConn struct {
	from  uint64 // dialer's node id; 0: unknown
	front net.Conn
	done  chan struct{} // closed by close

	mu     sync.Mutex
	back   net.Conn // nil until dialed
	closed bool
}

// close closes both sides, with an RST when reset.
func (c *proxyConn) close(reset bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	for _, nc := range []net.Conn{c.front, c.back} {
		if nc == nil {
			continue
		}
		if tc, ok := nc.(*net.TCPConn); ok && reset {
			_ = tc.SetLinger(0)
		}
		_ = nc.Close()
	}
	close(c.done)
}

// setBack records the dialed backend connection, or closes it and reports false when c was
// closed meanwhile (a Reset cut, CutAll).
func (c *proxyConn) setBack(back net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		_ = back.Close()
		return false
	}
	c.back = back
	return true
}

// NewProxy listens and starts forwarding. Close stops it.
func NewProxy(cfg ProxyConfig) (*Proxy, error) {
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.IdentifyTimeout <= 0 {
		cfg.IdentifyTimeout = 10 * time.Second
	}
	if cfg.Identify != nil && (cfg.Identify.PrefixLen <= 0 || cfg.Identify.Parse == nil) {
		return nil, errors.New("chaos proxy: Identify needs a PrefixLen and a Parse")
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("chaos proxy: %w", err)
	}
	p := &Proxy{cfg: cfg, ln: ln, conns: map[*proxyConn]struct{}{}}
	if cfg.Faults != nil {
		cfg.Faults.add(p)
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address dialers use.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetBackend makes new connections go to addr ("": none; they are closed at once).
// Connections already forwarded stay with the old backend until it closes them.
func (p *Proxy) SetBackend(addr string) {
	p.mu.Lock()
	p.backend = addr
	p.mu.Unlock()
}

// Backend is the current backend address.
func (p *Proxy) Backend() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.backend
}

// Accepted counts the connections accepted so far.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Unidentified counts the connections whose dialer Identify could not name: a cut treats
// them as coming from the unnamed side.
func (p *Proxy) Unidentified() int64 { return p.unidentified.Load() }

// Held is the number of chunks read from one side, and of connections not yet dialed
// through, that a Blackhole cut holds back now.
func (p *Proxy) Held() int64 { return p.held.Load() }

// Forwarded counts the bytes written to either side so far.
func (p *Proxy) Forwarded() int64 { return p.forwarded.Load() }

// Open is the number of connections forwarded (or held) now.
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// CutAll resets every open connection (RST to both sides), as the death of the host would.
func (p *Proxy) CutAll() {
	for _, c := range p.snapshot() {
		c.close(true)
	}
}

// Close stops listening, resets every connection and waits for the goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.CutAll()
	p.wg.Wait()
	return err
}

func (p *Proxy) snapshot() []*proxyConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		out = append(out, c)
	}
	return out
}

// resetCrossing resets the connections that cross the current cut (a Reset partition).
func (p *Proxy) resetCrossing() {
	for _, c := range p.snapshot() {
		if blocked, mode, _ := p.cfg.Faults.state(c.from, p.cfg.Node); blocked && mode == Reset {
			c.close(true)
		}
	}
}

// pass waits until c may carry bytes: at once when no cut separates its ends; until the
// heal under Blackhole. It returns false when c is closed meanwhile, or closes it (RST) under
// Reset.
func (p *Proxy) pass(c *proxyConn) bool {
	if p.cfg.Faults == nil {
		return true
	}
	for {
		blocked, mode, changed := p.cfg.Faults.state(c.from, p.cfg.Node)
		if !blocked {
			return true
		}
		if mode == Reset {
			c.close(true)
			return false
		}
		p.held.Add(1)
		select {
		case <-changed:
			p.held.Add(-1)
		case <-c.done:
			p.held.Add(-1)
			return false
		}
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		front, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		c := &proxyConn{front: front, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			front.Close()
			return
		}
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(c)
	}
}

// serve identifies the dialer, waits for the cut (if any) to let it through, dials the
// backend and forwards both ways.
func (p *Proxy) serve(c *proxyConn) {
	defer p.wg.Done()
	defer func() {
		c.close(false)
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	var prefix []byte
	if id := p.cfg.Identify; id != nil {
		prefix = make([]byte, id.PrefixLen)
		_ = c.front.SetReadDeadline(time.Now().Add(p.cfg.IdentifyTimeout))
		n, err := io.ReadFull(c.front, prefix)
		_ = c.front.SetReadDeadline(time.Time{})
		prefix = prefix[:n]
		if err != nil && n == 0 {
			return
		}
		if from, ok := id.Parse(prefix); ok {
			c.from = from
		} else {
			p.unidentified.Add(1)
		}
	}
	// A connection that a cut blocks is not dialed through: the backend sees nothing until
	// the heal, as behind a real partition.
	if !p.pass(c) {
		return
	}
	backend := p.Backend()
	if backend == "" {
		return
	}
	back, err := net.DialTimeout("tcp", backend, 5*time.Second)
	if err != nil {
		return
	}
	if !c.setBack(back) {
		return
	}
	if len(prefix) > 0 {
		if _, err := back.Write(prefix); err != nil {
			return
		}
		p.forwarded.Add(int64(len(prefix)))
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(c, back, c.front) }()
	go func() { defer wg.Done(); p.pipe(c, c.front, back) }()
	wg.Wait()
}

// pipe copies src to dst through the cut: each chunk read waits in pass before it is
// written, so a Blackhole cut holds it, and then reads nothing more from src (TCP's flow
// control then stops the sender). It closes the connection (both sides) when either side ends.
func (p *Proxy) pipe(c *proxyConn, dst, src net.Conn) {
	defer c.close(false)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.pass(c) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			p.forwarded.Add(int64(n))
		}
		if err != nil {
			return
		}
	}
}
