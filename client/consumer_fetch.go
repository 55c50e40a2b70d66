package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lightq/lightq/wire"
)

// The per-partition fetcher: it keeps up to two FETCHes going, verifies and decompresses the
// answers into chunks for the queue (a batch that fails its checks is queued as a corrupt
// batch, for Each), and retries, skips ahead or fails the consumer on errors.

// fetchCall is the pending slot of one FETCH; a fetcher reuses two of them.
type fetchCall struct {
	done  chan struct{} // cap 1: one token per registration answered
	ch    *chunk
	err   error
	corr  uint32
	l     *link
	inUse bool
}

// respond copies the answer into the call's chunk; it runs on the connection's reader.
func (fc *fetchCall) respond(_ uint32, body []byte, err error) {
	if err == nil {
		fc.ch.raw = append(fc.ch.raw[:0], body...)
	}
	fc.err = err
	fc.done <- struct{}{}
}

// sendFetch sends a FETCH for p at off into one of p's free call slots.
func (k *Consumer) sendFetch(s *session, p *partState, off int64) (*fetchCall, error) {
	fc := &p.calls[0]
	if fc.inUse {
		fc = &p.calls[1]
	}
	fc.inUse, fc.err, fc.l = true, nil, s.l
	fc.ch = k.getChunk(p)
	req := wire.Fetch{Topic: k.topic, Partition: uint32(p.id), Offset: off, MaxBytes: k.maxBytes, MaxWaitMs: k.maxWait, Isolation: k.opts.Isolation}
	p.req = req.AppendTo(p.req[:0])
	fc.corr = s.c.nextCorr()
	if err := s.l.register(fc.corr, wire.OpFetch, fc, time.Duration(k.maxWait)*time.Millisecond); err != nil {
		k.freeCall(fc)
		return nil, err
	}
	if err := s.c.writeFrame(s.l, wire.OpFetch, fc.corr, p.req); err != nil && s.l.unregister(fc.corr) {
		k.freeCall(fc)
		return nil, err
	}
	return fc, nil // on a write error the connection failed, which answers the call
}

func (k *Consumer) freeCall(fc *fetchCall) {
	if fc.ch != nil {
		k.recycle(fc.ch)
		fc.ch = nil
	}
	fc.inUse = false
}

// abandon gives up a call, waiting for an answer being delivered right now.
func (k *Consumer) abandon(fc *fetchCall) {
	if !fc.l.unregister(fc.corr) {
		<-fc.done
	}
	k.freeCall(fc)
}

// errFetchTimeout marks a FETCH that got no answer in time.
var errFetchTimeout = errors.New("no answer in time")

// await waits for fc's answer and returns its chunk, accounted.
func (k *Consumer) await(s *session, p *partState, fc *fetchCall) (*chunk, error) {
	if p.timer == nil {
		p.timer = time.NewTimer(k.reqWait)
	} else {
		p.timer.Reset(k.reqWait)
	}
	select {
	case <-fc.done:
		p.timer.Stop()
	case <-s.ctx.Done():
		p.timer.Stop()
		k.abandon(fc)
		return nil, s.ctx.Err()
	case <-p.timer.C:
		k.abandon(fc)
		return nil, errFetchTimeout
	}
	ch, err := fc.ch, fc.err
	fc.ch = nil
	fc.inUse = false
	if err != nil {
		k.recycle(ch)
		return nil, err
	}
	return ch, nil
}

// fetchLoop is one partition's fetcher for one session.
func (k *Consumer) fetchLoop(s *session, p *partState) {
	var pending *fetchCall
	defer func() {
		if pending != nil {
			k.abandon(pending)
		}
		p.comp.Close()
		p.comp = wire.Compressor{}
		s.wg.Done()
		k.wg.Done()
		if s.exited != nil {
			close(s.exited)
		}
	}()
	next := p.pos.Load()
	// The waits before retrying a failed FETCH (the client's one schedule, backoff.go).
	bo := backoff{min: 10 * time.Millisecond, max: reconnectMax}
	for {
		if pending == nil {
			if !k.waitSpace(s, p) {
				return
			}
			fc, err := k.sendFetch(s, p, next)
			if err != nil {
				if !k.fetchFailed(s, p, next, err, &next, &bo) {
					return
				}
				continue
			}
			pending = fc
		}
		ch, err := k.await(s, p, pending)
		pending = nil
		if err != nil {
			if !k.fetchFailed(s, p, next, err, &next, &bo) {
				return
			}
			continue
		}
		bo.reset()
		var resp wire.FetchResponse
		if err := resp.Decode(ch.raw); err != nil || resp.Partition != uint32(p.id) {
			k.recycle(ch)
			if err == nil {
				err = fmt.Errorf("answer for partition %d", resp.Partition)
			}
			k.fetchFailed(s, p, next, fmt.Errorf("%w: FETCH response: %w", ErrProtocol, err), &next, &bo)
			return
		}
		p.hw.Store(resp.HighWatermark)
		batches := ch.raw[wire.FetchResponseHeaderSize:]
		if len(batches) == 0 {
			// Nothing new: the long poll ran out. A broker that answers empty although it
			// has data would make this spin, hence the pause.
			k.recycle(ch)
			if resp.HighWatermark > next && !k.sleep(s, 10*time.Millisecond) {
				return
			}
			continue
		}
		end, framed := scanEnd(batches, next, resp.HighWatermark)
		room := k.account(ch, len(ch.raw))
		// Pipelining: the next FETCH goes out before this answer is verified and queued.
		var sendErr error
		if framed && end > next && room {
			pending, sendErr = k.sendFetch(s, p, end)
		}
		if k.process(p, ch, next, resp.HighWatermark) {
			return // Each stops at a corrupt batch: nothing after it is needed
		}
		if end <= next { // every batch framed (process stops at one that is not), none new
			k.enqueueFatal(p, fmt.Errorf("%w: %s partition %d: FETCH at offset %d answered with batches that end at %d", ErrProtocol, k.topic, p.id, next, end))
			return
		}
		next = end
		if sendErr != nil && !k.fetchFailed(s, p, next, sendErr, &next, &bo) {
			return
		}
	}
}

// scanEnd walks the batch headers of a FETCH answer and returns the offset after its last
// batch (at least from; see batchNext, hw is the answer's high watermark), and whether every
// batch is framed by its length field. The batches are checked later, by process; the next
// FETCH, sent before that, starts where a skip of a corrupt last batch would go.
func scanEnd(b []byte, from, hw int64) (int64, bool) {
	end := from
	for len(b) > 0 {
		n := wholeBatchSize(b)
		if n == 0 {
			return end, false
		}
		end = max(end, batchNext(b, n, hw))
		b = b[n:]
	}
	return end, true
}

// process verifies every batch of ch that reaches offset from (CRC and structure) and
// decompresses the ones it needs, and queues ch; Each decodes the records. A batch that fails
// is queued in its place as a corrupt batch, which Each skips or stops at
// (ConsumerOptions.OnCorruptBatch). process returns true when the fetcher has nothing more to
// fetch: the consumer will stop at that batch, because its extent is unknown or because no
// OnCorruptBatch can skip it. hw is the answer's high watermark.
func (k *Consumer) process(p *partState, ch *chunk, from, hw int64) (stop bool) {
	ch.batches, ch.dec = ch.batches[:0], ch.dec[:0]
	for off := wire.FetchResponseHeaderSize; off < len(ch.raw); {
		rest := ch.raw[off:]
		n := wholeBatchSize(rest)
		var (
			ref  batchRef
			keep bool
			err  error
		)
		if n == 0 {
			err = fmt.Errorf("%w: its length field says %d bytes, %d are left in the FETCH answer", wire.ErrCorruptBatch, wire.BatchSize(rest), len(rest))
		} else {
			ref, keep, err = k.verify(p, ch, off, n, from)
		}
		if err != nil {
			bad := corruptBatch(k.topic, p.id, rest, n, from, hw, err)
			ch.batches = append(ch.batches, batchRef{bad: bad})
			if !bad.Skippable() || k.opts.OnCorruptBatch == nil {
				stop = true
				break
			}
		} else if keep {
			ch.batches = append(ch.batches, ref)
		}
		off += n
	}
	k.account(ch, len(ch.dec))
	if len(ch.batches) > 0 {
		k.enqueue(ch)
	} else {
		k.recycle(ch)
	}
	return stop
}

// verify checks the batch of n bytes at ch.raw[off:] and returns where its records are,
// decompressed if need be; keep is false for a batch that ends before offset from, which is
// not decompressed. A control batch (PROTOCOL.md section 7) is kept as a reference without
// records, so that Each moves the position past its offset.
func (k *Consumer) verify(p *partState, ch *chunk, off, n int, from int64) (ref batchRef, keep bool, err error) {
	bt, err := wire.ParseBatch(ch.raw[off:off+n], k.maxBatch)
	if err != nil {
		return ref, false, err
	}
	if bt.NextOffset() <= from {
		return ref, false, nil
	}
	ref = batchRef{base: bt.BaseOffset, firstTS: bt.FirstTimestamp, count: bt.RecordCount}
	if bt.IsControl() {
		ref.control = true
		return ref, true, nil
	}
	if bt.Codec() == wire.CodecNone {
		ref.start, ref.end = off+n-len(bt.Records), off+n
		return ref, true, nil
	}
	ref.inDec, ref.start = true, len(ch.dec)
	dec, err := p.comp.Decompress(ch.dec, &bt)
	if err != nil {
		return ref, false, err
	}
	ch.dec = dec
	ref.end = len(ch.dec)
	return ref, true, nil
}

// sleep waits d unless the session ends (false).
func (k *Consumer) sleep(s *session, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// fetchFailed handles a failed FETCH at off: it returns true to retry (with *next possibly
// moved), false when the fetcher must stop (session over, or a fatal error queued).
func (k *Consumer) fetchFailed(s *session, p *partState, off int64, err error, next *int64, bo *backoff) bool {
	if s.ctx.Err() != nil {
		return false
	}
	var we *wire.Error
	isWire := errors.As(err, &we) && !errors.Is(err, ErrConnectionLost)
	switch {
	case errors.Is(err, ErrConnectionLost) || errors.Is(err, ErrClosed) || (isWire && we.Code.Fatal()):
		if !errors.Is(err, ErrClosed) {
			return false // the supervisor starts again on the next connection
		}
		k.enqueueFatal(p, fmt.Errorf("lightq: %s partition %d: %w", k.topic, p.id, err))
		return false
	case isWire && we.Code == wire.CodeNotLeader:
		// Nothing was read: the mover looks the leader up and starts a fetcher there, at
		// the position (consumer_session.go).
		k.requestMove(p)
		return false
	case isWire && we.Code == wire.CodeOffsetOutOfRange:
		ctx, cancel := context.WithTimeout(s.ctx, s.c.opts.RequestTimeout)
		defer cancel()
		start, lerr := s.c.ListOffsets(ctx, wire.ListOffsets{Topic: k.topic, Partition: uint32(p.id), Mode: wire.OffsetEarliest})
		switch {
		case lerr != nil:
			return k.fetchFailed(s, p, off, lerr, next, bo)
		case off < start:
			k.report(fmt.Errorf("%w: %s partition %d: offset %d, log start %d: resuming at %d", ErrOffsetReset, k.topic, p.id, off, start, start))
			*next = start
			return true
		}
		// Beyond the durable end but not the written one (a position committed by a
		// consumer with written isolation): the durable end catches up soon.
		res, ferr := s.c.Fetch(ctx, wire.Fetch{Topic: k.topic, Partition: uint32(p.id), Offset: start, MaxBytes: 1, Isolation: wire.IsolationWritten})
		if ferr == nil && k.opts.Isolation == wire.IsolationDurable && off <= res.HighWatermark {
			return k.sleep(s, bo.next())
		}
		k.enqueueFatal(p, fmt.Errorf("lightq: %s partition %d: offset %d is beyond the end of the log: %w", k.topic, p.id, off, err))
		return false
	case errors.Is(err, errFetchTimeout), errors.Is(err, context.DeadlineExceeded),
		isWire && (we.Code == wire.CodeStorageError || we.Code == wire.CodeInternal || we.Code == wire.CodeResourceLimit || we.Code == wire.CodeStorageFull):
		wait := max(bo.next(), 50*time.Millisecond)
		k.report(fmt.Errorf("lightq: %s partition %d: FETCH at offset %d (retry in %v): %w", k.topic, p.id, off, wait.Round(time.Millisecond), err))
		return k.sleep(s, wait)
	}
	k.enqueueFatal(p, fmt.Errorf("lightq: %s partition %d: FETCH at offset %d: %w", k.topic, p.id, off, err))
	return false
}
