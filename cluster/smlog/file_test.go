package smlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

func sampleSnap() raftpb.Snapshot {
	return raftpb.Snapshot{Data: encodeT(tstate{13, "the state"}), Metadata: raftpb.SnapshotMetadata{Index: 13, Term: 3,
		ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}}}
}

// TestFileRoundTrip: a written file reads back whole; a temporary file a crash left is
// removed; no file is not an error.
func TestFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if _, _, ok, err := testFormat.ReadFile(dir); ok || err != nil {
		t.Fatalf("no file: %v %v", ok, err)
	}
	snap := sampleSnap()
	if err := os.WriteFile(filepath.Join(dir, testFormat.tempPrefix()+"123"), []byte("left by a crash"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := testFormat.WriteFile(dir, snap); err != nil {
		t.Fatal(err)
	}
	got, st, ok, err := testFormat.ReadFile(dir)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if got.Metadata.Index != 13 || got.Metadata.Term != 3 || !bytes.Equal(got.Data, snap.Data) ||
		len(got.Metadata.ConfState.Voters) != 3 || got.Metadata.ConfState.Learners[0] != 4 || *st != (tstate{13, "the state"}) {
		t.Fatalf("read back %+v, %+v", got.Metadata, st)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("files left: %v", ents)
	}
}

// TestDecodeFileErrors: each check of the file's decoder, and a damaged file on disk, which
// is Corrupt and names the file.
func TestDecodeFileErrors(t *testing.T) {
	good, err := testFormat.AppendFile(nil, sampleSnap())
	if err != nil {
		t.Fatal(err)
	}
	reseal := func(b []byte) []byte {
		binary.BigEndian.PutUint32(b[8:], crc32.Checksum(b[12:], castagnoli))
		return b
	}
	with := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	file := func(snap raftpb.Snapshot) []byte {
		b, err := testFormat.AppendFile(nil, snap)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	otherIndex := sampleSnap()
	otherIndex.Metadata.Index++
	badState, bigState := sampleSnap(), sampleSnap()
	badState.Data = []byte("XX")
	bigState.Data = encodeT(tstate{13, strings.Repeat("x", testFormat.MaxState)})
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "shorter than its header"},
		{"header torn", good[:11], "shorter than its header"},
		{"magic", with(func(b []byte) []byte { b[1] = 'X'; return b }), "magic"},
		{"version", with(func(b []byte) []byte { b[4] = 9; return b }), "version 9"},
		{"reserved", with(func(b []byte) []byte { b[5] = 1; return b }), "reserved"},
		{"crc", with(func(b []byte) []byte { b[20] ^= 1; return b }), "crc32c"},
		{"torn", good[:len(good)-3], "crc32c"},
		{"zeroed", make([]byte, len(good)), "magic"},
		{"truncated", reseal(bytes.Clone(good[:len(good)-1])), "needs"},
		{"trailing", reseal(append(bytes.Clone(good), 1)), "trailing"},
		{"membership", with(func(b []byte) []byte { b[32] = 0xff; return reseal(b) }), "membership"},
		{"state", file(badState), "state"},
		{"state over the limit", file(bigState), "state"},
		{"index mismatch", file(otherIndex), "a state as of index 13 in a snapshot at index 14"},
	} {
		if _, _, err := testFormat.DecodeFile(tc.b); !errors.Is(err, errTestMalformed) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want errTestMalformed with %q", tc.name, err, tc.want)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, testFormat.FileName), good[:40], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := testFormat.ReadFile(dir); !errors.Is(err, errTestCorrupt) || !errors.Is(err, errTestMalformed) ||
		!strings.Contains(err.Error(), testFormat.FileName) {
		t.Fatalf("damaged file: %v", err)
	}
}

// FuzzDecodeFile: a snapshot file either fails to decode (Malformed), or decodes to a
// snapshot whose file, written again, decodes to the same snapshot.
func FuzzDecodeFile(f *testing.F) {
	good, err := testFormat.AppendFile(nil, sampleSnap())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:20])
	f.Fuzz(func(t *testing.T, b []byte) {
		snap, st, err := testFormat.DecodeFile(b)
		if err != nil {
			if !errors.Is(err, errTestMalformed) {
				t.Fatalf("an error that is not Malformed: %v", err)
			}
			return
		}
		if st.index != snap.Metadata.Index {
			t.Fatalf("a state as of %d in a snapshot at %d", st.index, snap.Metadata.Index)
		}
		again, err := testFormat.AppendFile(nil, snap)
		if err != nil {
			t.Fatal(err)
		}
		snap2, _, err := testFormat.DecodeFile(again)
		if err != nil {
			t.Fatalf("re-encoded file does not decode: %v", err)
		}
		if snap2.Metadata.Index != snap.Metadata.Index || snap2.Metadata.Term != snap.Metadata.Term ||
			snap2.Metadata.ConfState.Equivalent(snap.Metadata.ConfState) != nil ||
			!bytes.Equal(snap2.Data, snap.Data) {
			t.Fatalf("re-encoded file decodes to another snapshot: %+v, want %+v", snap2.Metadata, snap.Metadata)
		}
	})
}
