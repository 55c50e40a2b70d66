package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lightq/lightq/wire"
)

// SubscribeOptions configure a push subscription to a transient topic. Only Topic is required.
type SubscribeOptions struct {
	Topic string
	// Partition is used when HasPartition is set; otherwise every partition is subscribed.
	Partition    int32
	HasPartition bool
	// QueueGroup is empty for fan-out (every subscriber gets every message) or names a
	// queue group (each message goes to one member).
	QueueGroup string
	// Window is the credit window in bytes of batches, default 4 MiB. The client grants it
	// at SUBSCRIBE and grants consumed bytes back in CREDIT frames once half of it has been
	// consumed, so at most about Window bytes of batches (plus one batch) wait in the client.
	// A subscription to every partition of a cluster's transient topic whose partitions live
	// on several brokers shares it among its partitions (at least 64 KiB each).
	Window int
	// Buffer is the capacity, in messages, of the channel returned by Messages. Default 256.
	// The batch queue between the reader goroutine and the consumer is bounded by Window,
	// not by a count, so that a slow consumer never stalls the connection's reader.
	Buffer int
	// OnCorruptBatch is called, on the goroutine running Each, for a delivered batch the
	// client cannot decode (a *CorruptBatchError naming its topic, partition and the offsets
	// that cannot be delivered). The batch is skipped in any case; when its records stop
	// decoding part-way, the records before the damage were delivered (records are decoded
	// as they are handed to the handler) and the error's offsets start after them.
	// Returning nil goes on with the next batch; an error is returned by Each. nil (the
	// default): Each returns the *CorruptBatchError, and the next Each goes on after the
	// batch; Messages ends, and Err returns the error.
	OnCorruptBatch func(*CorruptBatchError) error
	// InlineHandler lets Each run its handler on the connection's reader goroutine while
	// Each waits for a batch, instead of handing every batch to the goroutine that called
	// Each: one goroutine hand-off (often a thread wake-up) less between the socket and the
	// handler, for latency-sensitive consumers. The handler must then return quickly and
	// must not wait for anything the connection delivers: while it runs, nothing else on
	// the connection is read (answers to requests, the other subscriptions' batches), so a
	// request made from it on the same Conn waits until its timeout, and Close called from
	// it returns without waiting for the broker's answer. Messages ignores the option.
	// Batches that do not decode are left to the goroutine in Each, as without the option.
	InlineHandler bool
}

// Received is one delivered message. In Each it aliases the subscription's buffers and is
// valid only during the handler call: copy what you keep. Values from Messages own their
// memory.
type Received struct {
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time
	Key       []byte
	Value     []byte
	Headers   []wire.RecordHeader
	// Dropped is the number of messages of this partition lost just before this one because
	// the subscriber fell behind the broker's ring.
	Dropped uint64
}

// clone copies a Received out of the buffers it aliases.
func (r *Received) clone() Received {
	m := *r
	m.Key = append([]byte(nil), r.Key...)
	m.Value = append([]byte(nil), r.Value...)
	m.Headers = nil
	if len(r.Headers) > 0 {
		m.Headers = make([]wire.RecordHeader, len(r.Headers))
		for i, h := range r.Headers {
			m.Headers[i] = wire.RecordHeader{Name: append([]byte(nil), h.Name...), Value: append([]byte(nil), h.Value...)}
		}
	}
	return m
}

// Subscription receives the batches the broker pushes for one SUBSCRIBE, on one connection:
// when that connection breaks, the subscription ends with an error wrapping ErrConnectionLost
// once what it had queued is consumed (Err). In a cluster whose brokers share a transient
// topic's partitions (PROTOCOL.md section 16.3), a subscription to every partition is one
// SUBSCRIBE per partition, each at the partition's home broker (a leg), merged here: it ends
// when any of their connections breaks. Consume it with
// Each (no allocation per message) or Messages (a channel of copies), not both, and from one
// goroutine at a time. Close, Dropped, Err and the accessors are safe from any goroutine.
type Subscription struct {
	c     *Conn
	topic string
	// legs are the broker subscriptions this one is made of: one, unless its partitions
	// live on several brokers (then one per partition, byPart indexes them). Set by
	// Subscribe before it returns, then read-only (each leg's consumed is consumeMu's).
	legs       []*subLeg
	byPart     []*subLeg // nil with one leg
	partitions int
	window     int // credit in bytes per leg
	maxBatch   int
	buffer     int
	onCorrupt  func(*CorruptBatchError) error
	inline     bool // SubscribeOptions.InlineHandler
	dropped    atomic.Uint64

	mu     sync.Mutex
	queue  []queuedBatch
	head   int
	free   [][]byte
	err    error         // terminal; the queue is still drained after a connection loss
	signal chan struct{} // cap 1: a batch was queued, or the reader gave a lent handler back
	done   chan struct{} // closed with err
	// The handler Each lends the reader while it waits (InlineHandler, subscription_inline.go).
	// While lent or busy, the reader owns the consumer state below (Each is parked in pop).
	lentFn    func(*Received) error
	lent      bool          // the reader may run lentFn on the next batch
	busy      bool          // the reader is running lentFn: Each waits on idle before it goes on
	idle      chan struct{} // cap 1: busy went false
	inlineErr error         // lentFn's error, which Each returns
	inlineN   atomic.Uint64 // batches the reader handled (tests)

	closeOnce sync.Once
	closeErr  error
	msgsOnce  sync.Once
	msgs      chan Received
	msgsCtx   context.Context
	msgsStop  context.CancelFunc

	// Consumer state, owned by whoever holds consumeMu.
	consumeMu sync.Mutex
	comp      wire.Compressor
	dbuf      []byte
	cur       queuedBatch
	curActive bool
	first     bool
	it        wire.RecordIter
	itNext    int64 // offset of the record it decodes next
	rec       wire.Record
	recv      Received
	credit    [8]byte
}

// subLeg is one SUBSCRIBE of a Subscription, on the connection it lives on (it ends with it).
type subLeg struct {
	l        *link
	id       uint32 // the broker's subscription id on l; set when the broker accepted
	consumed int    // bytes consumed since the last CREDIT (under consumeMu)
}

type queuedBatch struct {
	buf       []byte // the DELIVER body the batch was read into; recycled through free
	batch     []byte // the batch, inside buf
	partition uint32
	dropped   uint64
}

// maxFreeBuffers bounds the batch buffers a subscription keeps for reuse.
const maxFreeBuffers = 32

// subCall is the pending slot of a SUBSCRIBE. Its response registers the subscription on the
// reader goroutine, before the first DELIVER can be read.
type subCall struct {
	l          *link
	s          *Subscription
	leg        *subLeg
	done       chan struct{}
	mu         sync.Mutex
	abandoned  bool
	responded  bool
	err        error
	partitions int // the broker's count, once accepted
}

func (sc *subCall) respond(_ uint32, body []byte, err error) {
	if err == nil {
		var r wire.SubscribeResponse
		if derr := r.Decode(body); derr != nil {
			err = fmt.Errorf("%w: SUBSCRIBE response: %w", ErrProtocol, derr)
		} else {
			sc.leg.id, sc.partitions = r.SubscriptionID, int(r.Partitions)
			c := sc.l.c
			c.mu.Lock()
			if sc.l.err != nil {
				err = sc.l.err
			} else {
				sc.l.subs[r.SubscriptionID] = sc.s
			}
			c.mu.Unlock()
		}
	}
	sc.mu.Lock()
	sc.err = err
	sc.responded = true
	abandoned := sc.abandoned
	sc.mu.Unlock()
	if abandoned && err == nil {
		go sc.s.c.unsubscribe(sc.leg) // the caller gave up: do not leave the broker pushing to nobody
	}
	close(sc.done)
}

// Subscribe subscribes to a transient topic and returns once the broker has accepted.
func (c *Conn) Subscribe(ctx context.Context, opts SubscribeOptions) (*Subscription, error) {
	if err := wire.ValidTopicName(opts.Topic); err != nil {
		return nil, fmt.Errorf("lightq: %w", err)
	}
	if len(opts.QueueGroup) > wire.MaxGroupName {
		return nil, fmt.Errorf("lightq: group name of %d bytes, limit %d", len(opts.QueueGroup), wire.MaxGroupName)
	}
	if opts.Window <= 0 {
		opts.Window = 4 << 20
	}
	opts.Window = min(opts.Window, 1<<31-1)
	if opts.Buffer <= 0 {
		opts.Buffer = 256
	}
	part := wire.PartitionAny
	if opts.HasPartition {
		if opts.Partition < 0 {
			return nil, fmt.Errorf("lightq: partition %d", opts.Partition)
		}
		part = opts.Partition
	}
	s := &Subscription{
		c: c, topic: opts.Topic, window: opts.Window, maxBatch: c.Limits().MaxBatch, buffer: opts.Buffer, onCorrupt: opts.OnCorruptBatch,
		inline: opts.InlineHandler, signal: make(chan struct{}, 1), done: make(chan struct{}), idle: make(chan struct{}, 1),
	}
	s.recv.Topic = opts.Topic
	s.msgsCtx, s.msgsStop = context.WithCancel(context.Background())

	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	if err := c.subscribeRouted(ctx, s, part, opts.QueueGroup, opts.Window); err != nil {
		s.msgsStop()
		return nil, err
	}
	return s, nil
}

// subscribeLeg sends one SUBSCRIBE on l for leg and waits for the answer; it returns the
// number of partitions the broker subscribed. A caller that gives up (ctx) leaves the leg
// to be unsubscribed when the answer comes.
func (c *Conn) subscribeLeg(ctx context.Context, s *Subscription, l *link, leg *subLeg, req *wire.Subscribe) (int, error) {
	leg.l = l
	sc := &subCall{l: l, s: s, leg: leg, done: make(chan struct{})}
	corr := c.nextCorr()
	if err := l.register(corr, wire.OpSubscribe, sc, 0); err != nil {
		return 0, err
	}
	if err := c.writeFrame(l, wire.OpSubscribe, corr, req.AppendTo(nil)); err != nil {
		if l.unregister(corr) {
			return 0, err
		}
	}
	select {
	case <-sc.done:
	case <-ctx.Done():
		sc.mu.Lock()
		responded := sc.responded
		sc.abandoned = !responded
		sc.mu.Unlock()
		if !responded {
			return 0, ctx.Err() // respond will unsubscribe if the broker accepts
		}
		<-sc.done // answered meanwhile: take the outcome
	}
	return sc.partitions, sc.err
}

// SubscribeFunc subscribes, calls handler for every message until ctx ends or handler
// returns an error, and unsubscribes. It returns what ended it. See Subscription.Each.
func (c *Conn) SubscribeFunc(ctx context.Context, opts SubscribeOptions, handler func(*Received) error) error {
	s, err := c.Subscribe(ctx, opts)
	if err != nil {
		return err
	}
	err = s.Each(ctx, handler)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	return err
}

// ID is the broker's subscription id (of the first broker's, when the partitions are
// subscribed at several brokers).
func (s *Subscription) ID() uint32 { return s.legs[0].id }

// Partitions is the number of partitions subscribed.
func (s *Subscription) Partitions() int { return s.partitions }

// Dropped is the total number of messages lost so far because the subscriber fell behind,
// as reported in the batches consumed.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

// Err is nil while the subscription is active, ErrClosed after Close, or the error that ended
// its connection (wrapping ErrConnectionLost). A subscription does not survive its connection:
// the broker forgets it, and a transient topic keeps no position to resume from. The Conn
// reconnects by itself; subscribe again on it (what was pushed meanwhile is not delivered).
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// deliver queues a copy of a DELIVER body's batch; it runs on the reader goroutine and never
// blocks. The reader normally reads DELIVER bodies straight into takeBuffer's buffers and
// hands them to deliverOwned instead, which saves copying every delivered byte.
func (s *Subscription) deliver(body []byte) error {
	buf := s.takeBuffer(len(body))
	copy(buf, body)
	return s.deliverOwned(buf)
}

// takeBuffer returns a buffer of n bytes for a DELIVER body, recycled when one is free.
func (s *Subscription) takeBuffer(n int) []byte {
	var buf []byte
	s.mu.Lock()
	if k := len(s.free); k > 0 {
		buf = s.free[k-1]
		s.free[k-1] = nil
		s.free = s.free[:k-1]
	}
	s.mu.Unlock()
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	return buf[:n]
}

// deliverOwned queues the batch of the DELIVER body body, which the subscription now owns
// (it came from takeBuffer). It runs on the reader goroutine and never blocks.
func (s *Subscription) deliverOwned(body []byte) error {
	var d wire.Deliver
	if err := d.Decode(body); err != nil {
		return fmt.Errorf("%w: DELIVER body: %w", ErrProtocol, err)
	}
	q := queuedBatch{buf: body, batch: d.Batch, partition: d.Partition, dropped: d.Dropped}
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return nil
	}
	if s.lent && !s.busy && s.head == len(s.queue) {
		// !busy: a subscription of several legs has a reader per connection, and only one
		// may hold the consumer state.
		s.runLent(q) // unlocks s.mu
		return nil
	}
	s.queue = append(s.queue, q)
	s.mu.Unlock()
	select {
	case s.signal <- struct{}{}:
	default:
	}
	return nil
}

// fail ends the subscription with err (the first call wins).
func (s *Subscription) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	s.err = err
	if errors.Is(err, ErrClosed) {
		clear(s.queue)
		s.queue, s.head, s.free = nil, 0, nil
	}
	close(s.done)
}

// oneWayError receives an ERROR answering one of this subscription's CREDIT frames.
func (s *Subscription) oneWayError(err *wire.Error) { s.fail(err) }

// pop waits for the next queued batch. With fn (InlineHandler), it lends fn to the reader
// while it waits; it then returns an empty batch when the reader has left a batch current
// (s.curActive) for Each to finish, or fn's error.
func (s *Subscription) pop(ctx context.Context, fn func(*Received) error) (queuedBatch, error) {
	for {
		s.mu.Lock()
		if err := s.inlineErr; err != nil {
			s.inlineErr = nil
			s.mu.Unlock()
			return queuedBatch{}, err
		}
		if s.curActive {
			s.mu.Unlock()
			return queuedBatch{}, nil
		}
		if s.head < len(s.queue) {
			q := s.queue[s.head]
			s.queue[s.head] = queuedBatch{}
			s.head++
			if s.head == len(s.queue) {
				s.queue, s.head = s.queue[:0], 0
			} else if s.head > 64 && s.head > len(s.queue)/2 {
				n := copy(s.queue, s.queue[s.head:])
				clear(s.queue[n:])
				s.queue, s.head = s.queue[:n], 0
			}
			s.mu.Unlock()
			return q, nil
		}
		err := s.err
		lend := err == nil && fn != nil
		if lend {
			s.lentFn, s.lent = fn, true
		}
		s.mu.Unlock()
		if err != nil {
			return queuedBatch{}, err
		}
		select {
		case <-s.signal:
		case <-s.done:
		case <-ctx.Done():
		}
		if lend {
			s.reclaim()
		}
		if err := ctx.Err(); err != nil {
			return queuedBatch{}, err
		}
	}
}

// open starts iterating a batch, or describes why it cannot.
func (s *Subscription) open(q queuedBatch) *CorruptBatchError {
	bt, err := wire.ParseBatch(q.batch, s.maxBatch)
	if err != nil {
		return s.corruptBatch(q, err)
	}
	records := bt.Records
	if bt.Codec() != wire.CodecNone {
		if s.dbuf, err = s.comp.Decompress(s.dbuf[:0], &bt); err != nil {
			return s.corruptBatch(q, err)
		}
		records = s.dbuf
	}
	s.it = wire.NewRecordIter(records, bt.RecordCount, bt.BaseOffset, bt.FirstTimestamp)
	s.itNext = bt.BaseOffset
	s.cur, s.curActive, s.first = q, true, true
	s.recv.Partition = int32(q.partition)
	if q.dropped > 0 {
		s.dropped.Add(q.dropped)
	}
	return nil
}

// corruptBatch describes the delivered batch q, which failed to decode with cause. A DELIVER
// holds one batch: its offsets are its header's.
func (s *Subscription) corruptBatch(q queuedBatch, cause error) *CorruptBatchError {
	b := q.batch
	n := wholeBatchSize(b)
	if n > 0 {
		b = b[:n]
	}
	return corruptBatch(s.topic, int32(q.partition), b, n, -1, math.MaxInt64, cause)
}

// skipCorrupt applies OnCorruptBatch to a batch that failed to decode, already released: nil
// goes on.
func (s *Subscription) skipCorrupt(bad *CorruptBatchError) error {
	if s.onCorrupt == nil {
		return bad
	}
	return s.onCorrupt(bad)
}

// release recycles a consumed batch's buffer and grants its bytes back as credit, to the
// leg it came from, once half the leg's window has been consumed.
func (s *Subscription) release(q queuedBatch) {
	s.curActive = false
	s.cur = queuedBatch{}
	leg := s.legs[0]
	if s.byPart != nil && int(q.partition) < len(s.byPart) && s.byPart[q.partition] != nil {
		leg = s.byPart[q.partition]
	}
	leg.consumed += len(q.batch)
	s.mu.Lock()
	if s.err == nil && len(s.free) < maxFreeBuffers {
		s.free = append(s.free, q.buf)
	}
	s.mu.Unlock()
	if leg.consumed < s.window/2 {
		return
	}
	grant := leg.consumed
	leg.consumed = 0
	corr := s.c.nextCorr()
	leg.l.registerOneWay(corr, s)
	cr := wire.Credit{SubscriptionID: leg.id, Bytes: uint32(grant)}
	_ = s.c.writeFrame(leg.l, wire.OpCredit, corr, cr.AppendTo(s.credit[:0]))
}

// Each calls handler for every message, in order per partition, until ctx ends, handler
// returns an error, or the subscription ends; it returns that error (ErrClosed after Close).
// The *Received is reused: it is valid only during the call. Each does not allocate per
// message. When handler returns an error, the next Each resumes after that message. A batch
// that fails to decode is skipped and, unless SubscribeOptions.OnCorruptBatch says
// otherwise, its *CorruptBatchError returned. The context is checked between batches.
//
// With SubscribeOptions.InlineHandler, handler runs on the connection's reader goroutine
// whenever a batch arrives while Each waits (see there), and on the caller's otherwise.
func (s *Subscription) Each(ctx context.Context, handler func(*Received) error) error {
	return s.each(ctx, s.inline, handler)
}

// each is Each, lending handler to the reader only when inline.
func (s *Subscription) each(ctx context.Context, inline bool, handler func(*Received) error) error {
	s.consumeMu.Lock()
	defer s.consumeMu.Unlock()
	for {
		if !s.curActive {
			var fn func(*Received) error
			if inline {
				fn = handler
			}
			q, err := s.pop(ctx, fn)
			if err != nil {
				if s.Err() != nil {
					s.comp.Close()
					s.comp = wire.Compressor{}
				}
				return err
			}
			if q.buf == nil {
				continue // the reader left a batch current, or gave the handler back
			}
			if bad := s.open(q); bad != nil {
				s.release(q)
				if err := s.skipCorrupt(bad); err != nil {
					return err
				}
				continue
			}
		}
		if err := s.records(handler); err != nil {
			return err
		}
		if err := s.it.Err(); err != nil {
			bad := s.corruptBatch(s.cur, err)
			bad.FirstOffset = s.itNext // the records before it were delivered
			s.release(s.cur)
			// Trailing bytes after the records the header counts lose no offset.
			if bad.FirstOffset <= bad.LastOffset {
				if err := s.skipCorrupt(bad); err != nil {
					return err
				}
			}
			continue
		}
		s.release(s.cur)
	}
}

// records calls handler for the current batch's records left, until it returns an error.
// It runs on the goroutine that owns the consumer state: Each's, or the reader while lent.
func (s *Subscription) records(handler func(*Received) error) error {
	r := &s.recv
	for s.it.Next(&s.rec) {
		s.itNext = s.rec.Offset + 1
		r.Offset = s.rec.Offset
		r.Timestamp = time.UnixMilli(s.rec.Timestamp)
		r.Key, r.Value, r.Headers = s.rec.Key, s.rec.Value, s.rec.Headers
		r.Dropped = 0
		if s.first {
			r.Dropped = s.cur.dropped
			s.first = false
		}
		if err := handler(r); err != nil {
			return err
		}
	}
	return nil
}

// Messages returns a channel of copies of the subscription's messages, closed when the
// subscription ends (see Err), or at a batch that cannot be decoded unless
// SubscribeOptions.OnCorruptBatch skips it (Err then returns its *CorruptBatchError). It is the convenient API: every message costs allocations.
// Calling it more than once returns the same channel; do not combine it with Each.
func (s *Subscription) Messages() <-chan Received {
	s.msgsOnce.Do(func() {
		s.msgs = make(chan Received, s.buffer)
		go func() {
			defer close(s.msgs)
			ctx := s.msgsCtx
			err := s.each(ctx, false, func(r *Received) error {
				select {
				case s.msgs <- r.clone():
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
			if bad := (*CorruptBatchError)(nil); errors.As(err, &bad) {
				s.fail(err) // the channel closes: Err must say why
			}
		}()
	})
	return s.msgs
}

// Close unsubscribes (bounded by Options.RequestTimeout) and ends Each and Messages with
// ErrClosed. It is idempotent and safe from any goroutine, including a handler.
func (s *Subscription) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		onReader := s.busy // maybe called by the handler on a reader goroutine (InlineHandler)
		s.mu.Unlock()
		s.fail(ErrClosed)
		s.msgsStop()
		if onReader {
			// An answer on the handler's connection could only be read by this very
			// goroutine, after the handler returns: unsubscribe without waiting for it.
			legs := s.legs
			go func() {
				for _, leg := range legs {
					_ = s.c.unsubscribe(leg)
				}
			}()
			return
		}
		for _, leg := range s.legs {
			if err := s.c.unsubscribe(leg); err != nil && s.closeErr == nil {
				s.closeErr = err
			}
		}
	})
	return s.closeErr
}

// unsubscribe forgets leg on its connection and asks its broker to end it (bounded by
// Options.RequestTimeout). Nothing to ask when the connection is gone: the broker forgot the
// subscription with it.
func (c *Conn) unsubscribe(leg *subLeg) error {
	l := leg.l
	if l == nil || leg.id == 0 {
		return nil // never accepted
	}
	c.mu.Lock()
	if l.subs != nil && l.subs[leg.id] != nil {
		delete(l.subs, leg.id)
	}
	failed := l.err != nil
	c.mu.Unlock()
	if failed {
		return nil
	}
	ctx, cancel := c.withTimeout(context.Background())
	defer cancel()
	req := wire.Unsubscribe{SubscriptionID: leg.id}
	_, err := c.exchange(ctx, l, wire.OpUnsubscribe, req.AppendTo(nil), false)
	if err != nil && !errors.Is(err, &wire.Error{Code: wire.CodeUnknownSubscription}) && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrConnectionLost) {
		return err
	}
	return nil
}
