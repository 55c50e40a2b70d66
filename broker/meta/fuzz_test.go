package meta

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/lightq/lightq/broker/auth"
	"github.com/lightq/lightq/wire"
)

// FuzzUnmarshal feeds arbitrary bytes to the meta.json decoder and validator (what Open does),
// of format 2 and format 1: they never panic, and a state they accept encodes (always as
// format 2) to bytes that decode to the same state.
func FuzzUnmarshal(f *testing.F) {
	hash, err := auth.Hash("pw", auth.TestParams())
	if err != nil {
		f.Fatal(err)
	}
	st := State{
		Users: map[string]User{
			"u":     {Name: "u", Hash: hash, Grants: map[string]wire.Roles{"t": wire.RolesProduce, "v": wire.RolesBoth}},
			"admin": {Name: "admin", Hash: hash, Admin: true},
		},
		Topics: map[string]Topic{
			"t": {Name: "t", Kind: wire.KindDurable, Partitions: 2, User: "u", Options: []wire.Option{{Key: "fsync", Value: "always"}}, CreatedAt: time.Unix(1700000000, 0).UTC()},
			"v": {Name: "v", Kind: wire.KindTransient, Partitions: 1, CreatedAt: time.Unix(1700000000, 0).UTC()},
		},
	}
	good, err := marshal(st)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(marshalV1(f, st))
	f.Add([]byte(`{"format_version":1}`))
	f.Add([]byte(`{"format_version":2}`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		s, _, err := unmarshal(data)
		if err != nil || s.Validate() != nil {
			return
		}
		again, err := marshal(s)
		if err != nil {
			t.Fatalf("accepted state does not encode: %v", err)
		}
		s2, version, err := unmarshal(again)
		if err != nil || version != FormatVersion {
			t.Fatalf("re-encoded state does not decode as format %d: version %d, %v", FormatVersion, version, err)
		}
		if !reflect.DeepEqual(s, s2) {
			t.Fatalf("state changed through the file:\n%+v\n%+v", s, s2)
		}
		third, _ := marshal(s2)
		if !bytes.Equal(again, third) {
			t.Fatal("encoding is not stable")
		}
	})
}
