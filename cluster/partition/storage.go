package partition

import (
	"fmt"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/cluster/raftlog"
	"github.com/lightq/lightq/cluster/replica"
)

// storage is the replica's Storage: the segment log as the Raft log (raftlog.Storage), with
// the producer state added to the snapshots it gives and taken from those it installs, so
// that a follower brought up by a snapshot deduplicates as its leader does.
//
// Both methods run on the replica's goroutine (raft asks for a snapshot while it handles a
// message or a tick; the replica installs one while it handles a Ready).
type storage struct {
	*raftlog.Storage
	p *Partition
}

var (
	_ replica.Storage        = (*storage)(nil)
	_ replica.ConfStateSaver = (*storage)(nil)
)

// Snapshot is raftlog's snapshot with the partition state appended to its data: the
// producer state as of the index the table reflects, which is the applied index or later,
// so at or after the snapshot's index (retention removes only applied entries, and a
// membership change is applied when its index is recorded). The receiver skips the entries
// up to that index when it records producers.
//
// With Config.Segments, the snapshot is at the applied index and names this broker as the
// source of the segments below it (raftlog.SnapshotAt): the receiver fetches them (catchUp)
// and holds the partition from this log's start on, as this replica does.
//
// raft does not say which follower the snapshot is for; snapGate replaces it, for a peer
// that cannot fetch segments (a broker of the previous release), with snapshot(false).
func (s *storage) Snapshot() (raftpb.Snapshot, error) {
	return s.snapshot(s.p.cfg.Segments != nil)
}

// snapshot is Snapshot: with segments, at the applied index and naming this broker as the
// source of the segments below it; without, the previous release's (raftlog's Snapshot: at
// the log's first index, or the last membership change, data version 1).
func (s *storage) snapshot(segments bool) (raftpb.Snapshot, error) {
	if s.p.damagePending() {
		// raft asks for one because a read met damage (Entries): the follower is to get the
		// entries from the leader that takes over, not a snapshot that would empty its log.
		return raftpb.Snapshot{}, raft.ErrSnapshotTemporarilyUnavailable
	}
	p := s.p
	var (
		snap raftpb.Snapshot
		err  error
	)
	if segments {
		p.mu.Lock()
		applied := p.dd.index
		p.mu.Unlock()
		snap, err = s.Storage.SnapshotAt(applied, p.cfg.NodeID)
	} else {
		snap, err = s.Storage.Snapshot()
	}
	if err != nil {
		return snap, err
	}
	p.mu.Lock()
	snap.Data = appendState(nil, p.dd.index, snap.Data, p.dd.table, p.hw.Load(), time.Now().UnixMilli())
	index := p.dd.index
	p.mu.Unlock()
	if index < snap.Metadata.Index {
		// Cannot happen (see above); a snapshot whose state lags its index would make the
		// receiver miss the producers of the entries between.
		return raftpb.Snapshot{}, fmt.Errorf("partition: snapshot at %d, but the producer state reflects only entries up to %d", snap.Metadata.Index, index)
	}
	return snap, nil
}

// ApplySnapshot installs snap: the producer state is checked whole, the segments below the
// snapshot's offset are fetched from the snapshot's source when it names one (catchUp, with
// Config.Segments), the producer state is saved as the checkpoint (durable), then raftlog
// installs the fetched segments (or, without them, empties the log and starts it at the
// leader's offset), then the table is replaced. A crash between the two saves leaves a checkpoint
// ahead of the log, which is right: it reflects committed entries, which this replica skips
// when it applies them.
func (s *storage) ApplySnapshot(snap raftpb.Snapshot) error {
	p := s.p
	p.ct.snapsReceived.Add(1)
	index, logPart, table, err := loadState(snap.Data, p.tableConfig())
	if err != nil {
		return fmt.Errorf("partition: snapshot at %d: %w", snap.Metadata.Index, err)
	}
	if index < snap.Metadata.Index {
		table.Release()
		return fmt.Errorf("%w: snapshot at %d carries the producer state of entry %d only", ErrBadState, snap.Metadata.Index, index)
	}
	inner := snap
	inner.Data = logPart
	cu, err := p.catchUp(inner)
	if err != nil {
		table.Release()
		return err
	}
	table.Expire(time.Now().UnixMilli())
	p.ckMu.Lock()
	defer p.ckMu.Unlock()
	b := appendState(nil, index, nil, table, 0, time.Now().UnixMilli())
	if err := writeCheckpoint(p.fsys, p.cfg.Dir, b); err != nil {
		table.Release()
		return err
	}
	p.ckIndex = index
	if cu != nil {
		err = s.Storage.InstallSnapshot(inner, cu)
	} else {
		err = s.Storage.ApplySnapshot(inner)
	}
	if err != nil {
		table.Release()
		return err
	}
	p.mu.Lock()
	p.dd.replace(table, index)
	p.mu.Unlock()
	p.ct.snapsApplied.Add(1)
	p.logf("installed a snapshot at entry %d (offset %d; the log holds from %d): %d producer states as of entry %d",
		snap.Metadata.Index, s.Log().NextOffset(), s.Log().StartOffset(), table.Len(), index)
	return nil
}
