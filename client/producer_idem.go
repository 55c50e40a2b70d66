package client

import (
	"context"
	"fmt"
	"time"

	"github.com/lightq/lightq/wire"
)

// The idempotent producer's numbering (PROTOCOL.md section 15, "What a producer does").
// NewProducer asks INIT_PRODUCER for an id and an epoch once; they survive reconnects. seal
// stamps each batch with the id and epoch its partition numbers under (partQueue.pid, epoch)
// and the partition's next base sequence, once: a batch that may have been stored is re-sent
// byte for byte, so the broker answers a re-send with the original offsets.
//
// A gap in a partition's sequence (a batch failed: a refusal, the delivery timeout, a batch
// too large for the broker after a reconnect; or the broker answered UNKNOWN_PRODUCER, having
// lost the producer's state) cannot be closed under the same epoch: the broker would refuse
// every later batch as OUT_OF_ORDER_SEQUENCE. The partition is then marked resync, nothing of
// it is written, and once none of its batches is in flight the flusher bumps the producer's
// epoch (INIT_PRODUCER with the current id and epoch) and renumbers the partition's remaining
// batches from 0 under it (wire.SetBatchProducer): none of them can have been stored under
// the old numbers, since the broker stores nothing after a gap. Other partitions keep their
// numbering; each adopts the newest epoch at its own next gap. PRODUCER_FENCED stops the
// producer: a newer incarnation of it writes the partition.

// initProducer asks the broker for a producer id and epoch: a new one (NoProducer), or the
// next epoch of id.
func (c *Conn) initProducer(ctx context.Context, id int64, epoch int16) (wire.InitProducerResponse, error) {
	req := wire.InitProducer{PreviousID: id, PreviousEpoch: epoch}
	var resp wire.InitProducerResponse
	body, err := c.anyRoundTrip(ctx, wire.OpInitProducer, req.AppendTo(nil))
	if err != nil {
		return resp, err
	}
	if err := resp.Decode(body); err != nil {
		return resp, fmt.Errorf("%w: INIT_PRODUCER response: %w", ErrProtocol, err)
	}
	return resp, nil
}

// sequenceRefusal handles the answers only an idempotent batch gets; p.ackMu is held and b is
// in flight. It reports false for an answer that fails b as any refusal does:
// OUT_OF_ORDER_SEQUENCE with nothing earlier of the partition outstanding (the broker lost
// acknowledged batches, or the numbering is wrong: b fails, not stored, and the later batches
// start over).
func (p *Producer) sequenceRefusal(b *prodBatch, code wire.Code, err error) bool {
	q := &p.queues[b.partition]
	switch code {
	case wire.CodeProducerFenced:
		if p.fenced == nil {
			p.fenced = err
		}
		p.completeLocked(b, -1, b.partition, newProduceError(err, b.uncertain))
		p.signalAcker()
		return true
	case wire.CodeUnknownProducer:
	case wire.CodeOutOfOrderSequence:
		if q.moving && (len(q.batches) == 0 || q.batches[0] != b) {
			// Behind an earlier batch that goes again to the partition's leader (it met
			// NOT_LEADER or REPLICATION_TIMEOUT): b goes again after it, unchanged.
			b.state, b.lastErr = stUnsent, err
			return true
		}
		if len(q.batches) > 0 && q.batches[0] == b && !q.paused && !q.resync {
			return false
		}
		// An earlier batch was refused: b is behind its gap. It goes again, unchanged, when
		// the earlier one is retried (paused), or renumbered with it (resync).
		if q.paused && !q.resync {
			b.state, b.lastErr = stRefused, err
			return true
		}
	default:
		return false
	}
	b.state, b.lastErr = stRefused, err
	if !q.resync {
		q.resync = true
		p.resyncing++
	}
	return true
}

// resync starts over the numbering of the partitions marked resync whose batches are all
// answered, and stops the producer once it was fenced. It returns when it must run again
// (zero: when woken). It runs on the flusher; INIT_PRODUCER is asked without p.mu held.
func (p *Producer) resync() time.Time {
	p.ackMu.Lock()
	fenced, n := p.fenced, p.resyncing
	p.ackMu.Unlock()
	if fenced != nil {
		p.failOpen(fmt.Errorf("lightq: producer fenced: %w", fenced))
		p.failSealed(fenced)
		return time.Time{}
	}
	if n == 0 {
		return time.Time{}
	}
	p.mu.Lock()
	if p.dead != nil || !p.c.anyConnected() {
		p.mu.Unlock()
		return time.Time{} // a new connection wakes the flusher
	}
	ready, bump := p.resyncReady()
	if !ready {
		p.mu.Unlock()
		return time.Time{} // the answers wake the flusher
	}
	if bump {
		if now := time.Now(); now.Before(p.bumpAt) {
			p.mu.Unlock()
			return p.bumpAt
		}
		id, epoch := p.pid, p.epoch
		p.mu.Unlock()
		ip, err := p.bumpEpoch(id, epoch)
		p.mu.Lock()
		if err != nil {
			p.bumpAt = time.Now().Add(p.bumpBo.next())
			p.mu.Unlock()
			return p.bumpAt
		}
		p.bumpAt = time.Time{}
		p.bumpBo.reset()
		if p.pid == id && p.epoch == epoch {
			p.pid, p.epoch = ip.ProducerID, ip.ProducerEpoch
		}
	}
	p.ackMu.Lock()
	var parts []int
	for part := range p.queues {
		q := &p.queues[part]
		if !q.resync || inFlight(q) || q.pid == p.pid && q.epoch == p.epoch {
			continue
		}
		seq := int32(0)
		for _, b := range q.batches {
			if err := wire.SetBatchProducer(b.data, p.pid, p.epoch, seq); err != nil {
				panic("lightq: renumbering a sealed batch: " + err.Error()) // seal built it
			}
			seq = wire.NextSequence(seq, uint32(b.b.Count()))
			if b.state == stRefused {
				b.state = stUnsent
			}
		}
		q.pid, q.epoch, q.nextSeq = p.pid, p.epoch, seq
		q.resync = false
		p.resyncing--
		if q.paused {
			q.paused, q.retryAt = false, time.Time{}
			p.retrying--
		}
		parts = append(parts, part)
	}
	p.ackMu.Unlock()
	for _, part := range parts {
		p.pump(part, flushLater)
	}
	p.flushLocked()
	p.mu.Unlock()
	return time.Time{}
}

// resyncReady reports whether a partition marked resync has none of its batches in flight,
// and whether one such partition still numbers under the producer's current epoch (which
// must then be bumped first). p.mu is held.
func (p *Producer) resyncReady() (ready, bump bool) {
	p.ackMu.Lock()
	defer p.ackMu.Unlock()
	for part := range p.queues {
		q := &p.queues[part]
		if !q.resync || inFlight(q) {
			continue
		}
		ready = true
		if q.pid == p.pid && q.epoch == p.epoch {
			bump = true
		}
	}
	return ready, bump
}

// inFlight reports whether a batch of q awaits an answer. p.ackMu is held.
func inFlight(q *partQueue) bool {
	for _, b := range q.batches {
		if b.state == stInFlight {
			return true
		}
	}
	return false
}

// bumpEpoch asks for the next epoch of the producer's id, or a fresh id when the broker no
// longer knows this one. Close cuts it short.
func (p *Producer) bumpEpoch(id int64, epoch int16) (wire.InitProducerResponse, error) {
	ctx, cancel := p.c.withTimeout(context.Background())
	defer cancel()
	go func() {
		select {
		case <-p.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	ip, err := p.c.initProducer(ctx, id, epoch)
	if we := wireError(err); we != nil && we.Code == wire.CodeInvalidRequest {
		// The broker never handed the id out (it lost its record of ids): take a new one.
		ip, err = p.c.initProducer(ctx, wire.NoProducer, wire.NoProducer)
	}
	return ip, err
}
