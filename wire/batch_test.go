package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"runtime"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"

	"github.com/lightq/lightq/wire"
)

type testRecord struct {
	ts      int64
	key     []byte
	value   []byte
	headers []wire.RecordHeader
}

func hdr(name, value string) wire.RecordHeader {
	return wire.RecordHeader{Name: []byte(name), Value: []byte(value)}
}

// varietyRecords exercises every field: empty and long keys and values (multi-byte varints),
// several headers, and timestamps that go backwards (negative deltas) and forwards.
func varietyRecords() []testRecord {
	return []testRecord{
		{ts: exampleTS, key: []byte("k0"), value: []byte("v0")},
		{ts: exampleTS - 1000, key: nil, value: []byte{}},
		{ts: exampleTS + 1<<40, key: bytes.Repeat([]byte("K"), 200), value: bytes.Repeat([]byte{0xfe}, 20000),
			headers: []wire.RecordHeader{hdr("a", "1"), hdr("", ""), hdr("trace-id", string(bytes.Repeat([]byte("t"), 300)))}},
		{ts: -5, key: []byte{0}, value: []byte{0, 0}, headers: []wire.RecordHeader{hdr("only", "")}},
		{ts: exampleTS, key: []byte("last"), value: []byte("v")},
	}
}

func buildBatch(t testing.TB, recs []testRecord, codec wire.Codec, c *wire.Compressor) []byte {
	t.Helper()
	var bb wire.BatchBuilder
	for _, r := range recs {
		want := bb.SizeWith(r.ts, r.key, r.value, r.headers)
		bb.Append(r.ts, r.key, r.value, r.headers)
		if bb.Size() != want {
			t.Fatalf("SizeWith predicted %d, Size is %d", want, bb.Size())
		}
	}
	if bb.Count() != len(recs) {
		t.Fatalf("Count = %d, want %d", bb.Count(), len(recs))
	}
	b, err := bb.Finish(codec, c)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(b)
}

func checkRecords(t *testing.T, got []wire.Record, want []testRecord, base int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Offset != base+int64(i) || g.Timestamp != w.ts || g.TimestampDelta != w.ts-want[0].ts ||
			!bytes.Equal(g.Key, w.key) || !bytes.Equal(g.Value, w.value) || len(g.Headers) != len(w.headers) {
			t.Fatalf("record %d: offset %d ts %d delta %d key %q value of %d bytes, %d headers", i, g.Offset, g.Timestamp, g.TimestampDelta, g.Key, len(g.Value), len(g.Headers))
		}
		for j, h := range w.headers {
			if !bytes.Equal(g.Headers[j].Name, h.Name) || !bytes.Equal(g.Headers[j].Value, h.Value) {
				t.Fatalf("record %d header %d: %q=%q, want %q=%q", i, j, g.Headers[j].Name, g.Headers[j].Value, h.Name, h.Value)
			}
		}
	}
}

func TestBatchRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		recs []testRecord
		base int64
	}{
		{"one record", []testRecord{{ts: 0, value: []byte("x")}}, 0},
		{"variety", varietyRecords(), 1000},
		{"max base offset", varietyRecords()[:2], math.MaxInt64 - 1},
		{"many small", func() []testRecord {
			var rs []testRecord
			for i := 0; i < 500; i++ {
				rs = append(rs, testRecord{ts: exampleTS + int64(i%7) - 3, key: []byte{byte(i)}, value: []byte("value")})
			}
			return rs
		}(), 1 << 33},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := buildBatch(t, tt.recs, wire.CodecNone, nil)
			if wire.BatchSize(b) != len(b) {
				t.Fatalf("BatchSize = %d, len %d", wire.BatchSize(b), len(b))
			}
			if got := binary.BigEndian.Uint64(b); got != 0 {
				t.Fatalf("builder wrote base offset %d, want 0", got)
			}
			wire.SetBaseOffset(b, tt.base)
			bt, err := wire.ParseBatch(b, wire.DefaultLimits().MaxBatch)
			if err != nil {
				t.Fatal(err)
			}
			first, maxTS := tt.recs[0].ts, tt.recs[0].ts
			for _, r := range tt.recs {
				maxTS = max(maxTS, r.ts)
			}
			if bt.BaseOffset != tt.base || bt.RecordCount != uint32(len(tt.recs)) || bt.FirstTimestamp != first ||
				bt.MaxTimestamp != maxTS || bt.Codec() != wire.CodecNone || bt.Size() != len(b) || int(bt.RecordsSize) != len(bt.Records) {
				t.Fatalf("header %+v", bt)
			}
			checkRecords(t, checkBatch(t, b), tt.recs, tt.base)
		})
	}
}

func TestBatchBuilderReuse(t *testing.T) {
	recs := varietyRecords()
	fresh := buildBatch(t, recs[:2], wire.CodecNone, nil)
	var bb wire.BatchBuilder
	for _, r := range recs {
		bb.Append(r.ts, r.key, r.value, r.headers)
	}
	if _, err := bb.Finish(wire.CodecNone, nil); err != nil {
		t.Fatal(err)
	}
	bb.Reset()
	if bb.Count() != 0 || bb.Size() != wire.BatchHeaderSize {
		t.Fatalf("after Reset: count %d size %d", bb.Count(), bb.Size())
	}
	for _, r := range recs[:2] {
		bb.Append(r.ts, r.key, r.value, r.headers)
	}
	again, err := bb.Finish(wire.CodecNone, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, fresh) {
		t.Fatal("a reused builder produced a different batch")
	}
}

func TestBatchFinishEmptyPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Finish on an empty builder did not panic")
		}
	}()
	var bb wire.BatchBuilder
	_, _ = bb.Finish(wire.CodecNone, nil)
}

// TestBatchBitFlips flips every bit of a small batch: a flip in the base offset (bytes 0-7)
// must still parse, with another base offset; any other flip must be detected.
func TestBatchBitFlips(t *testing.T) {
	b := wireBatch(7, []exampleRecord{
		{ts: exampleTS, key: "k1", value: "hello"},
		{ts: exampleTS - 3, value: "world", headers: [][2]string{{"trace", "abc"}}},
	})
	for i := range b {
		for bit := 0; bit < 8; bit++ {
			c := bytes.Clone(b)
			c[i] ^= 1 << bit
			bt, err := wire.ParseBatch(c, wire.DefaultLimits().MaxBatch)
			if i < 8 {
				if err != nil || bt.BaseOffset == 7 {
					t.Fatalf("flip in base offset byte %d bit %d: base %d, %v", i, bit, bt.BaseOffset, err)
				}
				continue
			}
			if !errors.Is(err, wire.ErrCorruptBatch) {
				t.Fatalf("flip in byte %d bit %d not detected: %v", i, bit, err)
			}
		}
	}
}

// fixCRC recomputes the CRC of an encoded batch after a test corrupted a covered field.
func fixCRC(b []byte) {
	binary.BigEndian.PutUint32(b[12:], wire.BatchChecksum(b))
}

func TestChecksumIsCRC32C(t *testing.T) {
	// The standard CRC-32C check value.
	if got := wire.Checksum([]byte("123456789")); got != 0xe3069283 {
		t.Fatalf("Checksum(123456789) = %08x, want e3069283", got)
	}
}

func TestParseBatchErrors(t *testing.T) {
	good := wireBatch(0, []exampleRecord{{ts: exampleTS, key: "k", value: "v"}, {ts: exampleTS + 1, value: "w"}})
	tests := []struct {
		name    string
		corrupt func(b []byte) []byte
		max     int
		err     error
	}{
		{"too large", func(b []byte) []byte { return b }, len(good) - 1, wire.ErrBatchTooLarge},
		{"shorter than a header", func(b []byte) []byte { return b[:43] }, 0, wire.ErrCorruptBatch},
		{"truncated", func(b []byte) []byte { return b[:len(b)-1] }, 0, wire.ErrCorruptBatch},
		{"trailing byte", func(b []byte) []byte { return append(b, 0) }, 0, wire.ErrCorruptBatch},
		{"length field too big", func(b []byte) []byte { binary.BigEndian.PutUint32(b[8:], 0xffffffff); return b }, 0, wire.ErrCorruptBatch},
		{"magic 0", func(b []byte) []byte { b[16] = 0; fixCRC(b); return b }, 0, wire.ErrCorruptBatch},
		{"magic 2", func(b []byte) []byte { b[16] = 2; fixCRC(b); return b }, 0, wire.ErrCorruptBatch},
		{"codec 3", func(b []byte) []byte { b[17] = 3; fixCRC(b); return b }, 0, wire.ErrCorruptBatch},
		{"codec 7", func(b []byte) []byte { b[17] = 7; fixCRC(b); return b }, 0, wire.ErrCorruptBatch},
		{"attribute bit 3", func(b []byte) []byte { b[17] = 0x08; fixCRC(b); return b }, 0, wire.ErrCorruptBatch},
		{"reserved", func(b []byte) []byte { b[19] = 1; fixCRC(b); return b }, 0, wire.ErrCorruptBatch},
		{"no records", func(b []byte) []byte { binary.BigEndian.PutUint32(b[20:], 0); fixCRC(b); return b }, 0, wire.ErrCorruptBatch},
		{"count too high for section", func(b []byte) []byte { binary.BigEndian.PutUint32(b[20:], 1<<30); fixCRC(b); return b }, 0, wire.ErrCorruptBatch},
		{"records size differs", func(b []byte) []byte { binary.BigEndian.PutUint32(b[40:], uint32(len(b)-44+1)); fixCRC(b); return b }, 0, wire.ErrCorruptBatch},
		{"compressed records size over limit", func(b []byte) []byte {
			b[17] = byte(wire.CodecZstd)
			binary.BigEndian.PutUint32(b[40:], 1<<21)
			fixCRC(b)
			return b
		}, 1 << 20, wire.ErrCorruptBatch},
		{"max timestamp before first", func(b []byte) []byte { binary.BigEndian.PutUint64(b[32:], exampleTS-1); fixCRC(b); return b }, 0, wire.ErrCorruptBatch},
		{"crc", func(b []byte) []byte { b[12] ^= 0xff; return b }, 0, wire.ErrCorruptBatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			max := tt.max
			if max == 0 {
				max = wire.DefaultLimits().MaxBatch
			}
			if _, err := wire.ParseBatch(tt.corrupt(bytes.Clone(good)), max); !errors.Is(err, tt.err) {
				t.Fatalf("ParseBatch = %v, want %v", err, tt.err)
			}
		})
	}
	if a := testing.AllocsPerRun(100, func() { _, _ = wire.ParseBatch(good, 1<<20) }); a != 0 {
		t.Errorf("ParseBatch allocates %v times", a)
	}
}

// rawBatch assembles a batch around a records section, with a correct CRC.
func rawBatch(codec wire.Codec, count uint32, recordsSize uint32, section []byte) []byte {
	b := make([]byte, wire.BatchHeaderSize, wire.BatchHeaderSize+len(section))
	binary.BigEndian.PutUint32(b[8:], uint32(wire.BatchHeaderSize-12+len(section)))
	b[16], b[17] = wire.BatchMagic, byte(codec)
	binary.BigEndian.PutUint32(b[20:], count)
	binary.BigEndian.PutUint32(b[40:], recordsSize)
	b = append(b, section...)
	fixCRC(b)
	return b
}

func TestRecordIterErrors(t *testing.T) {
	rec := wire.AppendRecord(nil, 0, []byte("k"), []byte("v"), []wire.RecordHeader{hdr("h", "x")})
	tests := []struct {
		name    string
		count   uint32
		section []byte
	}{
		{"fewer records than count", 2, rec},
		{"bytes after the last record", 1, append(bytes.Clone(rec), 0, 0, 0, 0, 0)},
		{"record length past the end", 1, append([]byte{0x7f}, rec[1:]...)},
		{"record length short", 1, append([]byte{rec[0] - 1}, rec[1:]...)},
		{"over-long record length", 1, append([]byte{rec[0] | 0x80, 0x00}, rec[1:]...)},
		{"key past the record", 1, []byte{0x05, 0x00, 0x7f, 0x00, 0x00, 0x00}},
		{"value past the record", 1, []byte{0x05, 0x00, 0x00, 0x7f, 0x00, 0x00}},
		{"header count past the record", 1, []byte{0x05, 0x00, 0x00, 0x00, 0x03, 0x00}},
		{"huge header count", 1, append([]byte{0x0e, 0x00, 0x00, 0x00}, append(binary.AppendUvarint(nil, 1<<63+1), 0, 0)...)},
		{"header name past the record", 1, []byte{0x06, 0x00, 0x00, 0x00, 0x01, 0x05, 0x00}},
		{"over-long key length", 1, []byte{0x06, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := rawBatch(wire.CodecNone, tt.count, uint32(max(len(tt.section), 5*int(tt.count))), tt.section)
			bt, err := wire.ParseBatch(b, 1<<20)
			if err != nil {
				// The header checks already refuse it; the iterator must too.
				bt = wire.Batch{BatchHeader: wire.BatchHeader{RecordCount: tt.count}, Records: tt.section}
			}
			it := wire.NewRecordIter(bt.Records, bt.RecordCount, 0, 0)
			var r wire.Record
			n := 0
			for it.Next(&r) {
				n++
			}
			if it.Err() == nil {
				t.Fatalf("iterated %d records without error", n)
			}
			if !errors.Is(it.Err(), wire.ErrMalformed) && !errors.Is(it.Err(), wire.ErrCorruptBatch) {
				t.Fatalf("error %v is neither ErrMalformed nor ErrCorruptBatch", it.Err())
			}
			if it.Next(&r) {
				t.Fatal("Next returned true after an error")
			}
		})
	}
}

func TestRecordIterDoesNotAllocate(t *testing.T) {
	b := buildBatch(t, varietyRecords(), wire.CodecNone, nil)
	bt, err := wire.ParseBatch(b, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var rec wire.Record
	rec.Headers = make([]wire.RecordHeader, 0, 8)
	a := testing.AllocsPerRun(100, func() {
		it := wire.NewRecordIter(bt.Records, bt.RecordCount, bt.BaseOffset, bt.FirstTimestamp)
		for it.Next(&rec) {
		}
		if it.Err() != nil {
			t.Fatal(it.Err())
		}
	})
	if a != 0 {
		t.Fatalf("RecordIter allocates %v times per batch", a)
	}
}

func TestCompressedBatchRoundTrip(t *testing.T) {
	recs := varietyRecords()
	plain := buildBatch(t, recs, wire.CodecNone, nil)
	plainBT, err := wire.ParseBatch(plain, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var c wire.Compressor
	defer c.Close()
	for _, codec := range []wire.Codec{wire.CodecS2, wire.CodecZstd} {
		t.Run(codec.String(), func(t *testing.T) {
			b := buildBatch(t, recs, codec, &c)
			if len(b) >= len(plain) {
				t.Errorf("%v batch is %d bytes, plain %d", codec, len(b), len(plain))
			}
			wire.SetBaseOffset(b, 500)
			bt, err := wire.ParseBatch(b, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if bt.Codec() != codec || bt.RecordsSize != plainBT.RecordsSize || bt.RecordCount != plainBT.RecordCount ||
				bt.FirstTimestamp != plainBT.FirstTimestamp || bt.MaxTimestamp != plainBT.MaxTimestamp {
				t.Fatalf("header %+v, plain %+v", bt, plainBT)
			}
			if !bytes.Equal(wire.AppendBatch(nil, &bt), b) {
				t.Fatal("AppendBatch differs")
			}
			// Decompress appends after what dst holds, and again into reused memory.
			out, err := c.Decompress([]byte("prefix"), &bt)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out[:6], []byte("prefix")) || !bytes.Equal(out[6:], plainBT.Records) {
				t.Fatal("decompressed section differs from the plain one")
			}
			out, err = c.Decompress(out[:0], &bt)
			if err != nil || !bytes.Equal(out, plainBT.Records) {
				t.Fatalf("second Decompress: %v", err)
			}
			got, err := collectRecords(out, &bt)
			if err != nil {
				t.Fatal(err)
			}
			checkRecords(t, got, recs, 500)
		})
	}
	if out, err := c.Decompress(nil, &plainBT); err != nil || !bytes.Equal(out, plainBT.Records) {
		t.Fatalf("Decompress of an uncompressed batch: %v", err)
	}
}

// TestDecompressionBombs: a compressed section whose records size understates what it
// decompresses to is refused, without decompressing all of it.
func TestDecompressionBombs(t *testing.T) {
	zeros := make([]byte, 64<<20)
	var zbuf bytes.Buffer
	zw, err := zstd.NewWriter(&zbuf) // streaming: the frame does not declare its content size
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(zeros); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	zenc, _ := zstd.NewWriter(nil)
	zsmall := zenc.EncodeAll(zeros[:1000], nil) // declares 1000 bytes
	tests := []struct {
		name        string
		codec       wire.Codec
		section     []byte
		recordsSize uint32
	}{
		{"zstd 64 MiB claims 4 KiB", wire.CodecZstd, zbuf.Bytes(), 4096},
		{"zstd 64 MiB claims 1 MiB", wire.CodecZstd, zbuf.Bytes(), 1 << 20},
		{"zstd 1000 claims 999", wire.CodecZstd, zsmall, 999},
		{"zstd 1000 claims 1001", wire.CodecZstd, zsmall, 1001},
		{"zstd garbage", wire.CodecZstd, []byte("not zstd at all"), 100},
		{"s2 64 MiB claims 4 KiB", wire.CodecS2, s2.Encode(nil, zeros), 4096},
		{"s2 1000 claims 1001", wire.CodecS2, s2.Encode(nil, zeros[:1000]), 1001},
		{"s2 garbage", wire.CodecS2, []byte{0x05, 0xff, 0xff, 0xff}, 5},
		{"s2 truncated", wire.CodecS2, s2.Encode(nil, bytes.Repeat([]byte("abcdefgh"), 100))[:20], 800},
	}
	var c wire.Compressor
	defer c.Close()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := rawBatch(tt.codec, 1, tt.recordsSize, tt.section)
			bt, err := wire.ParseBatch(b, 1<<20)
			if err != nil {
				t.Fatalf("ParseBatch: %v", err)
			}
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			out, err := c.Decompress(nil, &bt)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, wire.ErrCorruptBatch) {
				t.Fatalf("Decompress = %d bytes, %v; want ErrCorruptBatch", len(out), err)
			}
			// The output is capped at records size; the decoder's own state is about 1 MiB.
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 4*uint64(tt.recordsSize)+1<<20 {
				t.Fatalf("Decompress allocated %d KiB for a section that claims %d bytes", grew>>10, tt.recordsSize)
			}
		})
	}
}

func TestPartitionForKey(t *testing.T) {
	tests := []struct {
		key  string
		n    int
		want int
	}{
		{"", 1, 0},
		{"", 3, 1},
		{"k1", 2, 1},
		{"user-7", 3, 0},
		{"user-8", 3, 2},
		{"order-1001", 8, 4},
		{"order-1002", 8, 5},
		{"Ünïcode", 16, 11},
		{"a", 1024, 300},
	}
	for _, tt := range tests {
		if got := wire.PartitionForKey([]byte(tt.key), tt.n); got != tt.want {
			t.Errorf("PartitionForKey(%q, %d) = %d, want %d", tt.key, tt.n, got, tt.want)
		}
	}
	for n := 1; n <= 1024; n *= 2 {
		for i := 0; i < 1000; i++ {
			if p := wire.PartitionForKey(binary.BigEndian.AppendUint32(nil, uint32(i)), n); p < 0 || p >= n {
				t.Fatalf("PartitionForKey = %d for %d partitions", p, n)
			}
		}
	}
}

func TestBatchSizeShortInput(t *testing.T) {
	if n := wire.BatchSize(make([]byte, 11)); n != 0 {
		t.Fatalf("BatchSize of 11 bytes = %d, want 0", n)
	}
}

// BatchBaseOffset names a batch that does not parse: it reads the base offset and nothing else.
func TestBatchBaseOffset(t *testing.T) {
	b := buildBatch(t, varietyRecords(), wire.CodecNone, nil)
	wire.SetBaseOffset(b, 1<<40+3)
	b[16] = 99 // an unknown magic: PeekBatchHeader refuses the batch
	if _, err := wire.PeekBatchHeader(b); err == nil {
		t.Fatal("PeekBatchHeader accepted magic 99")
	}
	if got := wire.BatchBaseOffset(b); got != 1<<40+3 {
		t.Fatalf("BatchBaseOffset = %d, want %d", got, int64(1<<40+3))
	}
	if got := wire.BatchBaseOffset(b[:7]); got != 0 {
		t.Fatalf("BatchBaseOffset of 7 bytes = %d, want 0", got)
	}
}

// PeekBatchHeader reads the header from the header's bytes alone, agrees with ParseBatch, and
// refuses what no batch of any known magic can be.
func TestPeekBatchHeader(t *testing.T) {
	b := buildBatch(t, varietyRecords(), wire.CodecNone, nil)
	wire.SetBaseOffset(b, 77)
	full, err := wire.ParseBatch(b, len(b))
	if err != nil {
		t.Fatal(err)
	}
	h, err := wire.PeekBatchHeader(b[:wire.BatchHeaderSize])
	if err != nil {
		t.Fatal(err)
	}
	if h != full.BatchHeader {
		t.Fatalf("peek %+v, parse %+v", h, full.BatchHeader)
	}
	if !wire.MayBeBatchHeader(b) {
		t.Fatal("MayBeBatchHeader refuses a valid header")
	}
	if u := wire.PeekBatchHeaderUnchecked(b); u != h {
		t.Fatalf("PeekBatchHeaderUnchecked %+v, want %+v", u, h)
	}
	if h.Size() != len(b) || h.NextOffset() != 77+int64(len(varietyRecords())) {
		t.Fatalf("size %d next %d", h.Size(), h.NextOffset())
	}
	for _, tt := range []struct {
		name   string
		mangle func(b []byte) []byte
	}{
		{"short", func(b []byte) []byte { return b[:wire.BatchHeaderSize-1] }},
		{"magic", func(b []byte) []byte { b[16] = 9; return b }},
		{"attributes", func(b []byte) []byte { b[17] = 0x40; return b }},
		{"codec", func(b []byte) []byte { b[17] = 7; return b }},
		{"reserved", func(b []byte) []byte { b[19] = 1; return b }},
		{"length", func(b []byte) []byte { binary.BigEndian.PutUint32(b[8:], 3); return b }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.mangle(append([]byte(nil), b[:wire.BatchHeaderSize]...))
			if _, err := wire.PeekBatchHeader(c); !errors.Is(err, wire.ErrCorruptBatch) {
				t.Fatalf("err %v, want ErrCorruptBatch", err)
			}
		})
	}
}
