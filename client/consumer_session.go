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

// session is one connection's set of fetchers. Each fetcher runs in a sub-session of its
// own (same connection and WaitGroup, a context of its own, exited closed when it returns),
// so that a group member can stop one partition's fetcher.
type session struct {
	c      *Conn
	ctx    context.Context
	cancel context.CancelFunc
	wg     *sync.WaitGroup // every fetcher of the session
	exited chan struct{}   // a fetcher's sub-session: closed when the fetcher returned
}

// startSession makes a session on c the consumer's and starts a fetcher for every active
// partition.
func (k *Consumer) startSession(c *Conn) *session {
	s := &session{c: c, wg: &sync.WaitGroup{}}
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
	sub := &session{c: s.c, wg: s.wg, exited: make(chan struct{})}
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
		k.endSession(s)
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
