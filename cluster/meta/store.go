package meta

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/cluster/replica"
	"github.com/lightq/lightq/cluster/smlog"
	"github.com/lightq/lightq/wire"
)

// Config configures a Store. Dir, NodeID and Sender are required.
type Config struct {
	// Dir holds the store: the Raft log and raft state (LogDirName) and the snapshot file.
	Dir    string
	NodeID uint64
	// Peers are the voters a new cluster's metadata group starts with (this broker among
	// them), used only when Dir holds nothing yet.
	Peers []uint64
	// Join starts a broker with an empty Dir as a new member of a running group (Peers is
	// ignored): it waits until a member adds it (AddMember), then receives the leader's
	// snapshot and log. Ignored when Dir holds a store.
	Join   bool
	Sender replica.Sender
	// Logf receives what the store and raft report (elections, snapshots, a command this
	// broker cannot apply). Nil: silent.
	Logf          func(format string, args ...any)
	Tick          time.Duration // raft's tick (default 100 ms)
	ElectionTicks int           // ticks without a leader before an election (default 10)
	// SnapshotEvery is how many applied commands are between two snapshots (default 1000);
	// after each, the log behind the snapshot is removed, whole segments at a time.
	SnapshotEvery int
	// SegmentBytes is the size of the log's segments (default 4 MiB): the log keeps at least
	// the active one behind a snapshot.
	SegmentBytes int64
	// MaxPending bounds the proposals waiting on this broker (default 1024); past it Propose
	// fails with replica.ErrBusy.
	MaxPending int
}

// LogDirName is the directory of the Raft log inside Config.Dir.
const LogDirName = smlog.LogDirName

var (
	// ErrOutcomeUnknown: Propose stopped waiting (its context ended, or the store closed)
	// after the command was handed to raft: it may yet be applied, or never be. Read the
	// state, or propose again (a repeat is checked like any command: a CreateTopic that was
	// applied the first time gets ErrTopicExists).
	ErrOutcomeUnknown = errors.New("meta: outcome unknown")
	// ErrClosed: the store is closed.
	ErrClosed = errors.New("meta: store closed")
	// ErrStalled wraps the error of a committed entry this broker cannot apply (a command of
	// a newer release, a damaged entry): the store applies nothing after it, so that its
	// state never differs from the others', and every Propose fails with it. See Store.Err.
	ErrStalled = errors.New("meta: applying stalled")
)

// Store is this broker's member of the metadata group: the replicated State, proposals from
// any member, snapshots. See the package doc.
//
// Concurrency: every method is safe from any goroutine. Commands are applied on the
// replica's goroutine, which publishes each new State with an atomic store and then wakes
// the Watch channel and the proposer.
type Store struct {
	cfg  Config
	logf func(string, ...any)
	stor *smlog.Storage[*State]
	rep  *replica.Replica

	state atomic.Pointer[State]
	done  chan struct{} // closed by Close

	mu      sync.Mutex
	waiters map[[16]byte]chan outcome // guarded by mu
	changed chan struct{}             // closed at the next publish; guarded by mu
	stalled error                     // sticky; guarded by mu
	closed  bool                      // guarded by mu

	// Owned by the replica's goroutine.
	sinceSnap int
	scratch   []byte

	// replayed is closed once the replica applied what its log had committed at Open
	// (replayTo): until then State lags what this broker knew when it stopped.
	replayed     chan struct{}
	replayTo     uint64
	replayedOnce sync.Once

	snapshots atomic.Int64 // snapshots taken here
	installed atomic.Int64 // snapshots installed from the leader
}

type outcome struct {
	res Result
	err error
}

// Open opens (creating) the store in cfg.Dir and starts its member of the metadata group:
// the state is the snapshot file's, and the committed entries after it are applied again
// (raft replays them) before the state is current. A new Dir starts a new group of
// cfg.Peers.
func Open(cfg Config) (*Store, error) {
	if cfg.Dir == "" || cfg.NodeID == 0 || cfg.Sender == nil {
		return nil, errors.New("meta: Dir, NodeID and Sender are required")
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.SnapshotEvery <= 0 {
		cfg.SnapshotEvery = 1000
	}
	if cfg.SegmentBytes <= 0 {
		cfg.SegmentBytes = 4 << 20
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 1024
	}
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	s := &Store{cfg: cfg, logf: logf, done: make(chan struct{}), waiters: map[[16]byte]chan outcome{}, changed: make(chan struct{})}
	stor, st, applied, err := smlog.Open(&snapFormat, cfg.Dir, smlog.Options[*State]{
		SegmentBytes: cfg.SegmentBytes, Logf: logf, Install: s.install, ConfChanged: s.confChanged})
	if err != nil {
		return nil, err
	}
	s.stor = stor
	s.state.Store(st)
	s.replayed = make(chan struct{})
	if hs, _, err := stor.InitialState(); err == nil && hs.Commit > applied {
		s.replayTo = hs.Commit
	} else {
		close(s.replayed)
		s.replayedOnce.Do(func() {})
	}
	rep, err := replica.Start(replica.Config{
		ID: cfg.NodeID, Group: Group, Peers: cfg.Peers, Storage: s.stor, Sender: cfg.Sender,
		Apply: s.apply, Applied: applied, Tick: cfg.Tick, ElectionTicks: cfg.ElectionTicks,
		Advanced:         s.advanced,
		ForwardProposals: true, Join: cfg.Join, LostCommit: stor.LostCommit(), Logger: replica.LogfLogger{Logf: logf, Verbose: true},
	})
	if err != nil {
		stor.Close()
		return nil, fmt.Errorf("meta: %w", err)
	}
	s.rep = rep
	return s, nil
}

// Replayed is closed once this member has applied every entry its log had committed when it
// opened (at once for a new or fully applied one): a broker waits for it before it serves,
// so that a restart does not answer for a while as if the cluster had no topics.
func (s *Store) Replayed() <-chan struct{} { return s.replayed }

// advanced is the replica's Advanced callback: it closes replayed once applied reaches
// replayTo.
func (s *Store) advanced(st replica.Status) {
	if st.Applied >= s.replayTo {
		s.replayedOnce.Do(func() { close(s.replayed) })
	}
}

// State is the current state: immutable, safe to keep and read from any goroutine.
func (s *Store) State() *State { return s.state.Load() }

// Watch returns a channel closed when the state next changes (any applied entry, a refused
// command included, or an installed snapshot). Take the channel before reading State, so
// that no change falls between: for { ch := s.Watch(); reconcile(s.State()); <-ch }.
func (s *Store) Watch() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Replica is the store's member of the metadata group, for a replica.Router (Add(Group, r)).
func (s *Store) Replica() *replica.Replica { return s.rep }

// Step hands a message from a peer to the metadata group (what the Router does).
func (s *Store) Step(m raftpb.Message) { s.rep.Step(m) }

// ReportUnreachable tells raft a message to node was lost.
func (s *Store) ReportUnreachable(node uint64) { s.rep.ReportUnreachable(node) }

// Status is the metadata group's status as this member sees it.
func (s *Store) Status() replica.Status { return s.rep.Status() }

// Err is the error that stalled applying (wrapping ErrStalled), or nil.
func (s *Store) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stalled
}

// Close stops the member; waiting proposals end with ErrOutcomeUnknown.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.done)
	s.rep.Stop()
	return s.stor.Close()
}

// Propose proposes cmd on this member (any member: a follower's proposal goes to the leader)
// and waits until this broker has applied it, so that State reflects it when Propose returns.
// It returns the command's Result, or its refusal (an error wrapping ErrInvalid,
// ErrTopicExists, ...: the same on every member). A command invalid on its own is refused
// before it is proposed.
//
// A forwarded proposal can be lost without a word (the leader it went to stopped, or lost its
// leadership before the entry committed, or the link dropped it), so while it waits Propose
// proposes the command again, with the same request id, when this member sees a new leader or
// term, and every 2 election timeouts: apply recognises the id and applies the command once
// (within the last 1024 commands: see the package doc). While no leader is known it waits for
// one. When ctx ends or the store closes first, the error wraps ErrOutcomeUnknown: the command
// may still be applied, or never be.
//
// Safe from any goroutine; it blocks (on the network and the leader's fsync).
func (s *Store) Propose(ctx context.Context, cmd Command) (Result, error) {
	if err := cmd.check(); err != nil {
		return Result{}, err
	}
	var id [16]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand)
	// Each attempt gets its own bytes: raftlog writes the index and term into the entry's
	// data in place, and an earlier attempt's entry may still be in raft's hands.
	attempt := func() error {
		data, err := encodeEntry(id, cmd)
		if err != nil {
			return err
		}
		return s.handOver(ctx, data)
	}
	ch := make(chan outcome, 1)
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return Result{}, ErrClosed
	case s.stalled != nil:
		err := s.stalled
		s.mu.Unlock()
		return Result{}, err
	case len(s.waiters) >= s.cfg.MaxPending:
		s.mu.Unlock()
		return Result{}, fmt.Errorf("meta: %d proposals waiting: %w", len(s.waiters), replica.ErrBusy)
	}
	s.waiters[id] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.waiters, id)
		s.mu.Unlock()
	}()
	if err := attempt(); err != nil {
		return Result{}, err
	}
	tick := time.NewTicker(s.cfg.Tick)
	defer tick.Stop()
	seen, ticks := s.rep.Status(), 0
	retryTicks := 2 * s.electionTicks()
	for {
		select {
		case o := <-ch:
			return o.res, o.err
		case <-ctx.Done():
			return Result{}, fmt.Errorf("%w: %w", ErrOutcomeUnknown, ctx.Err())
		case <-s.done:
			return Result{}, fmt.Errorf("%w: %w", ErrOutcomeUnknown, ErrClosed)
		case <-tick.C:
		}
		ticks++
		st := s.rep.Status()
		if ticks < retryTicks && (st.Leader == 0 || st.Leader == seen.Leader && st.Term == seen.Term) {
			continue
		}
		seen, ticks = st, 0
		if err := attempt(); err != nil {
			return Result{}, fmt.Errorf("%w: proposed, then %w", ErrOutcomeUnknown, err)
		}
	}
}

func (s *Store) electionTicks() int {
	if s.cfg.ElectionTicks > 0 {
		return s.cfg.ElectionTicks
	}
	return 10 // replica's default
}

// handOver gives data to raft, again each tick while raft drops it unsent (no leader known,
// a leader transfer, the queue full), until ctx ends.
func (s *Store) handOver(ctx context.Context, data []byte) error {
	var timer *time.Timer
	for {
		p, err := s.rep.Propose(data)
		if err == nil {
			select {
			case <-p.Done():
				err = p.Err
			case <-ctx.Done():
				return fmt.Errorf("%w: %w", ErrOutcomeUnknown, ctx.Err())
			}
		}
		var nl *replica.NotLeaderError
		switch {
		case err == nil:
			return nil
		case errors.Is(err, replica.ErrStopped):
			return ErrClosed
		case !errors.As(err, &nl) && !errors.Is(err, replica.ErrBusy):
			return err
		}
		if timer == nil {
			timer = time.NewTimer(s.cfg.Tick)
			defer timer.Stop()
		} else {
			timer.Reset(s.cfg.Tick)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			return fmt.Errorf("meta: not proposed (%v): %w", err, ctx.Err())
		case <-s.done:
			return ErrClosed
		}
	}
}

// encodeEntry is the Raft entry of a command: a format-2 batch of one record whose value is
// the command (what raftlog stores; the raft index and term go into its header).
func encodeEntry(id [16]byte, cmd Command) ([]byte, error) {
	value := AppendCommand(nil, id, cmd)
	if len(value) > MaxCommand-1024 {
		return nil, fmt.Errorf("%w: a command of %d bytes, limit %d", ErrInvalid, len(value), MaxCommand-1024)
	}
	var bb wire.BatchBuilder
	bb.SetMagic(wire.BatchMagic2)
	bb.Append(time.Now().UnixMilli(), nil, value, nil)
	b, err := bb.Finish(wire.CodecNone, nil)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(b), nil
}

// decodeEntry decodes a committed entry's command.
func decodeEntry(data []byte) ([16]byte, Command, error) {
	bt, err := wire.ParseBatch(data, MaxCommand)
	if err != nil {
		return [16]byte{}, nil, fmt.Errorf("%w entry: %w", ErrMalformed, err)
	}
	if bt.RecordCount != 1 || bt.Codec() != wire.CodecNone {
		return [16]byte{}, nil, fmt.Errorf("%w entry: %d records, codec %v; want one uncompressed", ErrMalformed, bt.RecordCount, bt.Codec())
	}
	it := wire.NewRecordIter(bt.Records, bt.RecordCount, bt.BaseOffset, bt.FirstTimestamp)
	var rec wire.Record
	if !it.Next(&rec) {
		return [16]byte{}, nil, fmt.Errorf("%w entry: %v", ErrMalformed, it.Err())
	}
	return DecodeCommand(rec.Value)
}

// apply is the replica's Apply: one committed entry, on the replica's goroutine.
func (s *Store) apply(e raftpb.Entry) {
	cur := s.state.Load()
	if e.Index <= cur.index || s.Err() != nil {
		return // in the snapshot the state came from; or stalled
	}
	id, cmd, err := decodeEntry(e.Data)
	if err != nil {
		s.stall(fmt.Errorf("%w: entry %d of term %d: %w", ErrStalled, e.Index, e.Term, err))
		return
	}
	st, res, aerr := Apply(cur, e.Index, id, cmd)
	s.publish(st)
	s.mu.Lock()
	ch := s.waiters[id]
	delete(s.waiters, id) // a duplicate delivery finds no one
	s.mu.Unlock()
	if ch != nil {
		ch <- outcome{res, aerr}
	}
	s.sinceSnap++
	if s.sinceSnap >= s.cfg.SnapshotEvery {
		s.sinceSnap = 0
		s.snapshot(st, e)
	}
}

// snapshot saves st, as of entry e, as the latest snapshot and removes the log behind it.
// A failure is reported and leaves the previous snapshot and the log as they were: the next
// snapshot tries again.
func (s *Store) snapshot(st *State, e raftpb.Entry) {
	s.scratch = appendState(s.scratch[:0], st)
	if err := s.stor.Save(e.Index, e.Term, s.scratch); err != nil {
		s.logf("meta: snapshot at %d: %v", e.Index, err)
		return
	}
	s.snapshots.Add(1)
	if err := s.stor.EnforceRetention(e.Index); err != nil {
		s.logf("meta: compact the log behind the snapshot at %d: %v", e.Index, err)
	}
}

// confChanged is smlog.Options.ConfChanged: the membership change at index was applied. The state
// moves to that index (nothing else changes) and is snapshot there, so that a member the
// change added can be sent a snapshot that holds it (see smlog.Storage.SetConfState).
func (s *Store) confChanged(index uint64) {
	cur := s.state.Load()
	if index <= cur.index || s.Err() != nil {
		return
	}
	term, err := s.stor.Term(index)
	if err != nil {
		s.logf("meta: the membership change at %d: its term: %v", index, err)
		return
	}
	st := cur.at(index)
	s.publish(st)
	s.sinceSnap = 0
	s.snapshot(st, raftpb.Entry{Index: index, Term: term})
}

// install is smlog.Options.Install: the state of a snapshot from the leader.
func (s *Store) install(st *State) {
	s.installed.Add(1) // before the state shows it
	s.publish(st)
	s.sinceSnap = 0
	s.logf("meta: installed the leader's snapshot as of entry %d", st.index)
	// A proposal of this broker applied within the snapshot gets no result of its own.
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, ch := range s.waiters {
		if st.seen(id) {
			delete(s.waiters, id)
			ch <- outcome{Result{}, fmt.Errorf("%w: applied within a snapshot from the leader; whether it was refused is not known here", ErrOutcomeUnknown)}
		}
	}
}

func (s *Store) publish(st *State) {
	s.state.Store(st)
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// stall stops applying for good (see ErrStalled) and fails every waiting proposal.
func (s *Store) stall(err error) {
	s.logf("meta: %v: this broker applies no more metadata until it runs a release that can", err)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stalled = err
	for id, ch := range s.waiters {
		delete(s.waiters, id)
		ch <- outcome{Result{}, err}
	}
}
