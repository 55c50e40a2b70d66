package raftlog

import (
	"errors"
	"math"
	"strings"
	"syscall"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/log"
	"github.com/lightq/lightq/log/vfs/crashfs"
	"github.com/lightq/lightq/wire"
)

// TestStorageContract: the answers of raft's Storage interface, errors included, on an empty
// log, a log of entries, and a log whose start retention moved.
func TestStorageContract(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{Window: 4})
	defer s.Close()
	type call struct {
		name string
		do   func() (any, error)
		want any
		err  error
	}
	term := func(i uint64) func() (any, error) { return func() (any, error) { return s.Term(i) } }
	entries := func(lo, hi uint64) func() (any, error) {
		return func() (any, error) {
			e, err := s.Entries(lo, hi, math.MaxUint64)
			return len(e), err
		}
	}
	first := func() (any, error) { return s.FirstIndex() }
	last := func() (any, error) { return s.LastIndex() }
	run := func(calls []call) {
		t.Helper()
		for _, c := range calls {
			got, err := c.do()
			if !errors.Is(err, c.err) || c.err == nil && err != nil || err == nil && got != c.want {
				t.Errorf("%s = %v, %v; want %v, %v", c.name, got, err, c.want, c.err)
			}
		}
	}
	run([]call{
		{"empty: FirstIndex", first, uint64(1), nil},
		{"empty: LastIndex", last, uint64(0), nil},
		{"empty: Term(0)", term(0), uint64(0), nil},
		{"empty: Term(1)", term(1), nil, raft.ErrUnavailable},
		{"empty: Entries(1, 1)", entries(1, 1), 0, nil},
		{"empty: Entries(1, 2)", entries(1, 2), nil, raft.ErrUnavailable},
		{"empty: Entries(0, 1)", entries(0, 1), nil, raft.ErrCompacted},
	})
	ents := mixedEntries(1, 30, 1, 10)
	mustAppend(t, s, clone(ents))
	run([]call{
		{"FirstIndex", first, uint64(1), nil},
		{"LastIndex", last, uint64(30), nil},
		{"Term(0)", term(0), uint64(0), nil},
		{"Term(1)", term(1), uint64(1), nil},
		{"Term(15) (before the window)", term(15), uint64(2), nil},
		{"Term(30)", term(30), uint64(3), nil},
		{"Term(31)", term(31), nil, raft.ErrUnavailable},
		{"Entries(1, 31)", entries(1, 31), 30, nil},
		{"Entries(5, 9)", entries(5, 9), 4, nil},
		{"Entries(30, 31)", entries(30, 31), 1, nil},
		{"Entries(0, 5)", entries(0, 5), nil, raft.ErrCompacted},
		{"Entries(5, 32)", entries(5, 32), nil, raft.ErrUnavailable},
		{"Entries(31, 31)", entries(31, 31), 0, nil},
		{"Entries(32, 32)", entries(32, 32), nil, raft.ErrUnavailable},
		{"Entries(9, 5)", entries(9, 5), nil, raft.ErrUnavailable},
	})
	// The state as retention would leave it: SnapIndex 10.
	s.mu.Lock()
	off, err := s.offsetOf(11)
	if err != nil {
		t.Fatal(err)
	}
	tm, _ := s.term(10)
	s.st.SnapIndex, s.st.SnapTerm, s.st.FirstOffset = 10, tm, off
	s.win.dropThrough(10)
	s.mu.Unlock()
	run([]call{
		{"compacted: FirstIndex", first, uint64(11), nil},
		{"compacted: Term(9)", term(9), nil, raft.ErrCompacted},
		{"compacted: Term(10)", term(10), uint64(1), nil},
		{"compacted: Term(11)", term(11), uint64(2), nil},
		{"compacted: Entries(10, 12)", entries(10, 12), nil, raft.ErrCompacted},
		{"compacted: Entries(11, 31)", entries(11, 31), 20, nil},
		{"compacted: OffsetAfter(9)", func() (any, error) { return s.OffsetAfter(9) }, nil, raft.ErrCompacted},
		{"compacted: OffsetAfter(10)", func() (any, error) { return s.OffsetAfter(10) }, off, nil},
	})
}

// TestStorageRoundTrip: entries of every kind come back as appended, through a small window
// (binary searches) and after a reopen; each is one batch, control batches take one offset,
// data batches carry the term, the index and the offsets the log gave.
func TestStorageRoundTrip(t *testing.T) {
	for _, segBytes := range []int64{0, 2 << 10} {
		dir := t.TempDir()
		opts := Options{Window: 4, Log: log.Options{SegmentBytes: segBytes}}
		s := mustOpen(t, dir, opts)
		ents := mixedEntries(1, 120, 1, 25)
		appended := clone(ents)
		for i := 0; i < len(appended); i += 7 { // Readies of several entries
			mustAppend(t, s, appended[i:min(i+7, len(appended))])
		}
		checkLog(t, s, appended)
		batches := storedBatches(t, s)
		if len(batches) != len(ents) {
			t.Fatalf("%d batches for %d entries", len(batches), len(ents))
		}
		var off int64
		for i, b := range batches {
			bt, err := wire.ParseBatch(b, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			e := appended[i]
			if bt.BaseOffset != off || bt.RaftIndex != e.Index || uint64(bt.LeaderEpoch) != e.Term {
				t.Fatalf("entry %d: batch at %d index %d epoch %d, want offset %d term %d", e.Index, bt.BaseOffset, bt.RaftIndex, bt.LeaderEpoch, off, e.Term)
			}
			control := e.Type != raftpb.EntryNormal || len(e.Data) == 0
			if bt.IsControl() != control || control && bt.RecordCount != 1 {
				t.Fatalf("entry %d (%v, %d bytes): control %v, %d records", e.Index, e.Type, len(e.Data), bt.IsControl(), bt.RecordCount)
			}
			if !control && string(b) != string(e.Data) {
				t.Fatalf("entry %d: the stored batch is not the entry's data as Append left it", e.Index)
			}
			off = bt.NextOffset()
		}
		// OffsetAfter: where the next entry's batch starts, the log's end after the last.
		for i := uint64(0); i <= 120; i++ {
			want := s.Log().NextOffset()
			if i < 120 {
				want = wire.BatchBaseOffset(batches[i])
			}
			if got, err := s.OffsetAfter(i); err != nil || got != want {
				t.Fatalf("OffsetAfter(%d) = %d, %v; want %d", i, got, err, want)
			}
		}
		if _, err := s.OffsetAfter(121); !errors.Is(err, raft.ErrUnavailable) {
			t.Fatalf("OffsetAfter past the last entry: %v", err)
		}
		if s.probes == 0 { // terms come from the leader epochs file; offsets are searched for
			t.Fatal("no entry was looked up beyond the window")
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = mustOpen(t, dir, opts)
		checkLog(t, s, appended)
		// Appends go on after a reopen, at the right offset.
		next := dataEntry(121, 5, 2)
		mustAppend(t, s, []raftpb.Entry{next})
		checkLog(t, s, append(appended, next))
		s.Close()
	}
}

// TestStorageTruncateAndAppend: an Append that starts at or below LastIndex replaces the tail
// from there, in the active segment, in a sealed one, inside and beyond the window; the
// replaced entries are gone after a reopen too, and the offsets go on from the cut.
func TestStorageTruncateAndAppend(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   uint64
	}{
		{"the last entry", 60},
		{"inside the window", 58},
		{"beyond the window, in a sealed segment", 12},
		{"the first entry", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Window: 4, Log: log.Options{SegmentBytes: 1 << 10}}
			s := mustOpen(t, dir, opts)
			old := clone(mixedEntries(1, 60, 1, 0))
			mustAppend(t, s, old)
			repl := clone(mixedEntries(tc.at, tc.at+4, 2, 0))
			mustAppend(t, s, repl)
			want := append(clone(old[:tc.at-1]), repl...)
			checkLog(t, s, want)
			// The replacement's first batch sits where the replaced entry was.
			bt, err := wire.ParseBatch(repl[0].Data, 1<<20)
			if repl[0].Type == raftpb.EntryNormal && len(repl[0].Data) > 0 {
				oldBt, _ := wire.ParseBatch(old[tc.at-1].Data, 1<<20)
				if err != nil || oldBt.Magic == 2 && bt.BaseOffset != oldBt.BaseOffset {
					t.Fatalf("replacement at offset %d, the replaced entry was at %d (%v)", bt.BaseOffset, oldBt.BaseOffset, err)
				}
			}
			s.Close()
			s = mustOpen(t, dir, opts)
			defer s.Close()
			checkLog(t, s, want)
		})
	}
}

// TestStorageEntriesMaxSize: at least one entry, then as many as fit in maxSize by raft's
// measure (Entry.Size), whatever the read size; a catch-up that reads on from the previous
// hi needs no search.
func TestStorageEntriesMaxSize(t *testing.T) {
	for _, readBytes := range []int{0, 100} {
		s := mustOpen(t, t.TempDir(), Options{Window: 2, ReadBytes: readBytes})
		ents := clone(mixedEntries(1, 40, 1, 9))
		mustAppend(t, s, ents)
		size := func(from, n int) uint64 {
			var total uint64
			for _, e := range ents[from : from+n] {
				total += uint64(e.Size())
			}
			return total
		}
		for _, tc := range []struct {
			lo, hi  uint64
			maxSize uint64
			want    int
		}{
			{1, 41, 0, 1},
			{1, 41, 1, 1},
			{1, 41, size(0, 1), 1},
			{1, 41, size(0, 2) - 1, 1},
			{1, 41, size(0, 2), 2},
			{5, 41, size(4, 7), 7},
			{5, 8, size(4, 7), 3},
			{1, 41, math.MaxUint64, 40},
		} {
			got, err := s.Entries(tc.lo, tc.hi, tc.maxSize)
			if err != nil || len(got) != tc.want {
				t.Fatalf("read %d: Entries(%d, %d, %d): %d entries, %v; want %d", readBytes, tc.lo, tc.hi, tc.maxSize, len(got), err, tc.want)
			}
			for i, e := range got {
				if !sameEntry(e, ents[int(tc.lo)-1+i]) {
					t.Fatalf("Entries(%d, %d, %d): entry %d differs", tc.lo, tc.hi, tc.maxSize, e.Index)
				}
			}
		}
		// Catch-up: Entries from lo, then from the previous hi, needs one search at most.
		before := s.probes
		for lo := uint64(1); lo <= 40; {
			got, err := s.Entries(lo, 41, size(0, 3))
			if err != nil || len(got) == 0 || got[0].Index != lo {
				t.Fatalf("catch-up at %d: %d entries, %v", lo, len(got), err)
			}
			lo = got[len(got)-1].Index + 1
			if tm, err := s.Term(lo - 1); err != nil || tm != ents[lo-2].Term { // the cursor knows it
				t.Fatalf("Term(%d) = %d, %v after reading up to it", lo-1, tm, err)
			}
		}
		if s.probes-before > 2*maxProbesFor(s) {
			t.Fatalf("sequential reads took %d header reads", s.probes-before)
		}
		// The caller may keep and change what it got.
		a, _ := s.Entries(10, 12, math.MaxUint64)
		for i := range a {
			for j := range a[i].Data {
				a[i].Data[j] = 0
			}
		}
		b, _ := s.Entries(10, 12, math.MaxUint64)
		if !sameEntry(b[0], ents[9]) || !sameEntry(b[1], ents[10]) {
			t.Fatal("changing entries Entries returned changed the log")
		}
		s.Close()
	}
}

// maxProbesFor is what one binary search over s's log may read: log2 of its offsets, plus one.
func maxProbesFor(s *Storage) int {
	n := 1
	for span := s.l.NextOffset(); span > 1; span /= 2 {
		n++
	}
	return n
}

// TestStorageBinarySearch: with a window of 2, every entry of a long log, in any order, is
// found by a binary search whose probes stay within log2 of the offsets.
func TestStorageBinarySearch(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Window: 2, Log: log.Options{SegmentBytes: 4 << 10}}
	s := mustOpen(t, dir, opts)
	defer s.Close()
	ents := clone(mixedEntries(1, 600, 1, 50))
	mustAppend(t, s, ents)
	bound := maxProbesFor(s)
	stored := storedBatches(t, s)
	for k := range 600 {
		i := uint64(1 + (k*367)%600) // a permutation: no two lookups next to each other
		s.mu.Lock()
		s.cur.valid = false
		before := s.probes
		off, term, err := s.locate(i)
		probes := s.probes - before
		s.mu.Unlock()
		if i >= 599 { // in the window: Term and Entries do not search
			continue
		}
		bt, _ := wire.ParseBatch(stored[i-1], 1<<20)
		if err != nil || off != bt.BaseOffset || term != ents[i-1].Term {
			t.Fatalf("locate(%d) = %d, %d, %v; want %d, %d", i, off, term, err, bt.BaseOffset, ents[i-1].Term)
		}
		if probes > bound {
			t.Fatalf("locate(%d) read %d headers, more than %d", i, probes, bound)
		}
		got, err := s.Entries(i, i+1, 0)
		if err != nil || len(got) != 1 || !sameEntry(got[0], ents[i-1]) {
			t.Fatalf("Entries(%d): %v %v", i, got, err)
		}
	}
}

// TestStorageAppendRefuses: what Append cannot store is refused with ErrBadEntry, and the
// storage refuses everything afterwards (raft must not go on from a failed write).
func TestStorageAppendRefuses(t *testing.T) {
	magic1 := func() []byte {
		var bb wire.BatchBuilder
		bb.Append(1, nil, []byte("v"), nil)
		b, _ := bb.Finish(wire.CodecNone, nil)
		return append([]byte(nil), b...)
	}()
	for _, tc := range []struct {
		name string
		e    raftpb.Entry
		want string
	}{
		{"a gap", dataEntry(7, 1, 1), "a gap"},
		{"a term over MaxInt32", dataEntry(6, math.MaxInt32+1, 1), "does not fit the leader epoch"},
		{"a term going down", dataEntry(6, 0, 1), "term 0 after term 1"},
		{"data that is no batch", raftpb.Entry{Index: 6, Term: 1, Data: []byte("not a batch")}, "not a record batch"},
		{"a format-1 batch", raftpb.Entry{Index: 6, Term: 1, Data: magic1}, "not one format-2 record batch"},
		{"a control batch as data", raftpb.Entry{Index: 6, Term: 1, Data: wire.AppendControlBatch(nil, 0, nil)}, "control true"},
		{"a batch and more", raftpb.Entry{Index: 6, Term: 1, Data: append(recordBatch("a"), 0)}, "not one format-2 record batch"},
		{"an unknown type", raftpb.Entry{Index: 6, Term: 1, Type: 7}, "type 7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := mustOpen(t, t.TempDir(), Options{})
			defer s.Close()
			mustAppend(t, s, clone(mixedEntries(1, 5, 1, 0)))
			err := s.Append([]raftpb.Entry{tc.e})
			if !errors.Is(err, ErrBadEntry) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Append: %v, want ErrBadEntry saying %q", err, tc.want)
			}
			if last, err2 := s.LastIndex(); err2 != err || last != 5 {
				t.Fatalf("after a refused Append: LastIndex %d, %v; want 5 and the sticky error", last, err2)
			}
		})
	}
}

// TestStorageHardStateSync: a new term or vote is synced before SetHardState returns; a
// commit index alone is written without a sync (etcd's MustSync).
func TestStorageHardStateSync(t *testing.T) {
	fsys := crashfs.New()
	dir := t.TempDir()
	s := mustOpen(t, dir, Options{Log: log.Options{FS: fsys}})
	defer s.Close()
	mustAppend(t, s, clone(mixedEntries(1, 5, 1, 0)))
	if err := s.SetHardState(raftpb.HardState{Term: 1, Vote: 2, Commit: 1}); err != nil {
		t.Fatal(err)
	}
	// From now on a sync of the state file fails: only saves that sync notice.
	fsys.Inject(crashfs.Fault{Op: crashfs.OpSync, Name: StateFileName, Nth: 1, Err: syscall.EIO})
	if err := s.SetHardState(raftpb.HardState{Term: 1, Vote: 2, Commit: 4}); err != nil {
		t.Fatalf("a commit-only save synced: %v", err)
	}
	if err := s.SetHardState(raftpb.HardState{Term: 2, Vote: 2, Commit: 4}); !errors.Is(err, syscall.EIO) {
		t.Fatalf("a new term was saved without a sync: %v", err)
	}
	if _, err := s.Term(1); !errors.Is(err, syscall.EIO) {
		t.Fatalf("the failed save is not sticky: %v", err)
	}
}

// TestStorageSyncEachAppend: with SyncEachAppend, Append returns once the log is fsynced.
func TestStorageSyncEachAppend(t *testing.T) {
	for _, sync := range []bool{false, true} {
		s := mustOpen(t, t.TempDir(), Options{SyncEachAppend: sync})
		mustAppend(t, s, clone(mixedEntries(1, 5, 1, 0)))
		if durable := s.Log().DurableOffset() == s.Log().NextOffset(); durable != sync {
			t.Fatalf("SyncEachAppend %v: durable to %d of %d", sync, s.Log().DurableOffset(), s.Log().NextOffset())
		}
		s.Close()
	}
}

// TestStorageConfState: SetConfState is what InitialState returns after a reopen, and what
// Snapshot sends, at the membership change's index when it is past SnapIndex.
func TestStorageConfState(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, Options{})
	ents := clone(mixedEntries(1, 20, 1, 8))
	mustAppend(t, s, ents)
	if err := s.SetHardState(raftpb.HardState{Term: 3, Vote: 1, Commit: 20}); err != nil {
		t.Fatal(err)
	}
	cs := raftpb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{9}}
	if err := s.SetConfState(cs, 11); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = mustOpen(t, dir, Options{})
	defer s.Close()
	hs, gotCS, err := s.InitialState()
	if err != nil || hs != (raftpb.HardState{Term: 3, Vote: 1, Commit: 20}) || gotCS.Equivalent(cs) != nil {
		t.Fatalf("InitialState %+v %+v %v", hs, gotCS, err)
	}
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	off, err := decodeSnapshotData(snap.Data)
	bt, _ := wire.ParseBatch(storedBatches(t, s)[11], 1<<20) // entry 12
	if err != nil || snap.Metadata.Index != 11 || snap.Metadata.Term != ents[10].Term || off != bt.BaseOffset || len(snap.Metadata.ConfState.Voters) != 3 {
		t.Fatalf("Snapshot %+v (first offset %d, %v); want index 11 term %d offset %d", snap.Metadata, off, err, ents[10].Term, bt.BaseOffset)
	}
}

// TestStorageApplySnapshot: a follower given a snapshot empties its log and goes on at the
// snapshot's offset; the state follows (commit at least the snapshot's index); an old
// snapshot and bad data are refused without a change; a reopen keeps it all.
func TestStorageApplySnapshot(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, Options{Log: log.Options{SegmentBytes: 1 << 10}})
	mustAppend(t, s, clone(mixedEntries(1, 30, 1, 0)))
	if err := s.SetHardState(raftpb.HardState{Term: 2, Vote: 3, Commit: 20}); err != nil {
		t.Fatal(err)
	}
	cs := raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	snap := raftpb.Snapshot{Data: appendSnapshotData(nil, 5000), Metadata: raftpb.SnapshotMetadata{Index: 100, Term: 4, ConfState: cs}}
	bad := snap
	bad.Data = []byte("LQSN")
	if err := s.ApplySnapshot(bad); !errors.Is(err, errSnapshotData) {
		t.Fatalf("bad snapshot data: %v", err)
	}
	if last, _ := s.LastIndex(); last != 30 {
		t.Fatalf("a refused snapshot changed the log: last %d", last)
	}
	if err := s.ApplySnapshot(snap); err != nil {
		t.Fatal(err)
	}
	check := func(s *Storage) {
		t.Helper()
		first, _ := s.FirstIndex()
		last, _ := s.LastIndex()
		term, err := s.Term(100)
		hs, gotCS, _ := s.InitialState()
		st := s.State()
		if first != 101 || last != 100 || term != 4 || err != nil || hs.Commit != 100 || hs.Term != 2 || hs.Vote != 3 ||
			len(gotCS.Voters) != 3 || st.FirstOffset != 5000 || st.ResetPending || s.Log().NextOffset() != 5000 || s.Log().StartOffset() != 5000 {
			t.Fatalf("after the snapshot: first %d last %d term %d (%v) hard state %+v conf %+v state %+v log [%d, %d)",
				first, last, term, err, hs, gotCS, st, s.Log().StartOffset(), s.Log().NextOffset())
		}
		if _, err := s.Term(99); !errors.Is(err, raft.ErrCompacted) {
			t.Fatalf("Term(99): %v", err)
		}
	}
	check(s)
	if err := s.ApplySnapshot(snap); !errors.Is(err, raft.ErrSnapOutOfDate) {
		t.Fatalf("the same snapshot again: %v", err)
	}
	next := []raftpb.Entry{dataEntry(101, 4, 3), emptyEntry(102, 5)}
	mustAppend(t, s, next)
	bt, _ := wire.ParseBatch(next[0].Data, 1<<20)
	if bt.BaseOffset != 5000 {
		t.Fatalf("entry 101 at offset %d, want 5000", bt.BaseOffset)
	}
	s.Close()
	s = mustOpen(t, dir, Options{})
	defer s.Close()
	checkLog(t, s, next)
	// The snapshot a leader in this state sends names the same offset.
	again, err := s.Snapshot()
	if off, derr := decodeSnapshotData(again.Data); err != nil || derr != nil || again.Metadata.Index != 100 || off != 5000 {
		t.Fatalf("Snapshot after ApplySnapshot: %+v offset %d (%v %v)", again.Metadata, off, err, derr)
	}
}

// TestStorageRetention: retention up to the applied index moves FirstIndex to the first entry
// of the first segment kept, with the term of the entry before it (a term that starts
// exactly at a segment boundary included), never past applied; reads below fail with
// ErrCompacted; a reopen agrees.
func TestStorageRetention(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Window: 3, Log: log.Options{SegmentBytes: 2 << 10, RetentionBytes: 1}}
	s := mustOpen(t, dir, opts)
	var ents []raftpb.Entry
	term := uint64(1)
	for i := uint64(1); i <= 200; i++ {
		e := dataEntry(i, term, 1+int(i%3))
		if i%37 == 0 {
			term++
			e = emptyEntry(i, term)
		}
		ents = append(ents, e)
		mustAppend(t, s, []raftpb.Entry{e})
	}
	if err := s.SetHardState(raftpb.HardState{Term: term, Commit: 200}); err != nil {
		t.Fatal(err)
	}
	// Up to entry 50 only: segments that end at or before it go.
	if err := s.EnforceRetention(50); err != nil {
		t.Fatal(err)
	}
	st := s.State()
	first, _ := s.FirstIndex()
	if first <= 1 || first > 51 || st.SnapIndex != first-1 || st.SnapTerm != ents[first-2].Term || st.FirstOffset != s.Log().StartOffset() {
		t.Fatalf("after retention to 50: first %d, state %+v, log start %d", first, st, s.Log().StartOffset())
	}
	if _, err := s.Entries(first-1, first, 0); !errors.Is(err, raft.ErrCompacted) {
		t.Fatalf("Entries below the start: %v", err)
	}
	if tm, err := s.Term(first - 1); err != nil || tm != ents[first-2].Term {
		t.Fatalf("Term(SnapIndex) = %d, %v", tm, err)
	}
	checkLog(t, s, ents[first-1:])
	// Everything applied: all but the active segment go.
	if err := s.EnforceRetention(200); err != nil {
		t.Fatal(err)
	}
	st = s.State()
	first = st.SnapIndex + 1
	if !s.Log().InActiveSegment(s.Log().StartOffset()) || st.SnapTerm != ents[first-2].Term {
		t.Fatalf("after retention to 200: state %+v, log start %d", st, s.Log().StartOffset())
	}
	checkLog(t, s, ents[first-1:])
	s.Close()
	s = mustOpen(t, dir, opts)
	defer s.Close()
	if s.State().SnapIndex != st.SnapIndex {
		t.Fatalf("reopened at snapshot %d, want %d", s.State().SnapIndex, st.SnapIndex)
	}
	checkLog(t, s, ents[first-1:])
}

// TestStorageRetentionAtTermStart: the first segment kept starts with a new leader's entry,
// so the term before it is only in the segment retention deletes: it is taken from there
// before the segment goes.
func TestStorageRetentionAtTermStart(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Window: 2, Log: log.Options{SegmentBytes: 1 << 10, RetentionBytes: 1}}
	s := mustOpen(t, dir, opts)
	defer s.Close()
	i := uint64(1)
	for ; s.Log().InActiveSegment(0); i++ { // until an entry rolls the first segment
		mustAppend(t, s, []raftpb.Entry{dataEntry(i, 3, 2)})
	}
	// Entry i-1 opened the second segment: a new leader (term 4) replaces it, so the segment
	// starts with the new leader's entry.
	lead := emptyEntry(i-1, 4)
	mustAppend(t, s, []raftpb.Entry{lead, dataEntry(i, 4, 1)})
	if s.Log().InActiveSegment(s.Log().StartOffset()) {
		t.Fatal("the log has one segment")
	}
	if err := s.SetHardState(raftpb.HardState{Term: 4, Commit: i}); err != nil {
		t.Fatal(err)
	}
	if err := s.EnforceRetention(i); err != nil {
		t.Fatal(err)
	}
	st := s.State()
	if st.SnapIndex != lead.Index-1 || st.SnapTerm != 3 {
		t.Fatalf("state %+v: want the snapshot at %d, term 3 (the term before the new leader's entry)", st, lead.Index-1)
	}
	if tm, err := s.Term(lead.Index); err != nil || tm != 4 {
		t.Fatalf("Term(%d) = %d, %v", lead.Index, tm, err)
	}
}
