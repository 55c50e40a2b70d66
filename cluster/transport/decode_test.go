package transport

import (
	"reflect"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// FuzzDecodeMessage: the fast decoder agrees with raftpb's generated one on every input:
// both fail, or both succeed with equal messages; and an aliased decode leaves the input's
// bytes as they were (the entries point into it, they do not write it).
func FuzzDecodeMessage(f *testing.F) {
	for _, m := range []raftpb.Message{
		appendMsg(2, 10, []byte("hello"), []byte("world")),
		appendMsg(2, 10, nil, []byte{}),
		{Type: raftpb.MsgHeartbeat, To: 2, From: 1, Term: 3, Commit: 9, Context: []byte("ctx")},
		{Type: raftpb.MsgAppResp, To: 1, From: 2, Term: 3, Index: 40, Reject: true, RejectHint: 7, LogTerm: 2},
		{Type: raftpb.MsgVote, Vote: 5, Context: []byte{}},
		{Type: raftpb.MsgSnap, Snapshot: &raftpb.Snapshot{Data: []byte("s"), Metadata: raftpb.SnapshotMetadata{Index: 4, Term: 1}}},
		{Type: raftpb.MsgStorageAppend, Responses: []raftpb.Message{{Type: raftpb.MsgAppResp}}},
	} {
		b, err := m.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x3a, 0x02, 0x22, 0x00})             // an entry with empty data
	f.Add([]byte{0x3a, 0x04, 0x2a, 0x02, 0x08, 0x01}) // an entry with an unknown field
	f.Fuzz(func(t *testing.T, b []byte) {
		var want raftpb.Message
		wantErr := want.Unmarshal(b)
		keep := string(b)
		var got raftpb.Message
		var slab entrySlab
		_, err := decodeMessage(b, &got, &slab)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("decodeMessage: %v; raftpb: %v", err, wantErr)
		}
		if err == nil && !reflect.DeepEqual(&got, &want) {
			t.Fatalf("decodeMessage: %+v\nraftpb:       %+v", got, want)
		}
		if string(b) != keep {
			t.Fatal("decodeMessage changed its input")
		}
	})
}

// TestDecodeMessageAllocs: a frame of appends costs the decoder one allocation (the entries'
// slab), not one per entry.
func TestDecodeMessageAllocs(t *testing.T) {
	var envs []Envelope
	for range 8 {
		envs = append(envs, Envelope{Group: 1, Msg: appendMsg(2, 10, make([]byte, 1000), make([]byte, 1000), make([]byte, 1000))})
	}
	frame, err := appendFrame(nil, envs)
	if err != nil {
		t.Fatal(err)
	}
	n := testing.AllocsPerRun(100, func() {
		var slab entrySlab
		if _, err := decodeFrameInto(frame, &slab, func(Envelope) {}); err != nil {
			t.Fatal(err)
		}
	})
	if n > 1 {
		t.Fatalf("%.0f allocations to decode a frame of %d appends of 3 entries; want 1", n, len(envs))
	}
}
