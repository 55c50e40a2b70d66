package wire_test

import (
	"fmt"
	"testing"

	"github.com/lightq/lightq/wire"
)

// smallBatch is a one-record batch of the given magic (magic 2 with a producer): the header
// checks dominate its cost, which the 128-512 KiB batches of BenchmarkValidate hide behind
// their CRC.
func smallBatch(b *testing.B, magic uint8) []byte {
	var bb wire.BatchBuilder
	bb.SetMagic(magic)
	bb.Append(exampleTS, []byte("k"), []byte("hello world"), nil)
	if magic == wire.BatchMagic2 {
		bb.SetProducer(4097, 0, 40)
	}
	out, err := bb.Finish(wire.CodecNone, nil)
	if err != nil {
		b.Fatal(err)
	}
	return append([]byte(nil), out...)
}

func BenchmarkPeekBatchHeader(b *testing.B) {
	for _, magic := range []uint8{wire.BatchMagic, wire.BatchMagic2} {
		b.Run(fmt.Sprintf("magic=%d", magic), func(b *testing.B) {
			batch := smallBatch(b, magic)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := wire.PeekBatchHeader(batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkParseSmallBatch is ParseBatch and RecordValidator.Validate of a one-record batch.
func BenchmarkParseSmallBatch(b *testing.B) {
	for _, magic := range []uint8{wire.BatchMagic, wire.BatchMagic2} {
		b.Run(fmt.Sprintf("magic=%d", magic), func(b *testing.B) {
			batch := smallBatch(b, magic)
			var v wire.RecordValidator
			b.ReportAllocs()
			for b.Loop() {
				bt, err := wire.ParseBatch(batch, 1<<20)
				if err != nil {
					b.Fatal(err)
				}
				if err := v.Validate(&bt, 1<<20); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
