package partition

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/cluster/raftlog"
	"github.com/lightq/lightq/cluster/replica"
	"github.com/lightq/lightq/log"
	"github.com/lightq/lightq/log/producerstate"
	"github.com/lightq/lightq/log/vfs"
	"github.com/lightq/lightq/wire"
)

// Fsync is a partition's fsync policy: FsyncAlways, FsyncNever, or FsyncInterval(d).
type Fsync time.Duration

const (
	// FsyncAlways syncs every append before the replica acknowledges it to its leader (and
	// before a leader counts its own copy), so a commit means a quorum fsynced the entry.
	FsyncAlways Fsync = 0
	// FsyncNever leaves syncing to the kernel (and to Close): a commit means a quorum wrote
	// the entry to its page cache.
	FsyncNever Fsync = -1
)

// FsyncInterval syncs the log every d: a commit means a quorum wrote the entry, and each
// replica syncs it within d.
func FsyncInterval(d time.Duration) Fsync {
	if d <= 0 {
		return FsyncAlways
	}
	return Fsync(d)
}

func (f Fsync) String() string {
	switch {
	case f == FsyncAlways:
		return "always"
	case f < 0:
		return "never"
	}
	return "interval " + time.Duration(f).String()
}

// ProducerLimits are the limits of the producer state (as log.ProducerOptions).
type ProducerLimits struct {
	Expiry       time.Duration         // drop a producer idle this long (default 24 h)
	MaxProducers int                   // producer states in this partition (default 10,000)
	Budget       *producerstate.Budget // a cap shared with other partitions; nil: none
	Label        string                // names the partition in refusals (default the directory)
}

// Config configures a Partition. Dir, NodeID and Sender are required, and Peers when Dir
// holds no replica yet.
type Config struct {
	Dir    string // the replica's directory: its segments, raft.state and producers.state
	NodeID uint64 // this broker
	Group  uint64 // the partition's Raft group
	// Peers are the voters (this broker among them) a new group starts with when Dir holds
	// no replica; ignored otherwise.
	Peers []uint64
	// Join starts a replica whose Dir holds none without bootstrapping the group (Peers is
	// ignored): a replica that a membership change adds to a running group (as a learner,
	// then a voter), which the leader brings up with its log or a snapshot. Ignored when Dir
	// holds a replica.
	Join   bool
	Sender replica.Sender // *transport.Transport in the broker
	Fsync  Fsync
	// Log configures the segment log (segment size, retention, MaxBatch, FS). Its Producers
	// must be zero: a replica's log does not deduplicate (the partition does, see the doc).
	// Replicas roll segments by size at the same batches, so their segment files are
	// byte-identical; SegmentAge makes each roll on its own clock (the bytes at every offset
	// stay the same, the split into files does not).
	Log       log.Options
	Producers ProducerLimits
	// OnCommit, if set, is called after the high watermark moved, on the replica's
	// goroutine: the broker wakes its long-poll fetches. It must not block.
	OnCommit func()
	Logf     func(format string, args ...any) // default: silent
	// Segments, if set, brings a follower behind its leader's log start up from whole
	// segments (catchup.go): snapshots name this broker as the source of the segments below
	// them, and a follower that installs one fetches them from its source through Segments
	// (*transport.Transport, whose Config.Segments must then serve this partition's Log).
	// Nil: a snapshot starts the follower's log at the snapshot's offset.
	Segments SegmentFetcher
	// CatchUpTimeout is how long a follower keeps fetching the segments of one snapshot
	// before it installs the snapshot without them (default 2 min): the outer bound of a
	// fetch that makes progress.
	CatchUpTimeout time.Duration
	// CatchUpStall is how long a fetch may go without receiving bytes before the follower
	// abandons the snapshot (default: one election timeout, at least 250 ms): while it
	// fetches, its election timer does not run, so a source that died or stopped must not
	// hold its vote from the other replicas for longer than an election would take.
	CatchUpStall time.Duration

	// MaxPending bounds the batches proposed and not yet settled (default 4096), and
	// MaxPendingBytes their bytes (default 32 MiB): past either, Produce answers ErrBusy.
	MaxPending      int
	MaxPendingBytes int64
	// ProposalTimeout is how long Produce waits for a commit before it answers
	// ErrMaybeStored (default 5 s).
	ProposalTimeout time.Duration
	// CheckpointInterval is how often the producer state is checkpointed when it changed
	// (default 10 s): at most this much of the log is scanned at the next Open. It is also
	// checkpointed before a retention that would delete segments, and at Close.
	CheckpointInterval time.Duration
	// RetentionCheck is how often retention is applied when the log has a limit (default
	// 500 ms, as the broker's durable partitions).
	RetentionCheck time.Duration

	// Scrub, when set, makes a background goroutine verify the sealed segments again and
	// again at the rate it gives (shared by the partitions given the same one; the broker's
	// default is DefaultScrubBytesPerSecond), repairing what it finds from the other
	// replicas (scrub.go). Nil: no scrub (damage raft's reads meet is still repaired).
	Scrub *ScrubRate

	// Raft timing, passed to the replica: Tick (default 100 ms) and ElectionTicks (default
	// 10).
	Tick          time.Duration
	ElectionTicks int
}

const (
	defaultMaxPending      = 4096
	defaultMaxPendingBytes = 32 << 20
	defaultTimeout         = 5 * time.Second
	defaultCheckpoint      = 10 * time.Second
	defaultRetentionCheck  = 500 * time.Millisecond
	defaultProducerExpiry  = 24 * time.Hour
	defaultMaxProducers    = 10_000
	producerSweep          = time.Minute
	// maxJoiners bounds the retries waiting on one in-flight batch.
	maxJoiners = 8
)

// Errors of Produce, besides *replica.NotLeaderError, log.ErrDuplicate (with the original
// offset) and the producer refusals (wire.ErrOutOfOrderSequence, wire.ErrProducerFenced,
// wire.ErrUnknownProducer, producerstate.ErrTooManyProducers).
var (
	// ErrMaybeStored: the batch was proposed, and its outcome is unknown here (the
	// leadership was lost, the partition closed, or no commit came within ProposalTimeout).
	// It may be stored, at most once: the retry of an idempotent batch is answered with the
	// original offset if it was.
	ErrMaybeStored = errors.New("partition: outcome unknown, the batch may be stored; retry it unchanged")
	// ErrBusy: too many batches waiting for a commit; nothing stored, retry later.
	ErrBusy = replica.ErrBusy
	// ErrNotReady: a new leader has not applied its predecessors' entries yet, so it cannot
	// deduplicate an idempotent batch; nothing stored, retry (within a round trip). It wraps
	// ErrBusy.
	ErrNotReady = fmt.Errorf("%w: a new leader is applying its predecessors' entries", ErrBusy)
	// ErrClosed: the partition is closed, or its replica stopped on a storage error; nothing
	// stored.
	ErrClosed = errors.New("partition: closed; nothing stored")
	// ErrInvalidBatch: the batch cannot be stored in a replicated partition (a control
	// batch, a record count that disagrees with its header, a length that disagrees with its
	// header); it wraps wire.ErrCorruptBatch. Too large batches wrap wire.ErrBatchTooLarge.
	ErrInvalidBatch = fmt.Errorf("%w: not storable in a replicated partition", wire.ErrCorruptBatch)
)

// Partition is one replica of a replicated partition. See the package doc.
type Partition struct {
	cfg     Config
	fsys    vfs.FS
	st      *storage
	rep     *replica.Replica
	label   string
	maxSize int // the largest batch the log takes

	// mu guards dd, closed, term, ready, status, the list of pending batches and its counts,
	// and is taken by Produce, by the replica's callbacks (apply, advanced, settled), by
	// Snapshot and ApplySnapshot, and by the maintenance goroutine. Never held across
	// storage calls.
	mu     sync.Mutex
	dd     *dedup
	closed bool
	term   uint64 // the term this replica leads in, 0 when it does not
	ready  bool   // leader: its table is complete (it applied its term's first entry)
	status replica.Status
	head   *pending // proposals not settled, oldest first
	tail   *pending
	count  int
	bytes  int64
	// The answers to call once mu is released, reused: scratch by the replica's goroutine
	// (settled, advanced), sweepBuf by the maintenance goroutine; each owned by its
	// goroutine, not by mu.
	scratch  []answer
	sweepBuf []answer
	// hw is the high watermark (lock-free; written by the replica's goroutine).
	hw atomic.Int64

	// Guarded by mu too: the last term in which this replica saw a leader, and the terms it
	// saw one in since Open (Status.LeaderChanges).
	leaderTerm, leaderChanges uint64
	cu                        CatchUpStats // guarded by mu
	// abandonedSince is when the catch-ups began abandoning snapshots one after the other,
	// none installed since (zero: no such streak), lastAbandon the end of the last one; only
	// the replica's goroutine (catchUp) touches them.
	abandonedSince, lastAbandon time.Time

	// ckMu serialises checkpoint writes (maintenance, snapshot install, Close); ckIndex is
	// the state index of the last one written (guarded by ckMu, read by retention under it).
	ckMu    sync.Mutex
	ckIndex uint64
	ckBuf   []byte

	// The scrub (scrub.go): bytes verified and passes over the sealed segments (the damage
	// found and repaired is counted in ct); damage is the queue of damage raft's reads met,
	// to the scrub goroutine, and damageSeen (under damageMu) holds snapshots back until its
	// repair starts.
	scrubbed, scrubPasses atomic.Int64
	damage                chan *raftlog.CorruptEntryError
	damageMu              sync.Mutex
	damageSeen            bool
	scrubDone             chan struct{}

	ct  counters   // counters.go
	src *segSource // SegmentSource

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// Open opens (creating) the replica in cfg.Dir, rebuilds its producer state (the checkpoint,
// then the committed entries after it), and starts its Raft replica and its maintenance
// goroutine. Route the group's messages to Step (or Replica) and ReportUnreachable.
func Open(cfg Config) (*Partition, error) {
	if cfg.Dir == "" || cfg.NodeID == 0 || cfg.Sender == nil {
		return nil, errors.New("partition: Dir, NodeID and Sender are required")
	}
	if cfg.Log.Producers != (log.ProducerOptions{}) {
		return nil, errors.New("partition: Log.Producers must be zero: set Config.Producers (a replica's log does not deduplicate)")
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = defaultMaxPending
	}
	if cfg.MaxPendingBytes <= 0 {
		cfg.MaxPendingBytes = defaultMaxPendingBytes
	}
	if cfg.ProposalTimeout <= 0 {
		cfg.ProposalTimeout = defaultTimeout
	}
	if cfg.CheckpointInterval <= 0 {
		cfg.CheckpointInterval = defaultCheckpoint
	}
	if cfg.RetentionCheck <= 0 {
		cfg.RetentionCheck = defaultRetentionCheck
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.CatchUpTimeout <= 0 {
		cfg.CatchUpTimeout = defaultCatchUpTimeout
	}
	if cfg.CatchUpStall <= 0 {
		tick, ticks := cfg.Tick, cfg.ElectionTicks
		if tick <= 0 {
			tick = 100 * time.Millisecond // the replica's defaults
		}
		if ticks <= 0 {
			ticks = 10
		}
		cfg.CatchUpStall = max(tick*time.Duration(ticks), minCatchUpStall)
	}
	p := &Partition{cfg: cfg, fsys: cfg.Log.FS, stop: make(chan struct{}), done: make(chan struct{}),
		scrubDone: make(chan struct{}), damage: make(chan *raftlog.CorruptEntryError, 1)}
	p.src = &segSource{p}
	if p.fsys == nil {
		p.fsys = vfs.OS
	}
	p.label = cfg.Producers.Label
	if p.label == "" {
		p.label = "partition " + cfg.Dir
	}
	p.maxSize = cfg.Log.MaxBatch
	if p.maxSize <= 0 {
		p.maxSize = 1 << 20 // log.Options' default
	}
	lopts := cfg.Log
	if lopts.Logf == nil {
		lopts.Logf = cfg.Logf
	}
	// A damaged batch is cut, not refused: the peers hold the same bytes and raft brings
	// them back (the replica lost entries it had acknowledged: see replica.Config.LostCommit).
	lopts.CutDamage = true
	// The cache of recent entries holds what the leader has not applied yet (bounded by
	// raft's MaxUncommittedBytes below, data Produce holds anyway), so that neither
	// applying nor sending to a follower a little behind reads the log back; applied
	// entries beyond 4 MiB are given up (Storage.Applied in advanced).
	uncommitted := 2*cfg.MaxPendingBytes + int64(p.maxSize)
	s, err := raftlog.Open(cfg.Dir, raftlog.Options{Log: lopts, SyncEachAppend: cfg.Fsync == FsyncAlways,
		CacheBytes: int(uncommitted), CacheAppliedBytes: 4 << 20, Window: 2048, CutDamage: true})
	if err != nil {
		return nil, err
	}
	p.st = &storage{Storage: s, p: p}
	commit, err := p.rebuild()
	for cuts := 0; err != nil && cuts < 8; cuts++ {
		// A damaged batch (a flipped bit in a sealed segment, which the log's Open does not
		// read): cut the log there and let the peers bring the rest back, as for a damaged
		// active segment (log.Options.CutDamage).
		var ce *raftlog.CorruptEntryError
		if !errors.As(err, &ce) {
			break
		}
		p.logf("entry %d is damaged (%v): cutting the log there; the other replicas bring it back", ce.Index, ce)
		p.ct.found(FoundAtOpen, ce)
		if err = s.CutDamaged(ce); err == nil {
			p.ct.damageRepaired[FoundAtOpen].Add(1)
			commit, err = p.rebuild()
		}
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	if hw, err := s.OffsetAfter(commit); err == nil {
		p.hw.Store(hw)
	}
	rep, err := replica.Start(replica.Config{
		ID: cfg.NodeID, Group: cfg.Group, Peers: cfg.Peers, Join: cfg.Join, Storage: p.st, Sender: &snapGate{next: cfg.Sender, p: p},
		Apply: p.apply, Applied: commit, Advanced: p.advanced, LostCommit: s.LostCommit(),
		Tick: cfg.Tick, ElectionTicks: cfg.ElectionTicks,
		// Above what Produce lets through, so that raft never drops a proposal for its size
		// (a drop between two batches of one producer would store the later one after a gap).
		MaxUncommittedBytes: uint64(uncommitted),
		Logger:              replica.LogfLogger{Logf: cfg.Logf},
	})
	if err != nil {
		s.Close()
		return nil, err
	}
	p.rep = rep
	go p.maintain()
	go p.scrub()
	return p, nil
}

func (p *Partition) tableConfig() producerstate.Config {
	c := producerstate.Config{Expiry: p.cfg.Producers.Expiry, MaxProducers: p.cfg.Producers.MaxProducers,
		Budget: p.cfg.Producers.Budget, Label: p.label}
	if c.Expiry <= 0 {
		c.Expiry = defaultProducerExpiry
	}
	if c.MaxProducers <= 0 {
		c.MaxProducers = defaultMaxProducers
	}
	return c
}

// rebuild builds the producer state at Open: the checkpoint (if it still reaches the log's
// start), then the batches of the committed entries after it. It returns the commit index
// it applied up to, which the replica takes as applied.
func (p *Partition) rebuild() (uint64, error) {
	rs := p.st.State()
	commit := rs.HardState.Commit
	table, index := producerstate.New(p.tableConfig()), uint64(0)
	b, err := readCheckpoint(p.fsys, p.cfg.Dir)
	if err != nil {
		return 0, err
	}
	if b != nil {
		ci, _, t, err := loadState(b, p.tableConfig())
		switch {
		case err != nil:
			p.logf("checkpoint %s not used (the producer state is rebuilt from the log, which may have lost older producers to retention): %v", CheckpointFileName, err)
		case ci < rs.SnapIndex:
			t.Release()
			p.logf("checkpoint at entry %d is older than the log's start (entry %d): the producer state is rebuilt from the log", ci, rs.SnapIndex+1)
		default:
			table.Release()
			table, index = t, ci
		}
	} else if rs.SnapIndex > 0 {
		p.logf("no checkpoint, and the log starts at entry %d: the producer state is rebuilt from the log", rs.SnapIndex+1)
	}
	p.ckIndex = index
	p.dd = newDedup(table, p.label)
	p.dd.index = max(index, rs.SnapIndex)
	now := time.Now().UnixMilli()
	table.Expire(now)
	scanned := 0
	for lo := p.dd.index + 1; lo <= commit; {
		ents, err := p.st.Storage.Entries(lo, commit+1, 4<<20) // not the wrapper: damage is cut at Open
		if err != nil {
			return 0, fmt.Errorf("partition: rebuilding the producer state from entry %d: %w", lo, err)
		}
		for i := range ents {
			if e := &ents[i]; e.Type == raftpb.EntryNormal && len(e.Data) > 0 {
				h, err := wire.PeekBatchHeader(e.Data)
				if err != nil {
					return 0, fmt.Errorf("partition: entry %d: %w", e.Index, err)
				}
				p.dd.apply(e.Index, &h, now)
				scanned++
			}
		}
		lo = ents[len(ents)-1].Index + 1
	}
	p.dd.advance(commit)
	if scanned > 0 || index > 0 {
		p.logf("producer state: %d producers, from the checkpoint at entry %d and %d batches after it", table.Len(), index, scanned)
	}
	return commit, nil
}

// apply records a committed entry's producer (replica goroutine).
func (p *Partition) apply(e raftpb.Entry) {
	h, err := wire.PeekBatchHeader(e.Data)
	if err != nil {
		p.logf("entry %d: %v (not in the producer state)", e.Index, err)
		return
	}
	now := time.Now().UnixMilli()
	p.mu.Lock()
	p.dd.apply(e.Index, &h, now)
	p.mu.Unlock()
}

// advanced follows the replica after each Ready (its goroutine): the high watermark, the
// leadership, and a new leader's readiness to deduplicate.
func (p *Partition) advanced(st replica.Status) {
	off, offErr := p.st.Applied(st.Applied)
	p.mu.Lock()
	p.status = st
	if st.Leader != 0 && st.Term != p.leaderTerm {
		p.leaderTerm = st.Term
		p.leaderChanges++
	}
	p.dd.advance(st.Applied)
	var lead uint64
	if st.IsLeader {
		lead = st.Term
	}
	ans := p.scratch[:0]
	if lead != p.term {
		// Leadership lost or a new term: nothing waiting can be decided here any more (a
		// later leader decides it), so answer it now; the records stay until the replica
		// settles them.
		for r := p.head; r != nil; r = r.next {
			ans = r.abandon(ans, ErrMaybeStored)
		}
		p.term, p.ready = lead, false
	}
	if lead != 0 && !p.ready && st.TermStart != 0 && st.Applied >= st.TermStart {
		p.ready = true
	}
	p.mu.Unlock()
	p.scratch = call(ans)
	if offErr == nil && off > p.hw.Load() {
		p.hw.Store(off)
		if p.cfg.OnCommit != nil {
			p.cfg.OnCommit()
		}
	}
}

// HighWatermark is the offset after the last committed batch this replica applied: FETCH
// serves only offsets below it, which no later leader can replace. It never moves back.
// Safe for concurrent use; lock-free.
func (p *Partition) HighWatermark() int64 { return p.hw.Load() }

// Log is the segment log, for FETCH below HighWatermark (Read, sendfile). Never write it.
func (p *Partition) Log() *log.Log { return p.st.Log() }

// Replica is the partition's Raft replica, for the broker's replica.Router.
func (p *Partition) Replica() *replica.Replica { return p.rep }

// Step hands a message from a peer to the replica (replica.Replica.Step).
func (p *Partition) Step(m raftpb.Message) { p.rep.Step(m) }

// ReportUnreachable tells the replica a message to node was lost.
func (p *Partition) ReportUnreachable(node uint64) { p.rep.ReportUnreachable(node) }

// Close stops the partition: waiting batches end with ErrMaybeStored, the producer state is
// checkpointed, the log is synced and closed. Safe to call more than once.
func (p *Partition) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		close(p.stop)
		<-p.done
		<-p.scrubDone
		p.rep.Stop()
		err := p.checkpoint(true)
		if cerr := p.st.Close(); err == nil {
			err = cerr
		}
		p.mu.Lock()
		p.dd.table.Release() // its share of a Budget goes back
		p.mu.Unlock()
		p.closeErr = err
	})
	return p.closeErr
}

func (p *Partition) logf(format string, args ...any) {
	p.cfg.Logf("partition %d (%s): "+format, append([]any{p.cfg.Group, p.cfg.Dir}, args...)...)
}
