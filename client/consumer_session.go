package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lightq/lightq/wire"
)

// Sessions: a consumer made by NewConsumer runs one on its connection for its whole life; a
// DialConsumer's supervisor starts a new one on every reconnect, after dropping what the old
// one had queued.

// session is one connection's set of fetchers.
type session struct {
	c      *Conn
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startSession starts one fetcher per partition on c.
func (k *Consumer) startSession(c *Conn) *session {
	s := &session{c: c}
	s.ctx, s.cancel = context.WithCancel(k.ctx)
	for _, p := range k.parts {
		s.wg.Add(1)
		k.wg.Add(1)
		go k.fetchLoop(s, p)
	}
	return s
}

func (s *session) stop() {
	s.cancel()
	s.wg.Wait()
}

// supervise runs the sessions of a reconnecting consumer: when the connection breaks, it
// stops the fetchers, drops what they had queued, redials and starts again from the
// positions.
func (k *Consumer) supervise(c *Conn) {
	defer k.wg.Done()
	for {
		s := k.startSession(c)
		select {
		case <-c.Done():
		case <-k.ctx.Done():
		}
		s.stop()
		if k.ctx.Err() != nil {
			return
		}
		k.report(fmt.Errorf("lightq: consumer of %s: reconnecting: %w", k.topic, c.Err()))
		c.Close()
		k.dropQueued()
		if c = k.redial(); c == nil {
			return
		}
		k.connMu.Lock()
		k.conn = c
		k.connMu.Unlock()
	}
}

// redial dials until it succeeds, the consumer ends (nil), or the broker refuses the
// credentials (a fatal error, nil).
func (k *Consumer) redial() *Conn {
	backoff := 50 * time.Millisecond
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		c, err := Dial(k.ctx, k.addr, k.dopts)
		if err == nil {
			return c
		}
		if k.ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, &wire.Error{Code: wire.CodeAuthFailed}) {
			k.enqueueFatal(nil, fmt.Errorf("lightq: consumer of %s: redial: %w", k.topic, err))
			return nil
		}
		k.report(fmt.Errorf("lightq: consumer of %s: redial in %v: %w", k.topic, backoff, err))
		t.Reset(backoff)
		select {
		case <-t.C:
		case <-k.ctx.Done():
			return nil
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// dropQueued makes every queued chunk stale (the fetchers are stopped): the next session
// fetches again from the positions.
func (k *Consumer) dropQueued() {
	k.mu.Lock()
	defer k.mu.Unlock()
	keep := k.queue[:0]
	for _, ch := range k.queue[k.head:] {
		if ch.err != nil {
			keep = append(keep, ch)
		} else {
			k.recycleLocked(ch)
		}
	}
	clear(k.queue[len(keep):])
	k.queue, k.head = keep, 0
	for _, p := range k.parts {
		p.gen++
	}
}
