package tlsfront

import (
	"bytes"
	"testing"
)

// rec is a TLS record of n body bytes.
func rec(n int) []byte {
	b := []byte{23, 3, 3, byte(n >> 8), byte(n)}
	return append(b, bytes.Repeat([]byte{0xAB}, n)...)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestRecordTracker(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    []byte
		ended int
		mid   bool
	}{
		{"nothing", nil, 0, false},
		{"one record", rec(10), 1, false},
		{"empty record", rec(0), 1, false},
		{"two records", cat(rec(3), rec(16384)), 2, false},
		{"part of a header", rec(10)[:3], 0, true},
		{"a whole header only", rec(10)[:5], 0, true},
		{"header of an empty record", rec(0)[:5], 1, false},
		{"record and part of the next", cat(rec(4), rec(8)[:7]), 1, true},
		{"largest length", rec(65535), 1, false},
		{"largest length, one byte short", rec(65535)[:65539], 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tr recordTracker
			if got := tr.feed(tc.in); got != tc.ended || tr.midRecord() != tc.mid {
				t.Fatalf("feed: %d records ended, mid %v; want %d, %v", got, tr.midRecord(), tc.ended, tc.mid)
			}
			// Byte by byte: the same outcome.
			var one recordTracker
			n := 0
			for i := range tc.in {
				n += one.feed(tc.in[i : i+1])
			}
			if n != tc.ended || one != tr {
				t.Fatalf("byte by byte: %d ended, state %+v; whole: %+v", n, one, tr)
			}
		})
	}
}

// FuzzRecordTracker: however a byte stream is split, the tracker ends the same records and
// stops in the same state, and it is at a boundary exactly when the records it counted cover
// the stream.
func FuzzRecordTracker(f *testing.F) {
	f.Add(cat(rec(3), rec(0), rec(300)), uint16(4))
	f.Add(rec(5)[:4], uint16(1))
	f.Add([]byte{0x16, 0x03, 0x01, 0x00}, uint16(2))
	f.Fuzz(func(t *testing.T, in []byte, cut uint16) {
		var whole recordTracker
		ended := whole.feed(in)
		var split recordTracker
		c := int(cut) % (len(in) + 1)
		if n := split.feed(in[:c]) + split.feed(in[c:]); n != ended || split != whole {
			t.Fatalf("split at %d: %d ended, %+v; whole: %d, %+v", c, n, split, ended, whole)
		}
		// Walk the records independently.
		pos, count := 0, 0
		for pos+recordHeaderLen <= len(in) {
			n := int(in[pos+3])<<8 | int(in[pos+4])
			if pos+recordHeaderLen+n > len(in) {
				break
			}
			pos += recordHeaderLen + n
			count++
		}
		if count != ended || whole.midRecord() != (pos < len(in)) {
			t.Fatalf("walked %d records to %d of %d; tracker ended %d, mid %v", count, pos, len(in), ended, whole.midRecord())
		}
	})
}
