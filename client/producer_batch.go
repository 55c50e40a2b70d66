package client

import (
	"errors"
	"fmt"
	"time"

	"github.com/lightq/lightq/wire"
)

// The producer's machinery for one batch: sealing it, writing it (pump: in partition order,
// on the producer's connection), its answer, and the acker goroutine that runs callbacks in
// send order and frees in-flight slots. producer_flusher.go has the goroutine that enforces
// Linger, reconnects, retries and delivery timeouts.
//
// Where a batch waits (the structure a sequence number per batch would be stamped into):
// it is open in Producer.parts[partition] while messages join it; seal finishes it once
// (b.data, never rebuilt) and appends it to queues[partition].batches, in seal order, where it
// stays until its outcome is known; pump writes the batches of a partition in that order,
// each only after every earlier one, and writes them again, the same bytes, after a
// reconnect or a retriable refusal. b.seq numbers the sealed batches of a partition from 0.
// An idempotent producer stamps its id, epoch and the partition's next base sequence into the
// batch at seal (producer_idem.go renumbers the batches after a gap).

// seal closes partition part's open batch and hands it to pump. p.mu and the in-flight
// tokens for part are held; the tokens now belong to the batch.
func (p *Producer) seal(part int, flush flushMode) {
	b := p.parts[part]
	p.parts[part] = nil
	b.hasToken, b.hasPartToken = true, p.partSem != nil
	if part == p.sticky {
		p.sticky = (p.sticky + 1) % p.nparts
	}
	q := &p.queues[part] // its numbering fields are guarded by p.mu, held
	if p.idem {
		b.b.SetProducer(q.pid, q.epoch, q.nextSeq)
	}
	data, err := b.b.Finish(p.codec, &p.comp)
	if p.codec != wire.CodecNone && (err != nil || len(data) >= b.b.Size() || len(data) > p.maxBatch) {
		data, err = b.b.Finish(wire.CodecNone, nil)
	}
	if err != nil {
		p.enqueue(b, false)
		p.complete(b, -1, b.partition, newProduceError(err, false))
		return
	}
	b.data = data
	if p.idem {
		q.nextSeq = wire.NextSequence(q.nextSeq, uint32(b.b.Count()))
	}
	p.enqueue(b, true)
	p.pump(part, flush)
}

// enqueue appends a batch to the acknowledgement queue and, when it is to be sent (queued),
// to its partition's queue.
func (p *Producer) enqueue(b *prodBatch, queued bool) {
	p.ackMu.Lock()
	p.fifo = append(p.fifo, b)
	p.outstanding++
	b.queued = queued
	if queued {
		q := &p.queues[b.partition]
		b.seq = q.sealed
		q.sealed++
		b.state = stUnsent
		q.batches = append(q.batches, b)
	} else {
		b.state = stInFlight // not in a partition queue: only complete may touch it
	}
	p.ackMu.Unlock()
}

// pump writes partition part's batches that are next in order, while the partition's leader
// is connected and the partition is not paused or moving. p.mu is held.
func (p *Producer) pump(part int, flush flushMode) {
	r := p.route[part]
	if r == nil || r.link == nil {
		return
	}
	l := r.link
	for {
		p.ackMu.Lock()
		q := &p.queues[part]
		var b *prodBatch
		if !q.paused && !q.resync && !q.moving {
			for _, x := range q.batches {
				if x.state == stInFlight {
					continue
				}
				if x.state == stUnsent {
					b = x
				}
				break // a refused batch holds back the ones after it
			}
		}
		if b != nil {
			b.state, b.corr, b.link = stInFlight, p.c.nextCorr(), l
		}
		p.ackMu.Unlock()
		if b == nil || !p.write(r, l, b, flush) {
			return
		}
	}
}

// write writes batch b, marked in flight, on connection l of route r. It returns false when
// l is broken: the batch is then unsent again (nothing left) or in flight on a dead
// connection (bytes may have left), which the flusher's reconnect handling turns into a
// re-send.
func (p *Producer) write(r *prodRoute, l *link, b *prodBatch, flush flushMode) bool {
	n, corr := l.n, b.corr
	if len(b.data) > l.limits.MaxBatch {
		// The broker came back with a smaller MaxBatch than the batch was built for.
		p.complete(b, -1, b.partition, newProduceError(&wire.Error{Code: wire.CodeMessageTooLarge,
			Message: fmt.Sprintf("batch of %d bytes, the broker's MaxBatch is now %d", len(b.data), l.limits.MaxBatch)}, b.uncertain))
		if p.idem {
			p.wake() // its partition starts its numbering over
		}
		return true
	}
	if p.acks != wire.AcksNone {
		if err := l.register(corr, wire.OpProduce, b, 0); err != nil {
			p.unsend(b, corr)
			return false
		}
	}
	if err := n.beginWrite(l); err != nil {
		if p.acks == wire.AcksNone || l.unregister(corr) {
			p.unsend(b, corr)
		}
		return false
	}
	p.phdr = wire.AppendProduceHeader(p.phdr[:0], p.topic, b.partition, p.acks)
	wire.PutHeader(p.hdr[:], wire.OpProduce, 0, corr, len(p.phdr)+len(b.data))
	var err error
	if wire.HeaderSize+len(p.phdr)+len(b.data) > n.bw.Available() {
		p.iovec = [3][]byte{p.hdr[:], p.phdr, b.data}
		p.iov = p.iovec[:]
		err = n.writeVectored(&p.iov)
		p.iovec = [3][]byte{}
	} else {
		_, err = n.bw.Write(p.hdr[:])
		if err == nil {
			_, err = n.bw.Write(p.phdr)
		}
		if err == nil {
			_, err = n.bw.Write(b.data)
		}
	}
	if err = n.endWrite(l, err, flush); err != nil {
		return false
	}
	r.unflushed = flush == flushLater
	if p.acks == wire.AcksNone {
		l.registerOneWay(corr, p)
		p.complete(b, -1, b.partition, nil)
	}
	return true
}

// unsend takes back attempt corr of b, which never reached the socket.
func (p *Producer) unsend(b *prodBatch, corr uint32) {
	p.ackMu.Lock()
	if b.state == stInFlight && b.corr == corr {
		b.state, b.corr, b.link = stUnsent, 0, nil
	}
	p.ackMu.Unlock()
}

// flushLocked pushes frames left in the connections' buffers by seal(..., flushLater). It
// runs before anything blocks, since the acks that free slots need those frames sent.
func (p *Producer) flushLocked() {
	for _, r := range p.routes {
		if !r.unflushed || r.link == nil {
			continue
		}
		r.unflushed = false
		if err := r.n.beginWrite(r.link); err == nil {
			_ = r.n.endWrite(r.link, nil, flushNow)
		}
	}
}

// respond receives the PRODUCE answer on the reader goroutine. The end of the connection
// (ErrConnectionLost, ErrClosed, a code that closes it) is not an answer: the flusher sees
// the connection fail and sends the batch again on the next one.
func (b *prodBatch) respond(corr uint32, body []byte, err error) {
	if err != nil && connectionEnd(err) {
		return
	}
	base, par := int64(-1), b.partition
	if err == nil {
		var r wire.ProduceResponse
		if derr := r.Decode(body); derr != nil {
			err = fmt.Errorf("%w: PRODUCE response: %w", ErrProtocol, derr)
		} else {
			base, par = r.BaseOffset, int32(r.Partition)
		}
	}
	b.p.answer(b, corr, base, par, err)
}

// connectionEnd reports whether err is the end of the connection rather than an answer.
func connectionEnd(err error) bool {
	if errors.Is(err, ErrConnectionLost) || errors.Is(err, ErrClosed) {
		return true
	}
	we := wireError(err)
	return we != nil && we.Code.Fatal()
}

// wireError returns the broker's error in err, or nil. Keeping errors.As out of the callers
// keeps their success path free of the allocation its target costs.
func wireError(err error) *wire.Error {
	var we *wire.Error
	if errors.As(err, &we) {
		return we
	}
	return nil
}

// answer records the broker's answer to attempt corr of b, unless a later attempt replaced
// it (after a reconnect) or b already has its outcome.
func (p *Producer) answer(b *prodBatch, corr uint32, base int64, par int32, err error) {
	p.ackMu.Lock()
	if b.state != stInFlight || b.corr != corr {
		p.ackMu.Unlock()
		return
	}
	b.corr, b.link = 0, nil
	var we *wire.Error // looked up only for an error: errors.As would move it to the heap
	if err != nil {
		we = wireError(err)
	}
	switch {
	case err == nil:
		p.completeLocked(b, base, par, nil)
	case we != nil && p.leaderRefusal(b, we.Code, err):
		p.ackMu.Unlock()
		p.wake() // the flusher moves the partition to its leader
		return
	case we != nil && p.idem && p.sequenceRefusal(b, we.Code, err):
		p.ackMu.Unlock()
		p.wake()
		return
	case we != nil && refusalOf(we.Code).retry:
		b.state, b.lastErr = stRefused, err
		b.uncertain = b.uncertain || refusalOf(we.Code).maybe
		q := &p.queues[b.partition]
		if !q.paused {
			q.paused, q.retryAt = true, time.Time{}
			p.retrying++
		}
		p.ackMu.Unlock()
		p.wake()
		return
	case we != nil:
		p.completeLocked(b, -1, par, newProduceError(err, b.uncertain || refusalOf(we.Code).maybe))
	default: // an answer that does not decode
		p.completeLocked(b, -1, par, newProduceError(err, true))
	}
	q := &p.queues[b.partition]
	paused := q.paused || q.resync
	p.ackMu.Unlock()
	p.signalAcker()
	if paused {
		p.wake() // the flusher waits for the paused partition's answers
	}
}

// complete records a batch's outcome and wakes the acker.
func (p *Producer) complete(b *prodBatch, base int64, par int32, err error) {
	p.ackMu.Lock()
	p.completeLocked(b, base, par, err)
	p.ackMu.Unlock()
	p.signalAcker()
}

// completeLocked records b's outcome and takes it out of its partition's queue; p.ackMu is
// held. A batch stored after refused ones of its partition means those cannot be retried in
// order any more.
func (p *Producer) completeLocked(b *prodBatch, base int64, par int32, err error) {
	if b.state == stDone {
		return
	}
	b.state, b.base, b.ackPar, b.err = stDone, base, par, err
	b.corr, b.link = 0, nil
	if !b.queued {
		return
	}
	q := &p.queues[b.partition]
	for i, x := range q.batches {
		if x == b {
			copy(q.batches[i:], q.batches[i+1:])
			q.batches[len(q.batches)-1] = nil
			q.batches = q.batches[:len(q.batches)-1]
			break
		}
	}
	if err != nil {
		if p.idem && !q.resync {
			// Its sequence numbers are a gap now: the later batches start over.
			q.resync = true
			p.resyncing++
		}
		return
	}
	if q.bo.cur != 0 {
		q.bo.reset()
	}
	if q.paused {
		for _, x := range q.batches {
			if x.state == stRefused && x.seq < b.seq {
				x.noRetry = true
			}
		}
	}
}

func (p *Producer) signalAcker() {
	select {
	case p.ackSig <- struct{}{}:
	default:
	}
}

// oneWayError receives the refusal of an AckNone batch on the reader goroutine. The batch
// was not stored; its callback has already run.
func (p *Producer) oneWayError(werr *wire.Error) {
	err := newProduceError(werr, refusalOf(werr.Code).maybe)
	p.ackMu.Lock()
	if werr.Code == wire.CodeNotLeader {
		p.recheck = true // the flusher looks the leaders up again
		defer p.wake()
	}
	if p.firstErr == nil {
		p.firstErr = err
	}
	if p.onError != nil {
		p.asyncErrs = append(p.asyncErrs, err)
	}
	p.ackMu.Unlock()
	p.signalAcker()
}

// acker runs callbacks for completed batches in send order and frees their slots. It exits
// once the producer is closed or its flusher has stopped, and nothing is outstanding.
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
			if p.head < len(p.fifo) && p.fifo[p.head].state == stDone {
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
	if b.hasToken {
		<-p.sem
	}
	if b.hasPartToken {
		<-p.partSem[b.partition]
	}
	if (b.hasToken || b.hasPartToken) && p.tokenWait.Load() && p.tokenWait.CompareAndSwap(true, false) {
		p.wake()
	}
	p.putBatch(b)
}
