package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lightq/lightq/wire"
)

// The flusher goroutine: it seals batches whose linger is over, follows each partition's
// leader from one connection to the next (re-sending every unacknowledged batch after a
// reconnect, moving partitions whose leader changed: producer_route.go), retries the
// partitions paused by a retriable refusal, and fails what passes DeliveryTimeout. It never
// waits for an in-flight slot: a due batch without one is left until a slot frees
// (tokenWait), so that it is always free to re-send what holds the slots.

// flusher runs until Close or until the Conn ends.
func (p *Producer) flusher() {
	defer close(p.flusherDone)
	linger := time.NewTimer(time.Hour)
	defer linger.Stop()
	chores := time.NewTimer(time.Hour)
	defer chores.Stop()
	// links is closed at the next change of a connection of the Conn; it is taken again
	// before each look at the routes, so that no change goes unseen.
	links := p.c.linkChanges()
	p.followLinks()
	for {
		select {
		case <-p.kick:
		case <-linger.C:
		case <-chores.C:
		case <-links:
			links = p.c.linkChanges()
			p.followLinks()
		case <-p.closing:
			return
		case <-p.c.done:
			p.failAll(p.c.Err())
			return
		}
		next, _ := p.sealBatches(context.Background(), dueBatches)
		d := time.Hour
		if !next.IsZero() {
			d = max(time.Until(next), 0)
		}
		linger.Reset(d)
		d = time.Hour
		at := p.chores()
		if p.idem {
			if rat := p.resync(); !rat.IsZero() && (at.IsZero() || rat.Before(at)) {
				at = rat
			}
		}
		if !at.IsZero() {
			d = max(time.Until(at), 0)
		}
		chores.Reset(d)
	}
}

// linkLost handles the end of route r's connection l: every batch in flight on it is unsent
// again, and may have been stored unless the broker said it was shutting down (it answers
// every batch it stored before SHUTTING_DOWN, PROTOCOL.md 4.4). Paused partitions routed
// there start over on the next connection, except refused batches that a later stored batch
// of their partition has overtaken: those fail. Partitions with other replicas look their
// leader up again (it may have moved). p.mu is held.
func (p *Producer) linkLost(r *prodRoute, l *link) {
	shutdown := errors.Is(l.cause(), &wire.Error{Code: wire.CodeShuttingDown})
	if r.link != l {
		return
	}
	r.link, r.unflushed = nil, false
	var failed []*prodBatch
	p.ackMu.Lock()
	for i := range p.queues {
		q := &p.queues[i]
		for _, b := range q.batches {
			if b.state == stInFlight && b.link == l {
				b.state, b.corr, b.link = stUnsent, 0, nil
				b.uncertain = b.uncertain || !shutdown
			}
		}
		if p.route[i] != r {
			continue
		}
		for _, b := range q.batches {
			if b.state != stRefused {
				continue
			}
			if b.noRetry {
				failed = append(failed, b)
			} else {
				b.state = stUnsent
			}
		}
		if q.paused {
			q.paused, q.retryAt = false, time.Time{}
			p.retrying--
		}
		if p.replicated[i] {
			p.startMoveLocked(q)
		}
	}
	for _, b := range failed {
		p.completeLocked(b, -1, b.partition, newProduceError(b.lastErr, b.uncertain))
	}
	p.ackMu.Unlock()
	if len(failed) > 0 {
		p.signalAcker()
	}
}

// chores runs the delivery-timeout check when it is due and the retries of paused
// partitions, and returns when it must run next (zero: nothing scheduled).
func (p *Producer) chores() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if !p.deadlineAt.IsZero() && !now.Before(p.deadlineAt) {
		p.expire(now)
	}
	next := p.deadlineAt
	p.ackMu.Lock()
	retrying := p.retrying > 0
	p.ackMu.Unlock()
	if retrying {
		if at := p.retryPaused(now); !at.IsZero() && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	if at := p.routeChores(now); !at.IsZero() && (next.IsZero() || at.Before(next)) {
		next = at
	}
	return next
}

// retryPaused moves the partitions paused by a retriable refusal on, once none of their
// batches is in flight: refused batches that a later stored batch overtook fail (a retry
// would store them out of order); the others go again, in order, after the partition's
// backoff. It returns the earliest retry still to come. p.mu is held.
func (p *Producer) retryPaused(now time.Time) time.Time {
	var next time.Time
	for part := range p.queues {
		p.ackMu.Lock()
		q := &p.queues[part]
		if !q.paused || q.resync { // resync renumbers and sends a partition it holds
			p.ackMu.Unlock()
			continue
		}
		waiting := false
		for _, b := range q.batches {
			waiting = waiting || b.state == stInFlight
		}
		if waiting {
			p.ackMu.Unlock()
			continue // their answers wake the flusher
		}
		if q.retryAt.IsZero() {
			var failed []*prodBatch
			left := false
			for _, b := range q.batches {
				if b.state == stRefused && b.noRetry {
					failed = append(failed, b)
				} else if b.state == stRefused {
					left = true
				}
			}
			for _, b := range failed {
				p.completeLocked(b, -1, b.partition, newProduceError(b.lastErr, b.uncertain))
			}
			if len(failed) > 0 {
				defer p.signalAcker()
			}
			if left {
				q.retryAt = now.Add(q.bo.next())
			}
		}
		if !q.retryAt.IsZero() && now.Before(q.retryAt) {
			if next.IsZero() || q.retryAt.Before(next) {
				next = q.retryAt
			}
			p.ackMu.Unlock()
			continue
		}
		for _, b := range q.batches {
			if b.state == stRefused {
				b.state = stUnsent
			}
		}
		q.paused, q.retryAt = false, time.Time{}
		p.retrying--
		p.ackMu.Unlock()
		p.pump(part, flushNow)
	}
	return next
}

// expire fails every batch, open or sealed, whose DeliveryTimeout has passed, with the
// sealed batches after it in its partition, and sets deadlineAt to the next deadline. p.mu is
// held.
func (p *Producer) expire(now time.Time) {
	var next time.Time
	note := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	// waiting says what a partition's batches wait for, if not an answer or a slot: a
	// leader, or the reconnect of the leader's connection. It takes Conn.mu, so it runs
	// before p.ackMu is taken.
	waiting := func(part int) error {
		p.ackMu.Lock()
		moving := p.queues[part].moving
		p.ackMu.Unlock()
		if moving {
			return errors.New(p.moveCause(part))
		}
		r := p.route[part]
		if r == nil || r.link != nil {
			return nil
		}
		p.c.mu.Lock()
		last := r.n.lastErr
		p.c.mu.Unlock()
		if last == nil {
			last = errors.New("no connection")
		}
		return fmt.Errorf("reconnecting: %w", last)
	}
	timeout := func(b *prodBatch, wait error) error {
		cause := b.lastErr
		switch {
		case cause != nil && wait != nil && b.state == stUnsent && leaderCode(cause):
			cause = fmt.Errorf("%w, after %w", wait, cause)
		case cause != nil:
		case wait != nil:
			cause = wait
		case b.state == stInFlight:
			cause = errors.New("no answer from the broker")
		default:
			cause = errors.New("waiting for an in-flight slot")
		}
		return fmt.Errorf("%w: not acknowledged within %v: %w", ErrDeliveryTimeout, p.deliveryTimeout, cause)
	}
	type attempt struct {
		l    *link
		corr uint32
	}
	var drop []attempt
	for part := 0; part < p.nparts; part++ {
		wait := waiting(part)
		p.ackMu.Lock()
		q := &p.queues[part]
		cut := -1
		for i, b := range q.batches {
			if dl := b.opened.Add(p.deliveryTimeout); now.Before(dl) {
				note(dl)
			} else {
				cut = i
				break
			}
		}
		if cut >= 0 {
			expired := append([]*prodBatch(nil), q.batches[cut:]...)
			for _, b := range expired {
				if b.state == stInFlight && b.link != nil {
					drop = append(drop, attempt{b.link, b.corr})
				}
				p.completeLocked(b, -1, b.partition, newProduceError(timeout(b, wait), b.uncertain || b.state == stInFlight))
			}
			if q.paused && len(q.batches) == 0 {
				q.paused, q.retryAt = false, time.Time{}
				p.retrying--
			}
		}
		p.ackMu.Unlock()
		if cut >= 0 {
			p.signalAcker()
		}
		if ob := p.parts[part]; ob != nil && ob.b.Count() > 0 {
			if dl := ob.opened.Add(p.deliveryTimeout); now.Before(dl) {
				note(dl)
			} else {
				p.parts[part] = nil
				p.enqueue(ob, false)
				p.complete(ob, -1, ob.partition, newProduceError(timeout(ob, wait), false))
			}
		}
	}
	for _, a := range drop {
		a.l.unregister(a.corr) // a late answer would be ignored anyway
	}
	p.deadlineAt = next
}

// leaderCode reports whether err is NOT_LEADER or REPLICATION_TIMEOUT.
func leaderCode(err error) bool {
	we := wireError(err)
	return we != nil && (we.Code == wire.CodeNotLeader || we.Code == wire.CodeReplicationTimeout)
}

// sealScope says which open batches sealBatches seals.
type sealScope uint8

const (
	dueBatches sealScope = iota // full ones and those whose linger is over (the flusher)
	allBatches                  // every one that holds a message (Flush)
)

// sealBatches seals the open batches of scope and returns the earliest time another becomes
// due. For the flusher (dueBatches) it never waits for an in-flight slot; Flush does.
func (p *Producer) sealBatches(ctx context.Context, scope sealScope) (time.Time, error) {
	all := scope == allBatches
	var next time.Time
	p.mu.Lock()
	defer p.mu.Unlock()
	for part := 0; part < p.nparts; part++ {
		b := p.parts[part]
		if b == nil || b.b.Count() == 0 {
			continue
		}
		due := b.opened.Add(p.linger)
		if !all && b.b.Size() < p.batchBytes && time.Now().Before(due) {
			if next.IsZero() || due.Before(next) {
				next = due
			}
			continue
		}
		if !p.tryTokens(part) {
			if !all {
				// Set before trying again: a slot freed in between then wakes us.
				p.tokenWait.Store(true)
				if !p.tryTokens(part) {
					continue
				}
			} else {
				p.flushLocked()
				p.mu.Unlock()
				err := p.awaitTokens(ctx, part)
				p.mu.Lock()
				if err != nil {
					return next, err
				}
				if p.dead != nil || p.parts[part] == nil || p.parts[part].b.Count() == 0 {
					p.releaseTokens(part)
					continue
				}
			}
		}
		p.seal(part, flushLater)
	}
	p.flushLocked()
	if !all {
		p.timerDue = next // the flusher arms its timer for next (no timer when zero)
	}
	return next, nil
}

// failOpen stops the producer with err and fails every message still in an open batch (they
// were never sent).
func (p *Producer) failOpen(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead == nil {
		p.dead = err
	}
	for part, b := range p.parts {
		if b == nil {
			continue
		}
		p.parts[part] = nil
		if b.b.Count() == 0 {
			p.putBatch(b)
			continue
		}
		p.enqueue(b, false)
		p.complete(b, -1, b.partition, newProduceError(err, false))
	}
}

// failSealed fails every sealed batch without an outcome with err: those sent and not
// answered may have been stored.
func (p *Producer) failSealed(err error) {
	type attempt struct {
		l    *link
		corr uint32
	}
	var drop []attempt
	p.ackMu.Lock()
	for i := range p.queues {
		q := &p.queues[i]
		for len(q.batches) > 0 {
			b := q.batches[0]
			if b.state == stInFlight && b.link != nil {
				drop = append(drop, attempt{b.link, b.corr})
			}
			p.completeLocked(b, -1, b.partition, newProduceError(err, b.uncertain || b.state == stInFlight))
		}
		if q.paused {
			q.paused, q.retryAt = false, time.Time{}
			p.retrying--
		}
	}
	p.ackMu.Unlock()
	p.signalAcker()
	for _, a := range drop {
		a.l.unregister(a.corr)
	}
}

// failAll ends the producer when its Conn has ended.
func (p *Producer) failAll(err error) {
	p.failOpen(err)
	p.failSealed(err)
}
