package client

import (
	"context"
	"time"

	"github.com/lightq/lightq/wire"
)

// Where a producer's batches go: each partition's batches are written to its leader's
// connection (PROTOCOL.md section 16). The producer keeps one prodRoute per broker it writes
// to and, per partition, the route of its leader; with one broker every partition shares the
// boot node's route, and writing a batch costs what it did before clusters.
//
// A partition moves (partQueue.moving) when one of its batches is answered NOT_LEADER
// (nothing was done), or REPLICATION_TIMEOUT to an idempotent producer (the batch may be
// stored: it is re-sent as after a reconnect, and the broker answers a stored one with its
// offsets), or its leader's connection breaks while the partition has other replicas.
// Nothing of a moving partition is written. Once none of its batches is in flight, the
// flusher has the topic's METADATA asked again (on a goroutine of its own: refreshRoutes)
// and, when it names a leader, routes the partition there and writes every unacknowledged
// batch again, the same bytes, in seal order. While no leader is known (an election, leader
// 0), it asks again with backoff; DeliveryTimeout bounds it all, as it bounds a reconnect.

// prodRoute is one broker the producer writes to (guarded by Producer.mu).
type prodRoute struct {
	n         *node
	link      *link // the connection batches are written to; nil while the node reconnects
	unflushed bool  // frames written to the node's buffer without a flush
}

// routeFor returns the producer's route to node n, adding one for a node it has not
// written to yet. p.mu is held.
func (p *Producer) routeFor(n *node) *prodRoute {
	for _, r := range p.routes {
		if r.n == n {
			return r
		}
	}
	r := &prodRoute{n: n}
	r.link, _, _ = n.current()
	if r.link == nil {
		n.want()
	}
	p.routes = append(p.routes, r)
	return r
}

// initRoutes routes every partition to its leader from the Conn's view, which NewProducer
// has just refreshed; a partition without a known leader starts moving.
func (p *Producer) initRoutes() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.route = make([]*prodRoute, p.nparts)
	p.replicated = make([]bool, p.nparts)
	for part := range p.route {
		n, replicated, ok := p.c.leader(p.topic, int32(part))
		p.setReplicated(part, replicated)
		if ok {
			p.route[part] = p.routeFor(n)
			continue
		}
		p.ackMu.Lock()
		p.startMoveLocked(&p.queues[part])
		p.ackMu.Unlock()
	}
}

// setReplicated records whether partition part has replicas elsewhere. p.mu is held.
func (p *Producer) setReplicated(part int, replicated bool) {
	if p.replicated[part] != replicated {
		p.replicated[part] = replicated
		if replicated {
			p.nreplicated++
		} else {
			p.nreplicated--
		}
	}
}

// startMoveLocked marks q's partition moving. p.ackMu is held.
func (p *Producer) startMoveLocked(q *partQueue) {
	if !q.moving {
		q.moving = true
		p.moving++
	}
}

// followLinks notices the producer's routes whose connection broke (linkLost) or came back
// (linkUp). The flusher calls it when a link of the Conn changed.
func (p *Producer) followLinks() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.routes {
		if l := r.link; l != nil {
			select {
			case <-l.done:
				p.linkLost(r, l)
			default:
			}
		}
		if r.link == nil {
			p.linkUp(r)
		}
	}
}

// linkUp makes the route's node's new connection the route's and writes every waiting batch
// of the partitions routed there on it, in order per partition. p.mu is held.
func (p *Producer) linkUp(r *prodRoute) {
	cur, _, err := r.n.current()
	if cur == nil || err != nil {
		if err == nil && p.routed(r) && !r.n.want() {
			// The view no longer names the node a leader, so its reconnector stops at
			// once: nothing would ever connect the route. Look the leaders up again (from
			// a broker that is not suspect) and move the partitions routed there.
			p.ackMu.Lock()
			p.recheck = true
			p.ackMu.Unlock()
		}
		return
	}
	r.link = cur
	for part := range p.queues {
		if p.route[part] == r {
			p.pump(part, flushLater)
		}
	}
	p.flushLocked()
}

// routed reports whether a partition is routed to r. p.mu is held.
func (p *Producer) routed(r *prodRoute) bool {
	for _, x := range p.route {
		if x == r {
			return true
		}
	}
	return false
}

// rerouteDue reports whether some partition needs its leader looked up: it is moving, or it
// has other replicas and its leader's connection is down (the cluster may elect another).
// p.mu is held.
func (p *Producer) rerouteDue() bool {
	p.ackMu.Lock()
	moving := p.moving > 0 || p.recheck
	p.ackMu.Unlock()
	if moving || p.nreplicated == 0 {
		return moving
	}
	for part, r := range p.route {
		if p.replicated[part] && (r == nil || r.link == nil) {
			return true
		}
	}
	return false
}

// routeChores applies what the latest refresh of the topic's metadata says, starts another
// when partitions still wait for a leader, and returns when it must run again (zero: when
// woken). It runs on the flusher, p.mu held.
func (p *Producer) routeChores(now time.Time) time.Time {
	if p.refreshing || !p.rerouteDue() {
		if !p.refreshing {
			p.refreshBo.reset()
		}
		return time.Time{}
	}
	if p.refreshed {
		p.refreshed = false
		if p.applyRoutes() {
			return time.Time{}
		}
	}
	if now.Before(p.refreshAt) {
		return p.refreshAt
	}
	if !p.movable() {
		return time.Time{} // the answers of batches in flight wake the flusher
	}
	p.refreshing = true
	p.refreshAt = now.Add(p.refreshBo.next())
	go p.refreshRoutes()
	return time.Time{}
}

// movable reports whether some partition that needs a leader has none of its batches in
// flight. p.mu is held.
func (p *Producer) movable() bool {
	p.ackMu.Lock()
	defer p.ackMu.Unlock()
	if p.recheck {
		return true
	}
	for part := range p.queues {
		q := &p.queues[part]
		r := p.route[part]
		if (q.moving || p.replicated[part] && (r == nil || r.link == nil)) && !inFlight(q) {
			return true
		}
	}
	return false
}

// refreshRoutes asks for the topic's metadata again and wakes the flusher to apply it. Close
// cuts it short.
func (p *Producer) refreshRoutes() {
	ctx, cancel := p.c.withTimeout(context.Background())
	defer cancel()
	go func() {
		select {
		case <-p.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := p.c.refresh(ctx, p.topic)
	p.mu.Lock()
	p.refreshing, p.refreshed, p.refreshErr = false, true, err
	p.mu.Unlock()
	p.wake()
}

// applyRoutes routes the partitions that need a leader, and have no batch in flight, to the
// leader the Conn's view now names, and writes their waiting batches there. It reports
// whether every partition is routed to a connected leader. p.mu is held.
func (p *Producer) applyRoutes() bool {
	p.ackMu.Lock()
	recheck := p.recheck
	p.recheck = false
	p.ackMu.Unlock()
	done := true
	for part := range p.queues {
		r := p.route[part]
		p.ackMu.Lock()
		q := &p.queues[part]
		need := q.moving || recheck || p.replicated[part] && (r == nil || r.link == nil)
		busy := inFlight(q)
		p.ackMu.Unlock()
		if !need {
			continue
		}
		if busy {
			done = false
			continue
		}
		n, replicated, ok := p.c.leader(p.topic, int32(part))
		if !ok {
			done = false // no leader now: ask again after the backoff
			continue
		}
		nr := p.routeFor(n)
		p.route[part] = nr
		p.setReplicated(part, replicated)
		p.ackMu.Lock()
		if q.moving {
			q.moving = false
			p.moving--
		}
		p.ackMu.Unlock()
		if nr.link == nil {
			// The route may be one whose connection broke while the view named another
			// leader (its reconnector stopped, not wanted): now that the view names the
			// node again, dial it, or nothing ever would (linkUp follows the connect).
			nr.n.want()
			done = done && !replicated
			continue
		}
		p.pump(part, flushLater)
	}
	p.flushLocked()
	return done
}

// moveCause is why a batch of a moving partition waits, for its delivery-timeout error.
// p.mu is held.
func (p *Producer) moveCause(part int) string {
	if p.refreshErr != nil {
		return "waiting for partition's leader (looking it up: " + p.refreshErr.Error() + ")"
	}
	if _, _, ok := p.c.leader(p.topic, int32(part)); !ok {
		return "no leader of the partition (an election?)"
	}
	return "moving to the partition's new leader"
}

// leaderRefusal handles the answers about leadership; p.ackMu is held and b is in flight.
// NOT_LEADER: nothing was done, b goes again, unchanged, once the partition has moved.
// REPLICATION_TIMEOUT to an idempotent batch: it may be stored; it goes again in order like a
// batch whose connection broke (the broker answers a stored one with its original offsets).
// It reports false for any other answer.
func (p *Producer) leaderRefusal(b *prodBatch, code wire.Code, err error) bool {
	switch {
	case code == wire.CodeNotLeader:
	case code == wire.CodeReplicationTimeout && p.idem:
		b.uncertain = true
	default:
		return false
	}
	b.state, b.lastErr = stUnsent, err
	p.startMoveLocked(&p.queues[b.partition])
	return true
}
