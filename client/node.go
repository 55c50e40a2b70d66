package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/lightq/lightq/wire"
)

// node is one broker of a Conn: the addresses it dials, its working link (socket), the
// writer frames to it go through, and its reconnector. A Conn has the node Dial connected
// (Conn.boot, which dials the seed addresses in turn) and, in a cluster, one node per other
// broker it sent a partition's requests to, made when the cluster view first names that
// broker a leader (cluster.go). With one broker the boot node is the only one: one socket,
// as before clusters.
//
// A node reconnects by itself when its link breaks, as long as it is wanted: the boot node
// always (until the Conn ends), another while the cluster view names it the leader of a
// partition or someone waits for it (awaitLink, want).
type node struct {
	c *Conn
	// open dials one of addrs (the address is "" for a Conn made by DialFunc, whose
	// function knows where to go).
	open func(ctx context.Context, addr string) (net.Conn, error)

	// wmu guards the writer: whoever holds it writes whole frames to wl through bw.
	wmu sync.Mutex
	wl  *link // the connection bw writes to
	bw  *bufio.Writer
	// writes counts the frames written (under wmu), so keepAlive can tell an idle connection.
	writes uint64
	whdr   [wire.HeaderSize]byte

	// Guarded by Conn.mu.
	addrs   []string      // the boot node's seeds, or the broker's one address
	next    int           // the index in addrs dialled first at the next attempt
	addr    string        // the address of cur (or of the last link)
	id      uint32        // the broker's node id; 0 until a cluster METADATA names it
	cur     *link         // the working connection; nil while reconnecting and at the end
	lastErr error         // why the last connection, or the last reconnect attempt, failed
	up      chan struct{} // closed when cur is set again or at the end; replaced at each loss
	limits  wire.Limits
	role    wire.Role
	broker  string
	dialing bool // its reconnector runs
	// suspectUntil is the Conn clock until which the broker is not asked for METADATA nor
	// administration while another is connected (anyLink): its last link stalled (until a
	// new one is installed), or its METADATA named no leader for a partition (it may be cut
	// off from the others, who may have elected one). 0: not suspect.
	suspectUntil time.Duration
	waiters      int // awaitLink calls waiting for a link
	// keepAlive's own: the writes count it saw at its last tick (owned by that goroutine).
	seen uint64
}

// newNode makes a node that dials addrs with open. The caller adds it to c.nodes.
func (c *Conn) newNode(addrs []string, open func(context.Context, string) (net.Conn, error)) *node {
	return &node{
		c: c, open: open, addrs: addrs, limits: wire.DefaultLimits(),
		bw: bufio.NewWriterSize(nil, c.opts.WriteBufferSize),
		up: make(chan struct{}),
	}
}

// connect dials the node and runs the handshake, within DialTimeout per address: the boot
// node's seeds in turn, from the one that worked last, until one answers. A refused login
// ends the attempt (the same credentials go to every broker).
func (n *node) connect(ctx context.Context) (*link, error) {
	c := n.c
	c.mu.Lock()
	addrs, first := n.addrs, n.next
	c.mu.Unlock()
	var errs []error
	for i := range addrs {
		at := (first + i) % len(addrs)
		l, err := n.connectTo(ctx, addrs[at])
		if err == nil {
			c.mu.Lock()
			if n.addr != addrs[at] {
				n.id = 0 // another broker may answer there: the next cluster METADATA says
			}
			n.next, n.addr = at, addrs[at]
			c.mu.Unlock()
			return l, nil
		}
		if len(addrs) == 1 || ctx.Err() != nil || errors.Is(err, &wire.Error{Code: wire.CodeAuthFailed}) {
			return nil, err
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// connectTo dials addr and runs the handshake on it, within DialTimeout.
func (n *node) connectTo(ctx context.Context, addr string) (*link, error) {
	ctx, cancel := context.WithTimeout(ctx, n.c.opts.DialTimeout)
	defer cancel()
	nc, err := n.open(ctx, addr)
	if err != nil {
		return nil, err
	}
	l := n.newLink(nc)
	if err := l.handshake(ctx); err != nil {
		n.c.failLink(l, lost(err))
		return nil, err
	}
	return l, nil
}

// install makes l the node's working connection. It reports false when the Conn has ended
// or l has failed since its handshake.
func (n *node) install(l *link) bool {
	c := n.c
	n.wmu.Lock()
	defer n.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil || l.err != nil {
		return false
	}
	n.bw.Reset(l.nc) // drops whatever a broken connection left buffered
	n.wl, n.cur = l, l
	n.limits, n.role, n.broker = l.limits, l.role, l.broker
	n.lastErr, n.suspectUntil = nil, 0
	n.dialing = false // in the same step: a failure from now on starts a new reconnector
	close(n.up)
	c.changedLocked()
	return true
}

// suspectLocked reports whether the node is suspect at Conn clock now. Conn.mu is held.
func (n *node) suspectLocked(now time.Duration) bool { return now < n.suspectUntil }

// wantedLocked reports whether the node should be connected: the boot node always, another
// while someone waits for it or the cluster view names it a leader. Conn.mu is held.
func (n *node) wantedLocked() bool {
	return n == n.c.boot || n.waiters > 0 || n.c.view.leads(n.id)
}

// startDialLocked starts the reconnector unless the node is connected or already dialling.
// Conn.mu is held.
func (n *node) startDialLocked() {
	c := n.c
	if n.cur != nil || n.dialing || c.err != nil {
		return
	}
	n.dialing = true
	c.bg.Add(1)
	go n.reconnect()
}

// reconnect dials until a new connection is installed, the Conn ends, the node is no longer
// wanted, or the broker refuses the credentials (then the Conn ends with that refusal). The
// first attempt is immediate; then the waits follow the backoff from reconnectMin to
// reconnectMax.
func (n *node) reconnect() {
	c := n.c
	defer c.bg.Done()
	bo := backoff{min: reconnectMin, max: reconnectMax}
	stop := func() bool { // no longer wanted: let the next awaitLink or want start again
		c.mu.Lock()
		defer c.mu.Unlock()
		if n.wantedLocked() && c.err == nil {
			return false
		}
		n.dialing = false
		return true
	}
	for {
		if stop() {
			return
		}
		l, err := n.connect(c.ctx)
		if err == nil {
			if n.install(l) {
				c.log("connected", "broker", n.label())
				return
			}
			if c.ctx.Err() != nil {
				c.failLink(l, ErrClosed)
				return
			}
			err = lost(l.cause()) // it broke right after its handshake: try again
		}
		if c.ctx.Err() != nil {
			return
		}
		if errors.Is(err, &wire.Error{Code: wire.CodeAuthFailed}) {
			// The credentials no longer work: retrying would only lock the user out
			// (PROTOCOL.md 4.2).
			c.terminate(fmt.Errorf("%w: reconnect refused: %w", ErrConnectionLost, err))
			return
		}
		wait := bo.next()
		c.mu.Lock()
		n.lastErr = err
		watchers := make([]func(error, time.Duration), 0, len(c.watchers))
		for _, w := range c.watchers {
			watchers = append(watchers, w)
		}
		c.mu.Unlock()
		c.log("reconnect failed", "broker", n.label(), "retry_in", wait, "err", err)
		for _, w := range watchers {
			w(err, wait)
		}
		if !sleep(c.ctx, nil, wait) {
			return
		}
	}
}

// label names the node in logs: its address, and its node id once known.
func (n *node) label() string {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	addr := n.addr
	if addr == "" && len(n.addrs) > 0 {
		addr = n.addrs[n.next]
	}
	if n.id == 0 {
		return addr
	}
	return fmt.Sprintf("%s (node %d)", addr, n.id)
}

// current returns the working connection, or nil while reconnecting, with the channel closed
// when that changes (a new connection, or the end) and the Conn's terminal error.
func (n *node) current() (*link, <-chan struct{}, error) {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return n.cur, n.up, c.err
}

// want makes sure the node is connected or being connected. It reports false when the node
// is not wanted (wantedLocked): its reconnector then stops at once, so a caller that needs
// the node must find another way (look the partition's leader up again).
func (n *node) want() bool {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	n.startDialLocked()
	return n.cur != nil || n.wantedLocked()
}

// awaitLink returns the node's working connection, waiting for a (re)connect in progress
// until ctx ends; waiting makes the node wanted, so it is dialled meanwhile.
func (n *node) awaitLink(ctx context.Context) (*link, error) {
	c := n.c
	for {
		c.mu.Lock()
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return nil, err
		}
		if n.cur != nil {
			l := n.cur
			c.mu.Unlock()
			return l, nil
		}
		up := n.up
		n.waiters++
		n.startDialLocked()
		c.mu.Unlock()
		select {
		case <-up:
		case <-ctx.Done():
		}
		c.mu.Lock()
		n.waiters--
		last := n.lastErr
		c.mu.Unlock()
		if ctx.Err() != nil {
			if last == nil {
				return nil, fmt.Errorf("lightq: reconnecting: %w", ctx.Err())
			}
			return nil, fmt.Errorf("lightq: reconnecting (%v): %w", last, ctx.Err())
		}
	}
}

// beginWrite locks the node's writer for connection l and arms the write deadline. It fails,
// without the lock, when l has failed or is no longer the one written to. The caller writes
// whole frames to n.bw and then calls endWrite.
func (n *node) beginWrite(l *link) error {
	c := n.c
	n.wmu.Lock()
	c.mu.Lock()
	err := l.err
	switch {
	case err != nil:
	case l.werr != nil:
		err = lost(l.werr)
	case n.wl != l:
		err = lost(errReplaced)
	}
	c.mu.Unlock()
	if err != nil {
		n.wmu.Unlock()
		return err
	}
	_ = l.nc.SetWriteDeadline(time.Now().Add(c.opts.RequestTimeout))
	return nil
}

// endWrite flushes (with flushNow) and unlocks the writer. A write error breaks connection l:
// a partial frame cannot be taken back.
func (n *node) endWrite(l *link, werr error, flush flushMode) error {
	if werr == nil && flush == flushNow {
		werr = n.bw.Flush()
	}
	n.writes++
	n.wmu.Unlock()
	if werr != nil {
		return n.c.writeFailed(l, werr)
	}
	return nil
}

// writeVectored writes a large frame given in pieces with one writev, after flushing what the
// buffer holds. The caller holds the writer (beginWrite). Writing a large frame through the
// buffer would end it with a small separate segment, which the kernel may hold back until the
// previous one is acknowledged; over loopback that costs a delayed-ACK timeout per frame.
func (n *node) writeVectored(v *net.Buffers) error {
	if n.bw.Buffered() > 0 {
		if err := n.bw.Flush(); err != nil {
			return err
		}
	}
	if tc, ok := n.wl.nc.(*tlsConn); ok {
		return tc.writeBuffers(v) // in full records, with one write (tlsgather.go)
	}
	_, err := v.WriteTo(n.wl.nc)
	return err
}

// writeFrame writes one frame on connection l of n and flushes it.
func (n *node) writeFrame(l *link, op wire.Op, corr uint32, body []byte) error {
	if err := n.beginWrite(l); err != nil {
		return err
	}
	wire.PutHeader(n.whdr[:], op, 0, corr, len(body))
	_, err := n.bw.Write(n.whdr[:])
	if err == nil {
		_, err = n.bw.Write(body)
	}
	return n.endWrite(l, err, flushNow)
}
