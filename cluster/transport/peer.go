package transport

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// peer is the sending side towards one node: a bounded queue and the goroutine that dials,
// authenticates and writes batches of the queue as frames.
//
// Concurrency: enqueue is safe from any goroutine; stop may be called once (under the
// transport's mutex); everything else runs on run's goroutine.
type peer struct {
	t    *Transport
	node uint64
	addr string

	queue    chan Envelope
	done     chan struct{}
	counters *peerCounters // shared with the transport (PeerStats)

	mu   sync.Mutex // guards conn, for stop to close it under a blocked write
	conn net.Conn
	// features are what the listener at the other end of conn announced (handshake.go), 0
	// while it has not (a broker of the previous release never does) and without a
	// connection; announced says the message came. Stored by conn's features reader under
	// mu (only while conn is still the peer's), reset by closeConn and dial; read by anyone
	// (PeerFeatures) and by run. connected is when conn's handshake ended (UnixNano; 0
	// without a connection), for PeerFeatures to tell "not yet" from "never".
	features  atomic.Uint64
	announced atomic.Bool
	connected atomic.Int64
}

func newPeer(t *Transport, node uint64, addr string, c *peerCounters) *peer {
	return &peer{t: t, node: node, addr: addr, queue: make(chan Envelope, t.cfg.QueueLen), done: make(chan struct{}), counters: c}
}

// enqueue queues e without blocking; false when the queue is full or the peer stopped.
func (p *peer) enqueue(e Envelope) bool {
	select {
	case <-p.done:
		p.counters.dropped.Add(1)
		return false
	default:
	}
	select {
	case p.queue <- e:
		return true
	default:
		p.counters.dropped.Add(1)
		return false
	}
}

func (p *peer) stop() {
	close(p.done)
	p.mu.Lock()
	if p.conn != nil {
		_ = p.conn.Close() // unblocks a write in progress
	}
	p.mu.Unlock()
}

// run is the peer's goroutine: wait for a message, make sure a connection is up (dropping
// what is queued while it is not: raft resends), write everything queued as one frame (one
// writev: the entries' large data goes from where it is, see vecFrame).
func (p *peer) run() {
	defer p.t.wg.Done()
	defer p.closeConn()
	var (
		batch    []Envelope
		frame    vecFrame
		failures int
		retryAt  time.Time
	)
	for {
		var first Envelope
		select {
		case <-p.done:
			return
		case first = <-p.queue:
		}
		batch = append(batch[:0], first)
		size := envelopeSize(&first)
	gather:
		for size < p.t.cfg.MaxBatchBytes {
			select {
			case e := <-p.queue:
				batch = append(batch, e)
				size += envelopeSize(&e)
			default:
				break gather
			}
		}
		conn := p.current()
		if conn == nil && time.Now().After(retryAt) {
			var err error
			if conn, err = p.dial(); err != nil {
				p.t.cfg.Logf("cluster: node %d at %s: %v", p.node, p.addr, err)
				p.counters.dialFailures.Add(1)
				retryAt = time.Now().Add(backoff(p.t.cfg.RedialMin, p.t.cfg.RedialMax, failures))
				failures++
			} else {
				failures = 0
			}
		}
		if conn == nil {
			p.counters.dropped.Add(uint64(len(batch)))
			p.t.cfg.Unreachable(p.node)
			clear(batch)
			continue
		}
		batch = p.withFeatures(batch)
		if len(batch) == 0 {
			continue
		}
		if err := frame.build(batch); err != nil {
			p.t.cfg.Logf("cluster: node %d: %v", p.node, err)
			p.counters.dropped.Add(uint64(len(batch)))
			p.t.cfg.Unreachable(p.node)
			clear(batch)
			continue
		}
		n := uint64(len(batch))
		clear(batch) // the frame refers to what it needs: its bytes and the entries' data
		frameBytes := frame.size
		// A deadline that cannot be set shows as a failed write.
		_ = conn.SetWriteDeadline(time.Now().Add(p.t.cfg.WriteTimeout))
		if _, err := frame.bufs.WriteTo(conn); err != nil { // one writev
			if !errors.Is(err, net.ErrClosed) {
				p.t.cfg.Logf("cluster: node %d: write: %v", p.node, err)
			}
			p.closeConn()
			p.counters.dropped.Add(n)
			p.t.cfg.Unreachable(p.node)
		} else {
			p.counters.sent.Add(n)
			p.counters.sentBytes.Add(uint64(frameBytes))
		}
		frame.reset() // do not pin the entries until the next frame
		if cap(frame.buf) > 4<<20 {
			frame.buf = nil
		}
	}
}

func (p *peer) current() net.Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conn
}

func (p *peer) dial() (net.Conn, error) {
	d := net.Dialer{Timeout: p.t.cfg.DialTimeout}
	c, err := d.Dial("tcp", p.addr)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(p.t.cfg.DialTimeout)) // a failure shows in the handshake
	ss, err := dialHandshake(c, p.t.cfg.Secret, p.t.cfg.NodeID, p.node)
	if err != nil {
		_ = c.Close() // refused; the error says why
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		_ = c.Close() // stopped while dialling
		return nil, net.ErrClosed
	default:
	}
	p.conn = c
	p.features.Store(0)
	p.announced.Store(false)
	p.connected.Store(time.Now().UnixNano())
	p.t.wg.Add(1)
	go p.readFeatures(c, ss)
	return c, nil
}

// readFeatures reads the listener's features message on c (handshake.go) and records it
// while c is the peer's connection, then reads c until it closes (nothing else comes). A
// listener of the previous release sends nothing: it waits until c closes, and the peer
// keeps no features. One per connection; c's close (closeConn, stop) ends it.
func (p *peer) readFeatures(c net.Conn, ss session) {
	defer p.t.wg.Done()
	var b [featuresSize]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return // closed, or a listener of the previous release that closed it
	}
	f, err := parseFeatures(b[:], p.t.cfg.Secret, &ss)
	if err != nil {
		p.t.cfg.Logf("cluster: node %d at %s: %v", p.node, p.addr, err)
		_ = c.Close() // the writer redials
		return
	}
	p.mu.Lock()
	if p.conn == c {
		p.features.Store(f)
		p.announced.Store(true)
	}
	p.mu.Unlock()
	_, _ = io.Copy(io.Discard, c) // until it closes
}

// knownFeatures are the features of the current connection and whether they are known:
// announced, or none announced within FeaturesWait of the handshake (the previous
// release); not known without a connection or while the wait runs. Under mu, which every
// change of the three fields holds, so that they are read as one.
func (p *peer) knownFeatures() (uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.announced.Load() {
		return p.features.Load(), true
	}
	at := p.connected.Load()
	if at == 0 {
		return 0, false
	}
	return p.features.Load(), time.Since(time.Unix(0, at)) >= p.t.cfg.FeaturesWait
}

// withFeatures drops from batch (in place) the messages whose Needs the connection's
// features lack, counting them dropped and telling Unreachable: a message prepared for a
// peer that announced a feature is not written to a connection to one that did not (a
// broker restarted on the previous release since).
func (p *peer) withFeatures(batch []Envelope) []Envelope {
	f := p.features.Load()
	n := 0
	var missing uint64
	for i := range batch {
		if m := batch[i].Needs &^ f; m != 0 {
			missing |= m
			continue
		}
		batch[n] = batch[i]
		n++
	}
	if n < len(batch) {
		p.t.cfg.Logf("cluster: node %d: %d messages dropped: they need features %#x the connection lacks", p.node, len(batch)-n, missing)
		p.counters.dropped.Add(uint64(len(batch) - n))
		p.t.cfg.Unreachable(p.node)
		clear(batch[n:])
	}
	return batch[:n]
}

func (p *peer) closeConn() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		_ = p.conn.Close() // done with it
		p.conn = nil
	}
	p.features.Store(0)
	p.announced.Store(false)
	p.connected.Store(0)
}
