package client

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/lightq/lightq/wire"
)

// batchNext trusts the record count of the last batch of an answer only when the CRC vouches
// for it or the batch's bytes could hold that many records, so a damaged count cannot move a
// skip past good batches.
func TestBatchNextTrustsOnlyAPlausibleCount(t *testing.T) {
	build := func(codec wire.Codec) []byte {
		var bb wire.BatchBuilder
		for i := range 4 {
			bb.Append(1, nil, []byte{byte(i), 1, 2, 3}, nil)
		}
		var comp wire.Compressor
		defer comp.Close()
		b, err := bb.Finish(codec, &comp)
		if err != nil {
			t.Fatal(err)
		}
		b = append([]byte(nil), b...)
		wire.SetBaseOffset(b, 100)
		return b
	}
	setCount := func(b []byte, n uint32) []byte { binary.BigEndian.PutUint32(b[20:], n); return b }
	flipRecords := func(b []byte) []byte { b[len(b)-1] ^= 0xff; return b }
	for _, tc := range []struct {
		name string
		b    []byte
		want int64
	}{
		{"good", build(wire.CodecNone), 104},
		{"good, at most hw", build(wire.CodecNone), 102},
		{"bad CRC, plausible count", flipRecords(build(wire.CodecNone)), 104},
		{"bad CRC, count too large for its bytes", setCount(build(wire.CodecNone), 1_000_000), -1},
		{"bad CRC, compressed", flipRecords(build(wire.CodecS2)), -1},
	} {
		hw := int64(math.MaxInt64)
		if tc.name == "good, at most hw" {
			hw = 102
		}
		if got := batchNext(tc.b, len(tc.b), hw); got != tc.want {
			t.Errorf("%s: batchNext = %d, want %d", tc.name, got, tc.want)
		}
	}
}
