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

func (cl *call) respond(body []byte, err error) {
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

// roundTrip sends one request and waits for its answer: the response body, or the broker's
// *wire.Error, or the context's or the connection's error. When the context ends first the
// slot is dropped and a late answer is discarded.
func (c *Conn) roundTrip(ctx context.Context, op wire.Op, body []byte) ([]byte, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	cl := &call{done: make(chan struct{})}
	corr := c.nextCorr()
	if err := c.register(corr, op, cl); err != nil {
		return nil, err
	}
	if err := c.writeFrame(op, corr, body); err != nil {
		if c.unregister(corr) {
			return nil, err
		}
		<-cl.done
		return cl.body, cl.err
	}
	select {
	case <-cl.done:
		return cl.body, cl.err
	case <-ctx.Done():
		if c.unregister(corr) {
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
	corr uint32
	cl   *call
}

// startCall registers and writes one request now, on the caller's goroutine, and returns
// what waits for its answer: for a caller whose requests must reach the broker in the order
// it made them (a group member's heartbeats: an older one carrying a partition the member
// has since released must not arrive after the release), which concurrent roundTrips do not
// promise.
func (c *Conn) startCall(op wire.Op, body []byte) (*pendingCall, error) {
	cl := &call{done: make(chan struct{})}
	corr := c.nextCorr()
	if err := c.register(corr, op, cl); err != nil {
		return nil, err
	}
	if err := c.writeFrame(op, corr, body); err != nil {
		if c.unregister(corr) {
			return nil, err
		}
		<-cl.done
		if cl.err != nil {
			return nil, cl.err
		}
	}
	return &pendingCall{c: c, corr: corr, cl: cl}, nil
}

// wait waits for the answer of a started call, as roundTrip does.
func (p *pendingCall) wait(ctx context.Context) ([]byte, error) {
	ctx, cancel := p.c.withTimeout(ctx)
	defer cancel()
	select {
	case <-p.cl.done:
		return p.cl.body, p.cl.err
	case <-ctx.Done():
		if p.c.unregister(p.corr) {
			return nil, ctx.Err()
		}
		<-p.cl.done // the answer is being delivered right now
		return p.cl.body, p.cl.err
	}
}
