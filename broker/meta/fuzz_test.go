package meta

import (
	"bytes"
	"testing"
	"time"

	"github.com/lightq/lightq/broker/auth"
	"github.com/lightq/lightq/wire"
)

// FuzzUnmarshal feeds arbitrary bytes to the meta.json decoder and validator (what Open does):
// they never panic, and a state they accept encodes to bytes that decode to the same state.
func FuzzUnmarshal(f *testing.F) {
	hash, err := auth.Hash("pw", auth.TestParams())
	if err != nil {
		f.Fatal(err)
	}
	st := State{
		Users:  map[string]User{"u": {Name: "u", Hash: hash}, "admin": {Name: "admin", Hash: hash, Admin: true}},
		Topics: map[string]Topic{"t": {Name: "t", Kind: wire.KindDurable, Partitions: 2, User: "u", Options: []wire.Option{{Key: "fsync", Value: "always"}}, CreatedAt: time.Unix(1700000000, 0).UTC()}},
	}
	good, err := marshal(st)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"format_version":1}`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := unmarshal(data)
		if err != nil || s.Validate() != nil {
			return
		}
		again, err := marshal(s)
		if err != nil {
			t.Fatalf("accepted state does not encode: %v", err)
		}
		s2, err := unmarshal(again)
		if err != nil {
			t.Fatalf("re-encoded state does not decode: %v", err)
		}
		third, _ := marshal(s2)
		if !bytes.Equal(again, third) {
			t.Fatal("encoding is not stable")
		}
	})
}
