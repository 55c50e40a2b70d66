package transport

import (
	"bytes"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// TestVecFrameMatchesAppendFrame: vecFrame's pieces, joined, are appendFrame's bytes for the
// messages raft sends (appends with small, large, nil and empty data, heartbeats, responses
// with a context, a snapshot, several groups in one frame), and the frame decodes.
func TestVecFrameMatchesAppendFrame(t *testing.T) {
	big := func(n int, seed byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = seed + byte(i*7)
		}
		return b
	}
	app := raftpb.Message{Type: raftpb.MsgApp, To: 2, From: 1, Term: 7, LogTerm: 7, Index: 1 << 40, Commit: 99,
		Entries: []raftpb.Entry{
			{Type: raftpb.EntryNormal, Term: 7, Index: 1<<40 + 1, Data: big(512<<10, 1)},
			{Type: raftpb.EntryNormal, Term: 7, Index: 1<<40 + 2},
			{Type: raftpb.EntryConfChangeV2, Term: 7, Index: 1<<40 + 3, Data: []byte{1, 2, 3}},
			{Type: raftpb.EntryNormal, Term: 7, Index: 1<<40 + 4, Data: []byte{}},
			{Type: raftpb.EntryNormal, Term: 7, Index: 1<<40 + 5, Data: big(vecMinData, 2)},
			{Type: raftpb.EntryNormal, Term: 7, Index: 1<<40 + 6, Data: big(vecMinData-1, 3)},
		}}
	cases := []struct {
		name string
		envs []Envelope
	}{
		{"one append", []Envelope{{Group: 3, Msg: app}}},
		{"small entries only", []Envelope{{Group: 1, Msg: raftpb.Message{Type: raftpb.MsgApp, To: 2, From: 1, Term: 1,
			Entries: []raftpb.Entry{{Term: 1, Index: 1, Data: []byte("x")}}}}}},
		{"mixed groups", []Envelope{
			{Group: 0, Msg: raftpb.Message{Type: raftpb.MsgHeartbeat, To: 2, From: 1, Term: 7, Commit: 5, Context: []byte("ctx")}},
			{Group: 1 << 20, Msg: app},
			{Group: 5, Msg: raftpb.Message{Type: raftpb.MsgAppResp, To: 2, From: 1, Term: 7, Index: 9, Reject: true, RejectHint: 4, Context: []byte{}}},
			{Group: 6, Msg: raftpb.Message{Type: raftpb.MsgSnap, To: 2, From: 1, Term: 7, Snapshot: &raftpb.Snapshot{Data: big(8<<10, 4),
				Metadata: raftpb.SnapshotMetadata{Index: 3, Term: 2, ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}}},
			{Group: 7, Msg: app},
		}},
	}
	var f vecFrame
	for _, c := range cases {
		want, err := appendFrame(nil, c.envs)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.build(c.envs); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var got []byte
		for _, b := range f.bufs {
			got = append(got, b...)
		}
		if f.size != len(got) || !bytes.Equal(got, want) {
			t.Fatalf("%s: vecFrame's %d bytes (size %d) differ from appendFrame's %d", c.name, len(got), f.size, len(want))
		}
		n := 0
		if err := decodeFrame(got, func(Envelope) { n++ }); err != nil || n != len(c.envs) {
			t.Fatalf("%s: decode: %d envelopes, %v", c.name, n, err)
		}
		f.reset()
	}
}

// BenchmarkVecFrame: building a leader's frame of two 512 KiB appends, without the copy of
// the data (compare BenchmarkAppendFrame-style marshalling into a buffer).
func BenchmarkVecFrame(b *testing.B) {
	data := make([]byte, 512<<10)
	m := raftpb.Message{Type: raftpb.MsgApp, To: 2, From: 1, Term: 3, Entries: []raftpb.Entry{{Term: 3, Index: 1, Data: data}, {Term: 3, Index: 2, Data: data}}}
	envs := []Envelope{{Group: 1, Msg: m}}
	b.Run("vec", func(b *testing.B) {
		var f vecFrame
		b.SetBytes(int64(2 * len(data)))
		b.ReportAllocs()
		for b.Loop() {
			if err := f.build(envs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("copy", func(b *testing.B) {
		var buf []byte
		b.SetBytes(int64(2 * len(data)))
		b.ReportAllocs()
		for b.Loop() {
			var err error
			if buf, err = appendFrame(buf[:0], envs); err != nil {
				b.Fatal(err)
			}
		}
	})
}
