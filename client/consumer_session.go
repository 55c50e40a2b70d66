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

// session is one connection's set of fetchers. Each fetcher runs in a sub-session of its
// own (same connection and WaitGroup, a context of its own, exited closed when it returns),
// so that a group member can stop one partition's fetcher.
type session struct {
	c      *Conn
	l      *link // the connection the fetchers send on
	ctx    context.Context
	cancel context.CancelFunc
	wg     *sync.WaitGroup // every fetcher of the session
	exited chan struct{}   // a fetcher's sub-session: closed when the fetcher returned
}

// startSession makes a session on connection l of c the consumer's and starts a fetcher for
// every active partition.
func (k *Consumer) startSession(c *Conn, l *link) *session {
	s := &session{c: c, l: l, wg: &sync.WaitGroup{}}
	s.ctx, s.cancel = context.WithCancel(k.ctx)
	k.activeMu.Lock()
	k.session = s
	for _, p := range k.parts {
		if p.active.Load() {
			k.startFetcherLocked(s, p)
		}
	}
	k.activeMu.Unlock()
	return s
}

// startFetcherLocked starts p's fetcher in session s. Caller holds activeMu.
func (k *Consumer) startFetcherLocked(s *session, p *partState) {
	sub := &session{c: s.c, l: s.l, wg: s.wg, exited: make(chan struct{})}
	sub.ctx, sub.cancel = context.WithCancel(s.ctx)
	p.fetcher = sub
	s.wg.Add(1)
	k.wg.Add(1)
	go k.fetchLoop(sub, p)
}

// endSession stops every fetcher of s and waits for them. No fetcher starts in s meanwhile.
func (k *Consumer) endSession(s *session) {
	k.activeMu.Lock()
	if k.session == s {
		k.session = nil
	}
	k.activeMu.Unlock()
	s.cancel()
	s.wg.Wait()
	k.activeMu.Lock()
	for _, p := range k.parts {
		if p.fetcher != nil && p.fetcher.wg == s.wg {
			p.fetcher = nil
		}
	}
	k.activeMu.Unlock()
}

// activate makes p consumed: its fetcher starts (at its position) in the current session.
func (k *Consumer) activate(p *partState) {
	k.activeMu.Lock()
	p.active.Store(true)
	if k.session != nil && p.fetcher == nil {
		k.startFetcherLocked(k.session, p)
	}
	k.activeMu.Unlock()
}

// deactivate stops p's fetcher and waits until it returned: nothing more of p is queued.
func (k *Consumer) deactivate(p *partState) {
	k.activeMu.Lock()
	p.active.Store(false)
	f := p.fetcher
	p.fetcher = nil
	k.activeMu.Unlock()
	if f != nil {
		f.cancel()
		<-f.exited
	}
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
		if !k.awaitDropped() {
			return
		}
		s := k.startSession(c, l)
		select {
		case <-l.done:
		case <-k.ctx.Done():
		}
		k.endSession(s)
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
