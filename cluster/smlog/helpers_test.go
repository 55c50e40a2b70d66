package smlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// A state machine for the tests: its state is an index and a string, encoded as
// "TS" | index u64 | body.

var (
	errTestMalformed = errors.New("test: malformed")
	errTestCorrupt   = errors.New("test: corrupt store")
)

type tstate struct {
	index uint64
	body  string
}

func encodeT(st tstate) []byte {
	return append(binary.BigEndian.AppendUint64([]byte("TS"), st.index), st.body...)
}

func decodeT(b []byte) (*tstate, uint64, error) {
	if len(b) < 10 || string(b[:2]) != "TS" {
		return nil, 0, fmt.Errorf("%w state: %d bytes", errTestMalformed, len(b))
	}
	st := &tstate{index: binary.BigEndian.Uint64(b[2:]), body: string(b[10:])}
	return st, st.index, nil
}

var testFormat = Format[*tstate]{
	Name: "test", FileName: "test.snap", Magic: "LQTF", MaxState: 1 << 10,
	Corrupt: errTestCorrupt, Malformed: errTestMalformed,
	Decode: decodeT, Empty: func() *tstate { return &tstate{} },
}

// machine records what the Storage told it.
type machine struct {
	installed []*tstate
	confs     []uint64
}

func open(t testing.TB, dir string) (*Storage[*tstate], *tstate, uint64, *machine, error) {
	t.Helper()
	m := &machine{}
	stor, st, applied, err := Open(&testFormat, dir, Options[*tstate]{
		SegmentBytes: 1024, Logf: t.Logf,
		Install:     func(st *tstate) { m.installed = append(m.installed, st) },
		ConfChanged: func(index uint64) { m.confs = append(m.confs, index) },
	})
	return stor, st, applied, m, err
}

func mustOpen(t testing.TB, dir string) (*Storage[*tstate], *tstate, uint64, *machine) {
	t.Helper()
	stor, st, applied, m, err := open(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	return stor, st, applied, m
}

func snapAt(index, term uint64, body string) raftpb.Snapshot {
	return raftpb.Snapshot{Data: encodeT(tstate{index, body}), Metadata: raftpb.SnapshotMetadata{
		Index: index, Term: term, ConfState: raftpb.ConfState{Voters: []uint64{1}}}}
}

// fixture is a closed store: entries 1 to last of term 1 (committed), a snapshot at
// snapIndex, and the log compacted behind it so that it starts after logStart > 0.
type fixture struct {
	dir                       string
	last, snapIndex, logStart uint64
}

func newFixture(t testing.TB) fixture {
	t.Helper()
	f := fixture{dir: t.TempDir(), last: 60, snapIndex: 40}
	stor, _, _, _ := mustOpen(t, f.dir)
	if err := stor.SetConfState(raftpb.ConfState{Voters: []uint64{1}}, 0); err != nil {
		t.Fatal(err)
	}
	ents := make([]raftpb.Entry, f.last)
	for i := range ents {
		ents[i] = raftpb.Entry{Index: uint64(i) + 1, Term: 1, Type: raftpb.EntryNormal}
	}
	if err := stor.Append(ents); err != nil {
		t.Fatal(err)
	}
	if err := stor.SetHardState(raftpb.HardState{Term: 1, Vote: 1, Commit: f.last}); err != nil {
		t.Fatal(err)
	}
	if err := stor.Save(f.snapIndex, 1, encodeT(tstate{f.snapIndex, "as of 40"})); err != nil {
		t.Fatal(err)
	}
	if err := stor.EnforceRetention(f.snapIndex); err != nil {
		t.Fatal(err)
	}
	f.logStart = stor.State().SnapIndex
	if err := stor.Close(); err != nil {
		t.Fatal(err)
	}
	if f.logStart == 0 || f.logStart > f.snapIndex {
		t.Fatalf("the fixture's log starts after %d: want within (0, %d]", f.logStart, f.snapIndex)
	}
	return f
}
