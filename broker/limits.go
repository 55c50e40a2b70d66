package broker

import (
	"fmt"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/lightq/lightq/wire"
)

// This file holds the connection limits of Config: the caps on open connections, checked in
// OnOpen under Server.connsMu; the read and idle timeouts, whose clocks each connection keeps
// on its own loop and enforces at the end of its turns, while the ticker only wakes
// connections whose published deadline (conn.timeoutAt) has passed; and the rate-limited log
// line of refused connections.

// admit registers a new plaintext connection unless a connection cap is reached, in which
// case it returns the refusal to send. Caller holds connsMu.
func (s *Server) admit(c *conn) (refusal string) {
	if refusal := s.refusal(c.remote, 1); refusal != "" {
		return refusal
	}
	s.conns[c] = struct{}{}
	s.perAddr[c.remote]++
	return ""
}

// refusal says why one more connection from ip, using fds descriptors, is refused, or "".
// TLS sessions count from their admission, before their handshake (tlsconn.go), and use
// tlsDescriptors each. Caller holds connsMu.
func (s *Server) refusal(ip string, fds int) string {
	open := len(s.conns) + s.tlsPending
	switch {
	case open >= s.cfg.MaxConnections:
		return fmt.Sprintf("the broker's connection limit (%d open) is reached; retry later", open)
	case s.perAddr[ip] >= s.cfg.MaxConnectionsPerAddr:
		return fmt.Sprintf("the connection limit per client address (%d open from %s) is reached; close one first", s.perAddr[ip], ip)
	case s.fdRoom > 0 && open+(tlsDescriptors-1)*s.tlsSessions+fds > s.fdRoom:
		return fmt.Sprintf("the broker's descriptor budget (%d, three quarters of the open-file limit; a TLS connection takes %d) is used up; retry later", s.fdRoom, tlsDescriptors)
	}
	return ""
}

// forget unregisters a plaintext connection admit registered; others are ignored. Caller
// holds connsMu.
func (s *Server) forget(c *conn) {
	if _, ok := s.conns[c]; !ok {
		return
	}
	delete(s.conns, c)
	s.dropAddr(c.remote)
}

// dropAddr counts one connection less from ip. Caller holds connsMu.
func (s *Server) dropAddr(ip string) {
	if s.perAddr[ip]--; s.perAddr[ip] <= 0 {
		delete(s.perAddr, ip)
	}
}

// refusalLogInterval: at most one log line per this interval about refused connections, so a
// connection flood cannot flood the log; the line counts those not logged since the last.
const refusalLogInterval = time.Second

// logRefusal logs a refused connection on log (the connection's), rate-limited, and counts it
// for metrics. Safe from any goroutine; lock-free.
func (s *Server) logRefusal(log zerolog.Logger, refusal string) {
	s.metrics.connectionRefused()
	now := time.Now().UnixNano()
	next := s.refusalLogNext.Load()
	if now < next || !s.refusalLogNext.CompareAndSwap(next, now+int64(refusalLogInterval)) {
		s.refusalsUnlogged.Add(1)
		return
	}
	log.Warn().Str("reason", refusal).Int64("refused_unlogged", s.refusalsUnlogged.Swap(0)).
		Int("max_connections", s.cfg.MaxConnections).Int("max_connections_per_addr", s.cfg.MaxConnectionsPerAddr).
		Msg("connection refused: TOO_MANY_CONNECTIONS")
}

// fitConnectionsToFDLimit lowers MaxConnections, with a warning, to what the open-file limit
// leaves room for (connectionsWithin). This matters more than it seems: when accept(2) fails
// with EMFILE, gnet (v2.9.7, acceptor_unix.go) stops its engine, so a broker that ran out
// of descriptors would stop serving altogether instead of refusing one connection. (Go raises
// the soft limit to the hard one at start on Linux; this reads the result.) It also sets the
// descriptor budget, fdRoom, against which TLS connections (three descriptors each) are
// admitted. Called by Start before the loops run, so the loops see the final values.
func (s *Server) fitConnectionsToFDLimit() {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return
	}
	if n := connectionsWithin(uint64(lim.Cur), s.cfg.MaxConnections); n < s.cfg.MaxConnections {
		s.log.Warn().Uint64("open_file_limit", uint64(lim.Cur)).Int("max_connections", s.cfg.MaxConnections).Int("lowered_to", n).
			Msg("max-connections lowered to three quarters of the open-file limit, leaving the rest for files: running out of descriptors would stop the broker; raise the limit (ulimit -n) to allow more")
		s.cfg.MaxConnections = n
	}
	s.fdRoom = int(min(lim.Cur/4*3, 1<<30))
}

// connectionsWithin is the connection cap an open-file limit leaves room for: want, but at
// most three quarters of the limit (the rest is for segment, index and offsets files, epoll
// and the listener), and at least 1.
func connectionsWithin(fdLimit uint64, want int) int {
	if room := fdLimit / 4 * 3; room < uint64(want) {
		return int(max(room, 1))
	}
	return want
}

// timeoutScanInterval is how often the ticker looks for connections past their read or idle
// deadline: a second, or a quarter of a shorter timeout (tests), but not more often than it
// checks deadlines at all. A connection is thus closed at most this much late.
func timeoutScanInterval(cfg *Config) time.Duration {
	d := min(time.Second, cfg.ReadTimeout/4)
	if cfg.IdleTimeout > 0 {
		d = min(d, cfg.IdleTimeout/4)
	}
	return max(d, deadlineInterval)
}

// wakeTimedOut wakes the connections whose read or idle deadline has passed; their loops
// close them (enforceTimeouts). Ticker goroutine; caller holds connsMu.
func (s *Server) wakeTimedOut(now time.Time) {
	ns := now.UnixNano()
	for c := range s.conns {
		if at := c.timeoutAt.Load(); at != 0 && ns >= at {
			c.wakeNow()
		}
	}
}

// frameRead restarts the read and idle clocks: a whole frame was read. Runs on the loop.
func (c *conn) frameRead() { c.partialSince, c.idleSince = time.Time{}, time.Time{} }

// idle reports whether an authenticated connection has nothing outstanding: no subscription,
// no FETCH waiting, being prepared or being sent, no request holding the connection, no
// durable ack or COMMIT_OFFSET answer owed, no input. (Output the client has not read yet
// does not count: a client that reads nothing and sends nothing is idle. Nor does a LIST_OFFSETS
// by time on the meta pool, which is not counted anywhere; it takes milliseconds, the idle
// timeout minutes.) Runs on the loop.
func (c *conn) idle() bool {
	return c.principal != nil && len(c.subs) == 0 && len(c.fetches) == 0 && c.xfer == nil && len(c.ready) == 0 &&
		c.cold == 0 && !c.paused && c.durableWaits == 0 && c.commitWaits == 0 && len(c.parks) == 0 && c.gc.InboundBuffered() == 0
}

// waitingForFrame reports whether the connection waits for the client to finish a frame: input
// is left after readFrames, and nothing on the broker's side (a held request, unread answers,
// a transfer) keeps it from being read. Runs on the loop, after readFrames.
func (c *conn) waitingForFrame() bool {
	return c.gc.InboundBuffered() > 0 && !c.paused && !c.readBlocked && !c.commitBlocked && c.xfer == nil && len(c.ready) == 0
}

// enforceTimeouts runs at the end of each turn of an open connection: it starts or stops the
// read and idle clocks, closes the connection with TIMEOUT when one has run out, and
// publishes the next deadline for the ticker. Runs on the loop.
func (c *conn) enforceTimeouts() gnet.Action {
	if c.failing() || c.refused || c.saidGoodbye {
		return gnet.None
	}
	cfg := &c.srv.cfg
	now := time.Now()
	switch {
	case !c.waitingForFrame():
		c.partialSince = time.Time{}
	case c.partialSince.IsZero():
		c.partialSince = now
	case now.Sub(c.partialSince) >= cfg.ReadTimeout:
		return c.closeTimedOut(c.describePartialFrame())
	}
	switch {
	case cfg.IdleTimeout == 0 || !c.idle():
		c.idleSince = time.Time{}
	case c.idleSince.IsZero():
		c.idleSince = now
	case now.Sub(c.idleSince) >= cfg.IdleTimeout:
		return c.closeTimedOut(fmt.Sprintf("idle for %s (idle timeout): no request, subscription or FETCH; send PING to keep a connection open", cfg.IdleTimeout))
	}
	var next int64
	if !c.partialSince.IsZero() {
		next = c.partialSince.Add(cfg.ReadTimeout).UnixNano()
	}
	if !c.idleSince.IsZero() {
		if at := c.idleSince.Add(cfg.IdleTimeout).UnixNano(); next == 0 || at < next {
			next = at
		}
	}
	if c.timeoutAt.Load() != next {
		c.timeoutAt.Store(next)
	}
	return gnet.None
}

// describePartialFrame says how much of the frame being read has arrived. Runs on the loop.
func (c *conn) describePartialFrame() string {
	buffered := c.gc.InboundBuffered()
	head, _ := c.gc.Peek(min(buffered, wire.HeaderSize))
	if size, err := wire.FrameSize(head, 1<<31-1); err == nil && size > 0 {
		return fmt.Sprintf("frame not complete after %s (read timeout): %d of its %d bytes arrived", c.srv.cfg.ReadTimeout, buffered, size)
	}
	return fmt.Sprintf("frame not complete after %s (read timeout): %d bytes of its header arrived", c.srv.cfg.ReadTimeout, buffered)
}

// closeTimedOut logs why, answers TIMEOUT (corr id 0) and closes. Runs on the loop.
func (c *conn) closeTimedOut(why string) gnet.Action {
	c.log.Info().Str("reason", why).Msg("closing connection: TIMEOUT")
	c.sendError(0, wire.CodeTimeout, why)
	c.flush()
	return gnet.Close
}
