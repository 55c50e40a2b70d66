package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lightq/lightq/wire"
)

// This file is the durable-topic consumer: per partition a fetcher goroutine that keeps up to
// two FETCHes going, verifies (CRC) and decompresses what comes back and queues it, bounded in
// bytes; Each walks the queue without allocating; DialConsumer adds a supervisor goroutine that
// redials a lost connection and restarts the fetchers from the consumer's positions.
//
// Lock order: Consumer.commitMu, then Consumer.mu (never held while calling out), then
// Conn's locks. Consumer.consumeMu is held by Each only and taken before Consumer.mu.

// ErrOffsetReset is reported to ConsumerOptions.OnError (wrapped, with the partition and the
// offsets) when a partition's position was below the log start offset, because retention
// removed the records, and the consumer skipped ahead to the log start.
var ErrOffsetReset = errors.New("lightq: consumer position below the log start: records skipped")

// StartPosition says where a consumer starts reading a partition for which its group has no
// committed offset (or when it has no group). The zero value is Earliest().
type StartPosition struct {
	kind   startKind
	offset int64
	time   time.Time
}

type startKind uint8

const (
	startEarliest startKind = iota
	startLatest
	startOffset
	startTime
)

// Earliest starts at the oldest record still stored (the log start offset).
func Earliest() StartPosition { return StartPosition{kind: startEarliest} }

// Latest starts after the last record readable when the consumer is created: it receives only
// records produced afterwards.
func Latest() StartPosition { return StartPosition{kind: startLatest} }

// AtOffset starts at offset o. An offset below the log start offset is moved up to it (and
// reported to OnError); one beyond the end of the log fails the consumer.
func AtOffset(o int64) StartPosition { return StartPosition{kind: startOffset, offset: o} }

// AtTime starts at the first record whose timestamp is at or after t (millisecond precision),
// or at the end of the log when there is none.
func AtTime(t time.Time) StartPosition { return StartPosition{kind: startTime, time: t} }

func (s StartPosition) String() string {
	switch s.kind {
	case startLatest:
		return "latest"
	case startOffset:
		return fmt.Sprintf("offset %d", s.offset)
	case startTime:
		return "time " + s.time.Format(time.RFC3339Nano)
	}
	return "earliest"
}

// ConsumerOptions configure a Consumer of a durable topic. Only Topic is required.
type ConsumerOptions struct {
	Topic string
	// Partitions to consume; default every partition of the topic.
	Partitions []int32
	// Group, when set, names a consumer group: each partition starts at the group's committed
	// offset (FETCH_COMMITTED), or at Start when the group has committed nothing for it, and
	// Commit / AutoCommit store the consumer's positions for the group. Groups are
	// client-side: two consumers of one group do not share the partitions, they both read
	// what they are given.
	Group string
	// Start is where a partition without a committed offset starts. Default Earliest().
	Start StartPosition
	// MaxBytes is the max bytes of one FETCH. Default 1 MiB. The broker always sends at least
	// one whole batch, so a larger batch still comes through.
	MaxBytes int
	// MaxWait is how long a FETCH at the end of the log waits for new records (long poll).
	// Default 500ms.
	MaxWait time.Duration
	// Prefetch bounds, per partition, the bytes fetched but not yet consumed (raw batches
	// plus their decompressed records). A fetcher sends a FETCH only while its partition holds
	// less, so the client holds at most Prefetch + one FETCH response (MaxBytes, or one batch
	// when a batch is larger) per partition. Default 4 MiB.
	Prefetch int
	// Isolation of the FETCHes. Default wire.IsolationDurable: only records as safe as the
	// topic's fsync policy makes them.
	Isolation wire.Isolation
	// AutoCommit, with a Group, commits the consumed positions this often and at Close.
	// Default 1s; a negative value disables both (call Commit yourself).
	AutoCommit time.Duration
	// OnError receives non-fatal errors: a transient FETCH failure before its retry, a lost
	// connection being redialled (DialConsumer), a failed automatic commit, an offset reset
	// (ErrOffsetReset). Calls are made one at a time from a consumer goroutine; OnError may
	// call any Consumer method. When errors come faster than it returns, some are dropped.
	OnError func(error)
}

// Consumer reads a durable topic by offset. Consume it with Each (no allocation per record)
// or Messages (a channel of copies), not both, and from one goroutine at a time. Commit,
// CommitOffsets, Position, Buffered, Err and Close are safe from any goroutine, including a
// handler.
//
// Delivery. Records arrive in offset order per partition; partitions are interleaved. A
// partition's position is the next offset to deliver: it moves past a record when the
// handler called for it returns (with or without an error; Messages: when the copy has been
// received from the channel). A record below its partition's position is never delivered
// again by the same Consumer, and fetchers (re)start at the position, so nothing is skipped
// or repeated, across reconnects too. A new consumer of the same group starts at the
// committed offsets: it receives again the records delivered after the last successful
// commit (at-least-once).
type Consumer struct {
	topic    string
	opts     ConsumerOptions
	parts    []*partState
	byID     map[int32]*partState
	maxBatch int
	maxBytes uint32
	maxWait  uint32 // ms
	reqWait  time.Duration

	// reconnecting mode (DialConsumer)
	owned bool
	addr  string
	dopts Options

	connMu sync.Mutex
	conn   *Conn

	ctx    context.Context // ends at Close or at a fatal error
	cancel context.CancelFunc
	wg     sync.WaitGroup // fetchers, supervisor, auto-committer

	errs     chan error // to the reporter goroutine
	commitMu sync.Mutex

	// mu guards the queue, the terminal error, and the buffered/gen/free fields of partState.
	mu     sync.Mutex
	queue  []*chunk
	head   int
	err    error         // terminal: ErrClosed after Close, or a fatal error once Each reached it
	signal chan struct{} // cap 1: an item was queued

	closing   chan struct{}
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	msgsOnce sync.Once
	msgs     chan Received
	msgsCtx  context.Context
	msgsStop context.CancelFunc

	// Each's state, owned by whoever holds consumeMu.
	consumeMu sync.Mutex
	cur       *chunk
	bi        int // next batch of cur
	itActive  bool
	it        wire.RecordIter
	itBase    int64
	rec       wire.Record
	recv      Received
}

// partState is one consumed partition.
type partState struct {
	id        int32
	pos       atomic.Int64 // next offset to deliver; written by Each only (and at setup)
	committed atomic.Int64 // last offset committed for the group, -1 when none
	moved     atomic.Bool  // pos moved by a delivery: Commit has something to store
	hw        atomic.Int64 // high watermark of the latest FETCH response

	// guarded by Consumer.mu
	buffered int
	gen      uint64 // bumped when a reconnect makes queued chunks stale
	free     []*chunk

	space chan struct{} // cap 1: buffered went down

	// owned by the partition's fetcher goroutine (one at a time)
	comp  wire.Compressor
	req   []byte
	calls [2]fetchCall
	timer *time.Timer
}

// chunk is one FETCH response: the raw body, the decompressed records of its compressed
// batches, and where each batch's records are. A chunk with err set carries a fatal error in
// the partition's order instead.
type chunk struct {
	p       *partState
	gen     uint64
	raw     []byte
	dec     []byte
	batches []batchRef
	size    int // bytes accounted in p.buffered
	err     error
}

type batchRef struct {
	base, firstTS int64
	count         uint32
	inDec         bool
	start, end    int
}

func (ch *chunk) records(b *batchRef) []byte {
	if b.inDec {
		return ch.dec[b.start:b.end]
	}
	return ch.raw[b.start:b.end]
}

// maxFreeChunks bounds the chunks a partition keeps for reuse.
const maxFreeChunks = 8

// fetchCall is the pending slot of one FETCH; a fetcher reuses two of them.
type fetchCall struct {
	done  chan struct{} // cap 1: one token per registration answered
	ch    *chunk
	err   error
	corr  uint32
	c     *Conn
	inUse bool
}

// respond copies the answer into the call's chunk; it runs on the connection's reader.
func (fc *fetchCall) respond(body []byte, err error) {
	if err == nil {
		fc.ch.raw = append(fc.ch.raw[:0], body...)
	}
	fc.err = err
	fc.done <- struct{}{}
}

// session is one connection's set of fetchers.
type session struct {
	c      *Conn
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewConsumer returns a consumer of a durable topic on c. It looks up the partitions and each
// partition's start offset before returning. When c breaks, the consumer fails: Each returns
// the connection's error once the records already fetched are consumed. DialConsumer makes a
// consumer that reconnects instead.
func (c *Conn) NewConsumer(ctx context.Context, opts ConsumerOptions) (*Consumer, error) {
	return newConsumer(ctx, c, opts, false, "", Options{})
}

// DialConsumer dials addr and returns a consumer that owns its connection. When the
// connection is lost it reports the loss to OnError, redials with backoff (50ms doubling up
// to 2s, until Close; a wrong password fails the consumer) and resumes every partition at
// its position, so that no record is skipped or delivered twice. Records already fetched but
// not yet delivered are dropped and fetched again. The only records a reconnect can repeat or
// lose are those the broker itself lost: with fsync=interval or never, or Isolation
// written, records read before a broker crash may not exist after it (a position beyond the
// new end of the log fails the consumer; see AtOffset). Close closes the connection.
func DialConsumer(ctx context.Context, addr string, opts Options, copts ConsumerOptions) (*Consumer, error) {
	c, err := Dial(ctx, addr, opts)
	if err != nil {
		return nil, err
	}
	k, err := newConsumer(ctx, c, copts, true, addr, opts)
	if err != nil {
		c.Close()
		return nil, err
	}
	return k, nil
}

func newConsumer(ctx context.Context, c *Conn, opts ConsumerOptions, owned bool, addr string, dopts Options) (*Consumer, error) {
	if err := wire.ValidTopicName(opts.Topic); err != nil {
		return nil, fmt.Errorf("lightq: %w", err)
	}
	if len(opts.Group) > wire.MaxGroupName {
		return nil, fmt.Errorf("lightq: group name of %d bytes, limit %d", len(opts.Group), wire.MaxGroupName)
	}
	if opts.Isolation > wire.IsolationWritten {
		return nil, fmt.Errorf("lightq: isolation %d", opts.Isolation)
	}
	if opts.Start.kind == startOffset && opts.Start.offset < 0 {
		return nil, fmt.Errorf("lightq: start offset %d", opts.Start.offset)
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 1 << 20
	}
	opts.MaxBytes = min(opts.MaxBytes, c.Limits().MaxFrame)
	if opts.MaxWait <= 0 {
		opts.MaxWait = 500 * time.Millisecond
	}
	opts.MaxWait = min(opts.MaxWait, 30*time.Second)
	if opts.Prefetch <= 0 {
		opts.Prefetch = 4 << 20
	}
	if opts.AutoCommit == 0 {
		opts.AutoCommit = time.Second
	}

	md, err := c.Metadata(ctx, opts.Topic)
	if err != nil {
		return nil, err
	}
	if len(md) != 1 || md[0].Name != opts.Topic {
		return nil, &wire.Error{Code: wire.CodeUnknownTopic, Message: opts.Topic}
	}
	if md[0].Kind != wire.KindDurable {
		return nil, &wire.Error{Code: wire.CodeNotSupported, Message: fmt.Sprintf("topic %q is not durable: Subscribe to it", opts.Topic)}
	}
	ids := opts.Partitions
	if len(ids) == 0 {
		for _, pm := range md[0].Partitions {
			ids = append(ids, int32(pm.ID))
		}
	}
	k := &Consumer{
		topic: opts.Topic, opts: opts, byID: make(map[int32]*partState, len(ids)),
		maxBatch: c.Limits().MaxBatch, maxBytes: uint32(opts.MaxBytes), maxWait: uint32(opts.MaxWait / time.Millisecond),
		owned: owned, addr: addr, dopts: dopts, conn: c,
		errs: make(chan error, 64), signal: make(chan struct{}, 1), closing: make(chan struct{}),
	}
	k.dopts.setDefaults()
	k.reqWait = c.opts.RequestTimeout + opts.MaxWait
	for _, id := range ids {
		if id < 0 || int(id) >= len(md[0].Partitions) {
			return nil, &wire.Error{Code: wire.CodeUnknownPartition, Message: fmt.Sprintf("topic %q has partitions 0-%d, not %d", opts.Topic, len(md[0].Partitions)-1, id)}
		}
		if k.byID[id] != nil {
			return nil, fmt.Errorf("lightq: partition %d listed twice", id)
		}
		p := &partState{id: id, space: make(chan struct{}, 1)}
		p.committed.Store(-1)
		p.hw.Store(-1)
		for i := range p.calls {
			p.calls[i].done = make(chan struct{}, 1)
		}
		k.byID[id] = p
		k.parts = append(k.parts, p)
	}
	for _, p := range k.parts {
		start, err := k.resolveStart(ctx, c, p)
		if err != nil {
			return nil, err
		}
		p.pos.Store(start)
	}
	k.recv.Topic = opts.Topic
	k.ctx, k.cancel = context.WithCancel(context.Background())
	k.msgsCtx, k.msgsStop = context.WithCancel(context.Background())
	go k.reporter()
	if owned {
		k.wg.Add(1)
		go k.supervise(c)
	} else {
		k.startSession(c)
	}
	if opts.Group != "" && opts.AutoCommit > 0 {
		k.wg.Add(1)
		go k.autoCommit()
	}
	return k, nil
}

// resolveStart returns the group's committed offset for p, or the Start position's offset.
func (k *Consumer) resolveStart(ctx context.Context, c *Conn, p *partState) (int64, error) {
	if k.opts.Group != "" {
		off, err := c.FetchCommitted(ctx, wire.FetchCommitted{Group: k.opts.Group, Topic: k.topic, Partition: uint32(p.id)})
		if err != nil {
			return 0, err
		}
		if off >= 0 {
			p.committed.Store(off)
			return off, nil
		}
	}
	lo := wire.ListOffsets{Topic: k.topic, Partition: uint32(p.id)}
	switch st := k.opts.Start; st.kind {
	case startOffset:
		return st.offset, nil
	case startTime:
		lo.Mode, lo.Timestamp = wire.OffsetTimestamp, st.time.UnixMilli()
	case startLatest:
		lo.Mode = wire.OffsetLatest
	default:
		lo.Mode = wire.OffsetEarliest
	}
	off, err := c.ListOffsets(ctx, lo)
	if err != nil || k.opts.Start.kind != startLatest || k.opts.Isolation != wire.IsolationWritten {
		return off, err
	}
	// LIST_OFFSETS latest is the durable end; a written-isolation consumer starts at the
	// written end, which only a FETCH reports (as its high watermark).
	res, err := c.Fetch(ctx, wire.Fetch{Topic: k.topic, Partition: uint32(p.id), Offset: off, MaxBytes: 1, Isolation: wire.IsolationWritten})
	if err != nil {
		return 0, err
	}
	return max(off, res.HighWatermark), nil
}

// Topic is the consumed topic.
func (k *Consumer) Topic() string { return k.topic }

// Partitions lists the consumed partitions.
func (k *Consumer) Partitions() []int32 {
	out := make([]int32, len(k.parts))
	for i, p := range k.parts {
		out[i] = p.id
	}
	return out
}

// Position is the next offset the consumer will deliver from partition (the offset of the
// last delivered record + 1, or the start offset), or -1 for a partition it does not consume.
func (k *Consumer) Position(partition int32) int64 {
	if p := k.byID[partition]; p != nil {
		return p.pos.Load()
	}
	return -1
}

// HighWatermark is the partition's high watermark as of the latest FETCH answer (the offset
// after the last readable record), or -1 before the first answer or for an unknown partition.
// HighWatermark - Position is the partition's lag.
func (k *Consumer) HighWatermark(partition int32) int64 {
	if p := k.byID[partition]; p != nil {
		return p.hw.Load()
	}
	return -1
}

// Buffered is the number of bytes fetched and held by the consumer but not yet consumed (raw
// batches plus decompressed records), over all partitions.
func (k *Consumer) Buffered() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, p := range k.parts {
		n += p.buffered
	}
	return n
}

// Err is nil while the consumer works, ErrClosed after Close, or the fatal error that ended it.
func (k *Consumer) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

func (k *Consumer) currentConn() *Conn {
	k.connMu.Lock()
	defer k.connMu.Unlock()
	return k.conn
}

// report hands a non-fatal error to OnError without blocking.
func (k *Consumer) report(err error) {
	if k.opts.OnError == nil {
		return
	}
	select {
	case k.errs <- err:
	default:
	}
}

// reporter calls OnError, so that the goroutines that find errors never wait for it.
func (k *Consumer) reporter() {
	for {
		select {
		case err := <-k.errs:
			if k.opts.OnError != nil {
				k.opts.OnError(err)
			}
		case <-k.ctx.Done():
			return
		}
	}
}

// --- fetching -------------------------------------------------------------------------

// startSession starts one fetcher per partition on c.
func (k *Consumer) startSession(c *Conn) *session {
	s := &session{c: c}
	s.ctx, s.cancel = context.WithCancel(k.ctx)
	for _, p := range k.parts {
		s.wg.Add(1)
		k.wg.Add(1)
		go k.fetchLoop(s, p)
	}
	return s
}

func (s *session) stop() {
	s.cancel()
	s.wg.Wait()
}

// supervise runs the sessions of a reconnecting consumer: when the connection breaks, it
// stops the fetchers, drops what they had queued, redials and starts again from the
// positions.
func (k *Consumer) supervise(c *Conn) {
	defer k.wg.Done()
	for {
		s := k.startSession(c)
		select {
		case <-c.Done():
		case <-k.ctx.Done():
		}
		s.stop()
		if k.ctx.Err() != nil {
			return
		}
		k.report(fmt.Errorf("lightq: consumer of %s: reconnecting: %w", k.topic, c.Err()))
		c.Close()
		k.dropQueued()
		if c = k.redial(); c == nil {
			return
		}
		k.connMu.Lock()
		k.conn = c
		k.connMu.Unlock()
	}
}

// redial dials until it succeeds, the consumer ends (nil), or the broker refuses the
// credentials (a fatal error, nil).
func (k *Consumer) redial() *Conn {
	backoff := 50 * time.Millisecond
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		c, err := Dial(k.ctx, k.addr, k.dopts)
		if err == nil {
			return c
		}
		if k.ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, &wire.Error{Code: wire.CodeAuthFailed}) {
			k.enqueueFatal(nil, fmt.Errorf("lightq: consumer of %s: redial: %w", k.topic, err))
			return nil
		}
		k.report(fmt.Errorf("lightq: consumer of %s: redial in %v: %w", k.topic, backoff, err))
		t.Reset(backoff)
		select {
		case <-t.C:
		case <-k.ctx.Done():
			return nil
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// dropQueued makes every queued chunk stale (the fetchers are stopped): the next session
// fetches again from the positions.
func (k *Consumer) dropQueued() {
	k.mu.Lock()
	defer k.mu.Unlock()
	keep := k.queue[:0]
	for _, ch := range k.queue[k.head:] {
		if ch.err != nil {
			keep = append(keep, ch)
		} else {
			k.recycleLocked(ch)
		}
	}
	clear(k.queue[len(keep):])
	k.queue, k.head = keep, 0
	for _, p := range k.parts {
		p.gen++
	}
}

// getChunk returns a free chunk of p, for the current generation.
func (k *Consumer) getChunk(p *partState) *chunk {
	k.mu.Lock()
	defer k.mu.Unlock()
	var ch *chunk
	if n := len(p.free); n > 0 {
		ch = p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
	} else {
		ch = &chunk{p: p}
	}
	ch.gen = p.gen
	return ch
}

// recycleLocked takes back a chunk's accounted bytes and keeps it for reuse.
func (k *Consumer) recycleLocked(ch *chunk) {
	p := ch.p
	if p == nil {
		return
	}
	p.buffered -= ch.size
	ch.size = 0
	ch.raw, ch.dec, ch.batches = ch.raw[:0], ch.dec[:0], ch.batches[:0]
	if len(p.free) < maxFreeChunks && !k.closed.Load() {
		p.free = append(p.free, ch)
	}
	select {
	case p.space <- struct{}{}:
	default:
	}
}

func (k *Consumer) recycle(ch *chunk) {
	k.mu.Lock()
	k.recycleLocked(ch)
	k.mu.Unlock()
}

// account adds n bytes to ch and its partition; it reports whether the partition still has
// room for another FETCH.
func (k *Consumer) account(ch *chunk, n int) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	ch.size += n
	ch.p.buffered += n
	return ch.p.buffered < k.opts.Prefetch
}

// waitSpace waits until p holds less than Prefetch bytes.
func (k *Consumer) waitSpace(s *session, p *partState) bool {
	for {
		k.mu.Lock()
		ok := p.buffered < k.opts.Prefetch
		k.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-p.space:
		case <-s.ctx.Done():
			return false
		}
	}
}

// enqueue hands a processed chunk (or a fatal error) to Each.
func (k *Consumer) enqueue(ch *chunk) {
	k.mu.Lock()
	k.queue = append(k.queue, ch)
	k.mu.Unlock()
	select {
	case k.signal <- struct{}{}:
	default:
	}
}

// enqueueFatal queues err after what p (nil: any) has queued; Each returns it when it gets
// there and the consumer ends.
func (k *Consumer) enqueueFatal(p *partState, err error) {
	k.enqueue(&chunk{p: p, err: err})
}

// sendFetch sends a FETCH for p at off into one of p's free call slots.
func (k *Consumer) sendFetch(s *session, p *partState, off int64) (*fetchCall, error) {
	fc := &p.calls[0]
	if fc.inUse {
		fc = &p.calls[1]
	}
	fc.inUse, fc.err, fc.c = true, nil, s.c
	fc.ch = k.getChunk(p)
	req := wire.Fetch{Topic: k.topic, Partition: uint32(p.id), Offset: off, MaxBytes: k.maxBytes, MaxWaitMs: k.maxWait, Isolation: k.opts.Isolation}
	p.req = req.AppendTo(p.req[:0])
	fc.corr = s.c.nextCorr()
	if err := s.c.register(fc.corr, wire.OpFetch, fc); err != nil {
		k.freeCall(fc)
		return nil, err
	}
	if err := s.c.writeFrame(wire.OpFetch, fc.corr, p.req); err != nil && s.c.unregister(fc.corr) {
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
	if !fc.c.unregister(fc.corr) {
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
	}()
	next := p.pos.Load()
	backoff := time.Duration(0)
	for {
		if pending == nil {
			if !k.waitSpace(s, p) {
				return
			}
			fc, err := k.sendFetch(s, p, next)
			if err != nil {
				if !k.fetchFailed(s, p, next, err, &next, &backoff) {
					return
				}
				continue
			}
			pending = fc
		}
		ch, err := k.await(s, p, pending)
		pending = nil
		if err != nil {
			if !k.fetchFailed(s, p, next, err, &next, &backoff) {
				return
			}
			continue
		}
		backoff = 0
		var resp wire.FetchResponse
		if err := resp.Decode(ch.raw); err != nil || resp.Partition != uint32(p.id) {
			k.recycle(ch)
			if err == nil {
				err = fmt.Errorf("answer for partition %d", resp.Partition)
			}
			k.fetchFailed(s, p, next, fmt.Errorf("%w: FETCH response: %w", ErrProtocol, err), &next, &backoff)
			return
		}
		p.hw.Store(resp.HighWatermark)
		end, scanErr := scanEnd(ch.raw[wire.FetchResponseHeaderSize:], next)
		room := k.account(ch, len(ch.raw))
		if scanErr == nil && end == next {
			// Nothing new: the long poll ran out. A broker that answers empty although it
			// has data would make this spin, hence the pause.
			k.recycle(ch)
			if resp.HighWatermark > next && !k.sleep(s, 10*time.Millisecond) {
				return
			}
			continue
		}
		// Pipelining: the next FETCH goes out before this answer is verified and queued.
		var sendErr error
		if scanErr == nil && room {
			pending, sendErr = k.sendFetch(s, p, end)
		}
		if err := k.process(p, ch, next); err != nil {
			k.enqueueFatal(p, err)
			return
		}
		if scanErr != nil {
			k.enqueueFatal(p, fmt.Errorf("lightq: %s partition %d: FETCH at offset %d: %w", k.topic, p.id, next, scanErr))
			return
		}
		next = end
		if sendErr != nil && !k.fetchFailed(s, p, next, sendErr, &next, &backoff) {
			return
		}
	}
}

// scanEnd walks the batch headers of a FETCH answer and returns the offset after its last
// record (at least from). The CRCs are checked later, by process.
func scanEnd(b []byte, from int64) (int64, error) {
	end := from
	for len(b) > 0 {
		n := wholeBatchSize(b)
		if n == 0 {
			return end, fmt.Errorf("%w: batch of %d bytes with %d left in the answer", wire.ErrCorruptBatch, wire.BatchSize(b), len(b))
		}
		h, err := wire.PeekBatchHeader(b)
		if err != nil {
			return end, err // process names the batch
		}
		end = max(end, h.NextOffset())
		b = b[n:]
	}
	return end, nil
}

// process verifies every batch of ch, decompresses the ones it needs and queues ch. On a
// corrupt batch it queues the batches before it and returns the error, which names the
// partition and the batch's offset.
func (k *Consumer) process(p *partState, ch *chunk, from int64) error {
	ch.batches, ch.dec = ch.batches[:0], ch.dec[:0]
	off := wire.FetchResponseHeaderSize
	var bad error
	for off < len(ch.raw) {
		rest := ch.raw[off:]
		n := wholeBatchSize(rest)
		if n == 0 {
			break // scanEnd reports it
		}
		bt, err := wire.ParseBatch(rest[:n], k.maxBatch)
		if err != nil {
			bad = fmt.Errorf("lightq: %s partition %d: batch at offset %d: %w", k.topic, p.id, wire.BatchBaseOffset(rest), err)
			break
		}
		if bt.BaseOffset+int64(bt.RecordCount) > from {
			ref := batchRef{base: bt.BaseOffset, firstTS: bt.FirstTimestamp, count: bt.RecordCount}
			if bt.Codec() == wire.CodecNone {
				ref.start = off + n - len(bt.Records)
				ref.end = off + n
			} else {
				ref.inDec, ref.start = true, len(ch.dec)
				if ch.dec, err = p.comp.Decompress(ch.dec, &bt); err != nil {
					bad = fmt.Errorf("lightq: %s partition %d: batch at offset %d: %w", k.topic, p.id, bt.BaseOffset, err)
					break
				}
				ref.end = len(ch.dec)
			}
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
	return bad
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
func (k *Consumer) fetchFailed(s *session, p *partState, off int64, err error, next *int64, backoff *time.Duration) bool {
	if s.ctx.Err() != nil {
		return false
	}
	var we *wire.Error
	isWire := errors.As(err, &we) && !errors.Is(err, ErrConnectionLost)
	switch {
	case errors.Is(err, ErrConnectionLost) || errors.Is(err, ErrClosed) || (isWire && we.Code.Fatal()):
		if k.owned && !errors.Is(err, ErrClosed) {
			return false // the supervisor redials
		}
		k.enqueueFatal(p, fmt.Errorf("lightq: %s partition %d: %w", k.topic, p.id, err))
		return false
	case isWire && we.Code == wire.CodeOffsetOutOfRange:
		ctx, cancel := context.WithTimeout(s.ctx, s.c.opts.RequestTimeout)
		defer cancel()
		start, lerr := s.c.ListOffsets(ctx, wire.ListOffsets{Topic: k.topic, Partition: uint32(p.id), Mode: wire.OffsetEarliest})
		switch {
		case lerr != nil:
			return k.fetchFailed(s, p, off, lerr, next, backoff)
		case off < start:
			k.report(fmt.Errorf("%w: %s partition %d: offset %d, log start %d: resuming at %d", ErrOffsetReset, k.topic, p.id, off, start, start))
			*next = start
			return true
		}
		// Beyond the durable end but not the written one (a position committed by a
		// consumer with written isolation): the durable end catches up soon.
		res, ferr := s.c.Fetch(ctx, wire.Fetch{Topic: k.topic, Partition: uint32(p.id), Offset: start, MaxBytes: 1, Isolation: wire.IsolationWritten})
		if ferr == nil && k.opts.Isolation == wire.IsolationDurable && off <= res.HighWatermark {
			*backoff = min(max(2**backoff, 10*time.Millisecond), 2*time.Second)
			return k.sleep(s, *backoff)
		}
		k.enqueueFatal(p, fmt.Errorf("lightq: %s partition %d: offset %d is beyond the end of the log: %w", k.topic, p.id, off, err))
		return false
	case errors.Is(err, errFetchTimeout), errors.Is(err, context.DeadlineExceeded),
		isWire && (we.Code == wire.CodeStorageError || we.Code == wire.CodeInternal || we.Code == wire.CodeResourceLimit || we.Code == wire.CodeStorageFull):
		*backoff = min(max(2**backoff, 50*time.Millisecond), 2*time.Second)
		k.report(fmt.Errorf("lightq: %s partition %d: FETCH at offset %d (retry in %v): %w", k.topic, p.id, off, *backoff, err))
		return k.sleep(s, *backoff)
	}
	k.enqueueFatal(p, fmt.Errorf("lightq: %s partition %d: FETCH at offset %d: %w", k.topic, p.id, off, err))
	return false
}

// --- consuming ------------------------------------------------------------------------

// pop waits for the next chunk to consume. It returns the terminal error once the consumer
// is closed or has reached a fatal error.
func (k *Consumer) pop(ctx context.Context) (*chunk, error) {
	for {
		k.mu.Lock()
		if k.err != nil {
			err := k.err
			k.mu.Unlock()
			return nil, err
		}
		for k.head < len(k.queue) {
			ch := k.queue[k.head]
			k.queue[k.head] = nil
			k.head++
			if k.head == len(k.queue) {
				k.queue, k.head = k.queue[:0], 0
			} else if k.head > 64 && k.head > len(k.queue)/2 {
				n := copy(k.queue, k.queue[k.head:])
				clear(k.queue[n:])
				k.queue, k.head = k.queue[:n], 0
			}
			if ch.err != nil {
				k.err = ch.err
				k.mu.Unlock()
				k.cancel() // stop fetching: the consumer is over
				return nil, ch.err
			}
			if ch.gen != ch.p.gen {
				k.recycleLocked(ch)
				continue
			}
			k.mu.Unlock()
			return ch, nil
		}
		k.mu.Unlock()
		select {
		case <-k.signal:
		case <-k.closing:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

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
	return k.each(ctx, handler, true)
}

func (k *Consumer) each(ctx context.Context, handler func(*Received) error, advanceOnError bool) error {
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
				if err == nil || advanceOnError {
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
			}, false)
		}()
	})
	return k.msgs
}

// --- committing -----------------------------------------------------------------------

// Commit stores, for the consumer's Group, the position of every partition that delivered
// records since the last commit: the offset of its last delivered record + 1. The broker
// answers once the commit is durable.
func (k *Consumer) Commit(ctx context.Context) error {
	if k.opts.Group == "" {
		return errors.New("lightq: Commit needs ConsumerOptions.Group")
	}
	offsets := make(map[int32]int64)
	for _, p := range k.parts {
		if pos := p.pos.Load(); p.moved.Load() && pos != p.committed.Load() {
			offsets[p.id] = pos
		}
	}
	return k.CommitOffsets(ctx, offsets)
}

// CommitOffsets stores, for the consumer's Group, the given next offsets to read, by
// partition. The requests are pipelined; the errors are joined.
func (k *Consumer) CommitOffsets(ctx context.Context, offsets map[int32]int64) error {
	if k.opts.Group == "" {
		return errors.New("lightq: CommitOffsets needs ConsumerOptions.Group")
	}
	if len(offsets) == 0 {
		return nil
	}
	k.commitMu.Lock()
	defer k.commitMu.Unlock()
	c := k.currentConn()
	var wg sync.WaitGroup
	var emu sync.Mutex
	var errs []error
	for part, off := range offsets {
		wg.Go(func() {
			err := c.CommitOffset(ctx, wire.CommitOffset{Group: k.opts.Group, Topic: k.topic, Partition: uint32(part), Offset: off})
			if err != nil {
				emu.Lock()
				errs = append(errs, fmt.Errorf("lightq: commit %s partition %d offset %d: %w", k.topic, part, off, err))
				emu.Unlock()
				return
			}
			if p := k.byID[part]; p != nil {
				p.committed.Store(off)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (k *Consumer) autoCommit() {
	defer k.wg.Done()
	t := time.NewTicker(k.opts.AutoCommit)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-k.ctx.Done():
			return
		}
		ctx, cancel := context.WithTimeout(k.ctx, k.currentConn().opts.RequestTimeout)
		if err := k.Commit(ctx); err != nil && k.ctx.Err() == nil {
			k.report(err)
		}
		cancel()
	}
}

// Close stops the fetchers and, with a Group and AutoCommit not disabled, commits the
// positions (bounded by Options.RequestTimeout); it closes the connection of a DialConsumer.
// Each and Messages end with ErrClosed; a record whose handler is running during Close is
// not committed. It is idempotent and safe from any goroutine, including a handler and
// OnError; it returns the commit's error.
func (k *Consumer) Close() error {
	k.closeOnce.Do(func() {
		k.mu.Lock()
		if k.err == nil {
			k.err = ErrClosed
		}
		k.mu.Unlock()
		k.closed.Store(true)
		close(k.closing)
		k.cancel()
		k.msgsStop()
		k.wg.Wait()
		if k.opts.Group != "" && k.opts.AutoCommit > 0 {
			c := k.currentConn()
			ctx, cancel := c.withTimeout(context.Background())
			k.closeErr = k.Commit(ctx)
			cancel()
		}
		if k.owned {
			k.currentConn().Close()
		}
		k.mu.Lock()
		clear(k.queue)
		k.queue, k.head = nil, 0
		for _, p := range k.parts {
			p.free = nil
		}
		k.mu.Unlock()
	})
	return k.closeErr
}
