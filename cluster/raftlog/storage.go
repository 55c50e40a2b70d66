package raftlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

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
// from the batch, and nothing is kept beside the log but the state file and the leader
// epochs file (epochs.go: the first index of each term, which the terms read are checked
// against, since the batch CRC does not cover them). A normal entry with
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
	probes    int     // headers read by searches, for tests
	cacheHits int     // Entries served from the cache, for tests
	ep        *epochs // the leader epochs file (epochs.go)
	// rebuilding: Open found no leader epochs file (or a damaged one) beside a log holding
	// entries, and builds it from the entries its walk reads; those before are not covered.
	rebuilding bool
	gen        uint64 // bumped whenever entries are cut or the log reset (the scrub starts over)
	scrub      scrubPos
	// lostCommit is the commit index the state file recorded when Open found the log
	// shorter (entries lost to a power loss under fsync=never, or to damage): the replica
	// acknowledged entries it no longer holds (see LostCommit). 0 when none.
	lostCommit uint64
	// prepared is the last index PrepareAppend wrote the fields of (0: none): Append verifies
	// those entries' fields instead of writing them, since their bytes may be on their way to
	// the followers. Cleared by Append and by whatever cuts or resets the log.
	prepared uint64
	// openFound counts the damaged batches Open found and cut, by the check they failed
	// (written by Open only); entriesCut the entries damage cuts removed since (Damage).
	openFound  [Checks]int64
	entriesCut atomic.Int64
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
	// CutDamage makes Open cut the log at the first entry of the active segment whose batch
	// header contradicts the raft log (a raft index out of sequence, a term the leader
	// epochs file does not give it), rather than refuse to open: the replica lost the entries
	// from there, which LostCommit reports, and its peers bring them back. Damage found
	// later (sealed segments, when read) is a CorruptEntryError, for CutDamaged.
	CutDamage bool
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
// log's own recovery read), checking that their raft indexes are consecutive and their terms
// the leader epochs file's, and loading the window; the last batch gives LastIndex. A
// damaged header there is cut with Options.CutDamage, else refused (CorruptEntryError).
// Sealed segments are checked when read, and by Scrub.
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
	if err := prepareOpen(fsys, dir, &st); err != nil {
		sf.Close()
		return nil, err
	}
	lopts := opts.Log
	lopts.Producers.Disabled = true
	l, err := log.Open(dir, lopts)
	if err != nil {
		sf.Close()
		return nil, err
	}
	ep, found, err := loadEpochs(fsys, filepath.Join(dir, EpochsFileName))
	if errors.Is(err, ErrBadEpochs) {
		opts.Log.Logf("raftlog %s: %v: building it again from the log", dir, err)
		found, err = false, nil
	}
	if err != nil {
		l.Close()
		sf.Close()
		return nil, err
	}
	s := &Storage{dir: dir, opts: opts, l: l, sf: sf, st: st, ep: ep, win: newWindow(opts.Window, opts.CacheBytes, opts.CacheAppliedBytes)}
	s.rebuilding = !found
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
	case st.ResetPending && st.InstallPending:
		// InstallSnapshot recorded a snapshot; prepareOpen finished moving its segments in.
		s.opts.Log.Logf("raftlog %s: finished installing the segments of a snapshot at index %d (offset %d)", s.dir, st.SnapIndex, st.FirstOffset)
		st.ResetPending, st.InstallPending = false, false
		if err := s.sf.Save(*st, true); err != nil {
			return err
		}
	case st.ResetPending:
		// ApplySnapshot recorded a snapshot and did not finish emptying the log.
		s.opts.Log.Logf("raftlog %s: finishing the reset to offset %d of a snapshot at index %d", s.dir, st.FirstOffset, st.SnapIndex)
		s.ep.list, s.rebuilding = nil, false
		if err := s.ep.save(); err != nil {
			return err
		}
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
	var held, logLast uint64 // the last entry held before a cut (it may have acknowledged it)
	for cuts := 0; ; cuts++ {
		err := s.walk()
		var ce *CorruptEntryError
		if cuts == 0 {
			logLast = s.last // the last entry of what the log's own Open kept
			if errors.As(err, &ce) {
				logLast = s.lastHeld(ce)
			}
		}
		if err == nil || !s.opts.CutDamage || !errors.As(err, &ce) || cuts >= maxOpenCuts {
			if err != nil {
				return err
			}
			break
		}
		// The CRC does not cover a batch's term and index: the log's own recovery kept it.
		s.opts.Log.Logf("raftlog %s: %v: cutting the log there; the other replicas bring the rest back", s.dir, ce)
		s.openFound[ce.Check]++
		held = max(held, s.lastHeld(ce))
		if err := s.l.TruncateFrom(ce.Offset); err != nil {
			return err
		}
	}
	if t := s.l.DamagedTail(); t != nil {
		// The log's Open cut a damaged batch (its CRC) and the valid ones after it.
		held = max(held, logLast+countBatches(t))
		s.openFound[CheckBatch]++
	}
	if held > s.last {
		s.entriesCut.Add(int64(held - s.last))
	}
	if s.ep.dropFrom(s.last+1) || s.rebuilding {
		// Epochs past the log's end: a crash after an epoch was saved and before its entry
		// was stored, or entries lost or cut since.
		if err := s.ep.save(); err != nil {
			return err
		}
		if s.rebuilding && s.last > st.SnapIndex {
			s.opts.Log.Logf("raftlog %s: %s built again from the log: entries %d-%d checked against it, those before by their order only",
				s.dir, EpochsFileName, s.ep.list[0].first, s.last)
		}
		s.rebuilding = false
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
	if held > s.last {
		// The replica may have acknowledged entries its commit index does not reach yet:
		// its leader counts them as stored here, and ignores a refusal below them unless
		// the replica says it lost entries (LostCommit).
		s.lostCommit = max(s.lostCommit, held)
	}
	return nil
}

// countBatches is how many batches b holds, framed by their lengths; where a length cannot
// be trusted, the most the rest could hold.
func countBatches(b []byte) uint64 {
	var n uint64
	for p := 0; p < len(b); {
		size := wire.BatchSize(b[p:])
		if size < wire.BatchHeaderSize || size > len(b)-p {
			return n + uint64((len(b)-p)/wire.BatchHeaderSize2) + 1
		}
		n++
		p += size
	}
	return n
}

// lastHeld is the index of the last entry the log holds, at Open, when the batch ce names
// is damaged (the walk stopped there): the raft index of the log's last batch when it is
// plausible, else the most entries the offsets from the damaged batch on can hold after the
// entry before it. s.mu held, or Open.
func (s *Storage) lastHeld(ce *CorruptEntryError) uint64 {
	next, prev := s.l.NextOffset(), s.last
	if ce.Offset > s.st.FirstOffset { // the walk may have stopped before it read the batch before
		if h, _, nb, err := s.headerAt(ce.Offset - 1); err == nil && nb == ce.Offset {
			prev = max(prev, h.RaftIndex)
		}
	}
	bound := prev + uint64(max(next-ce.Offset, 1))
	if h, _, nb, err := s.headerAt(next - 1); err == nil && nb == next && h.RaftIndex > prev && h.RaftIndex <= bound {
		return h.RaftIndex
	}
	return bound
}

// maxOpenCuts bounds the cuts of damaged entries at Open (each cut walks again).
const maxOpenCuts = 8

// walk checks the raft log's first batch and walks the active segment (walkTail), from an
// empty window: the last entry it reaches is LastIndex. s.mu held, or Open.
func (s *Storage) walk() error {
	st := &s.st
	s.win.reset()
	s.cur = cursor{}
	s.last, s.lastTerm = st.SnapIndex, st.SnapTerm
	if s.rebuilding {
		s.ep.list = s.ep.list[:0]
	}
	if st.FirstOffset >= s.l.NextOffset() {
		return nil
	}
	h, path, _, err := s.headerAt(st.FirstOffset)
	if err != nil {
		return err
	}
	if h.BaseOffset != st.FirstOffset || h.RaftIndex != st.SnapIndex+1 {
		return &CorruptEntryError{Index: st.SnapIndex + 1, Offset: st.FirstOffset, Path: path, Check: CheckRaftIndex,
			Reason: fmt.Sprintf("base offset %d, raft index %d: not the entry after the snapshot at %d", h.BaseOffset, h.RaftIndex, st.SnapIndex)}
	}
	return s.walkTail()
}

// termProblem says what is wrong with term as the term of entry i, "" when nothing: it must
// be the one the leader epochs file gives it, or, for an entry older than the file's first
// epoch, at most that epoch's term (at most the HardState's term when the file has none).
// s.mu held.
func (s *Storage) termProblem(i, term uint64) string {
	if s.rebuilding {
		return ""
	}
	if t, ok := s.ep.termAt(i); ok {
		if term != t {
			return fmt.Sprintf("term %d, but %s says entry %d is in term %d", term, EpochsFileName, i, t)
		}
		return ""
	}
	bound, what := s.st.HardState.Term, "the raft state's term"
	if len(s.ep.list) > 0 {
		bound, what = s.ep.list[0].term, fmt.Sprintf("the term of entry %d", s.ep.list[0].first)
	}
	if term > bound {
		return fmt.Sprintf("term %d is past %s, %d", term, what, bound)
	}
	return ""
}

// CorruptEntryError is an entry whose stored batch is damaged (errors.Is ErrCorrupt): its
// index and offset say where a replica may cut its log (CutDamaged) and get the rest again
// from its peers.
type CorruptEntryError struct {
	Index  uint64
	Offset int64
	Path   string
	Reason string
	Check  Check // the check the batch failed
}

// Check names the check a damaged batch failed (CorruptEntryError.Check), for the counts
// an operator sees: the batch's own CRC protects all but its term and raft index, which
// raftlog checks against the log (epochs.go).
type Check uint8

const (
	// CheckBatch: the batch itself (its CRC, framing, format, base offset, a control
	// batch's content).
	CheckBatch Check = iota
	// CheckRaftIndex: its raft index is not the entry before's + 1 (or the batch after
	// the snapshot is not the entry after it).
	CheckRaftIndex
	// CheckTerm: its term (the leader epoch field) is not the one the leader epochs file
	// gives its index, or goes down.
	CheckTerm
	// Checks is the number of checks.
	Checks
)

func (c Check) String() string {
	switch c {
	case CheckRaftIndex:
		return "raft_index"
	case CheckTerm:
		return "leader_epoch"
	}
	return "batch"
}

func (e *CorruptEntryError) Error() string {
	return fmt.Sprintf("%v: %s: batch at offset %d (entry %d): %s", ErrCorrupt, e.Path, e.Offset, e.Index, e.Reason)
}

func (e *CorruptEntryError) Unwrap() error { return ErrCorrupt }

// CutDamaged cuts the log at the damaged entry ce names (its index and the offset of its
// batch, as found: the log's search by offsets could meet the same damage), committed or
// not: this replica loses entries it had acknowledged, which LostCommit reports from then on
// (its commit index is lowered to the log's end in memory, as Open does for a short log),
// and its peers bring them back. Call it while the replica is stopped. The entry must be
// after the snapshot.
func (s *Storage) CutDamaged(ce *CorruptEntryError) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := ce.Index
	if i <= s.st.SnapIndex || i > s.last || ce.Offset < s.st.FirstOffset || ce.Offset >= s.l.NextOffset() {
		return fmt.Errorf("raftlog %s: cannot cut at entry %d (offset %d): the log holds entries %d-%d after its snapshot, offsets [%d, %d)",
			s.dir, i, ce.Offset, s.st.SnapIndex+1, s.last, s.st.FirstOffset, s.l.NextOffset())
	}
	held := s.last // it may have acknowledged them all (see recover)
	if err := s.truncateAt(i, ce.Offset); err != nil {
		return err
	}
	s.entriesCut.Add(int64(held - s.last))
	s.lostCommit = max(s.lostCommit, held)
	if s.ep.dropFrom(i) {
		if err := s.ep.save(); err != nil {
			return s.fail(err)
		}
	}
	if hs := &s.st.HardState; hs.Commit > s.last {
		s.lostCommit = max(s.lostCommit, hs.Commit)
		hs.Commit = s.last
	}
	return nil
}

// DamageStats are the damage cuts of a Storage since Open.
type DamageStats struct {
	// AtOpen counts the damaged batches Open found and cut, by the check they failed
	// (Check): the active segment's walk (raft index, term) and the log's own recovery,
	// which cuts a batch failing its CRC (with the batches after it).
	AtOpen [Checks]int64
	// EntriesCut counts the raft entries the cuts removed (at Open, and CutDamaged): the
	// entries from the damaged one to the log's end, which the replica's peers bring back.
	// Where Open cannot read what it cut, the most it could hold.
	EntriesCut int64
}

// Damage reports the damage cuts since Open. Safe for concurrent use; no lock (what Open
// wrote is read only after).
func (s *Storage) Damage() DamageStats {
	return DamageStats{AtOpen: s.openFound, EntriesCut: s.entriesCut.Load()}
}

// LostCommit is the commit index this replica had recorded before Open found its log ending
// below it, or the last entry it held before a damaged one was cut (it may have
// acknowledged entries past its own commit index), 0 when the log holds everything it
// committed and acknowledged. Such a replica acknowledged
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
	if t, ok := s.ep.termAt(i); ok {
		// Every stored entry's term agrees with the file (checked when read), and the file
		// needs no read: a term field damaged on disk cannot mislead raft's log matching.
		return t, nil
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
// A receiver of this snapshot (version-1 data) holds no batch below that offset; SnapshotAt
// (catchup.go) makes the snapshot whose receiver fetches the segments below it.
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
	check := CheckBatch
	bad := func(format string, args ...any) (raftpb.Entry, int64, error) {
		return raftpb.Entry{}, 0, &CorruptEntryError{Index: index, Offset: off, Path: path, Reason: fmt.Sprintf(format, args...), Check: check}
	}
	switch {
	case err != nil:
		return bad("%v", err)
	case bt.Magic != wire.BatchMagic2:
		return bad("magic %d: not format 2, no raft index", bt.Magic)
	case bt.BaseOffset != off:
		return bad("base offset %d", bt.BaseOffset)
	case bt.RaftIndex != index:
		check = CheckRaftIndex
		return bad("raft index %d: the indexes are not consecutive", bt.RaftIndex)
	case bt.LeaderEpoch < 0:
		check = CheckTerm
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
