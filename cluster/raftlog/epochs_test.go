package raftlog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/log/vfs"
)

// TestEpochsDecode: a table of damaged files, each refused with the reason, and the round
// trip of a valid one.
func TestEpochsDecode(t *testing.T) {
	valid := appendEpochs(nil, []epoch{{1, 1}, {3, 10}, {7, 11}})
	if list, err := decodeEpochs(valid); err != nil || len(list) != 3 || list[2] != (epoch{7, 11}) {
		t.Fatalf("round trip: %v %v", list, err)
	}
	if list, err := decodeEpochs(appendEpochs(nil, nil)); err != nil || len(list) != 0 {
		t.Fatalf("empty: %v %v", list, err)
	}
	for _, tc := range []struct {
		name    string
		corrupt func(b []byte) []byte
		message string
	}{
		{"short", func(b []byte) []byte { return b[:10] }, "shorter than the header"},
		{"no magic", func(b []byte) []byte { b[0] = 'X'; return b }, "no magic"},
		{"a new version", func(b []byte) []byte { b[4] = 9; return b }, "version 9"},
		{"cut short", func(b []byte) []byte { return b[:len(b)-1] }, "3 epochs in 63 bytes"},
		{"a count past the limit", func(b []byte) []byte { b[8] = 0xff; return b }, "epochs in 64 bytes"},
		{"a flipped bit", func(b []byte) []byte { b[30] ^= 4; return b }, "crc"},
		{"terms not increasing", func([]byte) []byte {
			b := appendEpochs(nil, []epoch{{3, 1}, {3, 10}})
			return b
		}, "does not follow"},
		{"first indexes not increasing", func([]byte) []byte {
			return appendEpochs(nil, []epoch{{3, 10}, {4, 10}})
		}, "does not follow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeEpochs(tc.corrupt(bytes.Clone(valid)))
			if err == nil || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("%v, want %q", err, tc.message)
			}
		})
	}
}

// TestEpochsList: termAt, noteAppend (saved when a term starts, epochs past a cut dropped),
// compactTo, and the file as saved.
func TestEpochsList(t *testing.T) {
	dir := t.TempDir()
	e, found, err := loadEpochs(vfs.OS, filepath.Join(dir, EpochsFileName))
	if err != nil || found {
		t.Fatalf("new: %v %v", found, err)
	}
	for _, a := range []struct{ i, term uint64 }{{1, 1}, {2, 1}, {3, 2}, {4, 2}, {5, 4}, {6, 4}} {
		if err := e.noteAppend(a.i, a.term); err != nil {
			t.Fatal(err)
		}
	}
	want := []epoch{{1, 1}, {2, 3}, {4, 5}}
	check := func(want []epoch) {
		t.Helper()
		got, found, err := loadEpochs(vfs.OS, e.path)
		if err != nil || !found || len(got.list) != len(want) {
			t.Fatalf("saved %v %v %v, want %v", got, found, err, want)
		}
		for i := range want {
			if got.list[i] != want[i] || e.list[i] != want[i] {
				t.Fatalf("epoch %d: saved %v, held %v, want %v", i, got.list[i], e.list[i], want[i])
			}
		}
	}
	check(want)
	for i, term := range map[uint64]uint64{1: 1, 2: 1, 3: 2, 4: 2, 5: 4, 99: 4} {
		if got, ok := e.termAt(i); !ok || got != term {
			t.Fatalf("termAt(%d) = %d %v, want %d", i, got, ok, term)
		}
	}
	if _, ok := e.termAt(0); ok {
		t.Fatal("termAt(0) covered")
	}
	// A cut at 4 and a new term at 4: the epoch of term 4 goes.
	if err := e.noteAppend(4, 5); err != nil {
		t.Fatal(err)
	}
	check([]epoch{{1, 1}, {2, 3}, {5, 4}})
	if err := e.noteAppend(5, 3); !errors.Is(err, ErrBadEntry) {
		t.Fatalf("a term going down: %v", err)
	}
	if !e.compactTo(4) || e.compactTo(4) {
		t.Fatal("compactTo")
	}
	if err := e.save(); err != nil {
		t.Fatal(err)
	}
	check([]epoch{{5, 4}})
	if !e.dropFrom(4) || e.covers(4) {
		t.Fatal("dropFrom")
	}
}

// TestEpochsRebuilt: a leader epochs file lost or damaged is built again at Open from the
// entries the walk reads (the active segment), which are checked from then on.
func TestEpochsRebuilt(t *testing.T) {
	for _, damage := range []string{"removed", "damaged"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			s := mustOpen(t, dir, Options{})
			ents := mixedEntries(1, 40, 1, 10)
			mustAppend(t, s, clone(ents))
			if err := s.SetHardState(raftpb.HardState{Term: 4, Commit: 40}); err != nil {
				t.Fatal(err)
			}
			s.Close()
			path := filepath.Join(dir, EpochsFileName)
			if damage == "removed" {
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
			} else {
				b := readFile(t, path)
				b[20] ^= 1
				writeFile(t, path, b)
			}
			s = mustOpen(t, dir, Options{})
			defer s.Close()
			if got := s.ep.list; len(got) != 4 || got[0] != (epoch{1, 1}) || got[3] != (epoch{4, 31}) {
				t.Fatalf("rebuilt: %v", got)
			}
			e, found, err := loadEpochs(vfs.OS, path)
			if err != nil || !found || len(e.list) != 4 {
				t.Fatalf("saved: %v %v %v", e, found, err)
			}
		})
	}
}

// FuzzDecodeEpochs: the decoder never panics, and what it accepts encodes back to the same
// bytes, with terms and first indexes increasing.
func FuzzDecodeEpochs(f *testing.F) {
	f.Add(appendEpochs(nil, nil))
	f.Add(appendEpochs(nil, []epoch{{1, 1}, {2, 5}, {9, 6}}))
	f.Add([]byte("LQEP\x01\x00\x00\x00\x00\x00\x00\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		list, err := decodeEpochs(b)
		if err != nil {
			return
		}
		if again := appendEpochs(nil, list); !bytes.Equal(again, b) {
			t.Fatalf("re-encoded %x, decoded from %x", again, b)
		}
		for i := 1; i < len(list); i++ {
			if list[i].term <= list[i-1].term || list[i].first <= list[i-1].first {
				t.Fatalf("accepted %v", list)
			}
		}
	})
}
