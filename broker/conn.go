package broker

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/rs/zerolog"

	"github.com/lightq/lightq/broker/group"
	"github.com/lightq/lightq/wire"
)

// lifeState is where a connection is in its life. It only moves forward (conn.advance):
//
//	connOpen ──a fatal error queued (sendError)──▶ connFailing
//	connOpen, connFailing ──OnClose──▶ connClosed
//	connOpen, connFailing ──OnClose inside a DELIVER writev──▶ connCloseDeferred
//	connCloseDeferred ──the writev returned, ring slot released (afterWrite)──▶ connClosed
//
// It belongs to the connection's loop. conn.dead, under conn.mu, is the part of the close
// other goroutines see.
type lifeState uint8

const (
	connOpen lifeState = iota // serving requests
	// connFailing: an error that closes the connection was queued. No more input is read;
	// the output is flushed, then the connection closes.
	connFailing
	// connCloseDeferred: OnClose ran inside a DELIVER writev, under a ring slot's read lock,
	// where releasing subscriptions would invert the lock order. gc must not be touched;
	// afterWrite finishes the close once the slot is released.
	connCloseDeferred
	// connClosed: OnClose ran and finishClose released (or is releasing) what the connection
	// held. gc must not be touched; completions that still run release what they hold.
	connClosed
)

// advance moves the connection's state forward to s; a state it has passed stays passed.
func (c *conn) advance(s lifeState) {
	if s > c.life {
		c.life = s
	}
}

// failing reports whether the connection takes no more input: a fatal error is queued or it
// closed.
func (c *conn) failing() bool { return c.life >= connFailing }

// closed reports whether OnClose ran: stop touching gc.
func (c *conn) closed() bool { return c.life >= connCloseDeferred }

// conn is the protocol state of one client connection. Every field without a comment saying
// otherwise belongs to the connection's event loop and is touched only there.
type conn struct {
	srv    *Server
	gc     gnet.Conn
	log    zerolog.Logger
	remote string   // IP without port, for login throttling
	addr   string   // host:port, shown by DESCRIBE_GROUP
	tls    *tlsPeer // the TLS session this connection is the plaintext of; nil on the plaintext port

	helloDone bool
	principal *principal // who the connection is; what it may do: authorize (authz.go)
	// authUser is principal's user name ("" without one), for the workers that look for a
	// user's connections after a change of its rights (Server.recheckUser). Set with principal.
	authUser     atomic.Pointer[string]
	authDeadline time.Time
	paused       bool      // a request that holds the connection (AUTH, CREATE_TOPIC, ...) is running
	life         lifeState // open, failing, closed (see lifeState)

	// durableWaits counts this connection's PRODUCE acks waiting for an fsync (queued with
	// durablePart.waitDurable, answered through queueAck). A draining connection stays open
	// until they are out.
	durableWaits int
	// commitWaits counts this connection's COMMIT_OFFSETs its topic's offsets log holds for
	// its next fsync: owed answers, like durableWaits, that the drain and the idle clock wait
	// for. Loop-owned.
	commitWaits int
	// refused is set once a PRODUCE arrived during shutdown: its refusal (SHUTTING_DOWN with
	// corr refusedCorr) closes the connection, so it is sent only when the connection is
	// drained, after the acks it is owed; input after it is discarded unanswered.
	refused     bool
	refusedCorr uint32
	// saidGoodbye is set once that closing SHUTTING_DOWN is written: from then on the
	// connection only discards input and waits to close (see closeOnceSent).
	saidGoodbye bool

	out []byte // responses queued during this OnTraffic, written once at its end

	// loop is the event loop's shared scratch (record validation), found on the first
	// PRODUCE (see loopstate.go).
	loop *loopState

	subs      []*subscription
	nextSubID uint32
	published []*topic // topics this connection has produced to (publisher counts)
	iov       [][]byte
	dhdr      [wire.HeaderSize + wire.DeliverHeaderSize]byte

	// direct: the socket and the subscriptions' delivery state, lent to other loops between
	// turns (direct.go); while lent, subs, their credit and cursors, and dhdr are theirs.
	direct directState

	wakePending atomic.Bool // a Wake is queued; set by any goroutine
	stalled     atomic.Bool // waiting for the socket to drain; read by the ticker

	mu          sync.Mutex // guards dead, completions, acks and commits
	dead        bool       // onClose ran: nothing more is queued
	completions []func(*conn)
	acks        []pendingAck // durable acks from partition syncers
	acksSpare   []pendingAck
	commits     []commitResult // COMMIT_OFFSET answers from offsets syncers (offsets.go)
	commitSpare []commitResult

	parks   []*group.Parked // HEARTBEATs the group coordinator holds (long poll; groups.go)
	fetches []*fetchWait    // FETCHes waiting for data (long poll)
	xfer    *transfer       // the FETCH response being sent; nothing else is written meanwhile
	ready   []readyFetch    // FETCH answers prepared by workers, waiting for the socket
	cold    int             // FETCHes being prepared by workers

	readBlocked    bool         // frames left unread: the client does not read its answers
	commitBlocked  bool         // frames left unread: maxCommitsInFlight commits await their fsync (offsets.go)
	deliverBlocked bool         // deliveries stopped at the high-water mark
	xferBlocked    bool         // a copied transfer stopped at the high-water mark
	inWrite        bool         // a DELIVER writev is in progress (OnClose may run inside it)
	xferProgress   atomic.Int64 // unix ns of the transfer's last progress; read by the ticker

	// Read and idle timeouts (limits.go): when the loop began waiting for the rest of a frame,
	// and since when the connection has been idle (zero: not so; a frame read restarts both).
	// timeoutAt is the earlier deadline in unix ns (0: none), read by the ticker.
	partialSince time.Time
	idleSince    time.Time
	timeoutAt    atomic.Int64

	// turnStart is when the current onTraffic turn began, the arrival time of the requests it
	// reads, for the latency histograms (metrics.go); zero while metrics are off.
	turnStart time.Time
}

// pendingAck is a PRODUCE answer that waited for an fsync.
type pendingAck struct {
	corr      uint32
	partition uint32
	base      int64
	err       error
	start     time.Time // the PRODUCE's arrival (zero: metrics off)
}

// queueAck queues a durable ack and wakes the loop. Safe from any goroutine; allocates
// nothing once the queues have grown.
func (c *conn) queueAck(a pendingAck) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.acks = append(c.acks, a)
	c.mu.Unlock()
	c.wakePending.Store(false)
	c.wake()
}

func newConn(s *Server, gc gnet.Conn) *conn {
	addr := gc.RemoteAddr()
	peer, _ := gc.Context().(*tlsPeer) // set by enrollTLS for a TLS session's socket
	if peer != nil {
		addr = peer.remote
	}
	remote := ""
	if a, ok := addr.(*net.TCPAddr); ok {
		remote = a.IP.String()
	}
	lc := s.log.With().Str("remote", addr.String())
	if peer != nil {
		lc = lc.Str("listener", "tls")
		gc = &pipeConn{Conn: gc, p: peer.sess.Pipe()} // its bytes go through the session's pipe
	}
	return &conn{
		srv:          s,
		gc:           gc,
		remote:       remote,
		addr:         addr.String(),
		tls:          peer,
		log:          lc.Logger(),
		authDeadline: time.Now().Add(s.cfg.Limits.AuthTimeout),
		life:         connOpen,
		iov:          make([][]byte, 0, 2),
	}
}

// wake asks the connection's loop to run onTraffic soon. Safe from any goroutine; coalesces.
func (c *conn) wake() {
	if c.wakePending.CompareAndSwap(false, true) {
		if err := c.gc.Wake(nil); err != nil {
			c.wakePending.Store(false)
		}
	}
}

// complete queues fn to run on the connection's loop and wakes it. Safe from any goroutine;
// background jobs report their results through it. It returns false when the connection has
// closed: fn will never run, and the caller releases whatever fn would have taken over.
// Completions queued before the close run during onClose, with c.closed() true.
func (c *conn) complete(fn func(*conn)) bool {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return false
	}
	c.completions = append(c.completions, fn)
	c.mu.Unlock()
	c.wakePending.Store(false) // force a wake: completions must not wait for a coalesced one
	c.wake()
	return true
}

// onTraffic is the connection's whole turn on its loop: finished background work, input
// frames, then deliveries, with responses written in one go.
//
// A FETCH response being sent (c.xfer) owns the socket: until its last byte is out, no other
// byte is written, and input waits.
func (c *conn) onTraffic() gnet.Action {
	c.reclaim(true) // first: other loops stop writing, and their unsent tail goes out before anything
	c.wakePending.Store(false)
	c.turnStart = c.srv.metrics.now()
	if c.saidGoodbye {
		return c.closeOnceSent()
	}
	c.runCompletions()
	if c.principal == nil && !c.failing() && time.Now().After(c.authDeadline) {
		c.sendError(0, wire.CodeAuthTimeout, "no successful AUTH within "+c.srv.cfg.Limits.AuthTimeout.String())
	}
	act := c.turn()
	if act != gnet.None || c.closed() {
		return act
	}
	if c.xfer != nil && c.gc.InboundBuffered() > c.inputBound() {
		// Input piles up behind a transfer the client does not read; an ERROR cannot be
		// written in the middle of the transfer, so just close.
		c.log.Info().Int("inbound", c.gc.InboundBuffered()).Msg("closing: input piled up behind an unread FETCH response")
		return gnet.Close
	}
	c.setStalled(c.readBlocked || c.deliverBlocked || c.xferBlocked)
	if c.srv.stopping.Load() && c.xfer == nil && c.gc.OutboundBuffered() == 0 && !c.hasDeliverable() && !c.paused && c.durableWaits == 0 && c.commitWaits == 0 && len(c.parks) == 0 {
		// Drained, acks included: say goodbye and close (see Server.Shutdown). A PRODUCE
		// refused meanwhile gets the goodbye as its answer.
		msg := "broker is shutting down"
		if c.refused {
			msg = "broker is shutting down; batch not stored, nor anything sent after it"
		}
		c.sendError(c.refusedCorr, wire.CodeShuttingDown, msg)
		c.flush()
		c.saidGoodbye = true
		return c.closeOnceSent()
	}
	return gnet.None
}

// closeOnceSent closes a connection that said goodbye once the peer has acknowledged all of its
// output, the SHUTTING_DOWN included; until then it discards input, which nothing after the
// goodbye may act on. Closing as soon as the output is in the kernel loses it: a socket closed
// with unread input is reset, and Linux drops whatever it had not sent yet, acks and goodbye
// included. A producer that pipelines batches until it reads the goodbye always has input in
// flight, so this happened whenever its receive window was full. Server.Shutdown
// wakes the connection every few milliseconds until it closes; its drain deadline bounds the
// wait for a peer that does not read.
func (c *conn) closeOnceSent() gnet.Action {
	if c.closed() {
		return gnet.Close
	}
	c.discard(c.gc.InboundBuffered())
	if c.gc.OutboundBuffered() > 0 || unackedBytes(c.gc.Fd()) > 0 {
		return gnet.None
	}
	return gnet.Close
}

// turn does the connection's work for one wake: the transfer in flight, input frames,
// deliveries and waiting fetches, each transfer started only when the previous one is done.
// It yields after a few transfers, waking itself again, so one connection cannot hold the
// loop.
func (c *conn) turn() gnet.Action {
	for turns := 0; ; turns++ {
		if c.xfer == nil && len(c.ready) > 0 {
			c.startReady()
		}
		if c.transferStuck(time.Now()) {
			c.log.Info().Dur("timeout", c.srv.cfg.TransferTimeout).Msg("closing: the client stopped reading a FETCH response")
			return gnet.Close
		}
		if c.xfer != nil {
			switch c.pumpTransfer() {
			case xferFailed:
				return gnet.Close
			case xferWaiting:
				return gnet.None
			}
		}
		if turns == 8 {
			c.wakeNow() // more may be waiting: continue on the next wake
			return gnet.None
		}
		if !c.failing() {
			c.readFrames()
		}
		if c.xfer != nil || len(c.ready) > 0 {
			continue
		}
		if !c.flush() || c.failing() {
			return gnet.Close
		}
		if c.principal != nil {
			c.deliver()
			if c.closed() {
				return gnet.None
			}
			c.serviceFetches()
		}
		if c.xfer == nil && len(c.ready) == 0 {
			if !c.flush() {
				return gnet.None
			}
			return gnet.None
		}
	}
}

// inputBound is how much unprocessed input the connection may accumulate while it does not
// read frames (a request holds it, a transfer runs, or its output is over the high-water mark).
func (c *conn) inputBound() int {
	if c.principal == nil {
		return 2 * c.srv.cfg.Limits.PreAuthMaxFrame
	}
	return 4 * c.srv.cfg.Limits.MaxFrame
}

func (c *conn) runCompletions() {
	c.mu.Lock()
	fns := c.completions
	c.completions = nil
	acks := c.acks
	c.acks, c.acksSpare = c.acksSpare[:0], nil
	commits := c.commits
	c.commits, c.commitSpare = c.commitSpare[:0], nil
	c.mu.Unlock()
	for _, fn := range fns {
		fn(c)
	}
	c.answerCommits(commits)
	c.durableWaits -= len(acks)
	for _, a := range acks {
		if a.err != nil {
			if we, ok := a.err.(*wire.Error); ok { // a replicated partition's answer, worded
				c.sendError(a.corr, we.Code, we.Message)
			} else {
				c.sendStorageError(a.corr, "", a.partition, a.err)
			}
			continue
		}
		c.srv.metrics.acked(ackFsynced, a.start)
		resp := wire.ProduceResponse{Partition: a.partition, BaseOffset: a.base}
		c.respond(wire.OpProduce, a.corr, resp.AppendTo)
	}
	c.mu.Lock()
	if c.acksSpare == nil {
		c.acksSpare = acks[:0]
	}
	if c.commitSpare == nil {
		clear(commits) // drop the errors they hold
		c.commitSpare = commits[:0]
	}
	c.mu.Unlock()
}

// readFrames handles every whole frame in the inbound buffer, unless a request that holds the
// connection is running.
func (c *conn) readFrames() {
	limits := &c.srv.cfg.Limits
	c.readBlocked, c.commitBlocked = false, false
	if c.refused {
		// Nothing after the refused PRODUCE is processed (the closing SHUTTING_DOWN says
		// so); dropping it keeps the input bounded until then.
		c.discard(c.gc.InboundBuffered())
		return
	}
	for !c.paused && !c.failing() && !c.refused && c.xfer == nil {
		buffered := c.gc.InboundBuffered()
		if buffered == 0 {
			return
		}
		if c.gc.OutboundBuffered()+len(c.out) >= c.srv.cfg.HighWaterMark {
			// The client does not read its answers: read no more requests until it does
			// (the ticker wakes us to check).
			c.readBlocked = true
			break
		}
		if c.commitWaits >= maxCommitsInFlight {
			// Read no more until the offsets log answers some (their answers wake the loop):
			// one connection's pipelined commits cannot hold the loop (see offsets.go).
			c.commitBlocked = true
			break
		}
		maxFrame := limits.MaxFrame
		if c.principal == nil {
			maxFrame = limits.PreAuthMaxFrame
		}
		head, _ := c.gc.Peek(min(buffered, wire.HeaderSize))
		size, err := wire.FrameSize(head, maxFrame)
		if err != nil {
			c.badStream(head, err)
			return
		}
		if size == 0 {
			return
		}
		if buffered < size {
			// A large PRODUCE whose rest is already in the socket is read from there
			// straight into the ring (produceDirect); anything else waits for gnet.
			if size-buffered >= directReadMin && c.produceDirect(size) {
				c.frameRead()
				continue
			}
			return
		}
		if c.produceDirect(size) {
			c.frameRead()
			continue
		}
		frame, err := c.gc.Peek(size)
		if err != nil {
			c.sendError(0, wire.CodeInternal, "peek: "+err.Error())
			return
		}
		h, body, err := wire.ParseFrame(frame)
		if err != nil {
			c.badStream(frame, err)
			return
		}
		c.handle(h, body)
		c.discard(size)
		c.frameRead()
	}
	// Input is kept while frames are not read, and gnet keeps reading: bound it.
	if (c.paused || c.readBlocked || c.commitBlocked) && !c.failing() {
		if n, bound := c.gc.InboundBuffered(), c.inputBound(); n > bound {
			c.sendError(0, wire.CodeTooMuchInput, fmt.Sprintf("%d bytes sent while the broker could not take requests (limit %d)", n, bound))
		}
	}
}

// badStream answers input that cannot be framed, logs what it looked like, and closes.
func (c *conn) badStream(head []byte, err error) {
	code := wire.CodeOf(err)
	ev := c.log.Warn().Err(err).Str("code", code.String())
	if code == wire.CodeNotProtocol {
		ev = ev.Str("peer", wire.DescribePeer(head))
	}
	ev.Msg("closing connection: unreadable input")
	c.sendError(0, code, err.Error())
}

// respond queues a response frame whose body is appended by body.
func (c *conn) respond(op wire.Op, corr uint32, body func([]byte) []byte) {
	start := len(c.out)
	c.out = wire.AppendHeader(c.out, op, wire.FlagResponse, corr)
	if body != nil {
		c.out = body(c.out)
	}
	c.out = wire.FinishFrame(c.out, start)
}

// respondEmpty queues a response with an empty body.
func (c *conn) respondEmpty(op wire.Op, corr uint32) {
	c.out = wire.AppendFrame(c.out, op, wire.FlagResponse, corr, nil)
}

// sendError queues an ERROR frame; a fatal code also closes the connection after the flush.
func (c *conn) sendError(corr uint32, code wire.Code, msg string) {
	c.out = wire.AppendFrame(c.out, wire.OpError, 0, corr, errorBody(code, msg))
	if code.Fatal() {
		c.advance(connFailing)
	}
}

// flush writes the queued responses. It returns false when the connection closed under us.
func (c *conn) flush() bool {
	if c.closed() {
		return false
	}
	if len(c.out) > 0 {
		// gnet copies what the socket does not take; a write error closes the connection,
		// with OnClose run inside Write, which c.closed() below reports.
		_, _ = c.gc.Write(c.out)
		if cap(c.out) > 1<<20 {
			c.out = nil // do not keep a large buffer for an idle connection
		} else {
			c.out = c.out[:0]
		}
	}
	return !c.closed()
}

// discard drops n bytes of input. gnet's Discard cannot fail: it drops at most what is
// buffered and returns no error.
func (c *conn) discard(n int) { _, _ = c.gc.Discard(n) }

// hold pauses frame processing while a background job runs; release resumes it.
func (c *conn) hold() { c.paused = true }

func (c *conn) release() { c.paused = false }

// runBackground runs job, the work of request op, on the auth pool, then, after the delay it
// returns, the function it returns on the connection's loop. The connection reads no further
// frames meanwhile, so requests keep their order. The delay (a failed login's penalty) holds
// no worker. When the pool's queue is full, op is refused with RESOURCE_LIMIT and
// runBackground reports false (job never runs).
func (c *conn) runBackground(corr uint32, op wire.Op, job func() (func(*conn), time.Duration)) bool {
	c.hold()
	ok := c.srv.authPool.Submit(func() {
		done, delay := job()
		finish := func() {
			c.complete(func(c *conn) {
				c.release()
				done(c)
			})
		}
		if delay > 0 {
			time.AfterFunc(delay, finish)
		} else {
			finish()
		}
	})
	if !ok {
		c.release()
		c.sendError(corr, wire.CodeResourceLimit, op.String()+" refused: the broker is busy with logins and topic changes; retry")
	}
	return ok
}

func (c *conn) setStalled(v bool) {
	if c.stalled.Load() == v {
		return
	}
	c.stalled.Store(v)
	c.srv.connsMu.Lock()
	first := false
	if v {
		c.srv.stalled[c] = struct{}{}
		first = len(c.srv.stalled) == 1
	} else {
		delete(c.srv.stalled, c)
	}
	c.srv.connsMu.Unlock()
	if first { // the ticker may be sleeping for deadlineInterval: make it tick often again
		select {
		case c.srv.tickKick <- struct{}{}:
		default:
		}
	}
}

// onClose drops the connection's subscriptions and publisher registrations.
func (c *conn) onClose() {
	// Before gnet closes the descriptor: no other loop writes to it after this.
	c.reclaim(false)
	// Before gnet closes the descriptor, whose number another connection may get at once;
	// the watcher's lock is a leaf, so this is safe even under a ring slot's read lock.
	c.srv.watcher.forget(c, c.gc.Fd())
	if c.inWrite {
		// Inside a DELIVER writev, under a ring slot's read lock: closing takes topic locks,
		// which would invert the lock order. afterWrite finishes the close after releasing.
		c.advance(connCloseDeferred)
		return
	}
	c.advance(connClosed)
	c.finishClose()
}

// finishClose releases what the connection holds. Runs on its loop, holding no lock.
func (c *conn) finishClose() {
	c.mu.Lock()
	c.dead = true
	fns := c.completions
	c.completions, c.acks, c.commits = nil, nil, nil
	c.mu.Unlock()
	for _, fn := range fns {
		fn(c) // with c.closed() true: they release what they hold; their output goes nowhere
	}
	c.endFetches()
	c.unparkAll()
	for _, s := range c.subs {
		s.close()
	}
	c.subs = nil
	for _, t := range c.published {
		t.stats.publishers.Add(-1)
	}
	c.published = nil
}
