package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/lightq/lightq/wire"
)

// Stall detection. A broker that stops without closing its sockets (SIGSTOP, a hung machine,
// a network that drops every packet without a reset) leaves the client's requests waiting:
// no answer, no error, and TCP keeps the connection "up" for many minutes. Kafka's client
// bounds each request (request.timeout.ms) and NATS's pings a quiet connection and closes it
// after unanswered pings; the Conn does both, per link:
//
//   - every request waiting for its answer carries when it was registered and how long the
//     broker may hold it on purpose (a FETCH's or a HEARTBEAT's MaxWait; RequestTimeout for
//     the requests a broker answers from a background job that holds the connection,
//     heldByBroker; 0 for the others), and a request behind a held one shares its end;
//   - the reader counts the socket reads that return bytes (link.rx, one atomic add per
//     read, no clock);
//   - the watchdog goroutine (one per Conn) looks at every node's working link each
//     StallTimeout/8: a link whose count moved is alive; a link that received nothing since
//     its last sign of life, with a request waiting longer than StallTimeout beyond its own
//     hold, is dead: it fails with ErrStalled (wrapping ErrConnectionLost), which is what a
//     lost connection does to its requests, subscriptions, producers and consumers, and its
//     node is marked suspect;
//   - after half of StallTimeout of such silence the watchdog sends a PING on the link (one
//     at a time): a live broker answers it at once, even while it works on a slow request
//     (an fsync, a replication round), and that answer is the sign of life that keeps the
//     link. So only a broker that answers nothing at all for StallTimeout loses its link.
//
// An idle link has no request waiting; the keep-alive PING (Options.KeepAlive) is one, so a
// broker that stopped answering is found at the next keep-alive too.
//
// A suspect node's reconnect starts at its next seed address (the boot node of a seed list:
// another broker of the cluster), and its link is not installed until a handshake was
// answered, so nothing is asked of it meanwhile: METADATA goes to another broker (anyLink),
// which tells the producers and consumers where their partitions' leaders are now. A broker
// whose METADATA names no leader for a partition is suspect for a while too (suspectFor):
// cut off from its peers, it cannot learn of the leader they elected, so the next refresh
// asks another.

// ErrStalled is wrapped, with ErrConnectionLost, in the error of the requests of a
// connection that was declared dead because the broker answered nothing, not even a PING,
// for Options.StallTimeout (beyond the requests' own waits) while requests waited: the
// broker stopped, hangs, or the network drops everything. They are retriable as after any
// lost connection; the Conn reconnects.
var ErrStalled = errors.New("lightq: broker stopped answering")

// clock is the Conn's monotonic clock, for the watchdog's bookkeeping.
func (c *Conn) clock() time.Duration { return time.Since(c.epoch) }

// rxCounter is the reader of a link's socket: it counts the reads that returned bytes.
type rxCounter struct{ l *link }

func (r rxCounter) Read(b []byte) (int, error) {
	n, err := r.l.nc.Read(b)
	if n > 0 {
		r.l.rx.Add(1)
	}
	return n, err
}

// watchdog checks the Conn's links every stall/8 until the Conn ends. A link's last sign of
// life is known to a tick (the tick that saw rx move), so a dead link is found between
// StallTimeout and StallTimeout plus two ticks after the broker went silent.
func (c *Conn) watchdog(stall time.Duration) {
	defer c.bg.Done()
	t := time.NewTicker(max(stall/8, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		c.checkStalls(stall)
	}
}

// checkStalls fails the working links that stalled and probes the quiet ones.
func (c *Conn) checkStalls(stall time.Duration) {
	now := c.clock()
	var dead []*link
	var causes []error
	var probes []*link
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	for _, n := range c.nodes {
		l := n.cur
		if l == nil || l.werr != nil { // a failed write's drain has its own bound
			continue
		}
		probe, cause := l.stallLocked(now, stall)
		switch {
		case cause != nil:
			n.suspectUntil = math.MaxInt64 // until a new link is installed
			if len(n.addrs) > 1 {
				n.next = (n.next + 1) % len(n.addrs) // another seed first
			}
			dead, causes = append(dead, l), append(causes, cause)
		case probe:
			l.probing = true
			probes = append(probes, l)
			c.bg.Add(1)
		}
	}
	c.mu.Unlock()
	for i, l := range dead {
		c.failLink(l, causes[i]) // which logs the cause when it reconnects
	}
	for _, l := range probes {
		go c.probe(l, stall)
	}
}

// stallLocked is the watchdog's look at link l at Conn clock now: whether to probe it with
// a PING, or the error to fail it with when it stalled. Conn.mu is held.
func (l *link) stallLocked(now, stall time.Duration) (probe bool, cause error) {
	if rx := l.rx.Load(); rx != l.seenRx {
		l.seenRx, l.heard = rx, now
		return false, nil
	}
	// The broker serves a connection's requests in order and reads nothing past one it holds
	// (heldByBroker), so the latest end of any waiting request's hold bounds them all.
	var holdEnd time.Duration
	for _, p := range l.pending {
		if p.wait > 0 {
			holdEnd = max(holdEnd, p.at+p.wait)
		}
	}
	for _, p := range l.pending {
		quiet := now - max(p.at, l.heard)
		if quiet-max(p.wait, holdEnd-p.at) >= stall {
			return false, lost(fmt.Errorf("%w: nothing received for %v while %d requests waited (a %v for %v)",
				ErrStalled, (now - l.heard).Round(time.Millisecond), len(l.pending), p.op, (now - p.at).Round(time.Millisecond)))
		}
		probe = probe || quiet-max(p.wait, holdEnd-p.at) >= stall/2
	}
	return probe && !l.probing, nil
}

// probe sends one PING on l; its answer, if any, is the sign of life the watchdog looks for.
func (c *Conn) probe(l *link, stall time.Duration) {
	defer c.bg.Done()
	ctx, cancel := context.WithTimeout(c.ctx, 2*stall) // the watchdog fails l sooner
	_, _ = c.exchange(ctx, l, wire.OpPing, nil, false)
	cancel()
	c.mu.Lock()
	l.probing = false
	c.mu.Unlock()
}
