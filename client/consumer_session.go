package client

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Sessions: a consumer runs one session of fetchers per connection of its Conn. When the
// connection breaks (the Conn then reconnects by itself), the supervisor stops the fetchers,
// drops what they had queued, and starts a new session on the next connection from the
// positions.

// session is one connection's set of fetchers.
type session struct {
	c      *Conn
	l      *link // the connection the fetchers send on
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startSession starts one fetcher per partition on connection l of c.
func (k *Consumer) startSession(c *Conn, l *link) *session {
	s := &session{c: c, l: l}
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

// supervise runs the consumer's sessions: when a connection breaks, it stops the fetchers,
// drops what they had queued, waits for the Conn to reconnect and starts again from the
// positions. Failed reconnect attempts are reported to OnError. The consumer fails when the
// Conn ends (closed by its owner, or a reconnect refused for good).
func (k *Consumer) supervise(c *Conn) {
	defer k.wg.Done()
	defer c.watch(func(err error, wait time.Duration) {
		k.report(fmt.Errorf("lightq: consumer of %s: redial in %v: %w", k.topic, wait.Round(time.Millisecond), err))
	})()
	for {
		l, err := c.awaitLink(k.ctx)
		if err != nil {
			if k.ctx.Err() == nil {
				k.enqueueFatal(nil, fmt.Errorf("lightq: consumer of %s: redial: %w", k.topic, err))
			}
			return
		}
		s := k.startSession(c, l)
		select {
		case <-l.done:
		case <-k.ctx.Done():
		}
		s.stop()
		if k.ctx.Err() != nil {
			return
		}
		if err := c.Err(); err != nil {
			// The Conn ended (closed by its owner, or a reconnect refused): what was fetched
			// is still consumed, then Each returns the error.
			k.enqueueFatal(nil, fmt.Errorf("lightq: consumer of %s: %w", k.topic, err))
			return
		}
		k.report(fmt.Errorf("lightq: consumer of %s: reconnecting: %w", k.topic, l.cause()))
		k.dropQueued()
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
