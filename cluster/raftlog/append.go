package raftlog

import (
	"fmt"
	"math"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/wire"
)

// Writing the Raft log: Append, ApplySnapshot, and retention that moves the snapshot with
// the log's start.

// Append stores entries, which are consecutive and start at most one past LastIndex. Stored
// entries from entries[0].Index on are replaced: the log is cut there first (TruncateFrom,
// durable on return), as raft replaces only entries that never committed. Entries at or
// below SnapIndex are skipped.
//
// A normal entry with data must hold one format-2 record batch, which is written in place
// (the term into its leader epoch, the index into its raft index, the base offset the log
// assigns) and stored: the caller (the replica, which owns the proposal's bytes) sees those
// fields in the entry afterwards. Entries PrepareAppend wrote those fields into are only
// checked, never written (see PrepareAppend). Other entries become control batches. The log is synced
// before Append returns when Options.SyncEachAppend is set.
//
// Errors: ErrBadEntry (nothing of that entry stored; those before it are), a log error; any
// error is sticky.
func (s *Storage) Append(entries []raftpb.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return s.broken
	}
	first := entries[0].Index
	if first > s.last+1 {
		return s.fail(fmt.Errorf("%w: entry %d after entry %d: a gap", ErrBadEntry, first, s.last))
	}
	if first <= s.st.SnapIndex {
		skip := s.st.SnapIndex + 1 - first
		if skip >= uint64(len(entries)) {
			return nil
		}
		entries, first = entries[skip:], s.st.SnapIndex+1
	}
	if first <= s.last {
		if err := s.truncateFrom(first); err != nil {
			return s.fail(err)
		}
	}
	for i := range entries {
		if err := s.appendOne(&entries[i]); err != nil {
			s.prepared = 0
			return s.fail(err)
		}
	}
	s.prepared = 0
	if s.opts.SyncEachAppend {
		if _, err := s.l.Sync(); err != nil {
			return s.fail(fmt.Errorf("raftlog: sync after appending entries %d-%d: %w", first, s.last, err))
		}
	}
	return nil
}

// PrepareAppend writes into entries what Append would (each normal entry's leader epoch, raft
// index and base offset), so that a leader can send its new entries to the followers before
// it stores them: raft lets the messages of a Ready go out while that Ready's entries are
// being persisted (never before its HardState is). The Append of the same entries that
// follows (before any other write to the Storage) then finds those fields as it would have
// written them and leaves the bytes alone, which the transport may be reading meanwhile; a
// field that differs is an error, not a write.
//
// It reports false, having written nothing the caller may rely on, when entries do not
// simply extend the log (a gap, a replacement of stored entries, entries at or below
// SnapIndex), when one is not an entry Append would store, or when the Storage is broken: the
// caller then appends first and sends after, as without it. Safe for concurrent use.
func (s *Storage) PrepareAppend(entries []raftpb.Entry) bool {
	if len(entries) == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil || entries[0].Index != s.last+1 || entries[0].Index <= s.st.SnapIndex {
		return false
	}
	next := s.l.NextOffset()
	for i := range entries {
		e := &entries[i]
		if e.Index != s.last+1+uint64(i) || e.Term > math.MaxInt32 || e.Term < s.lastTerm {
			return false
		}
		switch {
		case e.Type == raftpb.EntryNormal && len(e.Data) > 0:
			h, err := wire.PeekBatchHeader(e.Data)
			if err != nil || h.Magic != wire.BatchMagic2 || h.Size() != len(e.Data) || h.IsControl() || h.RecordCount == 0 {
				return false // Append refuses it
			}
			wire.SetBatchLeaderEpoch(e.Data, int32(e.Term))
			wire.SetBatchRaftIndex(e.Data, e.Index)
			wire.SetBaseOffset(e.Data, next)
			next += int64(h.RecordCount)
		case e.Type == raftpb.EntryNormal, e.Type == raftpb.EntryConfChange, e.Type == raftpb.EntryConfChangeV2:
			next++ // a control batch of one offset, encoded by Append
		default:
			return false
		}
	}
	s.prepared = entries[len(entries)-1].Index
	return true
}

// truncateFrom cuts the log at entry i (SnapIndex < i <= last). s.mu held.
func (s *Storage) truncateFrom(i uint64) error {
	off, err := s.offsetOf(i)
	if err != nil {
		return err
	}
	return s.truncateAt(i, off)
}

// truncateAt is truncateFrom with entry i's offset known. s.mu held.
func (s *Storage) truncateAt(i uint64, off int64) error {
	prevTerm, err := s.term(i - 1)
	if err != nil {
		return err
	}
	if err := s.l.TruncateFrom(off); err != nil {
		return fmt.Errorf("raftlog: replace entries %d-%d (from offset %d): %w", i, s.last, off, err)
	}
	s.win.truncateFrom(i)
	s.last, s.lastTerm = i-1, prevTerm
	s.prepared = 0
	s.gen++
	if s.cur.valid && s.cur.index > i {
		s.cur.valid = false
	}
	return nil
}

// appendOne stores entry e, the one after the last. s.mu held.
func (s *Storage) appendOne(e *raftpb.Entry) error {
	switch {
	case e.Index != s.last+1:
		return fmt.Errorf("%w: entry %d after entry %d: not consecutive", ErrBadEntry, e.Index, s.last)
	case e.Term > math.MaxInt32:
		return fmt.Errorf("%w: entry %d: term %d does not fit the leader epoch field (at most %d)", ErrBadEntry, e.Index, e.Term, math.MaxInt32)
	case e.Term < s.lastTerm:
		return fmt.Errorf("%w: entry %d: term %d after term %d", ErrBadEntry, e.Index, e.Term, s.lastTerm)
	}
	var (
		batch []byte
		count uint32
		h     wire.BatchHeader
	)
	switch {
	case e.Type == raftpb.EntryNormal && len(e.Data) > 0:
		var err error
		h, err = wire.PeekBatchHeader(e.Data)
		switch {
		case err != nil:
			return fmt.Errorf("%w: entry %d: its data is not a record batch: %w", ErrBadEntry, e.Index, err)
		case h.Magic != wire.BatchMagic2 || h.Size() != len(e.Data) || h.IsControl():
			return fmt.Errorf("%w: entry %d: its data is not one format-2 record batch (magic %d, %d of %d bytes, control %v)",
				ErrBadEntry, e.Index, h.Magic, h.Size(), len(e.Data), h.IsControl())
		}
		batch, count = e.Data, h.RecordCount
	case e.Type == raftpb.EntryNormal, e.Type == raftpb.EntryConfChange, e.Type == raftpb.EntryConfChangeV2:
		s.scratch = wire.AppendControlBatch(s.scratch[:0], uint8(e.Type), e.Data)
		batch, count = s.scratch, 1
	default:
		return fmt.Errorf("%w: entry %d: type %v", ErrBadEntry, e.Index, e.Type)
	}
	if e.Index <= s.prepared && e.Type == raftpb.EntryNormal && len(e.Data) > 0 {
		// PrepareAppend wrote the fields and the bytes may be in flight: check, never write.
		if h.LeaderEpoch != int32(e.Term) || h.RaftIndex != e.Index || h.BaseOffset != s.l.NextOffset() {
			return fmt.Errorf("raftlog: entry %d: prepared as epoch %d, index %d, offset %d; appending it as epoch %d at offset %d",
				e.Index, h.LeaderEpoch, h.RaftIndex, h.BaseOffset, e.Term, s.l.NextOffset())
		}
	} else {
		wire.SetBatchLeaderEpoch(batch, int32(e.Term))
		wire.SetBatchRaftIndex(batch, e.Index)
	}
	if err := s.ep.noteAppend(e.Index, e.Term); err != nil { // before the entry: see epochs.go
		return err
	}
	base, err := s.l.Append(batch, count) // writes the base offset only where it differs
	if err != nil {
		return fmt.Errorf("raftlog: append entry %d: %w", e.Index, err)
	}
	s.win.push(e.Index, entryPos{term: e.Term, off: base, typ: e.Type, cached: true, data: e.Data})
	s.last, s.lastTerm = e.Index, e.Term
	return nil
}

// ApplySnapshot makes snap the replica's state: a follower too far behind, or whose log
// diverged, starts again after the snapshot's index. The log is emptied and starts again at
// the offset the snapshot names (snapdata.go): the leader's offset of the entry after the
// snapshot, so that offsets stay the same on every replica (the partition's messages below
// it are not here until the catch-up from whole segments brings them; see Snapshot).
//
// Crash-safe: the state (index, term, membership, first offset, commit at least the
// snapshot's index) is saved and synced with a reset-pending flag first, then the log is
// reset, then the flag is cleared (synced); Open finishes a reset a crash interrupted.
// Errors: raft.ErrSnapOutOfDate for a snapshot at or below SnapIndex, bad snapshot data
// (nothing changed), a write error (sticky).
func (s *Storage) ApplySnapshot(snap raftpb.Snapshot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, off, err := s.snapshotState(snap)
	if err != nil {
		return err
	}
	return s.restartAt(st, snap.Metadata, off, false, "empty the log for", func() error { return s.l.Reset(off) })
}

// restartAt makes the log start again after snapshot m, at log offset off, with the state
// st (snapshotState's): st is saved and synced with a reset pending (and an install, when
// installing segments), the scrub starts over and the epochs file is emptied (what the log
// holds below the snapshot is not the raft log's: the entries after it record their own
// epochs), fill empties the log or installs the segments, then the flags are cleared
// (synced). What ApplySnapshot and InstallSnapshot share; Open finishes a restart a crash
// interrupted. s.mu is held; a write error breaks the Storage.
func (s *Storage) restartAt(st State, m raftpb.SnapshotMetadata, off int64, installing bool, what string, fill func() error) error {
	st.FirstOffset, st.ResetPending, st.InstallPending = off, true, installing
	st.HardState.Commit = max(st.HardState.Commit, m.Index)
	if err := s.sf.Save(st, true); err != nil {
		return s.fail(fmt.Errorf("raftlog: record the snapshot at %d: %w", m.Index, err))
	}
	s.st = st
	s.gen++
	s.ep.list = nil
	if err := s.ep.save(); err != nil {
		return s.fail(err)
	}
	if err := fill(); err != nil {
		return s.fail(fmt.Errorf("raftlog: %s the snapshot at %d: %w", what, m.Index, err))
	}
	st.ResetPending, st.InstallPending = false, false
	if err := s.sf.Save(st, true); err != nil {
		return s.fail(fmt.Errorf("raftlog: record the snapshot at %d: %w", m.Index, err))
	}
	s.st = st
	s.win.reset()
	s.cur = cursor{}
	s.last, s.lastTerm = m.Index, m.Term
	s.prepared = 0
	return nil
}

// EnforceRetention applies the log's retention (Options.Log.RetentionBytes, RetentionAge)
// to the entries up to applied (the index the owner has applied; never past the commit
// index): whole segments that end at or below entry applied go, oldest first, never the
// active one. Before any leaves the log, the new SnapIndex (the entry before the first one
// kept), its term and the new first offset are saved in the state file, synced; the term is
// read from the log while it still holds that entry. A crash after the save and before the
// files are gone leaves batches below the new first offset, which Open ignores and the next
// retention removes. Call it where the log's retention would be called (the syncer); it
// holds out the other methods while it runs.
//
// (Retention cannot be applied first and followed after: once the segment is gone, so is the
// term of the entry before the new first one, which raft must keep, and a crash between the
// two would leave a log whose start no state file describes.)
func (s *Storage) EnforceRetention(applied uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return s.broken
	}
	applied = min(applied, s.st.HardState.Commit, s.last)
	if applied < s.st.SnapIndex {
		applied = s.st.SnapIndex
	}
	limit, err := s.offsetAfter(applied)
	if err != nil {
		return err
	}
	if err := s.l.EnforceRetentionBelow(limit, s.compactTo); err != nil {
		return fmt.Errorf("raftlog: retention up to entry %d: %w", applied, err)
	}
	return nil
}

// compactTo records that the log will start at offset start: the entry there (LastIndex+1
// when start is NextOffset) becomes the first, and the one before it the snapshot. It runs
// inside the log's retention, before any segment is removed. s.mu held.
func (s *Storage) compactTo(start int64) error {
	if start <= s.st.FirstOffset {
		return nil // leftovers below the raft log
	}
	first := s.last + 1
	if start < s.l.NextOffset() {
		h, path, _, err := s.headerAt(start)
		if err != nil {
			return err
		}
		if h.BaseOffset != start || h.RaftIndex <= s.st.SnapIndex+1 || h.RaftIndex > s.last {
			return fmt.Errorf("%w: %s: the batch at offset %d has raft index %d, outside the raft log (%d, %d]",
				ErrCorrupt, path, h.BaseOffset, h.RaftIndex, s.st.SnapIndex+1, s.last)
		}
		first = h.RaftIndex
	}
	term, err := s.term(first - 1)
	if err != nil {
		return err
	}
	st := s.st
	st.SnapIndex, st.SnapTerm, st.FirstOffset = first-1, term, start
	if err := s.sf.Save(st, true); err != nil {
		return s.fail(fmt.Errorf("raftlog: record the log start at entry %d: %w", first, err))
	}
	s.st = st
	if s.ep.compactTo(first) {
		if err := s.ep.save(); err != nil {
			return s.fail(err)
		}
	}
	s.win.dropThrough(first - 1)
	if s.cur.valid && s.cur.index < first {
		s.cur.valid = false
	}
	s.opts.Log.Logf("raftlog %s: retention: the raft log starts at entry %d (offset %d)", s.dir, first, start)
	return nil
}

// snapshotState checks snap against the Storage (not broken, newer than its snapshot, data
// and term that fit the log) and returns the state that takes it (index, term, membership)
// and the log offset its data names: what ApplySnapshot and InstallSnapshot share. s.mu is
// held; nothing is changed.
func (s *Storage) snapshotState(snap raftpb.Snapshot) (State, int64, error) {
	if s.broken != nil {
		return State{}, 0, s.broken
	}
	m := snap.Metadata
	if m.Index <= s.st.SnapIndex {
		return State{}, 0, raft.ErrSnapOutOfDate
	}
	off, err := decodeSnapshotData(snap.Data)
	if err != nil {
		return State{}, 0, err
	}
	if m.Term > math.MaxInt32 {
		return State{}, 0, fmt.Errorf("%w: snapshot at %d: term %d does not fit the leader epoch field", ErrBadEntry, m.Index, m.Term)
	}
	st := s.st
	st.SnapIndex, st.SnapTerm = m.Index, m.Term
	st.ConfState, st.ConfIndex = m.ConfState, m.Index
	return st, off, nil
}
