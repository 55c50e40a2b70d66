package client

import (
	"context"
	"time"

	"github.com/lightq/lightq/wire"
)

// The producer's machinery: sealing and writing batches, the flusher goroutine that enforces
// Linger, and the acker goroutine that runs callbacks in send order and frees in-flight slots.

// seal closes partition part's open batch and writes it. p.mu and an in-flight token are
// held; the token now belongs to the batch.
func (p *Producer) seal(part int, flush flushMode) {
	b := p.parts[part]
	p.parts[part] = nil
	b.hasToken = true
	if part == p.sticky {
		p.sticky = (p.sticky + 1) % p.nparts
	}
	p.enqueue(b)

	data, err := b.b.Finish(p.codec, &p.comp)
	if p.codec != wire.CodecNone && (err != nil || len(data) >= b.b.Size() || len(data) > p.maxBatch) {
		data, err = b.b.Finish(wire.CodecNone, nil)
	}
	if err != nil {
		p.complete(b, -1, b.partition, err)
		return
	}
	c := p.c
	b.corr = c.nextCorr()
	if p.acks != wire.AcksNone {
		if err := c.register(b.corr, wire.OpProduce, b); err != nil {
			p.complete(b, -1, b.partition, err)
			return
		}
	}
	if err := c.beginWrite(); err != nil {
		if p.acks == wire.AcksNone || c.unregister(b.corr) {
			p.complete(b, -1, b.partition, err)
		}
		return
	}
	p.phdr = wire.AppendProduceHeader(p.phdr[:0], p.topic, int32(part), p.acks)
	wire.PutHeader(p.hdr[:], wire.OpProduce, 0, b.corr, len(p.phdr)+len(data))
	if wire.HeaderSize+len(p.phdr)+len(data) > c.bw.Available() {
		p.iovec = [3][]byte{p.hdr[:], p.phdr, data}
		p.iov = p.iovec[:]
		err = c.writeVectored(&p.iov)
		p.iovec = [3][]byte{}
	} else {
		_, err = c.bw.Write(p.hdr[:])
		if err == nil {
			_, err = c.bw.Write(p.phdr)
		}
		if err == nil {
			_, err = c.bw.Write(data)
		}
	}
	if err = c.endWrite(err, flush); err != nil {
		if p.acks == wire.AcksNone || c.unregister(b.corr) {
			p.complete(b, -1, b.partition, err)
		}
		return
	}
	p.unflushed = flush == flushLater
	if p.acks == wire.AcksNone {
		c.registerOneWay(b.corr, p)
		p.complete(b, -1, b.partition, nil)
	}
}

// flushLocked pushes frames left in the connection's buffer by seal(..., flushLater). It runs
// before anything blocks, since the acks that free slots need those frames sent.
func (p *Producer) flushLocked() {
	if !p.unflushed {
		return
	}
	p.unflushed = false
	if err := p.c.beginWrite(); err == nil {
		_ = p.c.endWrite(nil, flushNow)
	}
}

// enqueue appends a sealed batch to the acknowledgement queue.
func (p *Producer) enqueue(b *prodBatch) {
	p.ackMu.Lock()
	p.fifo = append(p.fifo, b)
	p.outstanding++
	p.ackMu.Unlock()
}

// complete records a batch's outcome and wakes the acker.
func (p *Producer) complete(b *prodBatch, base int64, par int32, err error) {
	p.ackMu.Lock()
	b.done, b.base, b.ackPar, b.err = true, base, par, err
	p.ackMu.Unlock()
	select {
	case p.ackSig <- struct{}{}:
	default:
	}
}

// oneWayError receives the refusal of an AckNone batch on the reader goroutine.
func (p *Producer) oneWayError(err *wire.Error) {
	p.ackMu.Lock()
	if p.firstErr == nil {
		p.firstErr = err
	}
	if p.onError != nil {
		p.asyncErrs = append(p.asyncErrs, err)
	}
	p.ackMu.Unlock()
	select {
	case p.ackSig <- struct{}{}:
	default:
	}
}

// acker runs callbacks for completed batches in send order and frees their slots. It exits
// once the producer is closed or its connection has failed and nothing is outstanding.
func (p *Producer) acker() {
	defer close(p.ackerDone)
	closing, flusherDone := p.closing, p.flusherDone
	stopping := false
	var errs []error
	for {
		select {
		case <-p.ackSig:
		case <-closing:
			closing, stopping = nil, true
		case <-flusherDone:
			flusherDone, stopping = nil, true
		}
		for {
			p.ackMu.Lock()
			errs = append(errs[:0], p.asyncErrs...)
			p.asyncErrs = p.asyncErrs[:0]
			var b *prodBatch
			if p.head < len(p.fifo) && p.fifo[p.head].done {
				b = p.fifo[p.head]
				p.fifo[p.head] = nil
				p.head++
				if p.head == len(p.fifo) {
					p.fifo, p.head = p.fifo[:0], 0
				}
			}
			p.ackMu.Unlock()
			for _, err := range errs {
				p.onError(err)
			}
			if b == nil {
				break
			}
			p.finish(b)
		}
		if stopping {
			p.ackMu.Lock()
			idle := p.outstanding == 0
			p.ackMu.Unlock()
			if idle {
				return
			}
		}
	}
}

// finish runs a completed batch's callbacks and recycles it.
func (p *Producer) finish(b *prodBatch) {
	for i, cb := range b.cbs {
		if cb == nil {
			continue
		}
		if b.err != nil {
			cb(Ack{Partition: b.partition, Offset: -1}, b.err)
		} else if b.base < 0 {
			cb(Ack{Partition: b.ackPar, Offset: -1}, nil)
		} else {
			cb(Ack{Partition: b.ackPar, Offset: b.base + int64(i)}, nil)
		}
	}
	p.ackMu.Lock()
	if b.err != nil && p.firstErr == nil {
		p.firstErr = b.err
	}
	p.outstanding--
	if p.outstanding == 0 && p.drained != nil {
		close(p.drained)
		p.drained = nil
	}
	p.ackMu.Unlock()
	p.releaseIf(b.hasToken)
	p.putBatch(b)
}

// flusher seals batches whose linger has expired or that are full, and fails the open
// batches when the connection breaks.
func (p *Producer) flusher() {
	defer close(p.flusherDone)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-p.kick:
		case <-timer.C:
		case <-p.closing:
			return
		case <-p.c.done:
			p.failOpen(p.c.Err())
			return
		}
		next, err := p.sealBatches(context.Background(), dueBatches)
		if err != nil {
			continue // closing or connection down: the next select sees it
		}
		d := time.Hour
		if !next.IsZero() {
			d = max(time.Until(next), 0)
		}
		timer.Reset(d)
	}
}

// sealScope says which open batches sealBatches seals.
type sealScope uint8

const (
	dueBatches sealScope = iota // full ones and those whose linger is over (the flusher)
	allBatches                  // every one that holds a message (Flush)
)

// sealBatches seals the open batches of scope and returns the earliest time another becomes
// due.
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
		select {
		case p.sem <- struct{}{}:
		default:
			p.flushLocked()
			if !all {
				// No timer is armed while we wait: a Send opening a batch meanwhile (on a
				// partition this scan has passed) must wake the flusher to rescan.
				p.timerDue = time.Time{}
			}
			p.mu.Unlock()
			var err error
			select {
			case p.sem <- struct{}{}:
			case <-ctx.Done():
				err = ctx.Err()
			case <-p.closing:
				err = ErrClosed
			case <-p.c.done:
				err = p.c.Err()
			}
			p.mu.Lock()
			if err != nil {
				return next, err
			}
			if p.dead != nil || p.parts[part] == nil || p.parts[part].b.Count() == 0 {
				<-p.sem
				continue
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

// failOpen stops the producer with err and fails every message still in an open batch.
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
		p.enqueue(b)
		p.complete(b, -1, b.partition, err)
	}
}
