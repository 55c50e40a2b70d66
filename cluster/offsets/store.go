package offsets

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/cluster/replica"
	"github.com/lightq/lightq/cluster/smlog"
)

// Config configures a Store. Dir, NodeID, Group and Sender are required, and Peers when Dir
// holds no store yet (and Join is not set).
type Config struct {
	// Dir holds the store: the Raft log and raft state (LogDirName) and the snapshot file.
	Dir    string
	NodeID uint64 // this broker
	Group  uint64 // the partition's Raft group
	// Peers are the voters a new group starts with (this broker among them), used only when
	// Dir holds nothing yet.
	Peers []uint64
	// Join starts an empty replica that a membership change adds to a running group (Peers
	// is ignored); ignored when Dir holds a store.
	Join   bool
	Sender replica.Sender
	// Logf receives what the store and raft report. Nil: silent.
	Logf          func(format string, args ...any)
	Tick          time.Duration // raft's tick (default 100 ms)
	ElectionTicks int           // ticks without a leader before an election (default 10)
	// SnapshotBytes: once the entries applied since the last snapshot add up to this many
	// bytes and to at least twice the state's size, the state is snapshot and the log behind
	// it removed (default 4 MiB). So the log holds at most about that plus a segment, and a
	// snapshot's cost is spread over at least as many bytes of commits as it writes.
	SnapshotBytes int64
	// SegmentBytes is the size of the log's segments (default 4 MiB).
	SegmentBytes int64
	// MaxEntries bounds the committed offsets the partition holds (default 100,000): the
	// leader refuses a commit of a new key past it (a *LimitError), and past the bytes a
	// snapshot may hold. Keys already held can always be committed again.
	MaxEntries int
	// MaxPending bounds the proposals waiting for their commit (default 4096; past it: ErrBusy),
	// and ProposalTimeout how long one waits before it is answered ErrMaybeStored (default 5 s).
	MaxPending      int
	ProposalTimeout time.Duration
	// OnLeadership, if set, is called when what Leading reports changes (this replica starts
	// or stops leading, or becomes ready), on the replica's goroutine: it must not block.
	OnLeadership func()
}

// LogDirName is the directory of the Raft log inside Config.Dir.
const LogDirName = smlog.LogDirName

var (
	// ErrNotReady: this replica leads, but has not applied everything its predecessors
	// committed yet, so its state may lack commits they answered; nothing done, ask again in
	// a moment (within a round trip of the election). Proposals of an earlier term are never
	// taken either (a *replica.NotLeaderError).
	ErrNotReady = errors.New("offsets: a new leader is applying its predecessors' entries")
	// ErrMaybeStored: the record was proposed and its outcome is unknown here (the
	// leadership was lost, the store closed, or no commit came within ProposalTimeout).
	ErrMaybeStored = errors.New("offsets: outcome unknown, the commit may be stored")
	// ErrNotStored: a later leader replaced the proposal: it is not stored.
	ErrNotStored = errors.New("offsets: replaced by a later leader; not stored")
	// ErrBusy: too many proposals waiting; nothing stored.
	ErrBusy = replica.ErrBusy
	// ErrClosed: the store is closed; nothing stored.
	ErrClosed = errors.New("offsets: store closed")
	// ErrInvalid: a commit of a key or offset that cannot be stored (a bad name, a negative
	// offset); nothing stored.
	ErrInvalid = errors.New("offsets: invalid commit")
	// ErrStalled wraps the error of a committed entry this broker cannot apply (a record of
	// a newer release, a damaged entry): the store applies nothing after it, so that its
	// state never differs from the others', and it takes no commits.
	ErrStalled = errors.New("offsets: applying stalled")
)

// LimitError is a commit of a new key refused because the partition holds its maximum.
type LimitError struct {
	Max int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("offsets: the partition holds %d committed offsets, its limit", e.Max)
}

// Store is this broker's replica of one offsets partition. See the package doc.
type Store struct {
	cfg  Config
	logf func(string, ...any)
	stor *smlog.Storage[*state]
	rep  *replica.Replica

	// mu guards st, the leadership fields, the pending proposals and closed. The replica's
	// goroutine holds it while it applies an entry; no call out is made under it.
	mu       sync.RWMutex
	st       *state
	status   replica.Status
	term     uint64 // the term this replica leads in, 0 when it does not
	ready    bool   // leading, and every entry of earlier terms applied
	pending  map[*pending]struct{}
	newKeys  int   // pending commits of keys the state does not hold
	newBytes int64 // and their size
	stalled  error
	closed   bool

	// Owned by the replica's goroutine.
	sinceSnap int64
	scratch   []byte

	snapshots atomic.Int64 // snapshots taken here
	installed atomic.Int64 // snapshots installed from the leader

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// pending is one proposal waiting for its outcome.
type pending struct {
	p        replica.Proposal
	done     func(error)
	deadline time.Time
	newKey   int64 // the key's size when the state did not hold it, else 0
}

// Open opens (creating) the store in cfg.Dir and starts its replica: the state is the
// snapshot file's, and the committed entries after it are applied again (raft replays them)
// before this replica, if it leads, is ready.
func Open(cfg Config) (*Store, error) {
	if cfg.Dir == "" || cfg.NodeID == 0 || cfg.Group == 0 || cfg.Sender == nil {
		return nil, errors.New("offsets: Dir, NodeID, Group and Sender are required")
	}
	if cfg.SnapshotBytes <= 0 {
		cfg.SnapshotBytes = 4 << 20
	}
	if cfg.SegmentBytes <= 0 {
		cfg.SegmentBytes = 4 << 20
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = 100_000
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 4096
	}
	if cfg.ProposalTimeout <= 0 {
		cfg.ProposalTimeout = 5 * time.Second
	}
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	s := &Store{cfg: cfg, logf: logf, pending: map[*pending]struct{}{}, stop: make(chan struct{}), done: make(chan struct{})}
	stor, st, applied, err := smlog.Open(&snapFormat, cfg.Dir, smlog.Options[*state]{
		SegmentBytes: cfg.SegmentBytes, Logf: logf, Install: s.install, ConfChanged: s.confChanged})
	if err != nil {
		return nil, err
	}
	s.stor, s.st = stor, st
	rep, err := replica.Start(replica.Config{
		ID: cfg.NodeID, Group: cfg.Group, Peers: cfg.Peers, Storage: s.stor, Sender: cfg.Sender,
		Apply: s.apply, Applied: applied, Advanced: s.advanced, Tick: cfg.Tick, ElectionTicks: cfg.ElectionTicks,
		Join: cfg.Join, Logger: replica.LogfLogger{Logf: logf},
	})
	if err != nil {
		stor.Close()
		return nil, fmt.Errorf("offsets: %w", err)
	}
	s.rep = rep
	go s.maintain()
	return s, nil
}

// Replica is the store's replica, for a replica.Router (Add(Config.Group, r)).
func (s *Store) Replica() *replica.Replica { return s.rep }

// Leading reports the term this replica leads the partition in (0: it does not) and whether
// it is ready: it has applied every entry of earlier terms, so its state holds every commit
// its predecessors answered. Only a ready leader takes commits. Safe from any goroutine.
func (s *Store) Leading() (term uint64, ready bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.stalled != nil {
		return s.term, false
	}
	return s.term, s.ready
}

// Leader is the leader this replica knows (0: none now). Safe from any goroutine.
func (s *Store) Leader() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.status.Leader
}

// Status is the replica's status as of its last turn.
func (s *Store) Status() replica.Status { return s.rep.Status() }

// Err is the error that stalled applying (wrapping ErrStalled), or nil.
func (s *Store) Err() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.stalled
}

// Get returns the committed offset of k, as this replica has applied it. Safe from any
// goroutine.
func (s *Store) Get(k Key) (int64, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	off, ok := s.st.offsets[k]
	return off, ok
}

// Range calls fn for every committed offset, in no order, holding the store's read lock: fn
// must not call the Store, and holds up the replica's applying while it runs.
func (s *Store) Range(fn func(k Key, offset int64)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for k, off := range s.st.offsets {
		fn(k, off)
	}
}

// Topics lists the topic creations the partition holds offsets of (in no order).
func (s *Store) Topics() []TopicRef {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]TopicRef, 0, len(s.st.topics))
	for ref := range s.st.topics {
		out = append(out, ref)
	}
	return out
}

// Len is the number of committed offsets held.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.st.offsets)
}

// Commit stores offset for k, proposed for the leadership of term (Leading's): done is
// called once with nil when a majority of the replicas fsynced it and this replica applied
// it (Get then returns it), or with ErrMaybeStored, ErrNotStored or a *replica.NotLeaderError
// (the leadership moved first). An immediate refusal is returned instead, and done is never
// called: a *replica.NotLeaderError (not the leader in term), ErrNotReady, ErrBusy,
// ErrClosed, ErrStalled, ErrInvalid, a *LimitError. done runs on the replica's or the
// store's goroutine (never under a lock of the store) and must not block. Safe from any
// goroutine; it does not block.
func (s *Store) Commit(term uint64, k Key, offset int64, done func(error)) error {
	if err := checkKey(&k, offset); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return s.propose(term, &record{kind: kindCommit, key: k, offset: offset}, done)
}

// Session is the longest session timeout stored for group ref (SetSession), as this
// replica has applied it. Safe from any goroutine.
func (s *Store) Session(ref GroupRef) (time.Duration, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ms, ok := s.st.sessions[ref]
	return time.Duration(ms) * time.Millisecond, ok
}

// Sessions calls fn for every stored group session, in no order, holding the store's read
// lock: fn must not call the Store.
func (s *Store) Sessions(fn func(ref GroupRef, session time.Duration)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for ref, ms := range s.st.sessions {
		fn(ref, time.Duration(ms)*time.Millisecond)
	}
}

// SetSession stores session (rounded up to a millisecond, at most 2^32-1 ms) as group ref's
// longest session timeout unless a longer one is stored (the stored one only grows), proposed and answered as Commit's. A
// new group counts against Config.MaxEntries as a new key does.
func (s *Store) SetSession(term uint64, ref GroupRef, session time.Duration, done func(error)) error {
	ms := min((session+time.Millisecond-1)/time.Millisecond, 1<<32-1)
	if err := checkSession(&ref, uint32(ms)); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return s.propose(term, &record{kind: kindSession, key: Key{Topic: ref.Topic, Created: ref.Created, Group: ref.Group}, session: uint32(ms)}, done)
}

// DropTopic removes every committed offset and session of one creation of a topic (deleted
// from the cluster), as Commit proposes and answers.
func (s *Store) DropTopic(term uint64, ref TopicRef, done func(error)) error {
	return s.propose(term, &record{kind: kindDrop, key: Key{Topic: ref.Topic, Created: ref.Created}}, done)
}

func (s *Store) propose(term uint64, rec *record, done func(error)) error {
	pe := &pending{done: done, deadline: time.Now().Add(s.cfg.ProposalTimeout)}
	pe.p.Data = encodeEntry(rec)
	s.mu.Lock()
	var err error
	switch {
	case s.closed:
		err = ErrClosed
	case s.stalled != nil:
		err = s.stalled
	case term == 0 || s.term != term:
		err = &replica.NotLeaderError{Leader: s.status.Leader}
	case !s.ready:
		err = ErrNotReady
	case len(s.pending) >= s.cfg.MaxPending:
		err = fmt.Errorf("offsets: %d commits waiting: %w", len(s.pending), ErrBusy)
	}
	if err == nil && rec.kind != kindDrop {
		var held bool
		var size int64
		if rec.kind == kindCommit {
			_, held = s.st.offsets[rec.key]
			size = rec.key.size()
		} else {
			ref := GroupRef{rec.key.Topic, rec.key.Created, rec.key.Group}
			_, held = s.st.sessions[ref]
			size = ref.size()
		}
		if !held {
			keys := len(s.st.offsets) + len(s.st.sessions) + s.newKeys
			if keys >= s.cfg.MaxEntries || s.st.bytes+s.newBytes+size > maxStateBytes {
				err = &LimitError{Max: min(s.cfg.MaxEntries, keys)}
			}
			pe.newKey = size
		}
	}
	if err != nil {
		s.mu.Unlock()
		return err
	}
	s.add(pe)
	s.mu.Unlock()
	if err := s.rep.ProposeNotify(&pe.p, term, func(*replica.Proposal) { s.settle(pe) }); err != nil {
		s.mu.Lock()
		s.remove(pe)
		s.mu.Unlock()
		if errors.Is(err, replica.ErrStopped) {
			return ErrClosed
		}
		return err
	}
	return nil
}

// add and remove keep the pending set and its counts. s.mu held.
func (s *Store) add(pe *pending) {
	s.pending[pe] = struct{}{}
	if pe.newKey > 0 {
		s.newKeys++
		s.newBytes += pe.newKey
	}
}

func (s *Store) remove(pe *pending) bool {
	if _, ok := s.pending[pe]; !ok {
		return false
	}
	delete(s.pending, pe)
	if pe.newKey > 0 {
		s.newKeys--
		s.newBytes -= pe.newKey
	}
	return true
}

// settle answers a proposal the replica decided (its goroutine), unless it was answered
// already (a timeout, a leadership change).
func (s *Store) settle(pe *pending) {
	s.mu.Lock()
	ok := s.remove(pe)
	s.mu.Unlock()
	if !ok {
		return
	}
	var nl *replica.NotLeaderError
	switch err := pe.p.Err; {
	case err == nil:
		pe.done(nil)
	case errors.Is(err, replica.ErrReplaced):
		pe.done(ErrNotStored)
	case errors.As(err, &nl):
		pe.done(err)
	default: // stopped, covered by a snapshot
		pe.done(ErrMaybeStored)
	}
}

// apply is the replica's Apply: one committed entry, on the replica's goroutine.
func (s *Store) apply(e raftpb.Entry) {
	// Only this goroutine changes st and stalled, so what is read here stays true.
	s.mu.RLock()
	skip := e.Index <= s.st.index || s.stalled != nil
	s.mu.RUnlock()
	if skip {
		return // in the snapshot the state came from; or stalled
	}
	rec, err := decodeEntry(e.Data)
	if err != nil {
		s.stall(fmt.Errorf("%w: entry %d of term %d: %w", ErrStalled, e.Index, e.Term, err))
		return
	}
	s.mu.Lock()
	s.st.apply(e.Index, &rec)
	due := s.sinceSnap+int64(len(e.Data)) >= max(s.cfg.SnapshotBytes, 2*s.st.bytes)
	s.mu.Unlock()
	s.sinceSnap += int64(len(e.Data))
	if due {
		s.snapshot(e.Index, e.Term)
	}
}

// snapshot saves the state, as of entry index (of term), as the latest snapshot and removes
// the log behind it (replica goroutine). A failure is reported and leaves the previous
// snapshot and the log as they were: the next snapshot tries again.
func (s *Store) snapshot(index, term uint64) {
	s.mu.RLock()
	s.scratch = appendState(s.scratch[:0], s.st)
	s.mu.RUnlock()
	s.sinceSnap = 0
	err := s.stor.Save(index, term, s.scratch) // copies
	if cap(s.scratch) > 4<<20 {
		s.scratch = nil
	}
	if err != nil {
		s.logf("offsets group %d: snapshot at %d: %v", s.cfg.Group, index, err)
		return
	}
	s.snapshots.Add(1)
	if err := s.stor.EnforceRetention(index); err != nil {
		s.logf("offsets group %d: compact the log behind the snapshot at %d: %v", s.cfg.Group, index, err)
	}
}

// confChanged is smlog.Options.ConfChanged: the membership change at index was applied. The state
// moves to that index and is snapshot there, so that a replica the change added can be sent
// a snapshot that holds it.
func (s *Store) confChanged(index uint64) {
	s.mu.Lock()
	stale := index <= s.st.index || s.stalled != nil
	if !stale {
		s.st.index = index
	}
	s.mu.Unlock()
	if stale {
		return
	}
	term, err := s.stor.Term(index)
	if err != nil {
		s.logf("offsets group %d: the membership change at %d: its term: %v", s.cfg.Group, index, err)
		return
	}
	s.snapshot(index, term)
}

// install is smlog.Options.Install: the state of a snapshot from the leader.
func (s *Store) install(st *state) {
	s.mu.Lock()
	s.st = st
	s.mu.Unlock()
	s.sinceSnap = 0
	s.installed.Add(1)
	s.logf("offsets group %d: installed the leader's snapshot as of entry %d", s.cfg.Group, st.index)
}

// advanced follows the replica after each Ready (its goroutine): the leadership, a new
// leader's readiness, and what waits when the leadership moves.
func (s *Store) advanced(st replica.Status) {
	var lead uint64
	if st.IsLeader {
		lead = st.Term
	}
	s.mu.Lock()
	s.status = st
	var abandoned []*pending
	if lead != s.term {
		// Leadership lost or a new term: what waits is decided by a later leader, not here.
		for pe := range s.pending {
			s.remove(pe)
			abandoned = append(abandoned, pe)
		}
	}
	was, wasReady := s.term, s.ready
	s.term = lead
	s.ready = lead != 0 && st.TermStart != 0 && st.Applied >= st.TermStart
	changed := was != s.term || wasReady != s.ready
	s.mu.Unlock()
	for _, pe := range abandoned {
		pe.done(ErrMaybeStored)
	}
	if changed && s.cfg.OnLeadership != nil {
		s.cfg.OnLeadership()
	}
}

// maintain answers proposals whose wait passed ProposalTimeout.
func (s *Store) maintain() {
	defer close(s.done)
	t := time.NewTicker(max(s.cfg.ProposalTimeout/8, 10*time.Millisecond))
	defer t.Stop()
	var expired []*pending
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.mu.Lock()
			for pe := range s.pending {
				if now.After(pe.deadline) {
					s.remove(pe)
					expired = append(expired, pe)
				}
			}
			s.mu.Unlock()
			for i, pe := range expired {
				pe.done(ErrMaybeStored)
				expired[i] = nil
			}
			expired = expired[:0]
		}
	}
}

// stall stops applying for good (see ErrStalled).
func (s *Store) stall(err error) {
	s.logf("offsets group %d: %v: this broker applies no more of it until it runs a release that can", s.cfg.Group, err)
	s.mu.Lock()
	s.stalled = err
	s.mu.Unlock()
	if s.cfg.OnLeadership != nil {
		s.cfg.OnLeadership()
	}
}

// Close stops the replica; waiting commits end with ErrMaybeStored. Safe to call more than
// once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.stop)
		<-s.done
		s.rep.Stop() // settles what waits (ErrStopped)
		s.mu.Lock()
		var left []*pending
		for pe := range s.pending {
			s.remove(pe)
			left = append(left, pe)
		}
		s.mu.Unlock()
		for _, pe := range left {
			pe.done(ErrMaybeStored)
		}
		s.closeErr = s.stor.Close()
	})
	return s.closeErr
}

// ElectionTimeout is the replica's election timeout (Config.Tick times ElectionTicks): a
// leader cut off from a majority steps down within two of it (check-quorum), and a follower
// campaigns no sooner than one after it last heard from the leader.
func (s *Store) ElectionTimeout() time.Duration {
	tick, ticks := s.cfg.Tick, s.cfg.ElectionTicks
	if tick <= 0 {
		tick = 100 * time.Millisecond
	}
	if ticks <= 0 {
		ticks = 10
	}
	return tick * time.Duration(ticks)
}
