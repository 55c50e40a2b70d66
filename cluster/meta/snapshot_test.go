package meta

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/wire"
)

// sampleState is a state with something in every part: brokers of both states, topics with
// options and users, users with grants and the admin role, a coordinator, request ids.
func sampleState(t testing.TB) *State {
	st := emptyState()
	i := uint64(0)
	for _, cmd := range []Command{
		&AddBroker{ID: 1, ClientAddr: "b1:7070", TLSAddr: "b1:7443", ClusterAddr: "b1:7071"},
		&AddBroker{ID: 2, ClientAddr: "b2:7070", ClusterAddr: "b2:7071"},
		&AddBroker{ID: 3, ClientAddr: "b3:7070", ClusterAddr: "b3:7071"},
		&CreateTopic{Name: "orders", Kind: wire.KindDurable, User: "shop", UserHash: []byte("$argon2id$v=19$m=65536,t=1,p=4$c2FsdA$aGFzaA"), CreatedAt: 1_700_000_000_123,
			Options: []wire.Option{{Key: "retention.bytes", Value: "1073741824"}}, Placement: [][]uint64{{1, 2, 3}, {2, 3, 1}}},
		&CreateTopic{Name: "events", Kind: wire.KindTransient, CreatedAt: 5, Placement: [][]uint64{{3}}},
		&CreateUser{Name: "ops", Hash: []byte("h")},
		&Grant{User: "ops", Roles: wire.RolesAdmin},
		&Grant{User: "ops", Topic: "events", Roles: wire.RolesConsume},
		&SetCoordinator{Group: "billing", Node: 2},
		// A finished move (partition 0) and one under way (partition 1).
		&SetReplicas{Topic: "orders", Partition: 0, From: []uint64{1, 2, 3}, To: []uint64{1, 3, 2}},
		&FinishMove{Topic: "orders", Partition: 0, Group: 2, Replicas: []uint64{1, 3, 2}},
		&SetReplicas{Topic: "orders", Partition: 1, From: []uint64{2, 3, 1}, To: []uint64{2, 1}},
		&DrainBroker{ID: 3},
	} {
		i++
		next, _, err := Apply(st, i, [16]byte{byte(i)}, cmd)
		if err != nil {
			t.Fatalf("%T: %v", cmd, err)
		}
		st = next
	}
	return st
}

func TestStateRoundTrip(t *testing.T) {
	for _, st := range []*State{emptyState(), sampleState(t)} {
		b := appendState(nil, st)
		got, err := decodeState(b)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Equal(st) || !bytes.Equal(appendState(nil, got), b) {
			t.Fatal("the decoded state differs")
		}
		if got.Index() != st.Index() || got.UserCount() != st.UserCount() || got.TopicCount() != st.TopicCount() {
			t.Fatalf("decoded index %d, %d users, %d topics", got.Index(), got.UserCount(), got.TopicCount())
		}
	}
}

// TestStateVersion1: a snapshot of the first layout (no moves) still decodes, as a state
// with no move under way and no moves counted, and is written in the current layout.
func TestStateVersion1(t *testing.T) {
	st := sampleState(t)
	b := appendStateV1(st)
	got, err := decodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := got.Topic("orders")
	for i, p := range o.Partitions {
		if p.Previous != nil || p.Moves != 0 {
			t.Fatalf("partition %d: previous %v moves %d", i, p.Previous, p.Moves)
		}
	}
	want, _ := st.Topic("orders")
	if !slices.Equal(o.Partitions[1].Replicas, want.Partitions[1].Replicas) || got.Index() != st.Index() || got.UserCount() != st.UserCount() {
		t.Fatal("version 1 decoded differently")
	}
	if again := appendState(nil, got); again[4] != stateVersion {
		t.Fatalf("re-encoded as version %d", again[4])
	}
}

// appendStateV1 is the version-1 encoder (without a partition's previous replicas and moves),
// to check that such snapshots still decode.
func appendStateV1(s *State) []byte {
	b := appendState(nil, s)
	cur, err := decodeState(b)
	if err != nil {
		panic(err)
	}
	var dst []byte
	dst = append(dst, stateMagic...)
	dst = append(dst, 1, 0, 0, 0, 0, 0, 0, 0)
	dst = wire.AppendU64(dst, cur.index)
	dst = wire.AppendU64(dst, cur.nextGroup)
	dst = wire.AppendU32(dst, uint32(len(cur.brokers)))
	for _, b := range cur.Brokers() {
		dst = wire.AppendU64(dst, b.ID)
		dst = append(dst, byte(b.State))
		dst = appendStr(appendStr(appendStr(dst, b.ClientAddr), b.TLSAddr), b.ClusterAddr)
	}
	dst = wire.AppendU32(dst, uint32(len(cur.topics)))
	for _, t := range cur.Topics() {
		dst = appendStr(dst, t.Name)
		dst = append(dst, byte(t.Kind))
		dst = appendStr(dst, t.User)
		dst = wire.AppendI64(dst, t.CreatedAt.UnixMilli())
		dst = appendOptions(dst, t.Options)
		dst = wire.AppendU16(dst, uint16(len(t.Partitions)))
		for _, p := range t.Partitions {
			dst = appendIDs(wire.AppendU64(dst, p.Group), p.Replicas)
		}
	}
	// The users, coordinators and request ids are laid out as in version 2: copy them.
	rest := appendState(nil, &State{index: cur.index, nextGroup: cur.nextGroup, brokers: map[uint64]*Broker{}, topics: map[string]*Topic{},
		users: cur.users, coordinators: cur.coordinators, recent: cur.recent})
	dst = append(dst, rest[stateHeader+8+8+4+4:]...)
	binary.BigEndian.PutUint32(dst[8:], crc32.Checksum(dst[stateHeader:], castagnoli))
	return dst
}

// reseal recomputes the CRC of a state snapshot after a test changed its bytes.
func reseal(b []byte) []byte {
	binary.BigEndian.PutUint32(b[8:], crc32.Checksum(b[stateHeader:], castagnoli))
	return b
}

func TestDecodeStateErrors(t *testing.T) {
	good := appendState(nil, sampleState(t))
	with := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	// encoded builds a state that apply would never make, to see the decoder refuse it.
	encoded := func(f func(s *State)) []byte {
		s := sampleState(t)
		s.brokers, s.topics, s.users, s.coordinators = clone(s.brokers), clone(s.topics), clone(s.users), clone(s.coordinators)
		f(s)
		return appendState(nil, s)
	}
	// Brokers 2 and 3 have addresses of the same length: swapping their records breaks the order.
	swapped := with(func(b []byte) []byte {
		i2 := bytes.Index(b, []byte("\x00\x07b2:7070"))
		i3 := bytes.Index(b, []byte("\x00\x07b3:7070"))
		rec := 8 + 1 + 9 + 2 + 9 // id, state, client, tls (empty), cluster
		r2 := bytes.Clone(b[i2-9 : i2-9+rec])
		copy(b[i2-9:], b[i3-9:i3-9+rec])
		copy(b[i3-9:], r2)
		return reseal(b)
	})
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "0 bytes, shorter than its header"},
		{"magic", with(func(b []byte) []byte { b[0] = 'X'; return b }), "magic"},
		{"version 3", with(func(b []byte) []byte { b[4] = 3; return b }), "version 3, this broker reads 1 and 2"},
		{"reserved", with(func(b []byte) []byte { b[6] = 1; return b }), "reserved bytes"},
		{"flipped bit", with(func(b []byte) []byte { b[len(b)/2] ^= 0x10; return b }), "crc32c"},
		{"truncated", reseal(bytes.Clone(good[:len(good)-3])), "cannot fit"},
		{"cut in a topic", reseal(bytes.Clone(good[:bytes.Index(good, []byte("orders"))+3])), "needs"},
		{"trailing byte", reseal(append(bytes.Clone(good), 0)), "trailing"},
		{"brokers out of order", swapped, "not in order"},
		{"forged broker count", reseal(binary.BigEndian.AppendUint32(bytes.Clone(good[:28]), 1<<30)), "1073741824 brokers cannot fit"},
		{"broker state", encoded(func(s *State) { b := *s.brokers[2]; b.State = 7; s.brokers[2] = &b }), "broker 2: state 7"},
		{"replica no broker", encoded(func(s *State) { delete(s.brokers, 3) }), "replica 3 is no broker"},
		{"group past next", encoded(func(s *State) { s.nextGroup = 3 }), "outside [2, 3)"},
		{"group twice", encoded(func(s *State) {
			t := *s.topics["events"]
			t.Partitions = []Partition{{Group: 2, Replicas: []uint64{1}}}
			s.topics["events"] = &t
		}), "group 2 is another partition's"},
		{"grant on no topic", encoded(func(s *State) { delete(s.topics, "events") }), `grant on topic "events", which does not exist`},
		{"topic user missing", encoded(func(s *State) { delete(s.users, "shop") }), `its user "shop" does not exist`},
		{"coordinator no broker", encoded(func(s *State) { s.coordinators["x"] = 9 }), "coordinator 9 is no broker"},
		{"bad topic name", encoded(func(s *State) {
			t := *s.topics["events"]
			t.Name = "a/b"
			s.topics["a/b"] = &t
			delete(s.topics, "events")
			delete(s.users, "ops")
		}), "a/b"},
		{"empty hash", encoded(func(s *State) { u := *s.users["ops"]; u.Hash = nil; s.users["ops"] = &u }), "password hash of 1-1024 bytes"},
		{"too many request ids", encoded(func(s *State) { s.recent = make([][16]byte, dedupWindow+1) }), "1025 request ids, limit 1024"},
		{"previous no broker", encoded(func(s *State) {
			t := *s.topics["orders"]
			t.Partitions = []Partition{t.Partitions[0], {Group: 3, Replicas: []uint64{2}, Previous: []uint64{2, 9}, Moves: 1}}
			s.topics["orders"] = &t
		}), "replica 9 is no broker"},
		{"previous twice", encoded(func(s *State) {
			t := *s.topics["orders"]
			t.Partitions = []Partition{t.Partitions[0], {Group: 3, Replicas: []uint64{2}, Previous: []uint64{1, 1}, Moves: 1}}
			s.topics["orders"] = &t
		}), "node 1 listed twice"},
		{"moving without moves", encoded(func(s *State) {
			t := *s.topics["orders"]
			t.Partitions = []Partition{t.Partitions[0], {Group: 3, Replicas: []uint64{2}, Previous: []uint64{1}}}
			s.topics["orders"] = &t
		}), "a move under way, and 0 moves"},
	} {
		if _, err := decodeState(tc.b); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrMalformed with %q", tc.name, err, tc.want)
		}
	}
}

func clone[K comparable, V any](m map[K]V) map[K]V {
	c := make(map[K]V, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func sampleSnap(t testing.TB) raftpb.Snapshot {
	st := sampleState(t)
	return raftpb.Snapshot{Data: appendState(nil, st), Metadata: raftpb.SnapshotMetadata{Index: st.index, Term: 3,
		ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}}}
}

// TestSnapFileGolden: the metadata's snapshot file (cluster/smlog's, with this package's
// name, magic and sentinels) is byte for byte what the broker wrote before that package
// existed: the sha-256 of sampleSnap's file, taken then (it changes with sampleState). A
// damaged file fails Open with ErrCorrupt and ErrMalformed.
func TestSnapFileGolden(t *testing.T) {
	b, err := snapFormat.AppendFile(nil, sampleSnap(t))
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(b); len(b) != 694 || hex.EncodeToString(sum[:]) != "9bcf0001bd7f8eae71832591846120b288cdcf053e2f14060adcab397f44d785" {
		t.Fatalf("the snapshot file changed: %d bytes, sha-256 %x", len(b), sum)
	}
	if _, st, err := snapFormat.DecodeFile(b); err != nil || !st.Equal(sampleState(t)) {
		t.Fatalf("decoded: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, SnapshotFileName), b[:40], 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Open(Config{Dir: dir, NodeID: 1, Peers: []uint64{1}, Sender: nopSender{}})
	if !errors.Is(err, ErrCorrupt) || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "meta: corrupt metadata store: ") {
		t.Fatalf("Open with a damaged file: %v", err)
	}
}

// TestCreatedAtRoundTrip: CreatedAt keeps what the command carried, in UTC.
func TestCreatedAtRoundTrip(t *testing.T) {
	st := sampleState(t)
	o, _ := st.Topic("orders")
	if !o.CreatedAt.Equal(time.UnixMilli(1_700_000_000_123)) || o.CreatedAt.Location() != time.UTC {
		t.Fatalf("created at %v", o.CreatedAt)
	}
}
