package transport

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Config configures a Transport. NodeID, Secret and Handler are required.
type Config struct {
	NodeID uint64
	// Listen is the address of the cluster port ("127.0.0.1:0" picks a port); empty: no
	// listener (a transport that only sends, for tests).
	Listen string
	// Secret is the cluster secret every broker of the cluster shares (at least 16 bytes).
	Secret []byte
	// Handler receives the envelopes of each frame, on that peer connection's goroutine. It
	// owns the messages: their entries' data and contexts point into the frame's buffer,
	// which the transport gives up to them (it is not reused).
	Handler func(from uint64, envs []Envelope)
	// Unreachable, if set, is told when a message to node was dropped (queue full, peer not
	// connected, write failed), so raft can be told with ReportUnreachable. It may be called
	// from any goroutine and must not block.
	Unreachable func(node uint64)
	// Logf receives connection events (dial failures, refused handshakes). Nil: silent.
	Logf func(format string, args ...any)
	// QueueLen is the per-peer send queue, in messages (default 4096). Past it, Send drops.
	QueueLen int
	// MaxBatchBytes is how much one write gathers from the queue (default 1 MiB).
	MaxBatchBytes int
	// DialTimeout bounds a dial and its handshake (default 2 s); HandshakeTimeout bounds the
	// listener's side (default 5 s); WriteTimeout bounds one frame write (default 5 s).
	DialTimeout, HandshakeTimeout, WriteTimeout time.Duration
	// FeaturesWait is how long after a dial's handshake PeerFeatures says the peer's
	// features are not known yet when its features message has not arrived (default 5 s):
	// a listener of this release sends it at once, one of the previous release never does,
	// and only the wait tells the two apart.
	FeaturesWait time.Duration
	// RedialMin and RedialMax bound the backoff between dials to a dead peer (default 50 ms,
	// 1 s), with jitter.
	RedialMin, RedialMax time.Duration
	// Segments, if set, gives the segment log of a group this broker holds a replica of,
	// for the segment streams of followers catching up (segments.go); nil for none. It may
	// be called from any goroutine.
	Segments func(group uint64) SegmentSource
	// Faults, if set, is consulted for every message sent (tests only).
	Faults *Faults
	// NoFeatures makes the listener send no features message after its handshakes, as a
	// broker of the previous release (tests only: a fake old peer). Its dialers still read
	// their peers' features.
	NoFeatures bool
}

func (c *Config) withDefaults() (Config, error) {
	cfg := *c
	if cfg.NodeID == 0 {
		return cfg, errors.New("transport: node id 0 is not a node (raft reserves it)")
	}
	if len(cfg.Secret) < 16 {
		return cfg, fmt.Errorf("transport: cluster secret of %d bytes; want at least 16", len(cfg.Secret))
	}
	if cfg.Handler == nil {
		return cfg, errors.New("transport: a handler is required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.DialTimeout, 2*time.Second)
	def(&cfg.HandshakeTimeout, 5*time.Second)
	def(&cfg.WriteTimeout, 5*time.Second)
	def(&cfg.FeaturesWait, 5*time.Second)
	def(&cfg.RedialMin, 50*time.Millisecond)
	def(&cfg.RedialMax, time.Second)
	if cfg.QueueLen <= 0 {
		cfg.QueueLen = 4096
	}
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = 1 << 20
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.Unreachable == nil {
		cfg.Unreachable = func(uint64) {}
	}
	return cfg, nil
}

// Transport is one broker's end of the cluster network. See the package doc.
type Transport struct {
	cfg Config
	ln  net.Listener

	mu       sync.Mutex
	peers    map[uint64]*peer
	counters map[uint64]*peerCounters // per peer, kept across a change of its address
	inbound  map[net.Conn]struct{}
	closed   bool
	done     chan struct{} // closed by Close (ends a stalled segment stream: Faults)

	wg sync.WaitGroup
}

// New starts a transport: its listener (if Config.Listen is set) and no peers yet.
func New(c Config) (*Transport, error) {
	cfg, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	t := &Transport{cfg: cfg, peers: map[uint64]*peer{}, counters: map[uint64]*peerCounters{}, inbound: map[net.Conn]struct{}{}, done: make(chan struct{})}
	if cfg.Listen != "" {
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("cluster listener: %w", err)
		}
		t.ln = ln
		t.wg.Add(1)
		go t.acceptLoop()
	}
	return t, nil
}

// Addr is the listener's address (nil without a listener).
func (t *Transport) Addr() net.Addr {
	if t.ln == nil {
		return nil
	}
	return t.ln.Addr()
}

// SetPeer adds node at addr, or moves it to a new address (its connection is redialled).
func (t *Transport) SetPeer(node uint64, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || node == t.cfg.NodeID {
		return
	}
	if p := t.peers[node]; p != nil {
		if p.addr == addr {
			return
		}
		p.stop()
	}
	c := t.counters[node]
	if c == nil {
		c = new(peerCounters)
		t.counters[node] = c
	}
	p := newPeer(t, node, addr, c)
	t.peers[node] = p
	t.wg.Add(1)
	go p.run()
}

// RemovePeer stops sending to node and closes its connection.
func (t *Transport) RemovePeer(node uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.peers[node]; p != nil {
		p.stop()
		delete(t.peers, node)
	}
	delete(t.counters, node)
}

// Send queues envs for node and returns at once. It reports false when it dropped any of them
// (unknown peer, full queue, injected fault), after telling Config.Unreachable. The transport
// owns envs' messages afterwards: the caller must not change them (nor their entries' data).
func (t *Transport) Send(node uint64, envs ...Envelope) bool {
	t.mu.Lock()
	p := t.peers[node]
	t.mu.Unlock()
	if p == nil {
		t.cfg.Unreachable(node)
		return false
	}
	ok := true
	for _, e := range envs {
		if f := t.cfg.Faults; f != nil {
			if !f.apply(t.cfg.NodeID, node, e, p.enqueue) {
				ok = false
			}
			continue
		}
		if !p.enqueue(e) {
			ok = false
		}
	}
	if !ok {
		t.cfg.Unreachable(node)
	}
	return ok
}

// Close stops the listener, every peer and every inbound connection, and waits for their
// goroutines.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	close(t.done)
	for id, p := range t.peers {
		p.stop()
		delete(t.peers, id)
	}
	for c := range t.inbound {
		_ = c.Close() // unblocks its reader; the error is the point
	}
	t.mu.Unlock()
	var err error
	if t.ln != nil {
		err = t.ln.Close()
	}
	t.wg.Wait()
	return err
}

func (t *Transport) acceptLoop() {
	defer t.wg.Done()
	for {
		c, err := t.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			t.cfg.Logf("cluster accept: %v", err)
			continue
		}
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			_ = c.Close() // shutting down
			return
		}
		t.inbound[c] = struct{}{}
		t.wg.Add(1)
		t.mu.Unlock()
		go t.serveInbound(c)
	}
}

// serveInbound authenticates one dialer and hands its frames to the handler until the
// connection ends.
func (t *Transport) serveInbound(c net.Conn) {
	defer t.wg.Done()
	defer func() {
		t.mu.Lock()
		delete(t.inbound, c)
		t.mu.Unlock()
		_ = c.Close() // done with it either way
	}()
	_ = c.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout)) // a failure shows on the next read
	ss, err := acceptHandshake(c, t.cfg.Secret, t.cfg.NodeID)
	if err != nil {
		t.cfg.Logf("cluster connection from %s refused: %v", c.RemoteAddr(), err)
		return
	}
	from := ss.h.from
	if ss.h.magic == segMagic {
		t.serveSegments(c, from)
		return
	}
	if !t.cfg.NoFeatures {
		// On the direction the stream does not otherwise use (handshake.go); the deadline
		// above still bounds it. A dialer of the previous release never reads it.
		if _, err := c.Write(appendFeatures(nil, t.cfg.Secret, &ss, Features)); err != nil {
			t.cfg.Logf("cluster connection from node %d: send features: %v", from, err)
			return
		}
	}
	_ = c.SetDeadline(time.Time{}) // raft heartbeats keep a live stream busy
	r := bufio.NewReaderSize(c, 64<<10)
	var hdr [frameHeaderSize]byte
	var buf []byte
	var (
		envs []Envelope
		slab entrySlab
	)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				t.cfg.Logf("cluster stream from node %d: %v", from, err)
			}
			return
		}
		size, err := frameSize(hdr[:])
		if err != nil {
			t.cfg.Logf("cluster stream from node %d: %v", from, err)
			return
		}
		if cap(buf) < size {
			buf = make([]byte, size)
		}
		buf = buf[:size]
		copy(buf, hdr[:])
		if _, err := io.ReadFull(r, buf[frameHeaderSize:]); err != nil {
			t.cfg.Logf("cluster stream from node %d: frame cut short: %v", from, err)
			return
		}
		envs = envs[:0]
		aliased, err := decodeFrameInto(buf, &slab, func(e Envelope) { envs = append(envs, e) })
		if err != nil {
			t.cfg.Logf("cluster stream from node %d: %v", from, err)
			return
		}
		t.cfg.Handler(from, envs)
		clear(envs) // the handler owns the messages; drop our references
		if aliased || cap(buf) > 4<<20 {
			// The messages' entries point into buf (the follower's only copy of the data
			// before the segment file): the next frame gets a buffer of its own. Else one
			// huge frame would pin its buffer for the connection's life.
			buf = nil
		}
	}
}

// backoff returns the wait before redial attempt n (from 0), with full jitter.
func backoff(lo, hi time.Duration, n int) time.Duration {
	d := lo << min(n, 20)
	if d > hi || d <= 0 {
		d = hi
	}
	return d/2 + rand.N(d/2+1)
}
