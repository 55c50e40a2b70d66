package raftlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/log"
	"github.com/lightq/lightq/log/vfs"
	"github.com/lightq/lightq/wire"
)

// Storage is one replica's Raft log and raft state, with the partition's segment log as the
// Raft log: the replica.Storage (raft.Storage plus the writes a Ready asks for) of a
// replicated partition.
//
// # One entry, one batch
//
// Every Raft entry is one stored batch, whose leader epoch is the entry's term and whose raft
// index is the entry's index (format 2, wire/batch.go): the index and term of any entry come
// from the batch, and nothing is kept beside the log but the state file. A normal entry with
// data holds a format-2 record batch (the PRODUCE batch the leader proposed), which Append
// stores in place: it writes the term, the index and the base offset the log assigns into
// the entry's own bytes, and every replica stores byte-identical batches, since each assigns
// the same offsets to the same log prefix. Entries without messages (a new leader's empty
// entry, membership changes) are stored as control batches (wire/control.go), one offset
// each.
//
// # Index and offset
//
// Both grow together, so an entry is found by its offset. The most recent Options.Window
// entries keep their term and offset in memory, and those Append stored keep their data too,
// up to Options.CacheBytes (raft reads every entry again to apply it once committed: from
// memory, not the disk); a cursor remembers where the last Entries
// ended, so a follower catching up (Entries from lo, then from the previous hi) reads on
// without a search; anything else is a binary search over offsets reading batch headers.
// FirstIndex is SnapIndex+1 and Term(SnapIndex) is SnapTerm, from the state file.
//
// # Durability
//
// Append syncs the log when Options.SyncEachAppend is set (fsync=always); otherwise the
// owner syncs Log() on the partition's schedule, and raft's acknowledgements then mean
// what that policy means. SetHardState saves the state file, synced when the term or the
// vote changed (etcd's MustSync; a commit index alone is not synced: raft learns it again).
// A failed write makes the Storage refuse everything afterwards (sticky): raft must not vote
// or acknowledge from a state it could not record.
//
// # Idempotence
//
// The log is opened without deduplication (log.ProducerOptions.Disabled): a follower stores
// whatever raft commits to its log and must refuse nothing for idempotence reasons, and a
// producer-state expiry by wall clock would make replicas disagree. The leader deduplicates
// before it proposes; cluster/partition keeps the producer state, rebuilt on every replica
// from committed entries (so that a new leader has it), and adds it to the snapshots.
//
// # Concurrency
//
// Every method is safe for concurrent use (one mutex); raft calls them from the replica's
// goroutine. Log() may be read concurrently (FETCH); the owner must not write it except
// through Storage, but may Sync it.
type Storage struct {
	mu   sync.Mutex
	dir  string
	opts Options
	l    *log.Log
	sf   *StateFile
	st   State // as saved (or being saved)

	last      uint64 // index of the last entry; SnapIndex when there is none
	lastTerm  uint64
	win       window
	cur       cursor
	broken    error  // sticky, set by a failed write
	scratch   []byte // control batch encoding
	rbuf      []byte // header walks
	hdr       [wire.MaxBatchHeaderSize]byte
	probes    int // headers read by searches, for tests
	cacheHits int // Entries served from the cache, for tests
	// lostCommit is the commit index the state file recorded when Open found the log
	// shorter (entries lost to a power loss under fsync=never, or to damage): the replica
	// acknowledged entries it no longer holds (see LostCommit). 0 when none.
	lostCommit uint64
}

// Options configure a Storage. The zero value gives the defaults.
type Options struct {
	// Log configures the segment log (its FS is the state file's too). Producers must be
	// zero: the log is opened without deduplication (see the type's doc).
	Log log.Options
	// SyncEachAppend makes Append fsync the log before it returns: the partition's fsync
	// policy says every write is synced.
	SyncEachAppend bool
	// Window is how many of the most recent entries keep their term and offset in memory
	// (16 bytes each); default 512.
	Window int
	// ReadBytes bounds what one read of the log takes into memory in Entries; default 1 MiB
	// (at least one batch is read).
	ReadBytes int
	// CacheBytes bounds the data of the recent entries (among the Window last) that Append
	// keeps in memory, so that Entries serves them without reading the log: raft reads every
	// entry again to apply it once committed, and to send it to a follower a little behind.
	// Default 4 MiB; negative: none.
	CacheBytes int
	// CacheAppliedBytes bounds the cache once its oldest entries were applied (Applied): a
	// group may cache what it has not applied yet up to CacheBytes, and keep this much after
	// (default and at most CacheBytes).
	CacheAppliedBytes int
}

// StateFileName is the raft state file in a replica's directory, beside the segments.
const StateFileName = "raft.state"

const (
	defaultWindow     = 512
	defaultReadBytes  = 1 << 20
	defaultCacheBytes = 4 << 20
)

// Errors. Every error Storage returns but raft's own (ErrCompacted, ErrUnavailable,
// ErrSnapOutOfDate) wraps one of these, a log error, or a state file error.
var (
	// ErrCorrupt: the log does not hold a Raft log: raft indexes that are not consecutive, a
	// batch that is not format 2, a first batch that is not the entry after the snapshot. The
	// error names the segment file and offset.
	ErrCorrupt = errors.New("raftlog: corrupt raft log")
	// ErrBadEntry: Append was given an entry it cannot store (a term over MaxInt32, data that
	// is not a format-2 record batch, an unknown type, an index out of sequence).
	ErrBadEntry = errors.New("raftlog: entry cannot be stored")
)

// Open opens (creating) the replica's Storage in dir: the segment log and raft.state. It
// finishes a reset a crash interrupted (ApplySnapshot), checks that the first batch of the
// raft log is entry SnapIndex+1, and walks the batch headers of the active segment (what the
// log's own recovery read), checking that their raft indexes are consecutive and loading the
// window; the last batch gives LastIndex. Sealed segments are checked when read.
func Open(dir string, opts Options) (*Storage, error) {
	if opts.Log.Producers != (log.ProducerOptions{}) {
		return nil, errors.New("raftlog: Options.Log.Producers must be zero: a replica's log does not deduplicate")
	}
	if opts.Window <= 0 {
		opts.Window = defaultWindow
	}
	if opts.ReadBytes <= 0 {
		opts.ReadBytes = defaultReadBytes
	}
	if opts.CacheBytes == 0 {
		opts.CacheBytes = defaultCacheBytes
	}
	if opts.CacheAppliedBytes <= 0 {
		opts.CacheAppliedBytes = opts.CacheBytes
	}
	fsys := opts.Log.FS
	if fsys == nil {
		fsys = vfs.OS
	}
	if opts.Log.Logf == nil {
		opts.Log.Logf = func(string, ...any) {}
	}
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("raftlog: %w", err)
	}
	sf, st, err := OpenState(fsys, filepath.Join(dir, StateFileName))
	if err != nil {
		return nil, err
	}
	lopts := opts.Log
	lopts.Producers.Disabled = true
	l, err := log.Open(dir, lopts)
	if err != nil {
		sf.Close()
		return nil, err
	}
	s := &Storage{dir: dir, opts: opts, l: l, sf: sf, st: st, win: newWindow(opts.Window, opts.CacheBytes, opts.CacheAppliedBytes)}
	if err := s.recover(); err != nil {
		l.Close()
		sf.Close()
		return nil, err
	}
	return s, nil
}

// recover brings the state and the log together at Open.
func (s *Storage) recover() error {
	st := &s.st
	switch {
	case st.ResetPending:
		// ApplySnapshot recorded a snapshot and did not finish emptying the log.
		s.opts.Log.Logf("raftlog %s: finishing the reset to offset %d of a snapshot at index %d", s.dir, st.FirstOffset, st.SnapIndex)
		if err := s.l.Reset(st.FirstOffset); err != nil {
			return err
		}
		st.ResetPending = false
		if err := s.sf.Save(*st, true); err != nil {
			return err
		}
	case !s.sf.Saved():
		if s.l.StartOffset() != s.l.NextOffset() {
			return fmt.Errorf("%w: %s holds offsets [%d, %d) but no raft state: not a replica's log, or its %s was lost",
				ErrCorrupt, s.dir, s.l.StartOffset(), s.l.NextOffset(), StateFileName)
		}
		st.FirstOffset = s.l.NextOffset()
		if err := s.sf.Save(*st, true); err != nil { // from now on the directory is a replica's
			return err
		}
	case st.FirstOffset < 0: // a version-1 state file: the raft log started at the log's start
		st.FirstOffset = s.l.StartOffset()
	}
	start, next := s.l.StartOffset(), s.l.NextOffset()
	if next > start && !s.l.InActiveSegment(next-1) {
		// An empty active segment after sealed ones: a crash after a roll created it and
		// before the batch that caused the roll was written. Remove it, so that the next
		// entry goes where it goes on a replica that never rolled there (the next entry may
		// be another, smaller one: the segment files of replicas stay byte-identical).
		if err := s.l.TruncateFrom(next); err != nil {
			return err
		}
	}
	if st.FirstOffset < start || st.FirstOffset > next {
		return fmt.Errorf("%w: %s: the raft log starts at offset %d (entry %d), but the log holds [%d, %d)",
			ErrCorrupt, s.dir, st.FirstOffset, st.SnapIndex+1, start, next)
	}
	s.last, s.lastTerm = st.SnapIndex, st.SnapTerm
	if st.FirstOffset < next {
		h, path, _, err := s.headerAt(st.FirstOffset)
		if err != nil {
			return err
		}
		if h.BaseOffset != st.FirstOffset || h.RaftIndex != st.SnapIndex+1 {
			return fmt.Errorf("%w: %s: the batch at offset %d has raft index %d, want %d (the entry after the snapshot at %d, at offset %d)",
				ErrCorrupt, path, h.BaseOffset, h.RaftIndex, st.SnapIndex+1, st.SnapIndex, st.FirstOffset)
		}
		if err := s.walkTail(); err != nil {
			return err
		}
	}
	if hs := &st.HardState; hs.Commit > s.last || hs.Commit < st.SnapIndex {
		// Entries that the fsync policy left unsynced were lost with the power while a
		// later synced save (a vote) recorded their commit: raft must start within the log.
		s.opts.Log.Logf("raftlog %s: commit index %d outside the log [%d, %d]: using %d", s.dir, hs.Commit, st.SnapIndex, s.last, min(max(hs.Commit, st.SnapIndex), s.last))
		if hs.Commit > s.last {
			s.lostCommit = hs.Commit
		}
		hs.Commit = min(max(hs.Commit, st.SnapIndex), s.last)
	}
	return nil
}

// CorruptEntryError is an entry whose stored batch is damaged (errors.Is ErrCorrupt): its
// index and offset say where a replica may cut its log (CutDamaged) and get the rest again
// from its peers.
type CorruptEntryError struct {
	Index  uint64
	Offset int64
	Path   string
	Reason string
}

func (e *CorruptEntryError) Error() string {
	return fmt.Sprintf("%v: %s: batch at offset %d (entry %d): %s", ErrCorrupt, e.Path, e.Offset, e.Index, e.Reason)
}

func (e *CorruptEntryError) Unwrap() error { return ErrCorrupt }

// CutDamaged cuts the log at entry i, committed or not, because its batch is damaged: this
// replica loses entries it had acknowledged, which LostCommit reports from then on (its
// commit index is lowered to the log's end in memory, as Open does for a short log), and
// its peers bring them back. Call it before the replica starts. i must be after the
// snapshot.
func (s *Storage) CutDamaged(i uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i <= s.st.SnapIndex || i > s.last {
		return fmt.Errorf("raftlog %s: cannot cut at entry %d: the log holds entries %d-%d after its snapshot", s.dir, i, s.st.SnapIndex+1, s.last)
	}
	if err := s.truncateFrom(i); err != nil {
		return err
	}
	if hs := &s.st.HardState; hs.Commit > s.last {
		s.lostCommit = max(s.lostCommit, hs.Commit)
		hs.Commit = s.last
	}
	return nil
}

// LostCommit is the commit index this replica had recorded before Open found its log ending
// below it, 0 when the log holds everything it committed. Such a replica acknowledged
// entries it lost: it must not vote until it holds them again (replica.Config.LostCommit),
// and its leader must forget what it acknowledged (see cluster/replica).
func (s *Storage) LostCommit() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lostCommit
}

// InitialState returns the saved HardState and ConfState.
func (s *Storage) InitialState() (raftpb.HardState, raftpb.ConfState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.HardState, s.st.ConfState, s.broken
}

// FirstIndex is SnapIndex+1: the first entry the log holds (or would hold).
func (s *Storage) FirstIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.SnapIndex + 1, s.broken
}

// LastIndex is the index of the last entry (SnapIndex when the log holds none).
func (s *Storage) LastIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, s.broken
}

// Term returns the term of entry i, in [FirstIndex()-1, LastIndex()]: raft.ErrCompacted below,
// raft.ErrUnavailable above.
func (s *Storage) Term(i uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return 0, s.broken
	}
	return s.term(i)
}

// term is Term with s.mu held.
func (s *Storage) term(i uint64) (uint64, error) {
	switch {
	case i < s.st.SnapIndex:
		return 0, raft.ErrCompacted
	case i == s.st.SnapIndex:
		return s.st.SnapTerm, nil
	case i > s.last:
		return 0, raft.ErrUnavailable
	case i == s.last:
		return s.lastTerm, nil
	}
	if p, ok := s.win.get(i); ok {
		return p.term, nil
	}
	if s.cur.valid && s.cur.index == i+1 {
		return s.cur.prevTerm, nil
	}
	_, term, err := s.locate(i)
	return term, err
}

// OffsetAfter is the offset after entry i, for i in [SnapIndex, LastIndex]: where entry i+1
// is, or will be. For the commit index it is the partition's high watermark: a FETCH may
// read below it, and no batch below it is ever replaced. raft.ErrCompacted below SnapIndex,
// raft.ErrUnavailable past LastIndex.
func (s *Storage) OffsetAfter(i uint64) (int64, error) {
	return s.offsetAfterApplied(i, false)
}

// Applied says the entries up to i were applied: the cache keeps at most
// Options.CacheAppliedBytes of them. It returns OffsetAfter(i), which the caller of Applied
// wants too (the partition's high watermark), under one lock.
func (s *Storage) Applied(i uint64) (int64, error) {
	return s.offsetAfterApplied(i, true)
}

func (s *Storage) offsetAfterApplied(i uint64, applied bool) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.broken != nil:
		return 0, s.broken
	case i < s.st.SnapIndex:
		return 0, raft.ErrCompacted
	case i > s.last:
		return 0, raft.ErrUnavailable
	}
	if applied && i > s.win.applied {
		s.win.applied = i
		s.win.trim()
	}
	return s.offsetAfter(i)
}

// Snapshot returns the snapshot raft sends a follower that needs entries the log no longer
// holds: its metadata is (SnapIndex, SnapTerm, ConfState), or, when the membership was
// changed after SnapIndex, (ConfIndex, its term, ConfState), so that the membership is the
// one as of the snapshot's index. Its data (snapdata.go) is the offset of the entry after the
// snapshot's index, where the receiver's log goes on.
//
// The contract left for the catch-up from whole segments (a later piece): a receiver of this
// snapshot holds no batch below that offset; the sender is to give it its segments up to the
// snapshot's index (data version 2: the segment list), so that every replica holds the
// partition's messages from the log start on. Until then a replica that received a snapshot
// serves the partition from the snapshot's offset on.
func (s *Storage) Snapshot() (raftpb.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return raftpb.Snapshot{}, s.broken
	}
	idx, term, off := s.st.SnapIndex, s.st.SnapTerm, s.st.FirstOffset
	if ci := s.st.ConfIndex; ci > idx && ci <= s.last {
		var err error
		if term, err = s.term(ci); err != nil {
			return raftpb.Snapshot{}, err
		}
		if off, err = s.offsetAfter(ci); err != nil {
			return raftpb.Snapshot{}, err
		}
		idx = ci
	}
	return raftpb.Snapshot{
		Data:     appendSnapshotData(nil, off),
		Metadata: raftpb.SnapshotMetadata{Index: idx, Term: term, ConfState: s.st.ConfState},
	}, nil
}

// SetHardState saves st: synced when the term or the vote changed, else written without a
// sync (only the commit index moved).
func (s *Storage) SetHardState(hs raftpb.HardState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return s.broken
	}
	if hs == s.st.HardState {
		return nil
	}
	st := s.st
	mustSync := hs.Term != st.HardState.Term || hs.Vote != st.HardState.Vote
	st.HardState = hs
	if err := s.sf.Save(st, mustSync); err != nil {
		return s.fail(fmt.Errorf("raftlog: save hard state: %w", err))
	}
	s.st = st
	return nil
}

// SetConfState records the membership raft reported after applying the membership change
// at index (RawNode.ApplyConfChange), synced: InitialState returns it at the next start, and
// Snapshot sends it.
func (s *Storage) SetConfState(cs raftpb.ConfState, index uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return s.broken
	}
	st := s.st
	st.ConfState, st.ConfIndex = cs, index
	if err := s.sf.Save(st, true); err != nil {
		return s.fail(fmt.Errorf("raftlog: save membership: %w", err))
	}
	s.st = st
	return nil
}

// State is the raft state as saved.
func (s *Storage) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

// Log is the segment log, for reads (FETCH serves it), Sync (the fsync policy's syncer) and
// its offsets. Write it only through Storage.
func (s *Storage) Log() *log.Log { return s.l }

// Dir is the replica's directory.
func (s *Storage) Dir() string { return s.dir }

// Close closes the log (which syncs it) and the state file.
func (s *Storage) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.l.Close()
	if cerr := s.sf.Close(); err == nil {
		err = cerr
	}
	if s.broken == nil {
		s.broken = errClosed
	}
	return err
}

var errClosed = fmt.Errorf("raftlog: closed: %w", os.ErrClosed)

// fail makes err sticky and returns it. s.mu held.
func (s *Storage) fail(err error) error {
	if s.broken == nil {
		s.broken = err
		s.opts.Log.Logf("raftlog %s: refusing further use: %v", s.dir, err)
	}
	return err
}

// decodeEntry turns the stored batch b, which is to be entry index at offset off, into the
// entry it stores, and returns the offset after it. Entry data aliases b. path names the
// segment for errors.
func decodeEntry(b []byte, index uint64, off int64, maxBatch int, path string) (raftpb.Entry, int64, error) {
	bt, err := wire.ParseBatch(b, maxBatch)
	bad := func(format string, args ...any) (raftpb.Entry, int64, error) {
		return raftpb.Entry{}, 0, &CorruptEntryError{Index: index, Offset: off, Path: path, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case err != nil:
		return bad("%v", err)
	case bt.Magic != wire.BatchMagic2:
		return bad("magic %d: not format 2, no raft index", bt.Magic)
	case bt.BaseOffset != off:
		return bad("base offset %d", bt.BaseOffset)
	case bt.RaftIndex != index:
		return bad("raft index %d: the indexes are not consecutive", bt.RaftIndex)
	case bt.LeaderEpoch < 0:
		return bad("leader epoch %d is no term", bt.LeaderEpoch)
	}
	e := raftpb.Entry{Term: uint64(bt.LeaderEpoch), Index: index, Type: raftpb.EntryNormal, Data: b}
	if bt.IsControl() {
		typ, value, err := wire.ParseControl(&bt)
		if err != nil {
			return bad("%v", err)
		}
		switch typ {
		case wire.ControlEmptyEntry:
			if len(value) != 0 {
				return bad("an empty entry's control batch with a %d-byte value", len(value))
			}
			e.Data = nil
		case wire.ControlConfChange, wire.ControlConfChangeV2:
			e.Type, e.Data = raftpb.EntryType(typ), value
		default:
			return bad("control type %d is no raft entry type", typ)
		}
	}
	return e, bt.NextOffset(), nil
}
