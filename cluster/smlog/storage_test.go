package smlog

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// TestOpenNew: an empty directory opens with the machine's empty state, applied 0, and no
// snapshot for raft yet.
func TestOpenNew(t *testing.T) {
	stor, st, applied, _ := mustOpen(t, filepath.Join(t.TempDir(), "new"))
	defer stor.Close()
	if applied != 0 || *st != (tstate{}) {
		t.Fatalf("applied %d, state %+v", applied, st)
	}
	if _, err := stor.Snapshot(); !errors.Is(err, raft.ErrSnapshotTemporarilyUnavailable) {
		t.Fatalf("Snapshot: %v", err)
	}
}

// TestRecover: Open brings a log and a snapshot file together, one case per way a crash or
// a damaged disk can leave them.
func TestRecover(t *testing.T) {
	write := func(t *testing.T, f fixture, snap raftpb.Snapshot) {
		if err := testFormat.WriteFile(f.dir, snap); err != nil {
			t.Fatal(err)
		}
	}
	path := func(f fixture) string { return filepath.Join(f.dir, testFormat.FileName) }
	damage := func(t *testing.T, f fixture, change func([]byte) []byte) {
		b, err := os.ReadFile(path(f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path(f), change(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		corrupt func(t *testing.T, f fixture)
		// Either an error naming want, or a store applied to applied whose log starts after
		// logStart (0: the fixture's) and whose hard state has at least term and commit.
		want                            string
		applied, logStart, term, commit uint64
	}{
		{name: "intact", corrupt: func(*testing.T, fixture) {}, applied: 40, term: 1, commit: 60},
		{name: "a temporary file a crash left", corrupt: func(t *testing.T, f fixture) {
			if err := os.WriteFile(filepath.Join(f.dir, testFormat.FileName+".tmp-7"), []byte("half"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, applied: 40, term: 1, commit: 60},
		{name: "file lost", corrupt: func(t *testing.T, f fixture) {
			if err := os.Remove(path(f)); err != nil {
				t.Fatal(err)
			}
		}, want: "the snapshot file is as of 0 (lost or replaced?)"},
		{name: "file with a flipped bit", corrupt: func(t *testing.T, f fixture) {
			damage(t, f, func(b []byte) []byte { b[len(b)-1] ^= 1; return b })
		}, want: "crc32c"},
		{name: "file torn", corrupt: func(t *testing.T, f fixture) {
			damage(t, f, func(b []byte) []byte { return b[:len(b)/2] })
		}, want: "crc32c"},
		{name: "file zeroed", corrupt: func(t *testing.T, f fixture) {
			damage(t, f, func(b []byte) []byte { return make([]byte, len(b)) })
		}, want: "magic"},
		{name: "file older than the log start", corrupt: func(t *testing.T, f fixture) {
			write(t, f, snapAt(f.logStart-1, 1, "old"))
		}, want: "(lost or replaced?)"},
		{name: "file at the log start of another term", corrupt: func(t *testing.T, f fixture) {
			write(t, f, snapAt(f.logStart, 2, "other"))
		}, want: "the snapshot file is of term 2"},
		{name: "file past the log (a leader's snapshot saved, the log not yet emptied)", corrupt: func(t *testing.T, f fixture) {
			write(t, f, snapAt(100, 3, "the leader's"))
		}, applied: 100, logStart: 100, term: 3, commit: 100},
		{name: "file within the log, of another term", corrupt: func(t *testing.T, f fixture) {
			write(t, f, snapAt(50, 2, "the leader's"))
		}, applied: 50, logStart: 50, term: 2, commit: 60},
		{name: "file within the log, of its term", corrupt: func(t *testing.T, f fixture) {
			write(t, f, snapAt(50, 1, "newer"))
		}, applied: 50, term: 1, commit: 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.corrupt(t, f)
			stor, st, applied, _, err := open(t, f.dir)
			if tc.want != "" {
				if err == nil {
					stor.Close()
				}
				if !errors.Is(err, errTestCorrupt) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Open: %v, want errTestCorrupt with %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer stor.Close()
			logStart := cmpOr(tc.logStart, f.logStart)
			hs, _, _ := stor.InitialState()
			first, _ := stor.FirstIndex()
			if applied != tc.applied || st.index != tc.applied || first != logStart+1 || hs.Term < tc.term || hs.Commit < tc.commit {
				t.Fatalf("applied %d, state as of %d, log from %d, hard state %+v; want %d, from %d, term %d, commit %d",
					applied, st.index, first, hs, tc.applied, logStart+1, tc.term, tc.commit)
			}
			if hs.Term > 1 && hs.Vote != 0 {
				t.Fatalf("a term raised to the snapshot's keeps the vote of term 1: %+v", hs)
			}
			if snap, err := stor.Snapshot(); err != nil || snap.Metadata.Index != tc.applied {
				t.Fatalf("Snapshot: %+v, %v", snap.Metadata, err)
			}
			ents, _ := os.ReadDir(f.dir)
			for _, e := range ents {
				if strings.Contains(e.Name(), ".tmp-") {
					t.Fatalf("%s left", e.Name())
				}
			}
		})
	}
}

func cmpOr(a, b uint64) uint64 {
	if a != 0 {
		return a
	}
	return b
}

// TestApplySnapshot: a leader's snapshot is saved, the log emptied after it and the state
// installed; one this broker cannot read changes nothing.
func TestApplySnapshot(t *testing.T) {
	f := newFixture(t)
	stor, _, _, m := mustOpen(t, f.dir)
	for _, bad := range []raftpb.Snapshot{
		{Data: []byte("XX"), Metadata: raftpb.SnapshotMetadata{Index: 200, Term: 4}},
		snapAt(200, 4, "")} {
		if bad.Data[0] == 'T' {
			bad.Metadata.Index = 201 // the state is as of 200
		}
		if err := stor.ApplySnapshot(bad); err == nil {
			t.Fatalf("a snapshot at %d applied", bad.Metadata.Index)
		}
	}
	if len(m.installed) != 0 || stor.Latest().Index != f.snapIndex {
		t.Fatalf("a refused snapshot changed something: %d installed, latest %d", len(m.installed), stor.Latest().Index)
	}
	snap := snapAt(200, 4, "the leader's")
	if err := stor.ApplySnapshot(snap); err != nil {
		t.Fatal(err)
	}
	snap.Data[0] = 'X' // the message's buffer: not kept
	if len(m.installed) != 1 || *m.installed[0] != (tstate{200, "the leader's"}) {
		t.Fatalf("installed %v", m.installed)
	}
	if first, _ := stor.FirstIndex(); first != 201 {
		t.Fatalf("the log starts at %d", first)
	}
	if got, err := stor.Snapshot(); err != nil || got.Metadata.Index != 200 || got.Data[0] != 'T' {
		t.Fatalf("Snapshot: %+v %q, %v", got.Metadata, got.Data, err)
	}
	if err := stor.Close(); err != nil {
		t.Fatal(err)
	}
	stor, st, applied, _ := mustOpen(t, f.dir)
	defer stor.Close()
	if applied != 200 || *st != (tstate{200, "the leader's"}) {
		t.Fatalf("reopened at %d with %+v", applied, st)
	}
}

// TestSaveTakesTheMembership: SetConfState tells the machine after saving the membership,
// and Save keeps that membership with the snapshot and copies the data.
func TestSaveTakesTheMembership(t *testing.T) {
	stor, _, _, m := mustOpen(t, t.TempDir())
	defer stor.Close()
	if err := stor.Append([]raftpb.Entry{{Index: 1, Term: 1, Type: raftpb.EntryNormal}, {Index: 2, Term: 1, Type: raftpb.EntryNormal}}); err != nil {
		t.Fatal(err)
	}
	if err := stor.SetConfState(raftpb.ConfState{Voters: []uint64{1, 2}, Learners: []uint64{3}}, 2); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.confs, []uint64{2}) {
		t.Fatalf("told of %v", m.confs)
	}
	data := encodeT(tstate{2, "two"})
	if err := stor.Save(2, 1, data); err != nil {
		t.Fatal(err)
	}
	data[0] = 'X'
	snap, err := stor.Snapshot()
	if err != nil || snap.Data[0] != 'T' || !slices.Equal(snap.Metadata.ConfState.Voters, []uint64{1, 2}) ||
		!slices.Equal(snap.Metadata.ConfState.Learners, []uint64{3}) || snap.Metadata.Index != 2 {
		t.Fatalf("Snapshot: %+v, %v", snap.Metadata, err)
	}
	_, st, ok, err := testFormat.ReadFile(stor.dir)
	if err != nil || !ok || *st != (tstate{2, "two"}) {
		t.Fatalf("the file holds %+v, %v %v", st, ok, err)
	}
}
