package wire_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/lightq/lightq/wire"
)

// Each benchmark op handles one batch of benchRecords records; ns/record is reported too.
const benchRecords = 500

var benchSizes = []int{100, 1024}

// benchValues returns benchRecords JSON-ish values of size bytes: compressible like real
// payloads, not like zeros.
func benchValues(size int) [][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	vals := make([][]byte, benchRecords)
	for i := range vals {
		v := make([]byte, 0, size+64)
		for len(v) < size {
			v = fmt.Appendf(v, `{"id":%d,"user":"u%04d","amount":%d.%02d},`, rng.IntN(1e9), rng.IntN(10000), rng.IntN(1000), rng.IntN(100))
		}
		vals[i] = v[:size]
	}
	return vals
}

var benchHeaders = []wire.RecordHeader{{Name: []byte("trace-id"), Value: []byte("4bf92f3577b34da6")}}

func benchBatch(b *testing.B, size int, codec wire.Codec, c *wire.Compressor) []byte {
	var bb wire.BatchBuilder
	keys := benchKeys()
	for i, v := range benchValues(size) {
		bb.Append(exampleTS+int64(i), keys[i], v, benchHeaders)
	}
	out, err := bb.Finish(codec, c)
	if err != nil {
		b.Fatal(err)
	}
	return append([]byte(nil), out...)
}

func benchKeys() [][]byte {
	keys := make([][]byte, benchRecords)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "key-%05d", i)
	}
	return keys
}

func BenchmarkBatchBuild(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			vals, keys := benchValues(size), benchKeys()
			var bb wire.BatchBuilder
			build := func() []byte {
				bb.Reset()
				for i, v := range vals {
					bb.Append(exampleTS+int64(i), keys[i], v, benchHeaders)
				}
				out, err := bb.Finish(wire.CodecNone, nil)
				if err != nil {
					b.Fatal(err)
				}
				return out
			}
			b.SetBytes(int64(len(build())))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				build()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchRecords, "ns/record")
		})
	}
}

func BenchmarkBatchIter(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			batch := benchBatch(b, size, wire.CodecNone, nil)
			var rec wire.Record
			b.SetBytes(int64(len(batch)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				bt, err := wire.ParseBatch(batch, 1<<20) // includes the CRC
				if err != nil {
					b.Fatal(err)
				}
				it := wire.NewRecordIter(bt.Records, bt.RecordCount, bt.BaseOffset, bt.FirstTimestamp)
				n := 0
				for it.Next(&rec) {
					n++
				}
				if it.Err() != nil || n != benchRecords {
					b.Fatal(n, it.Err())
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchRecords, "ns/record")
		})
	}
}

// BenchmarkCompress compresses and decompresses the records section of one batch. SetBytes is
// the uncompressed size; "ratio" is compressed/uncompressed.
func BenchmarkCompress(b *testing.B) {
	for _, codec := range []wire.Codec{wire.CodecS2, wire.CodecZstd} {
		for _, size := range benchSizes {
			var c wire.Compressor
			defer c.Close()
			plain := benchBatch(b, size, wire.CodecNone, nil)
			records := plain[wire.BatchHeaderSize:]
			packed := benchBatch(b, size, codec, &c)
			bt, err := wire.ParseBatch(packed, 1<<20)
			if err != nil {
				b.Fatal(err)
			}
			ratio := float64(len(bt.Records)) / float64(len(records))

			b.Run(fmt.Sprintf("codec=%v/size=%d/compress", codec, size), func(b *testing.B) {
				dst := make([]byte, 0, 2*len(records))
				b.SetBytes(int64(len(records)))
				b.ReportAllocs()
				for b.Loop() {
					if dst, err = c.Compress(dst[:0], codec, records); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(ratio, "ratio")
			})
			b.Run(fmt.Sprintf("codec=%v/size=%d/decompress", codec, size), func(b *testing.B) {
				dst := make([]byte, 0, len(records))
				b.SetBytes(int64(len(records)))
				b.ReportAllocs()
				for b.Loop() {
					if dst, err = c.Decompress(dst[:0], &bt); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkValidate is what the broker adds to every PRODUCE: RecordValidator.Validate on
// batches of the sizes producers send (128-512 KiB), uncompressed and compressed (the
// decompression is included). SetBytes is the stored (compressed) batch size, so MB/s compares
// with the broker's ingest rate; ns/record is the cost per message. The parse sub-benchmarks
// are ParseBatch (header and CRC), all the broker checked before.
func BenchmarkValidate(b *testing.B) {
	var c wire.Compressor
	defer c.Close()
	for _, codec := range []wire.Codec{wire.CodecNone, wire.CodecS2, wire.CodecZstd} {
		for _, size := range benchSizes {
			for _, batchKiB := range []int{128, 512} {
				vals, keys := benchValues(size), benchKeys()
				var bb wire.BatchBuilder
				n := 0
				for ; bb.SizeWith(exampleTS, keys[0], vals[0], benchHeaders) <= batchKiB<<10; n++ {
					bb.Append(exampleTS+int64(n), keys[n%benchRecords], vals[n%benchRecords], benchHeaders)
				}
				out, err := bb.Finish(codec, &c)
				if err != nil {
					b.Fatal(err)
				}
				stored := append([]byte(nil), out...)
				bt, err := wire.ParseBatch(stored, 1<<20)
				if err != nil {
					b.Fatal(err)
				}
				name := fmt.Sprintf("codec=%v/size=%d/batch=%dKiB", codec, size, batchKiB)
				// What the broker checked before it validated records, for comparison.
				b.Run(name+"/parse", func(b *testing.B) {
					b.SetBytes(int64(len(stored)))
					b.ReportAllocs()
					for b.Loop() {
						if _, err := wire.ParseBatch(stored, 1<<20); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/record")
				})
				b.Run(name+"/validate", func(b *testing.B) {
					var v wire.RecordValidator
					defer v.Close()
					if err := v.Validate(&bt, 1<<20); err != nil { // grows the scratch
						b.Fatal(err)
					}
					b.SetBytes(int64(bt.Size()))
					b.ReportAllocs()
					for b.Loop() {
						if err := v.Validate(&bt, 1<<20); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/record")
				})
			}
		}
	}
}

// repeatValues is lqbench's payload: one value of size bytes, an 8-byte stamp then 'a' to 'z'
// over and over, sent again and again with a new stamp in one message of 16. A batch of it
// compresses 15x (100 B) to 150x (1 KiB) with s2, against 2-8x for benchValues.
func repeatValues(size int) [][]byte {
	vals := make([][]byte, benchRecords)
	for i := range vals {
		v := make([]byte, size)
		binary.BigEndian.PutUint64(v, uint64(exampleTS+int64(i/16*16)))
		for j := range v[8:] {
			v[8+j] = byte('a' + j%26)
		}
		vals[i] = v
	}
	return vals
}

// BenchmarkValidateParts splits RecordValidator.Validate of a compressed batch (s2, 512 KiB
// of records, lqbench's default batch) into its two passes: decompress (into a reused
// buffer, as Validate does) and walk (ValidateRecords over the decompressed section); validate
// is both, as the broker runs it; memmove copies the decompressed section once, the least a
// decompression can cost. For benchValues (JSON-ish, s2 ratio 2-8) and repeatValues (what
// lqbench sends). SetBytes is the decompressed size: MB/s compares with message throughput.
func BenchmarkValidateParts(b *testing.B) {
	var c wire.Compressor
	defer c.Close()
	for _, payload := range []string{"json", "lqbench"} {
		for _, size := range benchSizes {
			vals, keys := benchValues(size), benchKeys()
			if payload == "lqbench" {
				vals, keys = repeatValues(size), make([][]byte, benchRecords)
			}
			var bb wire.BatchBuilder
			n := 0
			for ; bb.SizeWith(exampleTS, keys[0], vals[0], nil) <= 512<<10; n++ {
				bb.Append(exampleTS+int64(n), keys[n%benchRecords], vals[n%benchRecords], nil)
			}
			out, err := bb.Finish(wire.CodecS2, &c)
			if err != nil {
				b.Fatal(err)
			}
			bt, err := wire.ParseBatch(append([]byte(nil), out...), 1<<20)
			if err != nil {
				b.Fatal(err)
			}
			plain, err := c.Decompress(nil, &bt)
			if err != nil {
				b.Fatal(err)
			}
			perRecord := func(b *testing.B) {
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/record")
				b.ReportMetric(float64(len(plain))/float64(len(bt.Records)), "ratio")
			}
			name := fmt.Sprintf("payload=%s/size=%d", payload, size)
			b.Run(name+"/decompress", func(b *testing.B) {
				dst := make([]byte, 0, len(plain))
				b.SetBytes(int64(len(plain)))
				b.ReportAllocs()
				for b.Loop() {
					if dst, err = c.Decompress(dst[:0], &bt); err != nil {
						b.Fatal(err)
					}
				}
				perRecord(b)
			})
			b.Run(name+"/walk", func(b *testing.B) {
				b.SetBytes(int64(len(plain)))
				b.ReportAllocs()
				for b.Loop() {
					if err := wire.ValidateRecords(plain, bt.RecordCount, 1<<20); err != nil {
						b.Fatal(err)
					}
				}
				perRecord(b)
			})
			b.Run(name+"/validate", func(b *testing.B) {
				var v wire.RecordValidator
				defer v.Close()
				if err := v.Validate(&bt, 1<<20); err != nil { // grows the scratch
					b.Fatal(err)
				}
				b.SetBytes(int64(len(plain)))
				b.ReportAllocs()
				for b.Loop() {
					if err := v.Validate(&bt, 1<<20); err != nil {
						b.Fatal(err)
					}
				}
				perRecord(b)
			})
			b.Run(name+"/memmove", func(b *testing.B) {
				dst := make([]byte, len(plain))
				b.SetBytes(int64(len(plain)))
				for b.Loop() {
					copy(dst, plain)
				}
				perRecord(b)
			})
		}
	}
}
