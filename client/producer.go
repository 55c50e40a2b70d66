package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/lightq/lightq/wire"
)

// AckLevel selects when the broker acknowledges a batch. The zero value is AckWritten.
type AckLevel uint8

const (
	// AckWritten: the broker answers once the batch is stored (ring or page cache).
	AckWritten AckLevel = iota
	// AckDurable: the broker answers once the batch is fsynced (transient topics treat it as
	// AckWritten).
	AckDurable
	// AckNone: the broker answers only to refuse a batch. A message counts as done once its
	// batch is written to the socket: its callback gets Ack{Offset: -1} and no error. A refusal
	// that arrives later is reported to ProducerOptions.OnError and by the next Flush.
	AckNone
)

func (a AckLevel) wire() wire.Acks {
	switch a {
	case AckDurable:
		return wire.AcksDurable
	case AckNone:
		return wire.AcksNone
	}
	return wire.AcksWritten
}

// ProducerOptions configure a Producer. Only Topic is required.
type ProducerOptions struct {
	Topic string
	Acks  AckLevel
	// BatchBytes is the target size of a batch before compression. Default 64 KiB, capped at
	// the broker's MaxBatch. A single record larger than it travels alone.
	BatchBytes int
	// Linger is how long a batch may wait for more messages before it is sent. Default 1ms;
	// a negative value sends a batch as soon as an in-flight slot is free (messages sent
	// meanwhile still join it).
	Linger time.Duration
	// MaxInFlight is the number of batches sent and not yet acknowledged. When all slots are
	// taken, Send blocks (until its context ends) once the current batch is full: this is
	// the producer's backpressure. Default 8.
	MaxInFlight int
	// Compression of each batch's records, end to end. Default wire.CodecNone; wire.CodecS2
	// is the recommended codec. A batch whose compressed form is not smaller is sent
	// uncompressed.
	Compression wire.Codec
	// OnError, when set, receives refusals of AckNone batches (ERROR frames nobody waits for),
	// from a producer goroutine. They are also returned by the next Flush.
	OnError func(error)
}

// Message is one message to produce. The zero value is an empty message whose partition the
// producer chooses.
type Message struct {
	Key, Value []byte
	Headers    []wire.RecordHeader
	// Partition is used when HasPartition is set. Otherwise a message with a key goes to
	// wire.PartitionForKey(Key, partitions), and one without a key to the partition the
	// producer is currently filling (sticky round robin from a random partition: it moves on
	// with each batch).
	Partition    int32
	HasPartition bool
	// Timestamp defaults to the time of Send. It is stored with millisecond precision.
	Timestamp time.Time
}

// Ack is the outcome of one produced message: its partition and its offset (-1 with AckNone).
type Ack struct {
	Partition int32
	Offset    int64
}

// Producer batches messages per partition and sends them to one topic, keeping up to
// MaxInFlight batches in flight. Send, Flush and Close are safe for concurrent use.
// Callbacks run on a producer goroutine, one at a time, in send order (so in order per
// partition); a callback must not call Flush or Close (they would wait for it), but may call
// Send with a context that can end.
type Producer struct {
	c          *Conn
	topic      string
	acks       wire.Acks
	codec      wire.Codec
	nparts     int
	batchBytes int
	linger     time.Duration
	maxMsg     int
	maxBatch   int
	onError    func(error)

	sem         chan struct{} // one token per sealed, not yet completed batch
	kick        chan struct{} // wakes the flusher: a batch was opened or filled
	closing     chan struct{}
	flusherDone chan struct{}
	ackerDone   chan struct{}
	free        chan *prodBatch
	closeOnce   sync.Once
	closeErr    error

	// mu guards the open batches and serializes sealing and writing, which keeps batches of
	// one partition in order. Lock order: p.mu, then Conn.wmu, then Conn.mu, then p.ackMu.
	mu        sync.Mutex
	parts     []*prodBatch // open batch per partition, nil when none
	sticky    int
	dead      error     // once set, Send refuses
	unflushed bool      // frames written to the Conn's buffer without a flush
	timerDue  time.Time // when the flusher's linger timer fires; zero when it is not armed
	comp      wire.Compressor
	hdr       [wire.HeaderSize]byte
	phdr      []byte
	iovec     [3][]byte
	iov       net.Buffers

	ackMu       sync.Mutex
	fifo        []*prodBatch // sealed batches in send order
	head        int
	outstanding int
	drained     chan struct{} // closed when outstanding reaches 0; nil when nobody waits
	firstErr    error
	asyncErrs   []error
	ackSig      chan struct{}
}

// prodBatch is one batch, reused through Producer.free.
type prodBatch struct {
	p         *Producer
	partition int32
	b         wire.BatchBuilder
	cbs       []func(Ack, error)
	opened    time.Time
	corr      uint32
	hasToken  bool
	// outcome, guarded by p.ackMu
	done   bool
	base   int64
	ackPar int32
	err    error
}

// respond receives the PRODUCE answer on the reader goroutine.
func (b *prodBatch) respond(body []byte, err error) {
	base, par := int64(-1), b.partition
	if err == nil {
		var r wire.ProduceResponse
		if derr := r.Decode(body); derr != nil {
			err = fmt.Errorf("%w: PRODUCE response: %w", ErrProtocol, derr)
		} else {
			base, par = r.BaseOffset, int32(r.Partition)
		}
	}
	b.p.complete(b, base, par, err)
}

// NewProducer returns a producer for opts.Topic. It asks the broker for the topic's partition
// count, so the topic must exist.
func (c *Conn) NewProducer(opts ProducerOptions) (*Producer, error) {
	if err := wire.ValidTopicName(opts.Topic); err != nil {
		return nil, fmt.Errorf("lightq: %w", err)
	}
	switch opts.Compression {
	case wire.CodecNone, wire.CodecS2, wire.CodecZstd:
	default:
		return nil, fmt.Errorf("lightq: unknown compression codec %v", opts.Compression)
	}
	ctx, cancel := c.withTimeout(context.Background())
	defer cancel()
	md, err := c.Metadata(ctx, opts.Topic)
	if err != nil {
		return nil, err
	}
	if len(md) != 1 || md[0].Name != opts.Topic || len(md[0].Partitions) == 0 {
		return nil, &wire.Error{Code: wire.CodeUnknownTopic, Message: opts.Topic}
	}
	lim := c.Limits()
	if opts.BatchBytes <= 0 {
		opts.BatchBytes = 64 << 10
	}
	opts.BatchBytes = min(opts.BatchBytes, lim.MaxBatch)
	if opts.Linger == 0 {
		opts.Linger = time.Millisecond
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 8
	}
	n := len(md[0].Partitions)
	p := &Producer{
		c: c, topic: opts.Topic, acks: opts.Acks.wire(), codec: opts.Compression,
		nparts: n, batchBytes: opts.BatchBytes, linger: max(opts.Linger, 0),
		// Unkeyed messages start at a random partition: from 0 in every producer, short-lived
		// producers (a few lines from lqcat -P) would all land on partition 0.
		sticky: rand.IntN(max(n, 1)),
		maxMsg: lim.MaxMessage, maxBatch: lim.MaxBatch, onError: opts.OnError,
		sem:         make(chan struct{}, opts.MaxInFlight),
		kick:        make(chan struct{}, 1),
		closing:     make(chan struct{}),
		flusherDone: make(chan struct{}),
		ackerDone:   make(chan struct{}),
		free:        make(chan *prodBatch, n+opts.MaxInFlight+1),
		parts:       make([]*prodBatch, n),
		ackSig:      make(chan struct{}, 1),
		fifo:        make([]*prodBatch, 0, opts.MaxInFlight+n),
	}
	go p.flusher()
	go p.acker()
	return p, nil
}

// Partitions is the topic's partition count, as learned when the producer was created.
func (p *Producer) Partitions() int { return p.nparts }

// Send adds m to its partition's batch. It copies the key, value and headers, so the caller
// may reuse m's buffers as soon as Send returns. It returns an error only when the message was
// not taken: the context ended while waiting for an in-flight slot, the producer or its
// connection is closed, or the message is invalid (over Limits().MaxMessage gives a
// *wire.Error with wire.CodeMessageTooLarge). Otherwise cb, if not nil, is called exactly
// once with the message's outcome. Send does not allocate.
func (p *Producer) Send(ctx context.Context, m *Message, cb func(Ack, error)) error {
	size := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		size += len(h.Name) + len(h.Value)
	}
	if size > p.maxMsg || wire.BatchHeaderSize+wire.RecordSize(0, m.Key, m.Value, m.Headers) > p.maxBatch {
		return &wire.Error{Code: wire.CodeMessageTooLarge, Message: fmt.Sprintf("message of %d bytes, limit %d", size, p.maxMsg)}
	}
	if m.HasPartition && (m.Partition < 0 || int(m.Partition) >= p.nparts) {
		return &wire.Error{Code: wire.CodeUnknownPartition, Message: fmt.Sprintf("partition %d of %d", m.Partition, p.nparts)}
	}
	var ts int64
	if m.Timestamp.IsZero() {
		ts = time.Now().UnixMilli()
	} else {
		ts = m.Timestamp.UnixMilli()
	}
	select {
	case <-p.c.done:
		return p.c.Err()
	default:
	}
	haveToken := false
	for {
		p.mu.Lock()
		if p.dead != nil {
			err := p.dead
			p.mu.Unlock()
			p.releaseIf(haveToken)
			return err
		}
		part := p.sticky
		switch {
		case m.HasPartition:
			part = int(m.Partition)
		case len(m.Key) > 0:
			part = wire.PartitionForKey(m.Key, p.nparts)
		}
		b := p.parts[part]
		if b == nil {
			b = p.getBatch(int32(part))
			p.parts[part] = b
		}
		if b.b.Count() == 0 || b.b.SizeWith(ts, m.Key, m.Value, m.Headers) <= p.batchBytes {
			opening := b.b.Count() == 0
			if opening {
				b.opened = time.Now()
			}
			b.b.Append(ts, m.Key, m.Value, m.Headers)
			b.cbs = append(b.cbs, cb)
			full := b.b.Size() >= p.batchBytes
			switch {
			case full && (haveToken || p.tryToken()):
				// Seal a full batch here rather than waking the flusher for it: the
				// flusher would only contend for p.mu with the next Send.
				p.seal(part, flushNow)
				haveToken = false
			case full, opening && (p.linger == 0 || p.timerDue.IsZero()):
				// The flusher waits for a slot, or arms its linger timer. A timer already
				// armed fires no later than this batch is due, and re-arms for it then.
				p.wake()
			}
			p.mu.Unlock()
			p.releaseIf(haveToken)
			return nil
		}
		// The batch is full: seal it, which takes an in-flight slot.
		if !haveToken {
			haveToken = p.tryToken()
		}
		if haveToken {
			p.seal(part, flushNow)
			haveToken = false
			p.mu.Unlock()
			continue
		}
		p.flushLocked()
		p.mu.Unlock()
		select {
		case p.sem <- struct{}{}:
			haveToken = true
		case <-ctx.Done():
			return ctx.Err()
		case <-p.closing:
			return ErrClosed
		case <-p.c.done:
			return p.c.Err()
		}
	}
}

// tryToken takes an in-flight slot if one is free.
func (p *Producer) tryToken() bool {
	select {
	case p.sem <- struct{}{}:
		return true
	default:
		return false
	}
}

func (p *Producer) releaseIf(token bool) {
	if token {
		<-p.sem
	}
}

func (p *Producer) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *Producer) getBatch(part int32) *prodBatch {
	select {
	case b := <-p.free:
		b.partition = part
		return b
	default:
		return &prodBatch{p: p, partition: part}
	}
}

func (p *Producer) putBatch(b *prodBatch) {
	b.b.Reset()
	clear(b.cbs)
	b.cbs = b.cbs[:0]
	b.done, b.err, b.hasToken = false, nil, false
	select {
	case p.free <- b:
	default:
	}
}

// Flush sends every buffered message and waits until all sent batches are acknowledged (or
// failed). It returns the first error any message met since the previous Flush, or the
// context's error. Messages sent concurrently with Flush may or may not be included.
func (p *Producer) Flush(ctx context.Context) error {
	if _, err := p.sealBatches(ctx, allBatches); err != nil {
		return err
	}
	for {
		p.ackMu.Lock()
		if p.outstanding == 0 {
			err := p.firstErr
			p.firstErr = nil
			p.ackMu.Unlock()
			if err == nil {
				p.mu.Lock()
				err = p.dead
				p.mu.Unlock()
			}
			return err
		}
		if p.drained == nil {
			p.drained = make(chan struct{})
		}
		ch := p.drained
		p.ackMu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close flushes (bounded by Options.RequestTimeout), then stops the producer. Messages still
// unacknowledged after that get ErrClosed. It returns the Flush error; it is idempotent.
// The connection stays open.
func (p *Producer) Close() error {
	p.closeOnce.Do(func() {
		ctx, cancel := p.c.withTimeout(context.Background())
		err := p.Flush(ctx)
		cancel()
		if err == ErrClosed {
			err = nil
		}
		p.failOpen(ErrClosed)
		close(p.closing)
		// Batches still waiting for an ack (the flush timed out) fail now.
		p.ackMu.Lock()
		var waiting []*prodBatch
		for _, b := range p.fifo[p.head:] {
			if !b.done {
				waiting = append(waiting, b)
			}
		}
		p.ackMu.Unlock()
		for _, b := range waiting {
			if p.c.unregister(b.corr) {
				p.complete(b, -1, b.partition, ErrClosed)
			}
		}
		<-p.flusherDone
		<-p.ackerDone
		p.comp.Close()
		p.closeErr = err
	})
	return p.closeErr
}
