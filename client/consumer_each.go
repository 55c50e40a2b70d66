package client

import (
	"context"
	"fmt"
	"time"

	"github.com/lightq/lightq/wire"
)

// Consuming: Each walks the queued chunks record by record without allocating and moves the
// partitions' positions; Messages runs Each on a goroutine of its own and sends copies.

// Each calls handler for every record, in offset order per partition, until ctx ends, the
// handler returns an error, or the consumer ends; it returns that error (ErrClosed after
// Close, or the fatal error that ended the consumer, such as a *CorruptBatchError, which
// names the partition and the batch's offsets; see ConsumerOptions.OnCorruptBatch). The
// *Received is reused: it is valid only during the call. Each does not allocate per record.
//
// The partition's position moves past a record once its handler returns, even with an
// error: the next Each resumes after that record. A handler may call Commit (which then
// covers the records before the current one) and Close. The context is checked between
// batches.
func (k *Consumer) Each(ctx context.Context, handler func(*Received) error) error {
	return k.each(ctx, handler, advanceOnError)
}

// positionOnError says what a handler's error means for its record's position.
type positionOnError uint8

const (
	// advanceOnError: the record counts as delivered; the position moves past it (Each).
	advanceOnError positionOnError = iota
	// holdOnError: the record was not delivered; the position stays at it (Messages, whose
	// handler fails only when the copy was not received).
	holdOnError
)

func (k *Consumer) each(ctx context.Context, handler func(*Received) error, onError positionOnError) error {
	k.consumeMu.Lock()
	defer func() {
		k.applyRevoke() // one asked for while this Each ran
		k.consumeMu.Unlock()
	}()
	done := ctx.Done()
outer:
	for {
		if k.cur == nil {
			ch, err := k.pop(ctx)
			if err != nil {
				return err
			}
			k.cur, k.bi, k.itActive = ch, 0, false
			k.recv.Partition = ch.p.id
		}
		ch := k.cur
		p := ch.p
		for {
			if !k.itActive {
				if k.bi == len(ch.batches) {
					break
				}
				select {
				case <-done:
					return ctx.Err()
				default:
				}
				if k.revokeReq.Load() && k.applyRevoke() {
					continue outer
				}
				b := &ch.batches[k.bi]
				k.bi++
				if b.bad != nil {
					if err := k.corruptReached(p, b.bad); err != nil {
						return k.failEach(ch, err)
					}
					continue
				}
				if b.control { // no message: only its offset, which the position passes
					if next := b.base + int64(b.count); next > p.pos.Load() {
						p.pos.Store(next)
						p.moved.Store(true)
					}
					continue
				}
				k.it = wire.NewRecordIter(ch.records(b), b.count, b.base, b.firstTS)
				k.itNext, k.itActive = b.base, true
			}
			r := &k.recv
			for k.it.Next(&k.rec) {
				k.itNext = k.rec.Offset + 1
				if k.rec.Offset < p.pos.Load() {
					continue
				}
				if k.closed.Load() {
					return ErrClosed
				}
				if k.revokeReq.Load() && k.applyRevoke() {
					continue outer // this chunk's partition was revoked
				}
				r.Offset = k.rec.Offset
				r.Timestamp = time.UnixMilli(k.rec.Timestamp)
				r.Key, r.Value, r.Headers = k.rec.Key, k.rec.Value, k.rec.Headers
				err := handler(r)
				if err == nil || onError == advanceOnError {
					p.pos.Store(r.Offset + 1)
					if !p.moved.Load() {
						p.moved.Store(true)
					}
				}
				if err != nil {
					return err
				}
			}
			if err := k.it.Err(); err != nil {
				if err := k.recordsFailed(p, &ch.batches[k.bi-1], err); err != nil {
					return k.failEach(ch, err)
				}
			}
			k.itActive = false
		}
		k.cur = nil
		k.recycle(ch)
	}
}

// recordsFailed handles a batch of p whose records stopped decoding with cause after those
// before k.itNext: the offsets from there (or from the position) to the batch's last are
// a corrupt batch for OnCorruptBatch. Trailing bytes after the records the header counts
// lose no offset: they are reported to OnError.
func (k *Consumer) recordsFailed(p *partState, b *batchRef, cause error) error {
	bad := &CorruptBatchError{Topic: k.topic, Partition: p.id, FirstOffset: max(k.itNext, p.pos.Load()), LastOffset: b.base + int64(b.count) - 1, Err: cause}
	if bad.FirstOffset > bad.LastOffset {
		k.report(fmt.Errorf("lightq: topic %s partition %d: batch at offset %d: after its %d records: %w", k.topic, p.id, b.base, b.count, cause))
		return nil
	}
	return k.corruptReached(p, bad)
}

// corruptReached applies OnCorruptBatch to a corrupt batch Each has reached in p: it returns
// nil when the batch is skipped (the position moves past it), else the error that ends the
// consumer.
func (k *Consumer) corruptReached(p *partState, bad *CorruptBatchError) error {
	if pos := p.pos.Load(); bad.Skippable() && bad.FirstOffset < pos {
		if bad.LastOffset < pos {
			return nil // behind the position already
		}
		started := *bad // the consumer started inside the batch: the rest is what it loses
		started.FirstOffset = pos
		bad = &started
	}
	if !bad.Skippable() || k.opts.OnCorruptBatch == nil {
		return bad
	}
	if err := k.opts.OnCorruptBatch(bad); err != nil {
		return err
	}
	p.pos.Store(bad.LastOffset + 1)
	p.moved.Store(true)
	return nil
}

// failEach ends the consumer with err, met by Each in ch, and returns err.
func (k *Consumer) failEach(ch *chunk, err error) error {
	k.mu.Lock()
	if k.err == nil {
		k.err = err
	}
	k.mu.Unlock()
	k.cancel()
	k.cur, k.itActive = nil, false
	k.recycle(ch)
	return err
}

// Messages returns a channel of copies of the consumer's records, closed when the consumer
// ends (see Err). The channel is unbuffered: a record's position moves when the record has
// been received. It is the convenient API: every record costs allocations. Calling it more
// than once returns the same channel; do not combine it with Each.
func (k *Consumer) Messages() <-chan Received {
	k.msgsOnce.Do(func() {
		k.msgs = make(chan Received)
		done := make(chan struct{})
		k.mu.Lock()
		k.msgsDone = done
		k.mu.Unlock()
		go func() {
			defer close(done)
			defer close(k.msgs)
			ctx := k.msgsCtx
			_ = k.each(ctx, func(r *Received) error {
				select {
				case k.msgs <- r.clone():
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}, holdOnError)
		}()
	})
	return k.msgs
}
