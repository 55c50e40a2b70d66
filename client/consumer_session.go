package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Sessions: a consumer fetches each partition from its leader's broker (a node of its Conn,
// PROTOCOL.md section 16), and runs one session of fetchers per connection of each node it
// fetches from; with one broker that is one session per connection of the Conn. A supervisor
// goroutine per node starts the session when the node is connected; when the connection
// breaks (the node then reconnects by itself), it stops the session's fetchers, drops what
// they had queued, and starts a new session on the next connection from the positions.
//
// A partition moves to another node when its FETCH is answered NOT_LEADER, or when its
// leader's connection is lost while it has replicas elsewhere: the mover goroutine asks for
// the topic's METADATA again (with backoff while no leader is known), stops the partition's
// fetcher if it still runs, drops what it had queued, and starts a fetcher at the position
// in the new leader's session. Nothing is skipped or delivered twice: the position moves
// only as Each delivers, and a fetcher starts there.

// session is one connection's set of fetchers. Each fetcher runs in a sub-session of its
// own (same connection and WaitGroup, a context of its own, exited closed when it returns),
// so that a group member can stop one partition's fetcher.
type session struct {
	c      *Conn
	n      *node // the broker the fetchers fetch from
	l      *link // the connection the fetchers send on
	ctx    context.Context
	cancel context.CancelFunc
	wg     *sync.WaitGroup // every fetcher of the session
	exited chan struct{}   // a fetcher's sub-session: closed when the fetcher returned
}

// startSession makes a session on connection l of node n the consumer's session for n and
// starts a fetcher for every active partition routed to n.
func (k *Consumer) startSession(n *node, l *link) *session {
	s := &session{c: n.c, n: n, l: l, wg: &sync.WaitGroup{}}
	s.ctx, s.cancel = context.WithCancel(k.ctx)
	k.activeMu.Lock()
	k.sessions[n] = s
	for _, p := range k.parts {
		if p.active.Load() && p.node == n && p.fetcher == nil && !p.moving.Load() {
			k.startFetcherLocked(s, p)
		}
	}
	k.activeMu.Unlock()
	return s
}

// startFetcherLocked starts p's fetcher in session s. Caller holds activeMu.
func (k *Consumer) startFetcherLocked(s *session, p *partState) {
	sub := &session{c: s.c, n: s.n, l: s.l, wg: s.wg, exited: make(chan struct{})}
	sub.ctx, sub.cancel = context.WithCancel(s.ctx)
	p.fetcher = sub
	s.wg.Add(1)
	k.wg.Add(1)
	go k.fetchLoop(sub, p)
}

// endSession stops every fetcher of s and waits for them. No fetcher starts in s meanwhile.
func (k *Consumer) endSession(s *session) {
	k.activeMu.Lock()
	if k.sessions[s.n] == s {
		delete(k.sessions, s.n)
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

// activate makes p consumed: its fetcher starts (at its position) in its leader's session.
func (k *Consumer) activate(p *partState) {
	k.activeMu.Lock()
	defer k.activeMu.Unlock()
	p.active.Store(true)
	if p.node == nil {
		k.requestMove(p) // its leader is not known yet
		return
	}
	if s := k.sessions[p.node]; s != nil && p.fetcher == nil && !p.moving.Load() {
		k.startFetcherLocked(s, p)
	}
	k.superviseLocked(p.node)
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

// superviseLocked starts node n's supervisor unless it runs. Caller holds activeMu.
func (k *Consumer) superviseLocked(n *node) {
	if k.sups[n] || k.ctx.Err() != nil {
		return
	}
	k.sups[n] = true
	k.wg.Add(1)
	go k.supervise(n)
}

// errNodeUnused: no active partition is fetched from the node any more.
var errNodeUnused = errors.New("no partition fetched from this broker")

// supervise runs the consumer's sessions on node n: when a connection breaks, it stops the
// fetchers, drops what they had queued, waits for the node to reconnect and starts again
// from the positions. The consumer fails when the Conn ends (closed by its owner, or a
// reconnect refused for good). The supervisor of another node than the boot node ends once
// no active partition is fetched from it and its connection is down.
func (k *Consumer) supervise(n *node) {
	defer k.wg.Done()
	c := n.c
	bo := backoff{min: reconnectMin, max: reconnectMax}
	for {
		l, err := k.awaitNode(n, &bo)
		if errors.Is(err, errNodeUnused) {
			return
		}
		if err != nil {
			if k.ctx.Err() == nil {
				k.enqueueFatal(nil, fmt.Errorf("lightq: consumer of %s: redial: %w", k.topic, err))
			}
			return
		}
		bo.reset()
		if !k.awaitDropped() {
			return
		}
		s := k.startSession(n, l)
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
		k.dropQueued(n)
		k.moveReplicated(n)
	}
}

// awaitNode waits for n's connection. The boot node's, when none of its partitions has
// replicas elsewhere, is waited for as long as it takes (as with one broker); otherwise the
// wait is cut at each backoff step to look up again the leaders of the replicated
// partitions routed there (the cluster may have elected others), and it ends with
// errNodeUnused once no active partition is fetched from a node other than the boot node.
func (k *Consumer) awaitNode(n *node, bo *backoff) (*link, error) {
	boot := n == n.c.boot
	for {
		k.activeMu.Lock()
		used, replicated := false, false
		for _, p := range k.parts {
			if p.active.Load() && p.node == n {
				used, replicated = true, replicated || p.replicated
			}
		}
		if !boot && !used {
			delete(k.sups, n)
			k.activeMu.Unlock()
			return nil, errNodeUnused
		}
		k.activeMu.Unlock()
		if boot && !replicated {
			return n.awaitLink(k.ctx)
		}
		ctx, cancel := context.WithTimeout(k.ctx, bo.next())
		l, err := n.awaitLink(ctx)
		cancel()
		if err == nil || k.ctx.Err() != nil || n.c.Err() != nil {
			return l, err
		}
		k.moveReplicated(n)
	}
}

// moveReplicated has the mover look up the leaders of the active partitions fetched from n
// that have replicas elsewhere.
func (k *Consumer) moveReplicated(n *node) {
	k.activeMu.Lock()
	defer k.activeMu.Unlock()
	for _, p := range k.parts {
		if p.active.Load() && p.node == n && p.replicated {
			k.requestMove(p)
		}
	}
}

// requestMove has the mover look up p's leader and move its fetcher there.
func (k *Consumer) requestMove(p *partState) {
	p.moving.Store(true)
	signal(k.moveSig)
}

// mover moves the partitions that requested it to their leaders, until the consumer ends.
func (k *Consumer) mover() {
	defer k.wg.Done()
	c := k.conn
	bo := backoff{min: lookupMin, max: lookupMax}
	for {
		select {
		case <-k.ctx.Done():
			return
		case <-k.moveSig:
		}
		for k.ctx.Err() == nil && k.anyMoving() {
			ctx, cancel := c.withTimeout(k.ctx)
			err := c.refresh(ctx, k.topic)
			cancel()
			if err != nil && k.ctx.Err() == nil {
				k.report(fmt.Errorf("lightq: consumer of %s: looking up the partitions' leaders: %w", k.topic, err))
			}
			if k.applyMoves() {
				bo.reset()
				break
			}
			if !sleep(k.ctx, nil, bo.next()) { // an election: ask again in a moment
				return
			}
		}
	}
}

// anyMoving reports whether a partition waits for the mover.
func (k *Consumer) anyMoving() bool {
	for _, p := range k.parts {
		if p.moving.Load() {
			return true
		}
	}
	return false
}

// applyMoves moves every partition that requested it and whose leader the Conn's view
// knows; it reports whether none is left waiting.
func (k *Consumer) applyMoves() bool {
	done := true
	for _, p := range k.parts {
		if !p.moving.Load() {
			continue
		}
		n, replicated, ok := k.conn.leader(k.topic, p.id)
		if !ok {
			done = false
			continue
		}
		k.moveTo(p, n, replicated)
	}
	return done
}

// moveTo makes n the node p is fetched from: a fetcher still running elsewhere (or stopped by
// NOT_LEADER) is stopped, what it queued is dropped, and a new one starts at the position in
// n's session (or when n's session starts).
func (k *Consumer) moveTo(p *partState, n *node, replicated bool) {
	k.activeMu.Lock()
	f := p.fetcher
	if p.node == n && f != nil && !exited(f) {
		p.replicated = replicated
		p.moving.Store(false) // still fetching from its leader
		k.activeMu.Unlock()
		return
	}
	k.activeMu.Unlock()
	if f != nil {
		f.cancel()
		<-f.exited
	}
	k.mu.Lock()
	p.gen++ // drop what the old fetcher queued: the new one fetches again from the position
	k.mu.Unlock()
	k.activeMu.Lock()
	defer k.activeMu.Unlock()
	if p.fetcher == f {
		p.fetcher = nil
	}
	p.node, p.replicated = n, replicated
	p.moving.Store(false)
	if !p.active.Load() {
		return
	}
	if s := k.sessions[n]; s != nil && p.fetcher == nil {
		k.startFetcherLocked(s, p)
	}
	k.superviseLocked(n)
}

// exited reports whether fetcher sub-session f has returned.
func exited(f *session) bool {
	select {
	case <-f.exited:
		return true
	default:
		return false
	}
}

// dropQueued makes every queued chunk of the partitions fetched from n stale (their fetchers
// are stopped): the next session fetches again from the positions.
func (k *Consumer) dropQueued(n *node) {
	k.activeMu.Lock()
	on := make(map[*partState]bool, len(k.parts))
	for _, p := range k.parts {
		if p.node == n {
			on[p] = true
		}
	}
	k.activeMu.Unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	keep := k.queue[:0]
	for _, ch := range k.queue[k.head:] {
		if ch.err != nil || !on[ch.p] {
			keep = append(keep, ch)
		} else {
			k.recycleLocked(ch)
		}
	}
	clear(k.queue[len(keep):])
	k.queue, k.head = keep, 0
	for p := range on {
		p.gen++
	}
}
