package offsets

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/wire"
)

func str(s string) []byte { return wire.AppendString(nil, s) }
func i64(v int64) []byte  { return wire.AppendI64(nil, v) }
func u32(v uint32) []byte { return wire.AppendU32(nil, v) }
func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

var testKey = Key{Topic: "orders", Created: 1700000000000, Group: "billing", Partition: 3}

// TestRecordRoundTrip: commits and drops encode and decode back, in an entry too.
func TestRecordRoundTrip(t *testing.T) {
	for _, rec := range []record{
		{kind: kindCommit, key: testKey, offset: 120},
		{kind: kindCommit, key: Key{Topic: strings.Repeat("t", wire.MaxTopicName), Created: -1, Group: strings.Repeat("é", 127), Partition: 1<<32 - 1}, offset: 1<<63 - 1},
		{kind: kindCommit, key: Key{Topic: "t", Group: "g"}, offset: 0},
		{kind: kindDrop, key: Key{Topic: "orders", Created: 5}},
		{kind: kindSession, key: Key{Topic: "orders", Created: 5, Group: "billing"}, session: 10_000},
		{kind: kindSession, key: Key{Topic: "t", Created: -1, Group: "g"}, session: 1<<32 - 1},
	} {
		b := appendRecord(nil, &rec)
		got, err := decodeRecord(b)
		if err != nil || got != rec {
			t.Fatalf("%+v: decoded %+v, %v", rec, got, err)
		}
		e, err := decodeEntry(encodeEntry(&rec))
		if err != nil || e != rec {
			t.Fatalf("%+v: from the entry %+v, %v", rec, e, err)
		}
	}
}

// TestRecordRefusals: every way a record can be wrong is refused with ErrMalformed.
func TestRecordRefusals(t *testing.T) {
	good := cat([]byte{1, kindCommit}, str("orders"), i64(1), str("g"), u32(0), i64(5))
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"version 2", cat([]byte{2, kindCommit}, good[2:])},
		{"kind 0", cat([]byte{1, 0}, str("orders"), i64(1))},
		{"kind 4", cat([]byte{1, 4}, str("orders"), i64(1))},
		{"session of 0 ms", cat([]byte{1, kindSession}, str("orders"), i64(1), str("g"), u32(0))},
		{"session without a group", cat([]byte{1, kindSession}, str("orders"), i64(1), str(""), u32(5))},
		{"session truncated", cat([]byte{1, kindSession}, str("orders"), i64(1), str("g"), u32(5))[:19]},
		{"truncated", good[:len(good)-1]},
		{"trailing byte", cat(good, []byte{0})},
		{"drop with commit fields", cat([]byte{1, kindDrop}, good[2:])},
		{"bad topic name", cat([]byte{1, kindCommit}, str("a/b"), i64(1), str("g"), u32(0), i64(5))},
		{"topic 250", cat([]byte{1, kindCommit}, str(strings.Repeat("t", 250)), i64(1), str("g"), u32(0), i64(5))},
		{"empty group", cat([]byte{1, kindCommit}, str("orders"), i64(1), str(""), u32(0), i64(5))},
		{"group with NUL", cat([]byte{1, kindCommit}, str("orders"), i64(1), str("g\x00"), u32(0), i64(5))},
		{"negative offset", cat([]byte{1, kindCommit}, str("orders"), i64(1), str("g"), u32(0), i64(-1))},
		{"drop of a bad topic", cat([]byte{1, kindDrop}, str(".."), i64(1))},
		{"over the limit", make([]byte, maxRecord+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := decodeRecord(tc.b); !errors.Is(err, ErrMalformed) {
				t.Fatalf("decodeRecord: %v, want ErrMalformed", err)
			}
		})
	}
	if _, err := decodeRecord(good); err != nil {
		t.Fatalf("the good record: %v", err)
	}
}

// TestEntryRefusals: an entry must be one uncompressed record in a valid batch.
func TestEntryRefusals(t *testing.T) {
	rec := record{kind: kindCommit, key: testKey, offset: 9}
	value := appendRecord(nil, &rec)
	two := func() []byte {
		var bb wire.BatchBuilder
		bb.SetMagic(wire.BatchMagic2)
		bb.Append(1, nil, value, nil)
		bb.Append(2, nil, value, nil)
		b, _ := bb.Finish(wire.CodecNone, nil)
		return bytes.Clone(b)
	}()
	flipped := encodeEntry(&rec)
	flipped[len(flipped)-1] ^= 1
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"not a batch", value},
		{"two records", two},
		{"bad crc", flipped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := decodeEntry(tc.b); !errors.Is(err, ErrMalformed) {
				t.Fatalf("decodeEntry: %v, want ErrMalformed", err)
			}
		})
	}
}

func testState() *state {
	s := newState()
	s.apply(7, &record{kind: kindCommit, key: testKey, offset: 10})
	s.apply(8, &record{kind: kindCommit, key: Key{Topic: "orders", Created: 1700000000000, Group: "audit", Partition: 0}, offset: 0})
	s.apply(9, &record{kind: kindCommit, key: Key{Topic: "a", Created: 2, Group: "billing", Partition: 1}, offset: 1 << 40})
	s.apply(10, &record{kind: kindCommit, key: testKey, offset: 11})
	return s
}

// TestStateApply: commits replace, drops remove one topic creation, and the counts follow.
func TestStateApply(t *testing.T) {
	s := testState()
	if len(s.offsets) != 3 || s.offsets[testKey] != 11 || s.index != 10 || len(s.topics) != 2 {
		t.Fatalf("state %+v", s)
	}
	want := testKey.size() + (&Key{Topic: "orders", Group: "audit"}).size() + (&Key{Topic: "a", Group: "billing"}).size()
	if s.bytes != want {
		t.Fatalf("bytes %d, want %d", s.bytes, want)
	}
	s.apply(11, &record{kind: kindDrop, key: Key{Topic: "orders", Created: 1}}) // another creation
	if len(s.offsets) != 3 {
		t.Fatalf("a drop of another creation removed keys: %d left", len(s.offsets))
	}
	s.apply(12, &record{kind: kindDrop, key: Key{Topic: "orders", Created: 1700000000000}})
	if len(s.offsets) != 1 || len(s.topics) != 1 || s.bytes != (&Key{Topic: "a", Group: "billing"}).size() || s.index != 12 {
		t.Fatalf("after the drop: %+v", s)
	}
}

// sessionState is testState with two group sessions.
func sessionState() *state {
	s := testState()
	s.apply(11, &record{kind: kindSession, key: Key{Topic: "orders", Created: 1700000000000, Group: "billing"}, session: 5000})
	s.apply(12, &record{kind: kindSession, key: Key{Topic: "a", Created: 2, Group: "billing"}, session: 1000})
	s.apply(13, &record{kind: kindSession, key: Key{Topic: "orders", Created: 1700000000000, Group: "billing"}, session: 9000})
	s.apply(14, &record{kind: kindSession, key: Key{Topic: "orders", Created: 1700000000000, Group: "billing"}, session: 7000}) // shorter: kept 9000
	return s
}

// TestStateSessions: a session raises the group's (never lowers it), counts for its topic creation, and a
// drop of the creation removes it with the offsets.
func TestStateSessions(t *testing.T) {
	s := sessionState()
	ref := GroupRef{Topic: "orders", Created: 1700000000000, Group: "billing"}
	if len(s.sessions) != 2 || s.sessions[ref] != 9000 || s.topics[TopicRef{"orders", 1700000000000}] != 3 {
		t.Fatalf("state %+v", s)
	}
	bytes0 := testState().bytes + ref.size() + (&GroupRef{Topic: "a", Group: "billing"}).size()
	if s.bytes != bytes0 {
		t.Fatalf("bytes %d, want %d", s.bytes, bytes0)
	}
	s.apply(15, &record{kind: kindDrop, key: Key{Topic: "orders", Created: 1700000000000}})
	if _, ok := s.sessions[ref]; ok || len(s.sessions) != 1 || len(s.topics) != 1 {
		t.Fatalf("after the drop: %+v", s)
	}
	s.apply(16, &record{kind: kindDrop, key: Key{Topic: "a", Created: 2}})
	if len(s.sessions) != 0 || len(s.offsets) != 0 || s.bytes != 0 || len(s.topics) != 0 {
		t.Fatalf("after the last drop: %+v", s)
	}
}

// TestStateRoundTrip: a state's snapshot decodes to the same state and encodes to the same
// bytes; a state without sessions is version 1, one with sessions version 2.
func TestStateRoundTrip(t *testing.T) {
	if b := appendState(nil, testState()); b[4] != stateVersion {
		t.Fatalf("a state without sessions is version %d", b[4])
	}
	if b := appendState(nil, sessionState()); b[4] != stateSessions {
		t.Fatalf("a state with sessions is version %d", b[4])
	}
	for _, s := range []*state{newState(), testState(), sessionState()} {
		b := appendState(nil, s)
		got, err := decodeState(b)
		if err != nil {
			t.Fatal(err)
		}
		if got.index != s.index || len(got.offsets) != len(s.offsets) || got.bytes != s.bytes || len(got.topics) != len(s.topics) {
			t.Fatalf("decoded %+v, want %+v", got, s)
		}
		for k, off := range s.offsets {
			if got.offsets[k] != off {
				t.Fatalf("key %+v: %d, want %d", k, got.offsets[k], off)
			}
		}
		if len(got.sessions) != len(s.sessions) {
			t.Fatalf("%d sessions decoded, want %d", len(got.sessions), len(s.sessions))
		}
		for g, ms := range s.sessions {
			if got.sessions[g] != ms {
				t.Fatalf("session %+v: %d, want %d", g, got.sessions[g], ms)
			}
		}
		if !bytes.Equal(appendState(nil, got), b) {
			t.Fatal("re-encoding differs")
		}
	}
}

// recrc fixes a state snapshot's checksum after a test changed it.
func recrc(b []byte) []byte {
	binary.BigEndian.PutUint32(b[8:], crcOf(b[stateHeader:]))
	return b
}

// TestStateRefusals: a damaged or non-canonical snapshot is refused with ErrMalformed.
func TestStateRefusals(t *testing.T) {
	good := appendState(nil, testState())
	entry := cat(str("orders"), i64(1), str("g"), u32(0), i64(1))
	withKeys := func(n uint32, keys ...[]byte) []byte {
		b := append([]byte(stateMagic), stateVersion, 0, 0, 0, 0, 0, 0, 0)
		b = append(b, cat(wire.AppendU64(nil, 5), u32(n))...)
		for _, k := range keys {
			b = append(b, k...)
		}
		return recrc(b)
	}
	withSessions := func(n uint32, sessions ...[]byte) []byte {
		b := append([]byte(stateMagic), stateSessions, 0, 0, 0, 0, 0, 0, 0)
		b = append(b, cat(wire.AppendU64(nil, 5), u32(1), entry, u32(n))...)
		for _, g := range sessions {
			b = append(b, g...)
		}
		return recrc(b)
	}
	for _, tc := range []struct {
		name    string
		corrupt func() []byte
	}{
		{"short", func() []byte { return good[:8] }},
		{"magic", func() []byte { b := bytes.Clone(good); b[0] = 'X'; return recrc(b) }},
		{"version", func() []byte { b := bytes.Clone(good); b[4] = 2; return recrc(b) }},
		{"reserved", func() []byte { b := bytes.Clone(good); b[6] = 1; return recrc(b) }},
		{"crc", func() []byte { b := bytes.Clone(good); b[len(b)-1] ^= 1; return b }},
		{"truncated", func() []byte { return recrc(bytes.Clone(good[:len(good)-1])) }},
		{"trailing", func() []byte { return recrc(append(bytes.Clone(good), 0)) }},
		{"count over bytes", func() []byte { return withKeys(1000, entry) }},
		{"duplicate key", func() []byte { return withKeys(2, entry, entry) }},
		{"keys out of order", func() []byte {
			return withKeys(2, cat(str("b"), i64(1), str("g"), u32(0), i64(1)), cat(str("a"), i64(1), str("g"), u32(0), i64(1)))
		}},
		{"bad group", func() []byte { return withKeys(1, cat(str("orders"), i64(1), str(""), u32(0), i64(1))) }},
		{"negative offset", func() []byte { return withKeys(1, cat(str("orders"), i64(1), str("g"), u32(0), i64(-5))) }},
		{"over the limit", func() []byte { return make([]byte, MaxSnapshot+1) }},
		{"version 3", func() []byte { b := bytes.Clone(good); b[4] = 3; return recrc(b) }},
		{"version 2 without sessions", func() []byte { return withSessions(0) }},
		{"version 2 session of 0 ms", func() []byte { return withSessions(1, cat(str("orders"), i64(1), str("g"), u32(0))) }},
		{"version 2 sessions out of order", func() []byte {
			return withSessions(2, cat(str("orders"), i64(1), str("h"), u32(5)), cat(str("orders"), i64(1), str("g"), u32(5)))
		}},
		{"version 2 duplicate session", func() []byte {
			return withSessions(2, cat(str("orders"), i64(1), str("g"), u32(5)), cat(str("orders"), i64(1), str("g"), u32(5)))
		}},
		{"version 2 session count over bytes", func() []byte { return withSessions(100, cat(str("orders"), i64(1), str("g"), u32(5))) }},
		{"version 2 truncated", func() []byte { b := appendState(nil, sessionState()); return recrc(b[:len(b)-2]) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := decodeState(tc.corrupt()); !errors.Is(err, ErrMalformed) {
				t.Fatalf("decodeState: %v, want ErrMalformed", err)
			}
		})
	}
	if _, err := decodeState(withKeys(1, entry)); err != nil {
		t.Fatalf("a valid hand-made state: %v", err)
	}
	if _, err := decodeState(withSessions(1, cat(str("orders"), i64(1), str("g"), u32(5)))); err != nil {
		t.Fatalf("a valid hand-made state with a session: %v", err)
	}
}

// TestSnapFileGolden: the offsets' snapshot file (cluster/smlog's, with this package's
// name, magic and sentinels) is byte for byte what the broker wrote before that package
// existed: the sha-256 of testState's file, taken then. A damaged file is ErrCorrupt and
// ErrMalformed.
func TestSnapFileGolden(t *testing.T) {
	st := testState()
	b, err := snapFormat.AppendFile(nil, raftpb.Snapshot{Data: appendState(nil, st), Metadata: raftpb.SnapshotMetadata{Index: st.index, Term: 2,
		ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}}})
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(b); len(b) != 174 || hex.EncodeToString(sum[:]) != "3c05ae5142eef400d07cdb4ad79aa4914101c700cb959afa1dbb8897d66cee41" {
		t.Fatalf("the snapshot file changed: %d bytes, sha-256 %x", len(b), sum)
	}
	if snap, got, err := snapFormat.DecodeFile(b); err != nil || snap.Metadata.Index != 10 || len(got.offsets) != 3 {
		t.Fatalf("decoded %+v, %v", snap.Metadata, err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, SnapshotFileName), b[:40], 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, _, err = snapFormat.ReadFile(dir)
	if !errors.Is(err, ErrCorrupt) || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "offsets: corrupt offsets store: ") {
		t.Fatalf("a damaged file: %v", err)
	}
}

// FuzzRecord: a record that decodes is valid and re-encodes to exactly its bytes.
func FuzzRecord(f *testing.F) {
	f.Add(appendRecord(nil, &record{kind: kindCommit, key: testKey, offset: 120}))
	f.Add(appendRecord(nil, &record{kind: kindDrop, key: Key{Topic: "orders", Created: 5}}))
	f.Add(appendRecord(nil, &record{kind: kindSession, key: Key{Topic: "orders", Created: 5, Group: "g"}, session: 3000}))
	f.Add([]byte{1, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := decodeRecord(b)
		if err != nil {
			return
		}
		if rec.kind == kindCommit && checkKey(&rec.key, rec.offset) != nil {
			t.Fatalf("an invalid commit decoded: %+v", rec)
		}
		if rec.kind == kindSession && checkSession(&GroupRef{rec.key.Topic, rec.key.Created, rec.key.Group}, rec.session) != nil {
			t.Fatalf("an invalid session decoded: %+v", rec)
		}
		if re := appendRecord(nil, &rec); !bytes.Equal(re, b) {
			t.Fatalf("decode then encode is not the identity:\n in  % x\n out % x", b, re)
		}
	})
}

// FuzzState: a state snapshot that decodes re-encodes to exactly its bytes.
func FuzzState(f *testing.F) {
	f.Add(appendState(nil, testState()))
	f.Add(appendState(nil, newState()))
	f.Add(appendState(nil, sessionState()))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeState(b)
		if err != nil {
			return
		}
		if re := appendState(nil, s); !bytes.Equal(re, b) {
			t.Fatalf("decode then encode is not the identity:\n in  % x\n out % x", b, re)
		}
	})
}

func crcOf(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
