package raftlog

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestSnapshotData(t *testing.T) {
	good := AppendSnapshotData(nil, 1<<40+5)
	if off, err := decodeSnapshotData(good); err != nil || off != 1<<40+5 {
		t.Fatalf("round trip: %d %v", off, err)
	}
	with := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty (raft's empty snapshot)", nil, "0 bytes"},
		{"short", good[:15], "in 15 bytes"},
		{"long", append(bytes.Clone(good), 0), "in 17 bytes"},
		{"magic", with(func(b []byte) []byte { b[0] = 'X'; return b }), "magic"},
		{"version 2 of version 1's size", with(func(b []byte) []byte { b[4] = 2; return b }), "version 2 in 16 bytes"},
		{"version 3", with(func(b []byte) []byte { b[4] = 3; return b }), "version 3, want 1 or 2"},
		{"version 2 without a source", appendSnapshotData2(nil, SnapData{FirstOffset: 9, Start: 1}), "source node 0"},
		{"version 2 starting after its offset", appendSnapshotData2(nil, SnapData{FirstOffset: 9, Source: 2, Start: 10}), "log start 10"},
		{"reserved", with(func(b []byte) []byte { b[6] = 1; return b }), "reserved"},
		{"negative offset", with(func(b []byte) []byte { b[8] = 0x80; return b }), "first offset -"},
	} {
		if _, err := decodeSnapshotData(tc.b); !errors.Is(err, errSnapshotData) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// FuzzSnapshotData: accepted data re-encodes to itself.
func FuzzSnapshotData(f *testing.F) {
	f.Add(appendSnapshotData(nil, 0))
	f.Add(appendSnapshotData(nil, 123456789))
	f.Add([]byte("LQSN\x01\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff"))
	f.Add(appendSnapshotData2(nil, SnapData{FirstOffset: 900, Source: 3, Start: 100}))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeSnapshotData(b)
		if err != nil {
			if !errors.Is(err, errSnapshotData) {
				t.Fatalf("error %v does not wrap errSnapshotData", err)
			}
			return
		}
		again := appendSnapshotData(nil, d.FirstOffset)
		if b[4] == snapVersion2 {
			again = appendSnapshotData2(nil, d)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("%x re-encodes as %x", b, again)
		}
	})
}
