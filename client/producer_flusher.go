package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lightq/lightq/wire"
)

// The flusher goroutine: it seals batches whose linger is over, follows the Conn from one
// connection to the next (re-sending every unacknowledged batch after a reconnect), retries
// the partitions paused by a retriable refusal, and fails what passes DeliveryTimeout. It
// never waits for an in-flight slot: a due batch without one is left until a slot frees
// (tokenWait), so that it is always free to re-send what holds the slots.

// flusher runs until Close or until the Conn ends.
func (p *Producer) flusher() {
	defer close(p.flusherDone)
	linger := time.NewTimer(time.Hour)
	defer linger.Stop()
	chores := time.NewTimer(time.Hour)
	defer chores.Stop()
	for {
		p.mu.Lock()
		l := p.link
		p.mu.Unlock()
		var lostc, upc <-chan struct{}
		if l != nil {
			lostc = l.done
		} else {
			_, upc, _ = p.c.current()
		}
		select {
		case <-p.kick:
		case <-linger.C:
		case <-chores.C:
		case <-lostc:
			p.linkLost(l)
		case <-upc:
			if !p.linkUp() {
				p.failAll(p.c.Err())
				return
			}
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

// linkLost handles the end of the producer's connection l: every batch in flight on it is
// unsent again, and may have been stored unless the broker said it was shutting down (it
// answers every batch it stored before SHUTTING_DOWN, PROTOCOL.md 4.4). Paused partitions
// start over on the next connection, except refused batches that a later stored batch of
// their partition has overtaken: those fail.
func (p *Producer) linkLost(l *link) {
	shutdown := errors.Is(l.cause(), &wire.Error{Code: wire.CodeShuttingDown})
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.link != l {
		return
	}
	p.link, p.unflushed = nil, false
	var failed []*prodBatch
	p.ackMu.Lock()
	for i := range p.queues {
		q := &p.queues[i]
		for _, b := range q.batches {
			switch b.state {
			case stInFlight:
				b.state, b.corr, b.link = stUnsent, 0, nil
				b.uncertain = b.uncertain || !shutdown
			case stRefused:
				if b.noRetry {
					failed = append(failed, b)
				} else {
					b.state = stUnsent
				}
			}
		}
		if q.paused {
			q.paused, q.retryAt = false, time.Time{}
			p.retrying--
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

// linkUp makes the Conn's new connection the producer's and writes every waiting batch on
// it, in order per partition. It reports false when the Conn has ended instead.
func (p *Producer) linkUp() bool {
	cur, _, err := p.c.current()
	if err != nil {
		return false
	}
	if cur == nil {
		return true // lost again already: wait for the next one
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.link = cur
	for part := range p.queues {
		p.pump(part, flushLater)
	}
	p.flushLocked()
	return true
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
	var noLink error
	if p.link == nil {
		_, last := p.c.Connected()
		if last == nil {
			last = errors.New("no connection")
		}
		noLink = fmt.Errorf("reconnecting: %w", last)
	}
	timeout := func(b *prodBatch) error {
		cause := b.lastErr
		switch {
		case cause != nil:
		case noLink != nil:
			cause = noLink
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
				p.completeLocked(b, -1, b.partition, newProduceError(timeout(b), b.uncertain || b.state == stInFlight))
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
				p.complete(ob, -1, ob.partition, newProduceError(timeout(ob), false))
			}
		}
	}
	for _, a := range drop {
		a.l.unregister(a.corr) // a late answer would be ignored anyway
	}
	p.deadlineAt = next
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
