package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lightq/lightq/wire"
)

// Connecting and reconnecting: a new link is dialled, greeted (HELLO) and logged in (AUTH)
// before it is installed as the Conn's working connection. Dial does it once and returns the
// error; after a connection breaks, the reconnector goroutine does it until it succeeds, the
// Conn is closed, or the broker refuses the credentials.

// connect dials a socket and runs the handshake on it, within DialTimeout.
func (c *Conn) connect(ctx context.Context) (*link, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.DialTimeout)
	defer cancel()
	nc, err := c.open(ctx)
	if err != nil {
		return nil, err
	}
	l := c.newLink(nc)
	if err := l.handshake(ctx); err != nil {
		c.failLink(l, lost(err))
		return nil, err
	}
	return l, nil
}

func (l *link) handshake(ctx context.Context) error {
	hello := wire.Hello{ClientName: l.c.opts.ClientName, ClientVersion: "lightq-go/" + Version}
	body, err := l.c.exchange(ctx, l, wire.OpHello, hello.AppendTo(nil), true)
	if err != nil {
		return handshakeErr("HELLO", explainTLSRefusal(err))
	}
	var hr wire.HelloResponse
	if err := hr.Decode(body); err != nil {
		return fmt.Errorf("%w: HELLO response: %w", ErrProtocol, err)
	}
	if err := hr.Limits.Validate(); err != nil {
		return fmt.Errorf("%w: broker announced bad limits: %v", ErrProtocol, err)
	}
	l.limits, l.broker = hr.Limits, hr.BrokerVersion
	l.maxFrame.Store(int64(hr.Limits.MaxFrame))

	body, err = l.authenticate(ctx)
	if err != nil {
		return handshakeErr("AUTH", err)
	}
	var ar wire.AuthResponse
	if err := ar.Decode(body); err != nil {
		return fmt.Errorf("%w: AUTH response: %w", ErrProtocol, err)
	}
	l.role = ar.Role
	return nil
}

// authenticate sends AUTH, again while the broker answers RESOURCE_LIMIT: it bounds the
// logins it verifies at once (PROTOCOL.md 4.2), so a service that opens many connections at
// start gets some of them refused until the first login has been verified, after which the
// others are answered from the broker's cache. The connection stays open across such an
// answer; the retries back off from 10 ms to 500 ms, with jitter, until ctx (DialTimeout) ends.
func (l *link) authenticate(ctx context.Context) ([]byte, error) {
	auth := wire.Auth{User: l.c.opts.User, Password: l.c.opts.Password}
	req := auth.AppendTo(nil)
	bo := backoff{min: 10 * time.Millisecond, max: 500 * time.Millisecond}
	for {
		body, err := l.c.exchange(ctx, l, wire.OpAuth, req, true)
		if !errors.Is(err, &wire.Error{Code: wire.CodeResourceLimit}) {
			return body, err
		}
		if !sleep(ctx, nil, bo.next()) {
			return nil, err
		}
	}
}

// handshakeErr returns broker refusals as they are and names the step otherwise.
func handshakeErr(step string, err error) error {
	var we *wire.Error
	if errors.As(err, &we) && !errors.Is(err, ErrConnectionLost) {
		return we
	}
	return fmt.Errorf("lightq: %s: %w", step, err)
}

// install makes l the Conn's working connection. It reports false when the Conn has ended
// or l has failed since its handshake.
func (c *Conn) install(l *link) bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil || l.err != nil {
		return false
	}
	c.bw.Reset(l.nc) // drops whatever a broken connection left buffered
	c.wl, c.cur = l, l
	c.limits, c.role, c.broker = l.limits, l.role, l.broker
	c.lastErr = nil
	close(c.up)
	return true
}

// reconnect dials until a new connection is installed, the Conn ends, or the broker refuses
// the credentials (then the Conn ends with that refusal). The first attempt is immediate;
// then the waits follow the backoff from reconnectMin to reconnectMax.
func (c *Conn) reconnect() {
	defer c.bg.Done()
	bo := backoff{min: reconnectMin, max: reconnectMax}
	for {
		l, err := c.connect(c.ctx)
		if err == nil {
			if c.install(l) {
				c.log("reconnected")
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
		c.lastErr = err
		watchers := make([]func(error, time.Duration), 0, len(c.watchers))
		for _, w := range c.watchers {
			watchers = append(watchers, w)
		}
		c.mu.Unlock()
		c.log("reconnect failed", "retry_in", wait, "err", err)
		for _, w := range watchers {
			w(err, wait)
		}
		if !sleep(c.ctx, nil, wait) {
			return
		}
	}
}
