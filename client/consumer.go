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

// The durable-topic consumer: per partition a fetcher goroutine that keeps up to two FETCHes
// going to the partition's leader, verifies (CRC) and decompresses what comes back and queues
// it, bounded in bytes; Each walks the queue without allocating; a supervisor goroutine per
// broker restarts the fetchers from the consumer's positions on each new connection, and the
// mover moves a partition's fetcher to its new leader (consumer_session.go).
//
// This file holds the options, the Consumer type, construction, the accessors, error
// reporting and Close; doc.go maps the other consumer_*.go files and gives the lock order.
// Consumer.mu is never held while calling out.

// ErrOffsetReset is reported to ConsumerOptions.OnError (wrapped, with the partition and the
// offsets) when a partition's position was below the log start offset, because retention
// removed the records, and the consumer skipped ahead to the log start.
var ErrOffsetReset = errors.New("lightq: consumer position below the log start: records skipped")

// ConsumerOptions configure a Consumer of a durable topic. Only Topic is required.
type ConsumerOptions struct {
	Topic string
	// Partitions to consume; default every partition of the topic.
	Partitions []int32
	// Group, when set, names a consumer group, and the consumer is one of its members: the
	// broker assigns it a share of the topic's partitions (PROTOCOL.md 10.1) and moves
	// partitions between the members as they join and leave. Each partition it is given
	// starts at the group's committed offset, or at Start when the group has committed
	// nothing for it; Commit / AutoCommit store its positions for the group (GROUP_COMMIT).
	// When a partition is taken away, the consumer stops delivering it, commits its
	// position (see OnRevoke) and lets it go; Close commits and leaves the group, so the
	// others take over at once. A group member may not set Partitions.
	Group string
	// OffsetsOnly, with a Group, does not join it: the consumer reads Partitions (default
	// all) and only stores its positions for the group, with COMMIT_OFFSET, which the broker
	// refuses (GROUP_NOT_EMPTY) while the group has members.
	OffsetsOnly bool
	// SessionTimeout of a group member: the broker gives its partitions to the others when
	// it has heard nothing from it for this long (a crash, a network cut). Default 0: the
	// broker's (10s by default).
	SessionTimeout time.Duration
	// OnAssign, for a group member, is called with the partitions given to the consumer and
	// the offset each starts at, before any of their records is delivered. Calls are made
	// one at a time, from a consumer goroutine (the first one from NewConsumer, before it
	// returns), never while a handler runs for those partitions.
	OnAssign func(starts map[int32]int64)
	// OnRevoke, for a group member, is called with partitions taken from the consumer once
	// Each delivers none of their records any more and before their positions are committed:
	// the application may finish what it holds for them. It returns the next offsets to
	// commit for them instead of their positions, or nil to commit the positions. lost is
	// true when the membership itself ended (the session expired): nothing is committed
	// then, and the consumer joins again. Close calls it too, with every partition the
	// consumer holds, before it commits and leaves the group (nil then commits the
	// positions unless AutoCommit is disabled).
	OnRevoke func(partitions []int32, lost bool) map[int32]int64
	// Start is where a partition without a committed offset starts. Default Earliest().
	Start StartPosition
	// Starts overrides Start for the partitions it names, so that each partition can
	// resume at its own offset without a group.
	Starts map[int32]StartPosition
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
	// OnError receives non-fatal errors: a transient FETCH failure before its retry (a
	// STORAGE_ERROR, for one, which a damaged segment causes until it is repaired), a lost
	// connection being redialled, a failed automatic commit, an offset reset
	// (ErrOffsetReset), bytes after the records a batch's header counts (which lose no
	// offset). Calls are made one at a time from a consumer goroutine; OnError may
	// call any Consumer method. When errors come faster than it returns, some are dropped.
	OnError func(error)
	// OnCorruptBatch decides what happens when Each reaches a batch the client cannot decode
	// (a *CorruptBatchError: a CRC mismatch, a bad structure or a records section that does
	// not decompress, found before any of the batch is delivered; or records that stop
	// decoding part-way, found as Each walks them, after delivering the records before the
	// damage). The error's offsets are those that cannot be delivered.
	//
	// nil, the default, stops the consumer there: Each returns the *CorruptBatchError, which
	// names the topic, partition and offsets, and the position stays at its first offset.
	// Otherwise OnCorruptBatch is called like the handler (on the goroutine running Each, in
	// offset order), once per batch. Returning nil skips the offsets: the position moves past
	// the batch's last offset, so Commit covers it like a delivered batch. Returning an error
	// stops the consumer with that error. A batch whose extent is unknown
	// (CorruptBatchError.Skippable is false) cannot be skipped: the consumer stops at it
	// without calling OnCorruptBatch.
	OnCorruptBatch func(*CorruptBatchError) error
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
// or repeated, across reconnects too; only OnCorruptBatch skips, and only offsets that cannot
// be decoded. A new consumer of the same group starts at the
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

	owned bool // the consumer closes conn (DialConsumer)
	conn  *Conn

	// member is the group membership (nil without a Group, or with OffsetsOnly); see
	// consumer_group.go.
	member *membership

	// activeMu guards sessions, sups and the partitions' fetcher, node and replicated
	// fields: who starts and stops the per-partition fetchers (the supervisors, the mover,
	// the group reconciler).
	activeMu sync.Mutex
	sessions map[*node]*session // each node's current session; none while it reconnects
	sups     map[*node]bool     // the nodes whose supervisor runs
	moveSig  chan struct{}      // cap 1: a partition asks the mover for its leader
	unwatch  func()             // stops reporting failed reconnect attempts

	ctx    context.Context // ends at Close or at a fatal error
	cancel context.CancelFunc
	wg     sync.WaitGroup // fetchers, supervisors, mover, auto-committer

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
	msgsDone chan struct{} // closed when the Messages goroutine has returned; under mu

	// Revocation of partitions (group members): the reconciler stores the partitions in
	// revoking and sets revokeReq; whoever holds consumeMu (Each, between two records, or the
	// reconciler itself when no Each runs) applies it and closes revokeDone. Each checks
	// revokeReq once per record: one atomic load.
	revokeMu   sync.Mutex // one revocation at a time
	revokeReq  atomic.Bool
	revoking   []*partState  // under consumeMu once revokeReq is set
	revokeDone chan struct{} // closed once applied

	// Each's state, owned by whoever holds consumeMu.
	consumeMu sync.Mutex
	cur       *chunk
	bi        int // next batch of cur
	itActive  bool
	it        wire.RecordIter
	itNext    int64 // offset of the record it decodes next
	rec       wire.Record
	recv      Received
}

// partState is one partition of the topic; the consumer delivers it while active.
type partState struct {
	id        int32
	active    atomic.Bool  // consumed now: fetched and delivered (a group member's assignment)
	resumable atomic.Bool  // lost with the membership, uncommitted: may resume at pos (startPartition)
	fetcher   *session     // under Consumer.activeMu: the partition's fetcher, nil when none runs
	pos       atomic.Int64 // next offset to deliver; written by Each only (and at setup)
	committed atomic.Int64 // last offset committed for the group, -1 when none
	moved     atomic.Bool  // pos moved by a delivery: Commit has something to store
	hw        atomic.Int64 // high watermark of the latest FETCH response

	// Under Consumer.activeMu: the node of the partition's leader (nil until known) and
	// whether it has replicas elsewhere (then a lost connection looks the leader up again).
	node       *node
	replicated bool
	moving     atomic.Bool // waits for the mover to look its leader up

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

// NewConsumer returns a consumer of a durable topic on c. It looks up the partitions and each
// partition's start offset before returning. When c's connection breaks, the consumer reports
// the loss to OnError, waits for c to reconnect (which it does by itself) and resumes every
// partition at its position, so that no record is skipped or delivered twice. Records already
// fetched but not yet delivered are dropped and fetched again. The only records a reconnect
// can repeat or lose are those the broker itself lost: with fsync=interval or never, or
// Isolation written, records read before a broker crash may not exist after it (a position
// beyond the new end of the log fails the consumer; see AtOffset). The consumer fails when c
// ends: closed by its owner, or a reconnect refused (a wrong password): Each returns the error
// once the records already fetched are consumed.
func (c *Conn) NewConsumer(ctx context.Context, opts ConsumerOptions) (*Consumer, error) {
	return newConsumer(ctx, c, opts, false)
}

// DialConsumer dials addr and returns a consumer, as NewConsumer makes, that owns its
// connection: Close closes it. Failed reconnect attempts are reported to OnError, each with
// the wait before the next (50ms doubling up to 2s, with jitter, until Close).
func DialConsumer(ctx context.Context, addr string, opts Options, copts ConsumerOptions) (*Consumer, error) {
	c, err := Dial(ctx, addr, opts)
	if err != nil {
		return nil, err
	}
	k, err := newConsumer(ctx, c, copts, true)
	if err != nil {
		c.Close()
		return nil, err
	}
	return k, nil
}

// newConsumer makes a consumer on c; with owned (DialConsumer) the consumer closes c.
func newConsumer(ctx context.Context, c *Conn, opts ConsumerOptions, owned bool) (*Consumer, error) {
	if err := wire.ValidTopicName(opts.Topic); err != nil {
		return nil, fmt.Errorf("lightq: %w", err)
	}
	if len(opts.Group) > wire.MaxGroupName {
		return nil, fmt.Errorf("lightq: group name of %d bytes, limit %d", len(opts.Group), wire.MaxGroupName)
	}
	if opts.Isolation > wire.IsolationWritten {
		return nil, fmt.Errorf("lightq: isolation %d", opts.Isolation)
	}
	if err := opts.Start.check(); err != nil {
		return nil, err
	}
	for _, st := range opts.Starts {
		if err := st.check(); err != nil {
			return nil, err
		}
	}
	memberMode := opts.Group != "" && !opts.OffsetsOnly
	if memberMode && len(opts.Partitions) > 0 {
		return nil, errors.New("lightq: a group member is assigned its partitions by the broker: leave Partitions empty, or set OffsetsOnly to choose them")
	}
	if opts.OffsetsOnly && opts.Group == "" {
		return nil, errors.New("lightq: OffsetsOnly needs a Group")
	}
	if opts.SessionTimeout < 0 || opts.SessionTimeout > 0 && opts.SessionTimeout < time.Millisecond {
		return nil, fmt.Errorf("lightq: session timeout %v", opts.SessionTimeout)
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

	cmd, err := c.clusterMetadata(ctx, []string{opts.Topic})
	if err != nil {
		return nil, err
	}
	md := cmd.Topics
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
	for id := range opts.Starts {
		if id < 0 || int(id) >= len(md[0].Partitions) {
			return nil, &wire.Error{Code: wire.CodeUnknownPartition, Message: fmt.Sprintf("Starts: topic %q has partitions 0-%d, not %d", opts.Topic, len(md[0].Partitions)-1, id)}
		}
	}
	k := &Consumer{
		topic: opts.Topic, opts: opts, byID: make(map[int32]*partState, len(ids)),
		maxBatch: c.Limits().MaxBatch, maxBytes: uint32(opts.MaxBytes), maxWait: uint32(opts.MaxWait / time.Millisecond),
		conn: c, errs: make(chan error, 64), signal: make(chan struct{}, 1), closing: make(chan struct{}),
		sessions: make(map[*node]*session), sups: make(map[*node]bool), moveSig: make(chan struct{}, 1),
	}
	k.owned = owned
	k.reqWait = c.opts.RequestTimeout + opts.MaxWait
	for _, id := range ids {
		if id < 0 || int(id) >= len(md[0].Partitions) {
			return nil, &wire.Error{Code: wire.CodeUnknownPartition, Message: fmt.Sprintf("topic %q has partitions 0-%d, not %d", opts.Topic, len(md[0].Partitions)-1, id)}
		}
		if k.byID[id] != nil {
			return nil, fmt.Errorf("lightq: partition %d listed twice", id)
		}
		p := &partState{id: id, space: make(chan struct{}, 1)}
		if n, replicated, ok := c.leader(opts.Topic, id); ok {
			p.node, p.replicated = n, replicated
		} else {
			p.moving.Store(true) // no leader now: the mover looks it up again
		}
		p.committed.Store(-1)
		p.hw.Store(-1)
		for i := range p.calls {
			p.calls[i].done = make(chan struct{}, 1)
		}
		k.byID[id] = p
		k.parts = append(k.parts, p)
	}
	k.recv.Topic = opts.Topic
	k.ctx, k.cancel = context.WithCancel(context.Background())
	k.unwatch = c.watch(func(err error, wait time.Duration) {
		k.report(fmt.Errorf("lightq: consumer of %s: redial in %v: %w", k.topic, wait.Round(time.Millisecond), err))
	})
	k.wg.Add(1)
	go k.mover()
	k.msgsCtx, k.msgsStop = context.WithCancel(context.Background())
	if memberMode {
		if k.member, err = newMembership(opts.SessionTimeout); err != nil {
			k.abort()
			return nil, err
		}
		if err := k.join(ctx, c); err != nil {
			k.member.cancel()
			k.abort()
			return nil, err
		}
		// The first assignment: its starts are resolved before NewConsumer returns.
		if err := k.reconcile(); err != nil {
			_ = k.leave(nil)
			k.member.cancel()
			k.abort()
			return nil, err
		}
	} else {
		for _, p := range k.parts {
			start, err := k.resolveStart(ctx, c, p)
			if err != nil {
				k.abort()
				return nil, err
			}
			p.pos.Store(start)
			p.active.Store(true)
		}
	}
	go k.reporter()
	k.activeMu.Lock()
	k.superviseLocked(c.boot) // as with one broker: the boot node's session always runs
	for _, p := range k.parts {
		if p.active.Load() && p.node != nil {
			k.superviseLocked(p.node)
		}
	}
	k.activeMu.Unlock()
	if k.anyMoving() {
		signal(k.moveSig)
	}
	if memberMode {
		k.startMember()
	}
	if opts.Group != "" && opts.AutoCommit > 0 {
		k.wg.Add(1)
		go k.autoCommit()
	}
	return k, nil
}

// abort stops what newConsumer started before it failed.
func (k *Consumer) abort() {
	k.cancel()
	k.wg.Wait()
	k.unwatch()
}

// Topic is the consumed topic.
func (k *Consumer) Topic() string { return k.topic }

// Partitions lists the consumed partitions: for a group member, those assigned to it now.
func (k *Consumer) Partitions() []int32 {
	var out []int32
	for _, p := range k.parts {
		if p.active.Load() {
			out = append(out, p.id)
		}
	}
	return out
}

// Position is the next offset the consumer will deliver from partition (the offset of the
// last delivered record + 1, or the start offset), or -1 for a partition it does not consume.
func (k *Consumer) Position(partition int32) int64 {
	if p := k.byID[partition]; p != nil && p.active.Load() {
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

func (k *Consumer) currentConn() *Conn { return k.conn }

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

// Close stops the fetchers and, with a Group and AutoCommit not disabled, commits the
// positions (bounded by Options.RequestTimeout). A group member first calls OnRevoke with the
// partitions it holds, as a rebalance that takes them all would, and commits the offsets it
// returns (or the positions, as above), then leaves the group, so the other members get its
// partitions at once; the whole of it is bounded by one Options.RequestTimeout when the
// broker does not answer. It closes the connection of a DialConsumer.
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
		if k.member != nil {
			k.stopMember() // no more assignments or revocations; still a member
		}
		k.cancel()
		k.msgsStop()
		k.mu.Lock()
		msgsDone := k.msgsDone
		k.mu.Unlock()
		if msgsDone != nil {
			// The position moves past a record after its hand-off on the channel: wait for
			// that, so the commit below covers every record the application received.
			<-msgsDone
		}
		k.wg.Wait()
		k.unwatch()
		switch {
		case k.member != nil:
			k.closeErr = k.closeMember() // OnRevoke, commit, LEAVE_GROUP
		case k.opts.Group != "" && k.opts.AutoCommit > 0:
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
