package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
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
	// that arrives later is reported to ProducerOptions.OnError and by the next Flush. Nothing
	// is kept for a re-send: a batch written just before the connection broke is lost
	// silently; a batch sealed while the Conn reconnects waits for the new connection.
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
	// meanwhile still join it): Send writes it itself while few batches are in flight, for
	// the lowest latency.
	Linger time.Duration
	// MaxInFlight is the number of batches sealed and not yet acknowledged, over all
	// partitions: the producer's memory bound (about MaxInFlight x BatchBytes, plus one open
	// batch per partition). When all slots are taken, Send blocks (until its context ends)
	// once the current batch is full: this is the producer's backpressure, and it holds while
	// the Conn reconnects too. Default 8.
	MaxInFlight int
	// MaxInFlightPerPartition bounds the batches of one partition sealed and not yet
	// acknowledged; after a reconnect they are all sent again, in order, byte for byte, so a
	// broker that remembers the last MaxInFlightPerPartition batches of each producer and
	// partition recognises every re-send. Not used with AckNone. Default 8; an idempotent
	// producer caps it at the window of the broker's deduplication (INIT_PRODUCER's answer,
	// PROTOCOL.md section 15), so that every re-send is among the batches the broker
	// remembers.
	MaxInFlightPerPartition int
	// DisableIdempotence turns off the broker's deduplication of this producer's batches. By
	// default a producer with AckWritten or AckDurable is idempotent (PROTOCOL.md section 15):
	// NewProducer asks the broker for a producer id (INIT_PRODUCER), every batch carries the
	// id, an epoch and a sequence number per partition, and a batch re-sent after a lost
	// answer is stored once. AckNone is never idempotent (the producer does not learn what to
	// re-send).
	DisableIdempotence bool
	// DeliveryTimeout bounds the time from the Send of a batch's first message to the
	// batch's outcome: a message not acknowledged by then fails with ErrDeliveryTimeout,
	// whatever the producer was doing (waiting for a slot, reconnecting, retrying a refusal,
	// waiting for an answer), and so do the later batches of its partition, which could not
	// be stored after it in order. Like Kafka's delivery.timeout.ms. Default 2 minutes.
	DeliveryTimeout time.Duration
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
//
// Delivery. A batch is sealed once and kept, byte for byte, until it is acknowledged or
// fails. When the connection breaks, the Conn reconnects by itself and the producer sends
// every unacknowledged batch again, in order per partition, before anything newer; Send keeps
// taking messages meanwhile, up to MaxInFlight. A batch refused with a code that passes
// (STORAGE_FULL, RESOURCE_LIMIT, STORAGE_ERROR) is sent again after a backoff, once the
// batches of its partition sent after it are answered, unless one of them was stored (it
// would then land out of order, so it fails instead). Other refusals fail the batch at once
// (doc.go has the table). Nothing is retried past DeliveryTimeout. Without the broker's
// deduplication (DisableIdempotence, AckNone, or a broker without INIT_PRODUCER), a batch
// whose answer was lost may be stored twice (at least once); an idempotent producer's batches
// are stored exactly once, even across reconnects (producer_idem.go).
type Producer struct {
	c               *Conn
	topic           string
	acks            wire.Acks
	codec           wire.Codec
	nparts          int
	batchBytes      int
	linger          time.Duration
	deliveryTimeout time.Duration
	maxMsg          int
	maxBatch        int
	onError         func(error)
	idem            bool // batches carry a producer id and sequence numbers (fixed at creation)
	hdrSize         int  // the batch header size of the producer's batch format

	sem         chan struct{}   // one token per sealed, not yet completed batch
	partSem     []chan struct{} // per partition, the same (nil with AckNone)
	kick        chan struct{}   // wakes the flusher: a batch was opened, filled or answered
	closing     chan struct{}
	flusherDone chan struct{}
	ackerDone   chan struct{}
	free        chan *prodBatch
	closeOnce   sync.Once
	closeErr    error
	// tokenWait is set when the flusher left a due batch for want of a slot: the next slot
	// freed wakes it.
	tokenWait atomic.Bool

	// mu guards the open batches and serializes sealing and writing, which keeps batches of
	// one partition in order. Lock order: p.mu, then node.wmu, then Conn.mu, then p.ackMu.
	mu         sync.Mutex
	parts      []*prodBatch // open batch per partition, nil when none
	sticky     int
	dead       error     // once set, Send refuses
	timerDue   time.Time // when the flusher's linger timer fires; zero when it is not armed
	deadlineAt time.Time // the earliest delivery deadline of a batch; zero when none is open
	comp       wire.Compressor
	hdr        [wire.HeaderSize]byte
	phdr       []byte
	iovec      [3][]byte
	iov        net.Buffers

	// Where batches go (producer_route.go): a route per broker written to, and per
	// partition its leader's route (nil while it moves) and whether it has other replicas.
	routes      []*prodRoute
	route       []*prodRoute
	replicated  []bool
	nreplicated int // partitions with replicated set: none with one broker
	// The topic's METADATA asked again for moving partitions: one at a time (refreshing),
	// its outcome waiting for the flusher (refreshed, refreshErr), the next not before
	// refreshAt.
	refreshing, refreshed bool
	refreshErr            error
	refreshAt             time.Time
	refreshBo             backoff

	// The producer's current id and epoch (idempotent producers; -1 otherwise). A partition
	// numbers its batches under the id and epoch in its partQueue, which catch up with these
	// when the partition starts its numbering over (producer_idem.go).
	pid    int64
	epoch  int16
	bumpAt time.Time // when a failed INIT_PRODUCER is tried again; zero: now
	bumpBo backoff
	fenced error // guarded by ackMu: PRODUCER_FENCED arrived; the flusher stops the producer

	ackMu       sync.Mutex
	fifo        []*prodBatch // sealed batches in send order: callbacks run in this order
	head        int
	queues      []partQueue // per partition, sealed batches not yet done, in seal order
	retrying    int         // partitions paused by a retriable refusal
	resyncing   int         // partitions waiting to start their numbering over
	moving      int         // partitions waiting for their leader (producer_route.go)
	recheck     bool        // an AckNone batch met NOT_LEADER: look up every partition's leader
	outstanding int
	drained     chan struct{} // closed when outstanding reaches 0; nil when nobody waits
	firstErr    error
	asyncErrs   []error
	ackSig      chan struct{}
}

// partQueue is one partition's batches between sealing and their outcome (guarded by
// Producer.ackMu). The batches are in seal order; those in flight come first, then the
// refused and unsent ones: a batch is written only after every earlier one of its partition.
type partQueue struct {
	batches []*prodBatch
	sealed  uint64 // batches of the partition sealed so far: the next one's seq
	// paused: a batch was refused with a code that passes. Nothing of the partition is
	// written until the flusher has its answers in and decides (see Producer.retryPaused).
	paused  bool
	retryAt time.Time // when the refused batches go again; zero until decided
	bo      backoff
	// resync: the partition's sequence has a gap (a batch failed, or the broker lost its
	// state): nothing of it is written until the flusher renumbers its batches from 0 under a
	// newer epoch (Producer.resync).
	resync bool
	// moving: the partition's leader changed or is unknown (NOT_LEADER, REPLICATION_TIMEOUT
	// to an idempotent batch, its leader's connection lost): nothing of it is written until
	// the flusher routes it to its leader (producer_route.go).
	moving bool

	// The numbering of an idempotent producer's batches here, guarded by Producer.mu (written
	// at seal and by resync, which holds both locks): the id and epoch, and the base sequence
	// of the next batch sealed.
	pid     int64
	epoch   int16
	nextSeq int32
}

// batchState is where a sealed batch is (guarded by Producer.ackMu).
type batchState uint8

const (
	stUnsent   batchState = iota // waiting for its turn or for a connection
	stInFlight                   // written (or being written) on link, answer awaited
	stRefused                    // refused with a code that passes: waits for a retry
	stDone                       // outcome known; callbacks pending or run
)

// prodBatch is one batch, reused through Producer.free.
type prodBatch struct {
	p            *Producer
	partition    int32
	b            wire.BatchBuilder
	cbs          []func(Ack, error)
	opened       time.Time
	hasToken     bool
	hasPartToken bool
	queued       bool   // in queues[partition] (sealed for sending; not a batch failed unsent)
	data         []byte // the sealed batch: every attempt writes these bytes
	seq          uint64 // its place among its partition's sealed batches

	// guarded by p.ackMu
	state     batchState
	corr      uint32 // the attempt in flight, 0 when none
	link      *link  // where that attempt was written
	uncertain bool   // an earlier attempt may have been stored
	noRetry   bool   // a later batch of its partition was stored: a retry would reorder
	lastErr   error  // the last refusal
	base      int64
	ackPar    int32
	err       error
}

// NewProducer returns a producer for opts.Topic. It asks the broker for the topic's partition
// count and its partitions' leaders (METADATA with the cluster flag), so the topic must
// exist. Keyed messages are spread over that partition count; unkeyed ones over the
// partitions in turn, each batch naming its partition and going to that partition's leader.
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
	cmd, err := c.clusterMetadata(ctx, []string{opts.Topic})
	if err != nil {
		return nil, err
	}
	md := cmd.Topics
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
	if opts.MaxInFlightPerPartition <= 0 {
		opts.MaxInFlightPerPartition = 8
	}
	if opts.DeliveryTimeout <= 0 {
		opts.DeliveryTimeout = 2 * time.Minute
	}
	idem := opts.Acks != AckNone && !opts.DisableIdempotence
	var ip wire.InitProducerResponse
	if idem {
		if ip, err = c.initProducer(ctx, wire.NoProducer, wire.NoProducer); err != nil {
			if we := wireError(err); we == nil || we.Code != wire.CodeUnknownOpcode {
				return nil, err
			}
			idem = false // a broker without idempotent produce
		} else {
			opts.MaxInFlightPerPartition = min(opts.MaxInFlightPerPartition, int(ip.Window))
		}
	}
	n := len(md[0].Partitions)
	p := &Producer{
		c: c, topic: opts.Topic, acks: opts.Acks.wire(), codec: opts.Compression,
		nparts: n, batchBytes: opts.BatchBytes, linger: max(opts.Linger, 0),
		deliveryTimeout: opts.DeliveryTimeout,
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
		queues:      make([]partQueue, n),
		ackSig:      make(chan struct{}, 1),
		fifo:        make([]*prodBatch, 0, opts.MaxInFlight+n),
		idem:        idem, hdrSize: wire.BatchHeaderSize,
		pid: wire.NoProducer, epoch: wire.NoProducer,
		bumpBo:    backoff{min: reconnectMin, max: reconnectMax},
		refreshBo: backoff{min: lookupMin, max: lookupMax},
	}
	if idem {
		p.hdrSize, p.pid, p.epoch = wire.BatchHeaderSize2, ip.ProducerID, ip.ProducerEpoch
	}
	if p.acks != wire.AcksNone {
		p.partSem = make([]chan struct{}, n)
		for i := range p.partSem {
			p.partSem[i] = make(chan struct{}, opts.MaxInFlightPerPartition)
		}
	}
	for i := range p.queues {
		p.queues[i].bo = backoff{min: reconnectMin, max: reconnectMax}
		p.queues[i].pid, p.queues[i].epoch = p.pid, p.epoch
	}
	p.initRoutes()
	go p.flusher()
	go p.acker()
	return p, nil
}

// Partitions is the topic's partition count, as learned when the producer was created.
func (p *Producer) Partitions() int { return p.nparts }

// Send adds m to its partition's batch. It copies the key, value and headers, so the caller
// may reuse m's buffers as soon as Send returns. It returns an error only when the message was
// not taken (so it was not stored): the context ended while waiting for an in-flight slot,
// the producer or its Conn is closed, or the message is invalid (over Limits().MaxMessage
// gives a *wire.Error with wire.CodeMessageTooLarge). Otherwise cb, if not nil, is called
// exactly once with the message's outcome: its Ack, or a *ProduceError. Send does not
// allocate. A full batch that finds an in-flight slot free, and with a negative Linger any
// batch while few are in flight, is written by Send itself, so Send may wait for the socket
// (bounded by Options.RequestTimeout), as the flusher would.
func (p *Producer) Send(ctx context.Context, m *Message, cb func(Ack, error)) error {
	size := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		size += len(h.Name) + len(h.Value)
	}
	if size > p.maxMsg || p.hdrSize+wire.RecordSize(0, m.Key, m.Value, m.Headers) > p.maxBatch {
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
	tokens := -1 // the partition whose slots this Send holds, -1 for none
	for {
		p.mu.Lock()
		if p.dead != nil {
			err := p.dead
			p.mu.Unlock()
			p.releaseTokens(tokens)
			return err
		}
		part := p.sticky
		switch {
		case m.HasPartition:
			part = int(m.Partition)
		case len(m.Key) > 0:
			part = wire.PartitionForKey(m.Key, p.nparts)
		}
		if tokens >= 0 && tokens != part {
			p.releaseTokens(tokens) // the sticky partition moved on meanwhile
			tokens = -1
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
				if p.deadlineAt.IsZero() {
					p.deadlineAt = b.opened.Add(p.deliveryTimeout)
					p.wake() // the flusher arms its delivery-timeout timer
				}
			}
			b.b.Append(ts, m.Key, m.Value, m.Headers)
			b.cbs = append(b.cbs, cb)
			full := b.b.Size() >= p.batchBytes
			switch {
			case (full || p.linger == 0 && len(p.sem) < lingerOffDirect) && (tokens == part || p.tryTokens(part)):
				// Seal a full batch here rather than waking the flusher for it: the
				// flusher would only contend for p.mu with the next Send. With linger
				// off, a batch is due at once: writing it here, on the caller's
				// goroutine, saves the hand-off to the flusher (a goroutine wake-up,
				// often a thread's, before the write) on every message's path. That
				// makes every message its own batch, so only while few batches are in
				// flight: past lingerOffDirect the broker (or the network) is behind,
				// and the flusher seals the batch when it runs, with whatever joined it
				// meanwhile, as before.
				p.seal(part, flushNow)
				tokens = -1
			case full, opening && (p.linger == 0 || p.timerDue.IsZero()):
				// The flusher waits for a slot, or arms its linger timer. A timer already
				// armed fires no later than this batch is due, and re-arms for it then.
				p.wake()
			}
			p.mu.Unlock()
			p.releaseTokens(tokens)
			return nil
		}
		// The batch is full: seal it, which takes an in-flight slot.
		if tokens == part || p.tryTokens(part) {
			p.seal(part, flushNow)
			tokens = -1
			p.mu.Unlock()
			continue
		}
		p.flushLocked()
		p.mu.Unlock()
		if err := p.awaitTokens(ctx, part); err != nil {
			return err
		}
		tokens = part
	}
}

// lingerOffDirect: with linger off, Send writes a batch itself while fewer batches than this
// are in flight (all partitions); from there on the flusher seals them, so that batches grow
// with a backlog instead of every message becoming a batch, which would only add work (and
// ring slots: a transient ring holds 1024 batches by default) where there is no time to spare.
const lingerOffDirect = 4

// tryTokens takes an in-flight slot and one of partition part's, if both are free.
func (p *Producer) tryTokens(part int) bool {
	select {
	case p.sem <- struct{}{}:
	default:
		return false
	}
	if p.partSem == nil {
		return true
	}
	select {
	case p.partSem[part] <- struct{}{}:
		return true
	default:
		<-p.sem
		return false
	}
}

// awaitTokens waits for an in-flight slot and one of partition part's.
func (p *Producer) awaitTokens(ctx context.Context, part int) error {
	if err := p.awaitToken(ctx, p.sem); err != nil {
		return err
	}
	if p.partSem == nil {
		return nil
	}
	if err := p.awaitToken(ctx, p.partSem[part]); err != nil {
		<-p.sem
		return err
	}
	return nil
}

func (p *Producer) awaitToken(ctx context.Context, sem chan struct{}) error {
	select {
	case sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-p.closing:
		return ErrClosed
	case <-p.c.done:
		return p.c.Err()
	}
}

// releaseTokens gives back the slots taken for partition part (none when part < 0).
func (p *Producer) releaseTokens(part int) {
	if part < 0 {
		return
	}
	<-p.sem
	if p.partSem != nil {
		<-p.partSem[part]
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
		b := &prodBatch{p: p, partition: part}
		if p.idem {
			b.b.SetMagic(wire.BatchMagic2) // kept across Reset
		}
		return b
	}
}

func (p *Producer) putBatch(b *prodBatch) {
	b.b.Reset()
	clear(b.cbs)
	b.cbs = b.cbs[:0]
	b.data = nil
	b.err, b.lastErr, b.link = nil, nil, nil
	b.hasToken, b.hasPartToken, b.queued, b.uncertain, b.noRetry = false, false, false, false, false
	b.state, b.corr = stUnsent, 0
	select {
	case p.free <- b:
	default:
	}
}

// Flush sends every buffered message and waits until all sealed batches are acknowledged or
// have failed, across reconnects (DeliveryTimeout bounds the wait). It returns the first
// error any message met since the previous Flush (a *ProduceError for a message taken by
// Send), or the context's error. Messages sent concurrently with Flush may or may not be
// included.
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
// unacknowledged after that fail with ErrClosed (a *ProduceError saying whether they may have
// been stored). It returns the Flush error; it is idempotent. The connection stays open. To
// wait for every message's outcome however long reconnecting takes, call Flush first: it
// ends within DeliveryTimeout.
func (p *Producer) Close() error {
	p.closeOnce.Do(func() {
		ctx, cancel := p.c.withTimeout(context.Background())
		err := p.Flush(ctx)
		cancel()
		if errors.Is(err, ErrClosed) {
			err = nil
		}
		p.failOpen(ErrClosed)
		close(p.closing)
		<-p.flusherDone
		p.failSealed(ErrClosed)
		<-p.ackerDone
		p.mu.Lock()
		p.comp.Close()
		p.mu.Unlock()
		p.closeErr = err
	})
	return p.closeErr
}
