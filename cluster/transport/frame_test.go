package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

func appendMsg(term, index uint64, data ...[]byte) raftpb.Message {
	m := raftpb.Message{Type: raftpb.MsgApp, To: 2, From: 1, Term: term, Index: index, LogTerm: term, Commit: index}
	for i, d := range data {
		m.Entries = append(m.Entries, raftpb.Entry{Term: term, Index: index + uint64(i) + 1, Data: d})
	}
	return m
}

func encodeMsg(t *testing.T, m *raftpb.Message) []byte {
	t.Helper()
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFrameRoundTrip(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 300_000)
	cases := []struct {
		name string
		envs []Envelope
	}{
		{"one heartbeat", []Envelope{{Group: 7, Msg: raftpb.Message{Type: raftpb.MsgHeartbeat, To: 2, From: 1, Term: 3, Commit: 9}}}},
		{"group 0 and a large group id", []Envelope{{Group: 0, Msg: raftpb.Message{Type: raftpb.MsgVote, To: 3, From: 1, Term: 1 << 40}}, {Group: 1<<63 + 5, Msg: raftpb.Message{Type: raftpb.MsgVoteResp}}}},
		{"append with entries", []Envelope{{Group: 1, Msg: appendMsg(4, 100, []byte("a"), nil, big)}}},
		{"zero message", []Envelope{{}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			frame, err := appendFrame([]byte("prefix"), tc.envs)
			if err != nil {
				t.Fatal(err)
			}
			if string(frame[:6]) != "prefix" {
				t.Fatal("appendFrame overwrote the bytes before it")
			}
			frame = frame[6:]
			var got []Envelope
			if err := decodeFrame(frame, func(e Envelope) { got = append(got, e) }); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.envs) {
				t.Fatalf("decoded %d envelopes, want %d", len(got), len(tc.envs))
			}
			for i := range got {
				if got[i].Group != tc.envs[i].Group || !bytes.Equal(encodeMsg(t, &got[i].Msg), encodeMsg(t, &tc.envs[i].Msg)) {
					t.Fatalf("envelope %d: got %+v, want %+v", i, got[i], tc.envs[i])
				}
			}
			size, err := frameSize(frame)
			if err != nil || size != len(frame) {
				t.Fatalf("frameSize = %d, %v; want %d", size, err, len(frame))
			}
		})
	}
}

func TestDecodeFrameErrors(t *testing.T) {
	good, err := appendFrame(nil, []Envelope{{Group: 1, Msg: appendMsg(2, 10, []byte("hello"))}})
	if err != nil {
		t.Fatal(err)
	}
	refix := func(b []byte) []byte {
		binary.BigEndian.PutUint32(b, uint32(len(b)-4))
		binary.BigEndian.PutUint32(b[4:], checksum(b[8:]))
		return b
	}
	mutate := func(f func([]byte) []byte) []byte { return f(bytes.Clone(good)) }
	cases := []struct {
		name  string
		frame []byte
	}{
		{"short header", good[:5]},
		{"length too small", mutate(func(b []byte) []byte { binary.BigEndian.PutUint32(b, 3); return b })},
		{"length over the limit", mutate(func(b []byte) []byte { binary.BigEndian.PutUint32(b, MaxFrame+1); return b })},
		{"length disagrees", mutate(func(b []byte) []byte { return b[:len(b)-1] })},
		{"crc", mutate(func(b []byte) []byte { b[len(b)-1] ^= 1; return b })},
		{"group varint cut", refix(append(bytes.Clone(good[:8]), 0x80))},
		{"message past the end", refix(append(bytes.Clone(good[:8]), 1, 50, 1, 2))},
		{"not protobuf", refix(append(bytes.Clone(good[:8]), 1, 3, 0xff, 0xff, 0xff))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := decodeFrame(tc.frame, func(Envelope) {})
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("got %v, want ErrBadFrame", err)
			}
		})
	}
}

func FuzzDecodeFrame(f *testing.F) {
	good, _ := appendFrame(nil, []Envelope{{Group: 3, Msg: appendMsg(2, 10, []byte("hello"), []byte("world"))}, {Group: 4, Msg: raftpb.Message{Type: raftpb.MsgHeartbeat}}})
	f.Add(good)
	f.Add(good[:9])
	f.Add([]byte{0, 0, 0, 6, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) >= frameHeaderSize {
			// Give the CRC a chance: most mutations would stop there.
			if n := binary.BigEndian.Uint32(b); int(n) == len(b)-4 && b[7]&1 == 1 {
				binary.BigEndian.PutUint32(b[4:], checksum(b[8:]))
			}
		}
		var envs []Envelope
		if err := decodeFrame(b, func(e Envelope) { envs = append(envs, e) }); err != nil {
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("error %v does not wrap ErrBadFrame", err)
			}
			return
		}
		// What decodes re-encodes to a frame that decodes to the same messages.
		again, err := appendFrame(nil, envs)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		if err := decodeFrame(again, func(e Envelope) {
			if e.Group != envs[n].Group || !bytes.Equal(encodeMsg(t, &e.Msg), encodeMsg(t, &envs[n].Msg)) {
				t.Fatalf("envelope %d changed on re-encoding", n)
			}
			n++
		}); err != nil {
			t.Fatal(err)
		}
	})
}
