package chaos

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/cluster/raftlog"
	"github.com/lightq/lightq/log/vfs"
	"github.com/lightq/lightq/wire"
)

func concat(bs [][]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

func testBatches(t testing.TB) [][]byte {
	return buildLog(t, []batchSpec{{ids: []MsgID{{1, 0}, {1, 1}}}, {control: true}, {ids: []MsgID{{1, 2}}}})
}

func TestWalkSegment(t *testing.T) {
	bs := testBatches(t)
	good := concat(bs)
	sizes := []int{len(bs[0]), len(bs[1]), len(bs[2])}
	huge := slices.Clone(good)
	binary.BigEndian.PutUint32(huge[len(bs[0])+8:], 1<<30)
	flipped := slices.Clone(good)
	flipped[len(bs[0])+wire.BatchHeaderSize2] ^= 1 // the control batch's record
	cases := []struct {
		name    string
		data    []byte
		base    int64
		batches int
		next    int64
		damage  int64 // byte position of the damage; -1 none
	}{
		{"whole", good, 0, 3, 4, -1},
		{"empty", nil, 5, 0, 5, -1},
		{"torn last batch", good[:len(good)-5], 0, 2, 3, int64(sizes[0] + sizes[1])},
		{"a few bytes after", append(slices.Clone(good), 1, 2, 3), 0, 3, 4, int64(len(good))},
		{"zeros after", append(slices.Clone(good), make([]byte, 100)...), 0, 3, 4, int64(len(good))},
		{"huge length", huge, 0, 1, 2, int64(sizes[0])},
		{"bad crc", flipped, 0, 1, 2, int64(sizes[0])},
		{"wrong base", good, 3, 0, 3, 0},
	}
	for _, tc := range cases {
		var n int
		next, err := WalkSegment("seg", tc.data, tc.base, func(pos int, raw []byte, bt *wire.Batch) {
			if !bytes.Equal(raw, bs[n]) {
				t.Errorf("%s: batch %d differs", tc.name, n)
			}
			n++
		})
		if n != tc.batches || next != tc.next {
			t.Errorf("%s: %d batches up to %d, want %d up to %d", tc.name, n, next, tc.batches, tc.next)
		}
		var d *Damage
		switch {
		case tc.damage < 0 && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.damage >= 0 && !errors.As(err, &d):
			t.Errorf("%s: err %v, want a *Damage", tc.name, err)
		case tc.damage >= 0 && (d.Pos != tc.damage || d.Offset != tc.next):
			t.Errorf("%s: damage at byte %d offset %d, want %d and %d: %v", tc.name, d.Pos, d.Offset, tc.damage, tc.next, err)
		}
	}
}

func FuzzWalkSegment(f *testing.F) {
	bs := buildLog(f, []batchSpec{{ids: []MsgID{{1, 0}, {1, 1}}}, {control: true}, {ids: []MsgID{{1, 2}}}})
	good := concat(bs)
	f.Add(good)
	f.Add(good[:len(good)-3])
	f.Add([]byte{})
	f.Add(make([]byte, 80))
	f.Fuzz(func(t *testing.T, data []byte) {
		base := wire.BatchBaseOffset(data)
		want := base
		end := 0
		next, err := WalkSegment("fuzz", data, base, func(pos int, raw []byte, bt *wire.Batch) {
			if pos != end || bt.BaseOffset != want {
				t.Fatalf("batch at byte %d offset %d, want %d and %d", pos, bt.BaseOffset, end, want)
			}
			if _, err := wire.ParseBatch(raw, MaxBatch); err != nil {
				t.Fatalf("walked an invalid batch: %v", err)
			}
			end += len(raw)
			want = bt.NextOffset()
		})
		if next != want {
			t.Fatalf("next %d, want %d", next, want)
		}
		var d *Damage
		if (err == nil) != (end == len(data)) || (err != nil && (!errors.As(err, &d) || d.Pos != int64(end))) {
			t.Fatalf("walked %d of %d bytes, err %v", end, len(data), err)
		}
	})
}

func TestPayload(t *testing.T) {
	seq := uint64(0)
	rnd := func() uint64 { seq++; return seq * 0x9e3779b97f4a7c15 }
	msg := make([]byte, 100)
	FillPayload(msg, false, MsgID{7, 1 << 40}, rnd)
	probe := make([]byte, MinPayload)
	FillPayload(probe, true, MsgID{3, 9}, rnd)
	odd := make([]byte, MinPayload+3) // a tail shorter than one fill word
	FillPayload(odd, false, MsgID{1, 2}, rnd)
	damaged := slices.Clone(msg)
	damaged[50] ^= 4
	damagedID := slices.Clone(msg)
	damagedID[6] ^= 1
	cases := []struct {
		name string
		b    []byte
		kind Kind
		id   MsgID
	}{
		{"message", msg, KindMessage, MsgID{7, 1 << 40}},
		{"probe", probe, KindProbe, MsgID{3, 9}},
		{"odd size", odd, KindMessage, MsgID{1, 2}},
		{"damaged body", damaged, KindCorrupt, MsgID{7, 1 << 40}},
		{"damaged id", damagedID, KindCorrupt, MsgID{7 ^ 1<<8, 1 << 40}},
		{"short", msg[:19], KindForeign, MsgID{}},
		{"a line of text", []byte("hello from lqcat, a line of text"), KindForeign, MsgID{}},
		{"empty", nil, KindForeign, MsgID{}},
	}
	for _, tc := range cases {
		k, id := ParsePayload(tc.b)
		if k != tc.kind || id != tc.id {
			t.Errorf("%s: %v %v, want %v %v", tc.name, k, id, tc.kind, tc.id)
		}
	}
}

func FuzzParsePayload(f *testing.F) {
	msg := make([]byte, 64)
	FillPayload(msg, false, MsgID{1, 2}, func() uint64 { return 3 })
	f.Add(msg)
	f.Add([]byte("LQCP"))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, id := ParsePayload(b)
		if k == KindMessage || k == KindProbe {
			again := slices.Clone(b)
			FillPayload(again[:PayloadHeader], k == KindProbe, id, nil)
			if !bytes.Equal(again[:16], b[:16]) {
				t.Fatalf("header of %v %v does not encode back", k, id)
			}
		}
	})
}

func TestReadReplicaLayout(t *testing.T) {
	// A missing directory is an empty replica.
	r, err := ReadReplica(filepath.Join(t.TempDir(), "none"), 1, true)
	if err != nil || len(r.Batches) != 0 || r.End != 0 || r.Damage != nil {
		t.Fatalf("missing dir: %+v, %v", r, err)
	}

	// Two segments whose offsets do not meet: damage at the second, the first kept.
	bs := testBatches(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "00000000000000000000.log"), bs[0], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "00000000000000000005.log"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "00000000000000000000.log.broken.123"), []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err = ReadReplica(dir, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Batches) != 1 || r.End != 2 || r.Damage == nil || r.HasState {
		t.Fatalf("gap: %d batches to %d, damage %v, state %v", len(r.Batches), r.End, r.Damage, r.HasState)
	}
	if r.Committed != r.End {
		t.Errorf("without raft.state Committed %d, want End %d", r.Committed, r.End)
	}
	if n, err := LastOffset(dir); err != nil || n != 5 {
		t.Errorf("LastOffset = %d, %v; want 5 (the empty newest segment's base)", n, err)
	}

	// LastOffset of a running replica: a half-written batch at the end is not counted.
	dir = t.TempDir()
	data := concat(bs)
	if err := os.WriteFile(filepath.Join(dir, "00000000000000000000.log"), data[:len(data)-4], 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := LastOffset(dir); err != nil || n != 3 {
		t.Errorf("LastOffset = %d, %v; want 3", n, err)
	}
	if n, err := LastOffset(t.TempDir()); err != nil || n != 0 {
		t.Errorf("LastOffset of an empty dir = %d, %v", n, err)
	}
}

// TestReadReplicaCommit maps the commit index to offsets: below, at and past the log.
func TestReadReplicaCommit(t *testing.T) {
	bs := testBatches(t) // raft indexes 1-3, offsets [0,2) [2,3) [3,4)
	for _, tc := range []struct {
		commit    uint64
		committed int64
		beyond    bool
	}{{1, 2, false}, {2, 3, false}, {3, 4, false}, {4, 4, true}} {
		root := t.TempDir()
		dir := writeReplica(t, root, 1, bs, tc.commit)
		r, err := ReadReplica(dir, 1, true)
		if err != nil {
			t.Fatal(err)
		}
		if !r.HasState || r.CommitIndex != tc.commit || r.Committed != tc.committed || r.CommitBeyond != tc.beyond {
			t.Errorf("commit %d: committed %d beyond %v (state %v, index %d); want %d, %v",
				tc.commit, r.Committed, r.CommitBeyond, r.HasState, r.CommitIndex, tc.committed, tc.beyond)
		}
		r, err = ReadReplica(dir, 1, false)
		if err != nil || r.HasState || r.Committed != 4 {
			t.Errorf("without state: %+v, %v", r, err)
		}
	}

	// A replica brought up from a snapshot at index 7 (its log starts after it, empty): its
	// commit index 7 is not beyond its log; 8 is.
	for _, tc := range []struct {
		commit uint64
		beyond bool
	}{{7, false}, {8, true}} {
		dir := t.TempDir()
		sf, _, err := raftlog.OpenState(vfs.OS, filepath.Join(dir, raftlog.StateFileName))
		if err != nil {
			t.Fatal(err)
		}
		if err := sf.Save(raftlog.State{HardState: raftpb.HardState{Term: 2, Commit: tc.commit}, SnapIndex: 7, SnapTerm: 2, FirstOffset: 12}, true); err != nil {
			t.Fatal(err)
		}
		sf.Close()
		if err := os.WriteFile(filepath.Join(dir, "00000000000000000012.log"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := ReadReplica(dir, 1, true)
		if err != nil {
			t.Fatal(err)
		}
		if r.CommitBeyond != tc.beyond || r.Committed != 12 || r.SnapIndex != 7 {
			t.Errorf("snapshot 7, commit %d: beyond %v, committed %d, snap %d", tc.commit, r.CommitBeyond, r.Committed, r.SnapIndex)
		}
	}
}
