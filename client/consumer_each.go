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
// Close, or the fatal error that ended the consumer, such as a corrupt batch, which names
// the partition and the batch's offset). The *Received is reused: it is valid only during
// the call. Each does not allocate per record.
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
	defer k.consumeMu.Unlock()
	done := ctx.Done()
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
				b := &ch.batches[k.bi]
				k.bi++
				k.it = wire.NewRecordIter(ch.records(b), b.count, b.base, b.firstTS)
				k.itBase, k.itActive = b.base, true
			}
			r := &k.recv
			for k.it.Next(&k.rec) {
				if k.rec.Offset < p.pos.Load() {
					continue
				}
				if k.closed.Load() {
					return ErrClosed
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
				err = fmt.Errorf("lightq: %s partition %d: batch at offset %d: %w", k.topic, p.id, k.itBase, err)
				k.mu.Lock()
				if k.err == nil {
					k.err = err
				}
				k.mu.Unlock()
				k.cancel()
				k.cur = nil
				k.recycle(ch)
				return err
			}
			k.itActive = false
		}
		k.cur = nil
		k.recycle(ch)
	}
}

// Messages returns a channel of copies of the consumer's records, closed when the consumer
// ends (see Err). The channel is unbuffered: a record's position moves when the record has
// been received. It is the convenient API: every record costs allocations. Calling it more
// than once returns the same channel; do not combine it with Each.
func (k *Consumer) Messages() <-chan Received {
	k.msgsOnce.Do(func() {
		k.msgs = make(chan Received)
		go func() {
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
