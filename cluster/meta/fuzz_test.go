package meta

import (
	"bytes"
	"testing"
)

// FuzzCommand: any bytes either fail to decode with ErrMalformed, or decode to a command that
// encodes back to the same bytes (one encoding per value), and that applies to a populated
// state, accepted or refused, leaving a state whose snapshot decodes: no command breaks the
// state's invariants.
func FuzzCommand(f *testing.F) {
	for i, cmd := range sampleCommands() {
		f.Add(AppendCommand(nil, [16]byte{byte(i)}, cmd))
	}
	base := sampleState(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		id, cmd, err := DecodeCommand(b)
		if err != nil {
			return
		}
		if again := AppendCommand(nil, id, cmd); !bytes.Equal(again, b) {
			t.Fatalf("decode then encode changed the bytes:\n%x\n%x", b, again)
		}
		next, _, _ := Apply(base, base.index+1, id, cmd)
		if _, err := decodeState(appendState(nil, next)); err != nil {
			t.Fatalf("after %T %+v the state does not decode: %v", cmd, cmd, err)
		}
		if !base.Equal(sampleState(t)) {
			t.Fatal("applying changed the state it started from")
		}
	})
}

// FuzzSnapshot: a state snapshot either fails to decode, or decodes to a state that encodes
// back to the same bytes (a version-1 snapshot: to a current one that decodes to an equal
// state).
func FuzzSnapshot(f *testing.F) {
	f.Add(appendState(nil, emptyState()))
	f.Add(appendState(nil, sampleState(f)))
	f.Add(appendStateV1(sampleState(f)))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := decodeState(b)
		if err != nil {
			return
		}
		again := appendState(nil, st)
		if b[4] == 1 {
			st2, err := decodeState(again)
			if err != nil || !st2.Equal(st) {
				t.Fatalf("a version-1 snapshot re-encoded does not decode to the same state: %v", err)
			}
			return
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("decode then encode changed the bytes:\n%x\n%x", b, again)
		}
	})
}
