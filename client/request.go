package client

import (
	"context"
	"time"

	"github.com/lightq/lightq/wire"
)

// call is the pending slot of one request/response exchange.
type call struct {
	done chan struct{}
	body []byte // a copy of the response body
	err  error
}

func (cl *call) respond(_ uint32, body []byte, err error) {
	if err == nil {
		cl.body = append([]byte(nil), body...)
	}
	cl.err = err
	close(cl.done)
}

// withTimeout applies RequestTimeout to a context that has no deadline.
func (c *Conn) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.opts.RequestTimeout)
}

// roundTrip sends one request on the boot node's working connection (waiting for a
// reconnect in progress) and waits for its answer: the response body, or the broker's
// *wire.Error, or the context's or the connection's error. A request in flight when the
// connection breaks fails with an error wrapping ErrConnectionLost; it is not sent again,
// since it may have been carried out. Group and committed-offset requests go this way: they
// stay with the broker Dial connected.
func (c *Conn) roundTrip(ctx context.Context, op wire.Op, body []byte) ([]byte, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	l, err := c.awaitLink(ctx)
	if err != nil {
		return nil, err
	}
	return c.exchange(ctx, l, op, body, false)
}

// anyRoundTrip is roundTrip on the first working connection of any node (anyLink): for the
// requests any broker of a cluster serves (administration, METADATA, STATS, INIT_PRODUCER).
// With one broker it is roundTrip.
func (c *Conn) anyRoundTrip(ctx context.Context, op wire.Op, body []byte) ([]byte, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	l, err := c.anyLink(ctx)
	if err != nil {
		return nil, err
	}
	return c.exchange(ctx, l, op, body, false)
}

// exchange sends one request on link l and waits for its answer. When the context ends first
// the slot is dropped and a late answer is discarded. direct writes straight to the socket
// (the handshake, before l is installed).
func (c *Conn) exchange(ctx context.Context, l *link, op wire.Op, body []byte, direct bool) ([]byte, error) {
	return c.exchangeHeld(ctx, l, op, body, 0, direct)
}

// exchangeHeld is exchange for a request the broker may hold up to wait on purpose (a FETCH
// with MaxWait): the stall watchdog allows that much more silence (stall.go).
func (c *Conn) exchangeHeld(ctx context.Context, l *link, op wire.Op, body []byte, wait time.Duration, direct bool) ([]byte, error) {
	if heldByBroker(op) {
		wait = max(wait, c.opts.RequestTimeout)
	}
	cl := &call{done: make(chan struct{})}
	corr := c.nextCorr()
	if err := l.register(corr, op, cl, wait); err != nil {
		return nil, err
	}
	var err error
	if direct {
		err = l.writeDirect(op, corr, body)
	} else {
		err = c.writeFrame(l, op, corr, body)
	}
	if err != nil {
		if l.unregister(corr) {
			return nil, err
		}
		<-cl.done
		return cl.body, cl.err
	}
	select {
	case <-cl.done:
		return cl.body, cl.err
	case <-ctx.Done():
		if l.unregister(corr) {
			return nil, ctx.Err()
		}
		<-cl.done // the answer is being delivered right now
		return cl.body, cl.err
	}
}

// Ping sends a PING and returns the round-trip time.
func (c *Conn) Ping(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	if _, err := c.roundTrip(ctx, wire.OpPing, nil); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// pendingCall is a request already written, whose answer is still to come.
type pendingCall struct {
	c    *Conn
	l    *link
	corr uint32
	cl   *call
}

// startCall writes one request now, on the caller's goroutine, on the working connection
// (waiting for a reconnect in progress, within ctx), and returns what waits for its answer:
// for a caller whose requests must reach the broker in the order it made them (a group
// member's heartbeats: an older one carrying a partition the member has since released must
// not arrive after the release), which concurrent roundTrips do not promise. wait is how
// long the broker may hold the request (a HEARTBEAT's MaxWait), for the stall watchdog.
func (c *Conn) startCall(ctx context.Context, op wire.Op, body []byte, wait time.Duration) (*pendingCall, error) {
	l, err := c.awaitLink(ctx)
	if err != nil {
		return nil, err
	}
	cl := &call{done: make(chan struct{})}
	corr := c.nextCorr()
	if err := l.register(corr, op, cl, wait); err != nil {
		return nil, err
	}
	if err := c.writeFrame(l, op, corr, body); err != nil {
		if l.unregister(corr) {
			return nil, err
		}
		<-cl.done
		if cl.err != nil {
			return nil, cl.err
		}
	}
	return &pendingCall{c: c, l: l, corr: corr, cl: cl}, nil
}

// wait waits for the answer of a started call, as roundTrip does.
func (p *pendingCall) wait(ctx context.Context) ([]byte, error) {
	ctx, cancel := p.c.withTimeout(ctx)
	defer cancel()
	select {
	case <-p.cl.done:
		return p.cl.body, p.cl.err
	case <-ctx.Done():
		if p.l.unregister(p.corr) {
			return nil, ctx.Err()
		}
		<-p.cl.done // the answer is being delivered right now
		return p.cl.body, p.cl.err
	}
}

// heldByBroker reports whether the broker answers op from a background job that holds the
// connection meanwhile (it reads nothing more from it, a PING included, until the job is
// done): a login (argon2id, queued behind others), a topic or user change, a membership
// change (in a cluster, each waits up to ten seconds for the metadata group). The stall
// watchdog allows such a request the Conn's RequestTimeout, its own bound, instead of
// taking the unanswered PING for a dead broker.
func heldByBroker(op wire.Op) bool {
	switch op {
	case wire.OpAuth, wire.OpCreateTopic, wire.OpDeleteTopic,
		wire.OpCreateUser, wire.OpDeleteUser, wire.OpSetPassword, wire.OpGrant, wire.OpRevoke,
		wire.OpAddBroker, wire.OpMoveReplicas, wire.OpDrainBroker, wire.OpRemoveBroker, wire.OpMembership:
		return true
	}
	return false
}
