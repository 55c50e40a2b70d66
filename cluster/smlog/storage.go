package smlog

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/cluster/raftlog"
	qlog "github.com/lightq/lightq/log"
)

// LogDirName is the directory of the Raft log inside a store's directory.
const LogDirName = "log"

// Options configures Open.
type Options[S any] struct {
	// SegmentBytes is the size of the log's segments: the log keeps at least the active one
	// behind a snapshot.
	SegmentBytes int64
	// Logf receives what the log reports. Nil: silent.
	Logf func(format string, args ...any)
	// Install makes st, from a snapshot the leader sent, the machine's state (required).
	Install func(st S)
	// ConfChanged is told of each membership change applied, after it was saved (required):
	// the machine snapshots there (see Storage.SetConfState).
	ConfChanged func(index uint64)
}

// Storage is a state machine's replica.Storage: the Raft log and raft state of a
// raftlog.Storage, with the snapshots of the state kept beside it in the snapshot file, not
// raftlog's partition snapshots (whose data is a log offset). Snapshot returns the latest
// state snapshot; ApplySnapshot, for a snapshot the leader sent, writes the snapshot file
// first, then empties the log (raftlog.ApplySnapshot), then installs the state: a crash
// between the first two is finished by Open, which finds a snapshot file past the log.
//
// Concurrency: the replica's goroutine calls everything but Snapshot, which is safe from any
// goroutine; snap is guarded by mu because raft may read it while the machine saves a new one
// (both on that goroutine today, but nothing here depends on it).
type Storage[S any] struct {
	*raftlog.Storage
	f   *Format[S]
	dir string

	mu   sync.Mutex
	snap raftpb.Snapshot // as in the snapshot file; empty when there is none

	install     func(st S)
	confChanged func(index uint64)
}

// Open opens (creating) the store in dir: it reads the snapshot file, opens the Raft log in
// dir/LogDirName (each append fsynced; retention removes every whole segment behind the
// snapshot, as EnforceRetention is called with a snapshot's index only) and brings the two
// together (see recover). It returns the state to start from (the file's, or f.Empty()) and
// the index it is applied to, for replica.Config.Applied: raft replays the committed entries
// after it.
func Open[S any](f *Format[S], dir string, o Options[S]) (stor *Storage[S], st S, applied uint64, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, st, 0, fmt.Errorf("%s: %w", f.Name, err)
	}
	snap, st, ok, err := f.ReadFile(dir)
	if err != nil {
		return nil, st, 0, err
	}
	if !ok {
		st = f.Empty()
	}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	rl, err := raftlog.Open(filepath.Join(dir, LogDirName), raftlog.Options{
		SyncEachAppend: true,
		Log:            qlog.Options{SegmentBytes: o.SegmentBytes, RetentionBytes: 1, Logf: logf},
	})
	if err != nil {
		return nil, st, 0, fmt.Errorf("%s: %w", f.Name, err)
	}
	s := &Storage[S]{Storage: rl, f: f, dir: dir, snap: snap, install: o.Install, confChanged: o.ConfChanged}
	applied, err = s.recover()
	if err != nil {
		rl.Close()
		return nil, st, 0, err
	}
	return s, st, applied, nil
}

// SetConfState saves the membership after the change at index (raftlog's), then tells the
// machine, which snapshots there: raft refuses a snapshot whose membership does not hold its
// receiver, so a member added by the change must be sent a snapshot as of the change or later.
func (s *Storage[S]) SetConfState(cs raftpb.ConfState, index uint64) error {
	if err := s.Storage.SetConfState(cs, index); err != nil {
		return err
	}
	s.confChanged(index)
	return nil
}

// Snapshot is the latest state snapshot, or raft.ErrSnapshotTemporarilyUnavailable before the
// first (the log is compacted only behind a snapshot, so raft needs one only after it). Safe
// from any goroutine.
func (s *Storage[S]) Snapshot() (raftpb.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if raft.IsEmptySnap(s.snap) {
		return raftpb.Snapshot{}, raft.ErrSnapshotTemporarilyUnavailable
	}
	return s.snap, nil
}

// Latest is the metadata of the latest snapshot (zero without one). Safe from any goroutine.
func (s *Storage[S]) Latest() raftpb.SnapshotMetadata {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap.Metadata
}

// Save makes data, the state snapshot as of entry index of term, the latest snapshot: the
// snapshot file, then what Snapshot returns. data is copied. The membership saved with it is
// the log's current one, which is index's: the replica saves each membership change when it
// applies it, in log order, and Save is called right after index was applied. On error the
// previous snapshot stays. The log behind it is not removed: call EnforceRetention(index).
func (s *Storage[S]) Save(index, term uint64, data []byte) error {
	return s.save(raftpb.Snapshot{Data: append([]byte(nil), data...), Metadata: raftpb.SnapshotMetadata{
		Index: index, Term: term, ConfState: s.State().ConfState}})
}

func (s *Storage[S]) save(snap raftpb.Snapshot) error {
	if err := s.f.WriteFile(s.dir, snap); err != nil {
		return err
	}
	s.mu.Lock()
	s.snap = snap
	s.mu.Unlock()
	return nil
}

// ApplySnapshot installs a snapshot the leader sent: checked, saved, the log emptied, the
// state installed. Any error stops the replica (it is a storage error or a snapshot this
// broker cannot read); the snapshot file may then be ahead of the log, which Open finishes.
func (s *Storage[S]) ApplySnapshot(snap raftpb.Snapshot) error {
	st, index, err := s.f.Decode(snap.Data)
	if err != nil {
		return fmt.Errorf("snapshot at %d from the leader: %w", snap.Metadata.Index, err)
	}
	if index != snap.Metadata.Index {
		return fmt.Errorf("snapshot at %d from the leader holds the state as of %d", snap.Metadata.Index, index)
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
func (s *Storage[S]) resetLog(m raftpb.SnapshotMetadata) error {
	data := raftlog.AppendSnapshotData(nil, s.Log().NextOffset())
	return s.Storage.ApplySnapshot(raftpb.Snapshot{Metadata: m, Data: data})
}

// recover brings the log and the snapshot file together at Open, and returns the index the
// state is applied to.
//   - A log compacted past the snapshot file: the state behind the log is lost (Corrupt).
//   - A snapshot file past the end of the log, or whose entry the log holds with another
//     term: a snapshot from the leader was saved and the log not yet emptied (a crash);
//     finish it.
//   - A commit index below the snapshot (commit indexes are saved without a sync): raise it,
//     since raft may not be told an applied index above its commit; and a term below the
//     snapshot's (the replica saves the hard state of a Ready after its snapshot, and a crash
//     fell between): raise it, with no vote, as a message of that term would have, so that
//     this member never appends entries of an older term after the snapshot's.
func (s *Storage[S]) recover() (applied uint64, err error) {
	rs := s.State()
	m := s.snap.Metadata // zero without a snapshot file
	switch {
	case rs.SnapIndex > m.Index:
		return 0, fmt.Errorf("%w: %s: the log starts after entry %d, but the snapshot file is as of %d (lost or replaced?)",
			s.f.Corrupt, s.dir, rs.SnapIndex, m.Index)
	case m.Index == 0:
		return 0, nil
	case rs.SnapIndex == m.Index:
		if rs.SnapTerm != m.Term {
			return 0, fmt.Errorf("%w: %s: the log starts after entry %d of term %d, the snapshot file is of term %d",
				s.f.Corrupt, s.dir, m.Index, rs.SnapTerm, m.Term)
		}
	default:
		last, err := s.LastIndex()
		if err != nil {
			return 0, err
		}
		term, terr := s.Term(m.Index)
		if last < m.Index || terr != nil || term != m.Term {
			if err := s.resetLog(m); err != nil {
				return 0, fmt.Errorf("%s: finish installing the snapshot at %d: %w", s.f.Name, m.Index, err)
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
