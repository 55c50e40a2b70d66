package offsets

import (
	"fmt"
	"sync"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/cluster/raftlog"
)

// storage is an offsets partition's replica.Storage: the Raft log and raft state of a
// raftlog.Storage (each record one stored batch), with the snapshots of the state kept beside
// it in the snapshot file (snapfile.go), as cluster/meta keeps the metadata's: raftlog's own
// snapshots name a log offset for a partition of messages. Snapshot returns the latest state
// snapshot; ApplySnapshot, for a snapshot the leader sent, writes the snapshot file first,
// then empties the log (raftlog.ApplySnapshot), then installs the state: a crash between the
// first two is finished by Open, which finds a snapshot file past the log.
//
// Concurrency: the replica's goroutine calls everything but Snapshot's readers; snap is
// guarded by mu.
type storage struct {
	*raftlog.Storage
	dir string

	mu   sync.Mutex
	snap raftpb.Snapshot // as in the snapshot file; empty when there is none

	// install makes st the store's state (on the replica's goroutine, from ApplySnapshot).
	install func(st *state)
	// confChanged is told of each membership change applied (on the replica's goroutine),
	// after it was saved.
	confChanged func(index uint64)
}

// SetConfState saves the membership after the change at index (raftlog's), then tells the
// store, which snapshots there: raft refuses a snapshot whose membership does not hold its
// receiver, so a replica added by the change must be sent a snapshot as of the change or
// later.
func (s *storage) SetConfState(cs raftpb.ConfState, index uint64) error {
	if err := s.Storage.SetConfState(cs, index); err != nil {
		return err
	}
	s.confChanged(index)
	return nil
}

// Snapshot is the latest state snapshot, or raft.ErrSnapshotTemporarilyUnavailable before the
// first (the log is compacted only behind a snapshot, so raft needs one only after it).
func (s *storage) Snapshot() (raftpb.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if raft.IsEmptySnap(s.snap) {
		return raftpb.Snapshot{}, raft.ErrSnapshotTemporarilyUnavailable
	}
	return s.snap, nil
}

// save makes snap the latest snapshot: the snapshot file, then what Snapshot returns.
func (s *storage) save(snap raftpb.Snapshot) error {
	if err := writeSnapFile(s.dir, snap); err != nil {
		return err
	}
	s.mu.Lock()
	s.snap = snap
	s.mu.Unlock()
	return nil
}

// ApplySnapshot installs a snapshot the leader sent: checked, saved, the log emptied, the
// state installed. Any error stops the replica (a storage error or a snapshot this broker
// cannot read); the snapshot file may then be ahead of the log, which Open finishes.
func (s *storage) ApplySnapshot(snap raftpb.Snapshot) error {
	st, err := decodeState(snap.Data)
	if err != nil {
		return fmt.Errorf("snapshot at %d from the leader: %w", snap.Metadata.Index, err)
	}
	if st.index != snap.Metadata.Index {
		return fmt.Errorf("snapshot at %d from the leader holds the state as of %d", snap.Metadata.Index, st.index)
	}
	snap.Data = append([]byte(nil), snap.Data...) // the message's buffer is not ours to keep
	if err := s.save(snap); err != nil {
		return err
	}
	if err := s.resetLog(snap.Metadata); err != nil {
		return err
	}
	s.install(st)
	return nil
}

// resetLog empties the log for a snapshot at m: it goes on after m.Index.
func (s *storage) resetLog(m raftpb.SnapshotMetadata) error {
	data := raftlog.AppendSnapshotData(nil, s.Log().NextOffset())
	return s.Storage.ApplySnapshot(raftpb.Snapshot{Metadata: m, Data: data})
}

// recover brings the log and the snapshot file together at Open, and returns the index the
// state is applied to (as cluster/meta's storage does):
//   - a log compacted past the snapshot file: the state behind the log is lost (ErrCorrupt);
//   - a snapshot file past the end of the log, or whose entry the log holds with another
//     term: a snapshot from the leader was saved and the log not yet emptied (a crash);
//     finish it;
//   - a commit index below the snapshot (commit indexes are saved without a sync): raise it,
//     since raft may not be told an applied index above its commit; and a term below the
//     snapshot's: raise it, with no vote, as a message of that term would have.
func (s *storage) recover() (applied uint64, err error) {
	rs := s.State()
	m := s.snap.Metadata // zero without a snapshot file
	switch {
	case rs.SnapIndex > m.Index:
		return 0, fmt.Errorf("%w: %s: the log starts after entry %d, but the snapshot file is as of %d (lost or replaced?)",
			ErrCorrupt, s.dir, rs.SnapIndex, m.Index)
	case m.Index == 0:
		return 0, nil
	case rs.SnapIndex == m.Index:
		if rs.SnapTerm != m.Term {
			return 0, fmt.Errorf("%w: %s: the log starts after entry %d of term %d, the snapshot file is of term %d",
				ErrCorrupt, s.dir, m.Index, rs.SnapTerm, m.Term)
		}
	default:
		last, err := s.LastIndex()
		if err != nil {
			return 0, err
		}
		term, terr := s.Term(m.Index)
		if last < m.Index || terr != nil || term != m.Term {
			if err := s.resetLog(m); err != nil {
				return 0, fmt.Errorf("offsets: finish installing the snapshot at %d: %w", m.Index, err)
			}
		}
	}
	hs, _, err := s.InitialState()
	if err != nil {
		return 0, err
	}
	fixed := hs
	fixed.Commit = max(hs.Commit, m.Index)
	if hs.Term < m.Term {
		fixed.Term, fixed.Vote = m.Term, 0
	}
	if fixed != hs {
		if err := s.SetHardState(fixed); err != nil {
			return 0, err
		}
	}
	return m.Index, nil
}
