package client

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/lightq/lightq/wire"
)

// link is one socket of a Conn to one broker (its node), from its dial to its failure: the
// requests waiting for an answer on it, the subscriptions made on it, and its reader
// goroutine. A node has one current link at a time and replaces it when it fails (node.go).
// What a broker knows about a client (subscription ids, the order of PRODUCE requests)
// belongs to one link, so everything that depends on it remembers the link it used.
type link struct {
	c        *Conn
	n        *node // the broker it connects to
	nc       net.Conn
	maxFrame atomic.Int64 // the frame limit the reader checks, from this link's HELLO
	// rx counts the socket reads that returned bytes (the reader's only cost of stall
	// detection, stall.go): the watchdog compares it between its ticks.
	rx atomic.Uint64

	// Set by the handshake, before the link is installed; read-only after.
	limits wire.Limits
	role   wire.Role
	broker string

	// Guarded by Conn.mu.
	pending map[uint32]pendingEntry
	subs    map[uint32]*Subscription
	oneWay  [oneWaySlots]oneWayEntry
	oneWayN int
	werr    error         // a write failed: nothing more is written; the reader drains the rest
	err     error         // set once, when the link fails
	done    chan struct{} // closed with err
	// The watchdog's (stall.go): rx at its last look, the Conn clock when it last saw rx
	// move (or the link was made), and whether its PING probe is out.
	seenRx  uint64
	heard   time.Duration
	probing bool
}

// responder receives the outcome of one request: the response body (valid only during the
// call, which runs on a reader goroutine and must not block) or an error, never both. corr is
// the correlation id the request was sent with.
type responder interface {
	respond(corr uint32, body []byte, err error)
}

type pendingEntry struct {
	op wire.Op
	r  responder
	// at is the Conn clock when the request was registered, wait how long the broker may
	// hold it on purpose (a FETCH's or a HEARTBEAT's MaxWait): the watchdog allows that much
	// silence more before it declares the link dead (stall.go).
	at, wait time.Duration
}

// oneWayOwner is told about an ERROR frame answering a frame that expects no response
// (PRODUCE with AcksNone, CREDIT).
type oneWayOwner interface {
	oneWayError(err *wire.Error)
}

type oneWayEntry struct {
	corr  uint32
	owner oneWayOwner
}

// oneWaySlots is how many recent one-way frames an ERROR can still be attributed to.
const oneWaySlots = 1024

// drainTimeout bounds how long the reader of a link whose write failed keeps reading what the
// broker had sent before it closed (acknowledgements, a SHUTTING_DOWN): those tell which
// requests were answered and, with SHUTTING_DOWN, that the rest were not processed.
const drainTimeout = time.Second

// newLink starts the reader of a fresh socket to n.
func (n *node) newLink(nc net.Conn) *link {
	c := n.c
	l := &link{
		c: c, n: n, nc: nc, limits: wire.DefaultLimits(),
		pending: make(map[uint32]pendingEntry),
		subs:    make(map[uint32]*Subscription),
		done:    make(chan struct{}),
		heard:   c.clock(),
	}
	l.maxFrame.Store(int64(l.limits.MaxFrame))
	c.bg.Add(1)
	go l.readLoop(bufio.NewReaderSize(rxCounter{l}, c.opts.ReadBufferSize))
	return l
}

// cause returns why l failed (nil while it works).
func (l *link) cause() error {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	return l.err
}

// register records r as waiting for the answer to corr, unless the link has failed. wait is
// how long the broker may hold the request on purpose (a long poll's MaxWait; 0 for the
// others), which the stall watchdog adds to its allowance.
func (l *link) register(corr uint32, op wire.Op, r responder, wait time.Duration) error {
	c := l.c
	at := c.clock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	l.pending[corr] = pendingEntry{op: op, r: r, at: at, wait: wait}
	return nil
}

// unregister removes corr's slot. It reports false when the slot was already taken by a
// response or a failure, in which case its responder has been or is being called.
func (l *link) unregister(corr uint32) bool {
	c := l.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := l.pending[corr]; !ok {
		return false
	}
	delete(l.pending, corr)
	return true
}

// registerOneWay remembers who sent the one-way frame corr, so that an ERROR for it can be
// reported. Only the last oneWaySlots such frames are remembered.
func (l *link) registerOneWay(corr uint32, owner oneWayOwner) {
	c := l.c
	c.mu.Lock()
	if l.err == nil {
		l.oneWay[l.oneWayN%oneWaySlots] = oneWayEntry{corr: corr, owner: owner}
		l.oneWayN++
	}
	c.mu.Unlock()
}

// subscription returns the subscription with broker id id, or nil.
func (l *link) subscription(id uint32) *Subscription {
	l.c.mu.Lock()
	s := l.subs[id]
	l.c.mu.Unlock()
	return s
}

// writeDirect writes one frame straight to the socket. Only the handshake uses it, before the
// link is installed, when nothing else writes to it.
func (l *link) writeDirect(op wire.Op, corr uint32, body []byte) error {
	_ = l.nc.SetWriteDeadline(time.Now().Add(l.c.opts.RequestTimeout))
	if _, err := l.nc.Write(wire.AppendFrame(nil, op, 0, corr, body)); err != nil {
		l.c.failLink(l, lost(err))
		return l.cause()
	}
	return nil
}

// writeFailed handles a failed write on l: nothing more is written to it, and its reader gets
// drainTimeout to read what the broker sent before the socket broke (a broker that closed
// after answering, or after a SHUTTING_DOWN, left those in the receive buffer). It returns the
// error for the writer.
func (c *Conn) writeFailed(l *link, err error) error {
	c.mu.Lock()
	if l.err == nil && l.werr == nil {
		l.werr = err
		_ = l.nc.SetReadDeadline(time.Now().Add(drainTimeout))
	}
	c.mu.Unlock()
	return lost(err)
}

// failLink ends connection l with err (the first call wins): it closes the socket, hands err
// to every request waiting on it and every subscription made on it, each exactly once, and
// starts reconnecting when l was its node's working connection, the Conn goes on and the
// node is wanted (node.go).
func (c *Conn) failLink(l *link, err error) {
	c.mu.Lock()
	if l.err != nil {
		c.mu.Unlock()
		return
	}
	if l.werr != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		err = lost(l.werr) // the drain after a failed write ran out: the write error says more
	}
	l.err = err
	pending, subs := l.pending, l.subs
	l.pending, l.subs = nil, nil
	l.oneWay = [oneWaySlots]oneWayEntry{}
	close(l.done)
	n := l.n
	reconnect := false
	if n.cur == l {
		n.cur = nil
		n.lastErr = err
		n.up = make(chan struct{})
		reconnect = c.err == nil && !n.dialing && n.wantedLocked()
		c.changedLocked()
	}
	if reconnect {
		n.dialing = true
		c.bg.Add(1)
	}
	c.mu.Unlock()

	_ = l.nc.Close()
	for corr, p := range pending {
		p.r.respond(corr, nil, err)
	}
	for _, s := range subs {
		s.fail(err)
	}
	if reconnect {
		c.log("connection lost; reconnecting", "broker", n.label(), "err", err)
		go n.reconnect()
	}
}

// readLoop reads frames until the link fails and dispatches each one. The frame buffer is
// reused: dispatch targets copy what they keep.
func (l *link) readLoop(br *bufio.Reader) {
	c := l.c
	defer c.bg.Done()
	buf := make([]byte, 64<<10)
	for {
		if _, err := io.ReadFull(br, buf[:wire.HeaderSize]); err != nil {
			c.failLink(l, lost(err))
			return
		}
		n, err := wire.FrameSize(buf[:wire.HeaderSize], int(l.maxFrame.Load()))
		if err != nil {
			c.failLink(l, lost(fmt.Errorf("%w: %w", ErrProtocol, err)))
			return
		}
		if h, _ := wire.PeekHeader(buf[:wire.HeaderSize]); h.Op == wire.OpDeliver {
			if s := l.subscription(h.Corr); s != nil {
				// Read the body straight into a buffer the subscription keeps: the batch
				// is not copied again on its way to the consumer.
				body := s.takeBuffer(h.BodyLen())
				if _, err := io.ReadFull(br, body); err != nil {
					c.failLink(l, lost(err))
					return
				}
				if err := s.deliverOwned(body); err != nil {
					c.failLink(l, lost(err))
					return
				}
				continue
			}
		}
		if n > len(buf) {
			nb := make([]byte, n)
			copy(nb, buf[:wire.HeaderSize])
			buf = nb
		}
		if _, err := io.ReadFull(br, buf[wire.HeaderSize:n]); err != nil {
			c.failLink(l, lost(err))
			return
		}
		h, body, err := wire.ParseFrame(buf[:n])
		if err != nil {
			c.failLink(l, lost(fmt.Errorf("%w: %w", ErrProtocol, err)))
			return
		}
		if err := l.dispatch(h, body); err != nil {
			c.failLink(l, lost(err))
			return
		}
	}
}

// dispatch routes one frame. A returned error breaks the link.
func (l *link) dispatch(h wire.Header, body []byte) error {
	c := l.c
	if h.Op == wire.OpDeliver {
		s := l.subscription(h.Corr)
		if s == nil {
			c.log("DELIVER for an unknown subscription", "subscription", h.Corr)
			return nil
		}
		return s.deliver(body)
	}
	var werr *wire.Error
	if h.Op == wire.OpError {
		var eb wire.ErrorBody
		if err := eb.Decode(body); err != nil {
			return fmt.Errorf("%w: ERROR body: %w", ErrProtocol, err)
		}
		werr = &wire.Error{Code: eb.Code, Message: eb.Message}
	} else if h.Flags&wire.FlagResponse == 0 {
		return fmt.Errorf("%w: unexpected %v request from the broker", ErrProtocol, h.Op)
	}

	c.mu.Lock()
	p, ok := l.pending[h.Corr]
	if ok {
		delete(l.pending, h.Corr)
	}
	var owner oneWayOwner
	if !ok && werr != nil && h.Corr != 0 {
		for i := range l.oneWay {
			if l.oneWay[i].corr == h.Corr && l.oneWay[i].owner != nil {
				owner = l.oneWay[i].owner
				l.oneWay[i] = oneWayEntry{}
				break
			}
		}
	}
	c.mu.Unlock()

	switch {
	case ok && werr != nil:
		p.r.respond(h.Corr, nil, werr)
	case ok && h.Op != p.op:
		p.r.respond(h.Corr, nil, fmt.Errorf("%w: %v answered by %v", ErrProtocol, p.op, h.Op))
		return fmt.Errorf("%w: %v answered by %v", ErrProtocol, p.op, h.Op)
	case ok:
		p.r.respond(h.Corr, body, nil)
	case owner != nil:
		owner.oneWayError(werr)
	case werr != nil:
		c.log("broker error", "corr", h.Corr, "err", werr)
	default:
		// The answer to a request whose caller gave up (context cancelled): discard it.
	}
	if werr != nil && werr.Code.Fatal() {
		return werr
	}
	return nil
}
