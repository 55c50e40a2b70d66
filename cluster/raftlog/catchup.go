package raftlog

import (
	"fmt"
	"os"
	"path/filepath"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/log"
	"github.com/lightq/lightq/log/vfs"
	"github.com/lightq/lightq/wire"
)

// The catch-up from whole segments: a follower that needs entries its leader's retention
// deleted gets a snapshot (SnapshotAt, data version 2) and, with it, the leader's segment
// files from the leader's log start (or from the follower's own committed end, if later) up
// to the snapshot's offset. CatchUp receives them: it verifies every batch as Append would
// (CRC, format 2, consecutive offsets, consecutive raft indexes, terms that never go down,
// the last batch the snapshot's entry) and writes them into temporary segment files in
// CatchUpDir, synced; InstallSnapshot then records the snapshot with an install pending and
// makes the log take those files (log.Install), so that the follower's segment files equal
// the leader's over that range. A crash before the install was recorded leaves CatchUpDir,
// which Open removes (the follower starts clean and is sent a snapshot again); one after it
// is finished by Open (log.FinishInstall).

// CatchUpDir is where a catch-up prepares its segment files, in the replica's directory.
const CatchUpDir = "catchup"

// SnapshotAt is the snapshot a follower behind the log's start is sent, at entry index
// (the owner's applied index: its own state, which it adds to the data, reflects it), made
// by node source: its data is version 2 (snapdata.go), naming source and the log's start, so
// that the receiver fetches the segments below the snapshot's offset from source. index is
// clamped to [SnapIndex, the commit index], and raised to the last membership change, whose
// ConfState the snapshot carries.
func (s *Storage) SnapshotAt(index, source uint64) (raftpb.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return raftpb.Snapshot{}, s.broken
	}
	idx := min(max(index, s.st.SnapIndex), s.st.HardState.Commit, s.last)
	if ci := s.st.ConfIndex; ci > idx && ci <= s.last {
		idx = ci
	}
	term, err := s.term(idx)
	if err != nil {
		return raftpb.Snapshot{}, err
	}
	off, err := s.offsetAfter(idx)
	if err != nil {
		return raftpb.Snapshot{}, err
	}
	d := SnapData{FirstOffset: off, Source: source, Start: min(s.l.StartOffset(), off)}
	return raftpb.Snapshot{
		Data:     appendSnapshotData2(nil, d),
		Metadata: raftpb.SnapshotMetadata{Index: idx, Term: term, ConfState: s.st.ConfState},
	}, nil
}

// CommittedEnd is the offset after the last committed entry this replica holds: where a
// catch-up may start (what is below it is the leader's too).
func (s *Storage) CommittedEnd() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	off, err := s.offsetAfter(min(s.st.HardState.Commit, s.last))
	if err != nil {
		return s.st.FirstOffset
	}
	return off
}

// CatchUp receives the segments of one catch-up (see above). Not safe for concurrent use:
// one goroutine feeds it (the transport's stream, on the replica's goroutine).
//
// Memory: at most one batch (Options.Log.MaxBatch) is carried between two Writes; the
// caller's chunks are written as they come.
type CatchUp struct {
	fsys      vfs.FS
	src       string
	maxBatch  int
	to        int64 // the snapshot's first offset
	snapIndex uint64
	snapTerm  uint64

	from      int64 // the first base offset (-1 before the first Write)
	bases     []int64
	f         vfs.File // the segment being written
	base      int64
	size      int64  // of f: whole verified batches only
	next      int64  // offset after the last verified batch
	nextIndex uint64 // raft index the next batch must have (0 before the first)
	lastTerm  uint64
	pend      []byte // a batch split across Writes
	received  int64
}

// NewCatchUp starts receiving the segments for snap (version-2 data), emptying CatchUpDir.
func (s *Storage) NewCatchUp(snap raftpb.Snapshot) (*CatchUp, error) {
	d, err := DecodeSnapshotData(snap.Data)
	if err != nil {
		return nil, err
	}
	fsys := s.fsys()
	c := &CatchUp{fsys: fsys, src: filepath.Join(s.dir, CatchUpDir), maxBatch: s.maxBatch(), to: d.FirstOffset,
		snapIndex: snap.Metadata.Index, snapTerm: snap.Metadata.Term}
	if err := c.Restart(); err != nil {
		return nil, err
	}
	return c, nil
}

func (s *Storage) fsys() vfs.FS {
	if s.opts.Log.FS != nil {
		return s.opts.Log.FS
	}
	return vfs.OS
}

// Restart drops what was received and empties CatchUpDir: the next Write must be the start
// of a segment.
func (c *CatchUp) Restart() error {
	c.closeFile()
	if err := log.RemoveInstallDir(c.fsys, c.src); err != nil {
		return err
	}
	if err := c.fsys.MkdirAll(c.src, 0o755); err != nil {
		return fmt.Errorf("raftlog: %w", err)
	}
	c.from, c.bases, c.size, c.next, c.nextIndex, c.lastTerm, c.pend = -1, nil, 0, 0, 0, 0, c.pend[:0]
	return nil
}

// Next is where a stream cut short goes on (exactly there), and Started whether anything was
// received since the last Restart.
func (c *CatchUp) Next() int64   { return c.next }
func (c *CatchUp) Started() bool { return c.from >= 0 }

// To is the offset the catch-up ends at (the snapshot's first offset).
func (c *CatchUp) To() int64 { return c.to }

// Received is the bytes of verified batches received since the catch-up started.
func (c *CatchUp) Received() int64 { return c.received }

// From is the first offset received (-1 before any).
func (c *CatchUp) From() int64 { return c.from }

// Resume prepares for a stream that goes on from Next after a cut: the part of a batch
// received is dropped.
func (c *CatchUp) Resume() { c.pend = c.pend[:0] }

// Write takes data, the bytes at position pos of the source's segment base. A new segment
// starts at position 0 at the offset where the previous one ended; within a segment data
// follows what was received. Batches are verified as they complete and written to the
// segment's temporary file. Errors wrap ErrCorrupt (the source sent bytes that are not the
// log the snapshot describes) or are I/O errors.
func (c *CatchUp) Write(base, pos int64, data []byte) error {
	switch {
	case c.from < 0 || base != c.base:
		if pos != 0 || len(c.pend) > 0 || c.from >= 0 && base != c.next {
			return fmt.Errorf("%w: catch-up: segment %d at byte %d, after offset %d of segment %d (%d bytes of a batch pending)",
				ErrCorrupt, base, pos, c.next, c.base, len(c.pend))
		}
		if err := c.startSegment(base); err != nil {
			return err
		}
	case pos != c.size+int64(len(c.pend)):
		return fmt.Errorf("%w: catch-up: segment %d: bytes at %d, want %d", ErrCorrupt, base, pos, c.size+int64(len(c.pend)))
	}
	for len(data) > 0 {
		if len(c.pend) > 0 {
			need := wireBatchPrefix - len(c.pend)
			if need <= 0 {
				need = wire.BatchSize(c.pend) - len(c.pend)
			}
			take := min(need, len(data))
			c.pend = append(c.pend, data[:take]...)
			data = data[take:]
			if len(c.pend) < wireBatchPrefix {
				continue
			}
			if sz := wire.BatchSize(c.pend); sz < wire.BatchHeaderSize || sz > c.maxBatch {
				return fmt.Errorf("%w: catch-up: batch at offset %d of %d bytes (limit %d)", ErrCorrupt, c.next, sz, c.maxBatch)
			} else if len(c.pend) < sz {
				continue
			}
			if err := c.take(c.pend); err != nil {
				return err
			}
			c.pend = c.pend[:0]
			continue
		}
		n := 0
		for {
			sz := wire.BatchSize(data[n:])
			if sz == 0 || n+sz > len(data) {
				break
			}
			if err := c.verify(data[n : n+sz]); err != nil {
				return err
			}
			n += sz
		}
		if n > 0 {
			if err := c.write(data[:n]); err != nil {
				return err
			}
		}
		if rest := data[n:]; len(rest) > 0 {
			if sz := wire.BatchSize(rest); len(rest) >= wireBatchPrefix && (sz < wire.BatchHeaderSize || sz > c.maxBatch) {
				return fmt.Errorf("%w: catch-up: batch at offset %d of %d bytes (limit %d)", ErrCorrupt, c.next, sz, c.maxBatch)
			}
			c.pend = append(c.pend, rest...)
		}
		data = nil
	}
	return nil
}

// wireBatchPrefix is what tells a batch's size: its base offset and length fields.
const wireBatchPrefix = 12

// take verifies and writes one whole batch.
func (c *CatchUp) take(b []byte) error {
	if err := c.verify(b); err != nil {
		return err
	}
	return c.write(b)
}

// verify checks batch b, the next one, as Append and Open would, and moves on past it.
func (c *CatchUp) verify(b []byte) error {
	bt, err := wire.ParseBatch(b, c.maxBatch)
	bad := func(f string, a ...any) error {
		return fmt.Errorf("%w: catch-up: batch at offset %d (segment %d): %s", ErrCorrupt, c.next, c.base, fmt.Sprintf(f, a...))
	}
	switch {
	case err != nil:
		return bad("%v", err)
	case bt.Magic != wire.BatchMagic2:
		return bad("magic %d: not format 2", bt.Magic)
	case bt.BaseOffset != c.next:
		return bad("base offset %d", bt.BaseOffset)
	case bt.NextOffset() > c.to:
		return bad("ends at %d, past the snapshot's offset %d", bt.NextOffset(), c.to)
	case c.nextIndex != 0 && bt.RaftIndex != c.nextIndex:
		return bad("raft index %d, want %d", bt.RaftIndex, c.nextIndex)
	case bt.RaftIndex == 0 || bt.RaftIndex > c.snapIndex:
		return bad("raft index %d outside (0, %d]", bt.RaftIndex, c.snapIndex)
	case bt.LeaderEpoch < 0 || uint64(bt.LeaderEpoch) < c.lastTerm || uint64(bt.LeaderEpoch) > c.snapTerm:
		return bad("term %d after term %d (the snapshot's is %d)", bt.LeaderEpoch, c.lastTerm, c.snapTerm)
	}
	c.next, c.nextIndex, c.lastTerm = bt.NextOffset(), bt.RaftIndex+1, uint64(bt.LeaderEpoch)
	return nil
}

func (c *CatchUp) write(b []byte) error {
	if _, err := c.f.WriteAt(b, c.size); err != nil {
		return fmt.Errorf("raftlog: catch-up: write segment %d: %w", c.base, err)
	}
	c.size += int64(len(b))
	c.received += int64(len(b))
	return nil
}

// startSegment syncs the segment written so far and creates the next one.
func (c *CatchUp) startSegment(base int64) error {
	if err := c.syncFile(); err != nil {
		return err
	}
	path := filepath.Join(c.src, fmt.Sprintf("%020d.log", base))
	f, err := c.fsys.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("raftlog: catch-up: %w", err)
	}
	if c.from < 0 {
		c.from, c.next = base, base
	}
	c.f, c.base, c.size = f, base, 0
	c.bases = append(c.bases, base)
	return nil
}

func (c *CatchUp) syncFile() error {
	if c.f == nil {
		return nil
	}
	if err := c.f.Sync(); err != nil {
		return fmt.Errorf("raftlog: catch-up: fsync segment %d: %w", c.base, err)
	}
	c.closeFile()
	return nil
}

func (c *CatchUp) closeFile() {
	if c.f != nil {
		c.f.Close()
		c.f = nil
	}
}

// Finish checks that the stream ended where the snapshot says (the last batch is its entry,
// and ends at its offset), syncs the files and writes the manifest: the segments are then
// ready for InstallSnapshot. keep says the replica's own segments below From stay.
func (c *CatchUp) Finish(keep bool) error {
	switch {
	case c.from < 0:
		return fmt.Errorf("%w: catch-up: nothing received", ErrCorrupt)
	case len(c.pend) > 0 || c.next != c.to || c.nextIndex != c.snapIndex+1 || c.lastTerm != c.snapTerm:
		return fmt.Errorf("%w: catch-up: ended at offset %d, entry %d of term %d (%d bytes of a batch pending); the snapshot is entry %d of term %d at offset %d",
			ErrCorrupt, c.next, c.nextIndex-1, c.lastTerm, len(c.pend), c.snapIndex, c.snapTerm, c.to)
	}
	if err := c.syncFile(); err != nil {
		return err
	}
	m := log.Manifest{From: c.from, Next: c.next, Keep: keep, Bases: c.bases}
	return log.WriteManifest(c.fsys, c.src, &m)
}

// Abandon closes the file being written and removes CatchUpDir.
func (c *CatchUp) Abandon() error {
	c.closeFile()
	return log.RemoveInstallDir(c.fsys, c.src)
}

// CanKeepBelow reports whether the replica's own segments below offset from may stay under
// installed ones starting there: from is a segment boundary of this log within what it
// committed.
func (s *Storage) CanKeepBelow(from int64) bool {
	l := s.l
	if from <= l.StartOffset() || from > s.CommittedEnd() {
		return false
	}
	if from == l.NextOffset() {
		return true
	}
	ch, err := l.Read(from, l.NextOffset(), 1)
	if err != nil || ch == nil {
		return false
	}
	defer ch.Release()
	return ch.Pos == 0 && ch.BaseOffset == from
}

// InstallSnapshot makes snap the replica's state with the segments c prepared (Finish):
// as ApplySnapshot, but the log takes c's segments (log.Install) instead of starting empty,
// and ends at the snapshot's offset. Crash-safe as ApplySnapshot: the state is saved with an
// install pending first (synced), then the log takes the files, then the flags are cleared;
// Open finishes an install a crash interrupted.
func (s *Storage) InstallSnapshot(snap raftpb.Snapshot, c *CatchUp) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, off, err := s.snapshotState(snap)
	if err != nil {
		return err
	}
	m := snap.Metadata
	if off != c.to || c.snapIndex != m.Index {
		return fmt.Errorf("raftlog: install the snapshot at %d (offset %d) with segments prepared for %d (offset %d)", m.Index, off, c.snapIndex, c.to)
	}
	return s.restartAt(st, m, off, true, "install the segments of", func() error { return s.l.Install(c.src) })
}

// prepareOpen runs before the log opens: an install the state says is pending is finished
// (the files moved into place), and a catch-up a crash interrupted before its install was
// recorded is removed.
func prepareOpen(fsys vfs.FS, dir string, st *State) error {
	src := filepath.Join(dir, CatchUpDir)
	if st.ResetPending && st.InstallPending {
		return log.FinishInstall(fsys, dir, src)
	}
	return log.RemoveInstallDir(fsys, src)
}
