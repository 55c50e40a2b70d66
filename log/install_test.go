package log

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzManifest: an accepted manifest re-encodes to itself; refusals wrap ErrBadManifest.
func FuzzManifest(f *testing.F) {
	f.Add(AppendManifest(nil, &Manifest{From: 100, Next: 300, Keep: true, Bases: []int64{100, 150, 290}}))
	f.Add(AppendManifest(nil, &Manifest{From: 0, Next: 0, Bases: []int64{0}}))
	f.Add([]byte("LQIM\x00\x00\x00\x00\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeManifest(b)
		if err != nil {
			if !errors.Is(err, ErrBadManifest) {
				t.Fatalf("error %v does not wrap ErrBadManifest", err)
			}
			return
		}
		if again := AppendManifest(nil, &m); !bytes.Equal(again, b) {
			t.Fatalf("%x re-encodes as %x", b, again)
		}
	})
}
