package meta

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/lightq/lightq/wire"
)

var testID = [16]byte{0: 0xaa, 15: 0xbb}

// sampleCommands has one command of every op, with every field set.
func sampleCommands() []Command {
	return []Command{
		&AddBroker{ID: 7, ClientAddr: "10.0.0.7:7070", TLSAddr: "10.0.0.7:7443", ClusterAddr: "10.0.0.7:7071"},
		&AddBroker{ID: 8, ClientAddr: "b8:1", ClusterAddr: "b8:2"},
		&DrainBroker{ID: 7},
		&RemoveBroker{ID: 7},
		&CreateTopic{Name: "orders", Kind: wire.KindDurable, User: "shop", UserHash: []byte("$argon2id$v=19$hash"), CreatedAt: 1_700_000_000_123,
			Options:   []wire.Option{{Key: "retention.bytes", Value: "1073741824"}, {Key: "segment.bytes", Value: ""}},
			Placement: [][]uint64{{1, 2, 3}, {2, 3, 1}, {3, 1, 2}}},
		&CreateTopic{Name: "t", Kind: wire.KindTransient, CreatedAt: -5, Placement: [][]uint64{{1}}},
		&DeleteTopic{Name: "orders"},
		&SetReplicas{Topic: "orders", Partition: 2, From: []uint64{3, 1, 2}, To: []uint64{4, 1, 2}},
		&CreateUser{Name: "alice", Hash: []byte{0, 1, 2}},
		&DeleteUser{Name: "alice"},
		&SetPassword{Name: "alice", Hash: []byte("new")},
		&Grant{User: "alice", Topic: "orders", Roles: wire.RolesConsume},
		&Grant{User: "ops", Roles: wire.RolesAdmin},
		&Revoke{User: "alice", Topic: "orders", Roles: wire.RolesBoth},
		&SetCoordinator{Group: "billing", Node: 3},
		&SetCoordinator{Group: "billing"},
		&FinishMove{Topic: "orders", Partition: 2, Group: 9, Replicas: []uint64{4, 1, 2}},
	}
}

func TestCommandRoundTrip(t *testing.T) {
	for _, cmd := range sampleCommands() {
		b := AppendCommand(nil, testID, cmd)
		id, got, err := DecodeCommand(b)
		if err != nil {
			t.Fatalf("%T: %v", cmd, err)
		}
		if id != testID || !reflect.DeepEqual(got, cmd) {
			t.Fatalf("%T: decoded %+v (id %x), want %+v", cmd, got, id, cmd)
		}
		if again := AppendCommand(nil, id, got); !bytes.Equal(again, b) {
			t.Fatalf("%T: re-encoding differs", cmd)
		}
		if err := cmd.check(); err != nil {
			t.Fatalf("%T: a sample is invalid: %v", cmd, err)
		}
	}
}

// TestCommandGolden pins the layout (version 1 is never to change).
func TestCommandGolden(t *testing.T) {
	for _, tc := range []struct {
		cmd  Command
		want string
	}{
		{&DrainBroker{ID: 0x0102}, "01" + hex.EncodeToString(testID[:]) + "02" + "0000000000000102"},
		{&Grant{User: "u", Topic: "t", Roles: wire.RolesBoth}, "01" + hex.EncodeToString(testID[:]) + "0a" + "000175" + "000174" + "03"},
		{&SetReplicas{Topic: "t", Partition: 1, From: []uint64{1}, To: []uint64{2, 3}}, "01" + hex.EncodeToString(testID[:]) + "06" +
			"000174" + "00000001" + "01" + "0000000000000001" + "02" + "0000000000000002" + "0000000000000003"},
		{&FinishMove{Topic: "t", Partition: 1, Group: 3, Replicas: []uint64{2}}, "01" + hex.EncodeToString(testID[:]) + "0d" +
			"000174" + "00000001" + "0000000000000003" + "01" + "0000000000000002"},
		{&CreateTopic{Name: "t", Kind: wire.KindDurable, CreatedAt: 1, Options: []wire.Option{{Key: "k", Value: "v"}}, Placement: [][]uint64{{9}}},
			"01" + hex.EncodeToString(testID[:]) + "04" + "000174" + "02" + "0000" + "00000000" + "0000000000000001" +
				"01" + "00016b" + "000176" + "0001" + "01" + "0000000000000009"},
	} {
		if got := hex.EncodeToString(AppendCommand(nil, testID, tc.cmd)); got != tc.want {
			t.Errorf("%T:\n got %s\nwant %s", tc.cmd, got, tc.want)
		}
	}
}

func TestDecodeCommandErrors(t *testing.T) {
	good := AppendCommand(nil, testID, &AddBroker{ID: 1, ClientAddr: "a:1", ClusterAddr: "a:2"})
	hdr := func(o op) []byte { return append(append([]byte{commandVersion}, testID[:]...), byte(o)) }
	long := strings.Repeat("x", MaxAddr+1)
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "u8 needs 1 bytes"},
		{"version 2", append([]byte{2}, good[1:]...), "version 2, this broker reads 1"},
		{"no request id", []byte{1, 0, 0}, "request id needs 16 bytes"},
		{"no op", append([]byte{1}, testID[:]...), "u8 needs 1 bytes"},
		{"unknown op", hdr(99), "op 99 unknown"},
		{"op 0", hdr(0), "op 0 unknown"},
		{"truncated", good[:len(good)-1], "needs"},
		{"trailing byte", append(bytes.Clone(good), 0), "1 trailing bytes"},
		{"address too long", wire.AppendString(wire.AppendU64(hdr(opAddBroker), 1), long), "client address of 256 bytes, limit 255"},
		{"too many replicas", append(wire.AppendU32(wire.AppendString(hdr(opSetReplicas), "t"), 0), 10), "10 replicas, limit 9"},
		{"too many options", append(wire.AppendI64(wire.AppendBytes(wire.AppendString(append(wire.AppendString(hdr(opCreateTopic), "t"), 2), ""), nil), 0), 65), "65 options, limit 64"},
		{"too many partitions", wire.AppendU16(append(wire.AppendI64(wire.AppendBytes(wire.AppendString(append(wire.AppendString(hdr(opCreateTopic), "t"), 2), ""), nil), 0), 0), 1025), "1025 partitions, limit 1024"},
		{"partitions past the end", wire.AppendU16(append(wire.AppendI64(wire.AppendBytes(wire.AppendString(append(wire.AppendString(hdr(opCreateTopic), "t"), 2), ""), nil), 0), 0), 1000), "1000 partitions in 0 bytes"},
		{"hash too long", wire.AppendU32(wire.AppendString(hdr(opCreateUser), "u"), MaxHash+1), "password hash of 1025 bytes, limit 1024"},
		{"too large", make([]byte, MaxCommand+1), "limit 1048576"},
	} {
		_, _, err := DecodeCommand(tc.b)
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrMalformed with %q", tc.name, err, tc.want)
		}
	}
}

// TestEntryRoundTrip: a command as raft stores it (one format-2 batch of one record), with
// the fields raftlog writes into the batch changed, decodes to the same command.
func TestEntryRoundTrip(t *testing.T) {
	cmd := &CreateUser{Name: "u", Hash: []byte("h")}
	data, err := encodeEntry(testID, cmd)
	if err != nil {
		t.Fatal(err)
	}
	wire.SetBatchLeaderEpoch(data, 5)
	wire.SetBatchRaftIndex(data, 77)
	wire.SetBaseOffset(data, 1234)
	id, got, err := decodeEntry(data)
	if err != nil || id != testID || !reflect.DeepEqual(got, cmd) {
		t.Fatalf("decoded %+v %x %v", got, id, err)
	}
	data[len(data)-1] ^= 1
	if _, _, err := decodeEntry(data); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a damaged entry: %v", err)
	}
	if _, err := encodeEntry(testID, &CreateUser{Name: "u", Hash: make([]byte, MaxCommand)}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("an oversized command: %v", err)
	}
}
