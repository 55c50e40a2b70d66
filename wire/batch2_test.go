package wire_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/lightq/lightq/wire"
)

// buildBatch2 builds a magic-2 batch of recs with the given producer fields.
func buildBatch2(t testing.TB, recs []testRecord, codec wire.Codec, c *wire.Compressor, id int64, epoch int16, seq int32) []byte {
	t.Helper()
	var bb wire.BatchBuilder
	bb.SetMagic(wire.BatchMagic2)
	for _, r := range recs {
		want := bb.SizeWith(r.ts, r.key, r.value, r.headers)
		bb.Append(r.ts, r.key, r.value, r.headers)
		if bb.Size() != want {
			t.Fatalf("SizeWith predicted %d, Size is %d", want, bb.Size())
		}
	}
	if id != wire.NoProducer {
		bb.SetProducer(id, epoch, seq)
	}
	b, err := bb.Finish(codec, c)
	if err != nil {
		t.Fatal(err)
	}
	if codec == wire.CodecNone && len(b) != bb.Size() {
		t.Fatalf("Finish gave %d bytes, Size says %d", len(b), bb.Size())
	}
	return bytes.Clone(b)
}

// Both magics carry the same records; magic 2 adds the producer fields and the leader epoch.
func TestBatch2RoundTrip(t *testing.T) {
	var c wire.Compressor
	defer c.Close()
	for _, codec := range []wire.Codec{wire.CodecNone, wire.CodecS2, wire.CodecZstd} {
		for _, p := range []struct {
			id    int64
			epoch int16
			seq   int32
		}{{wire.NoProducer, wire.NoProducer, wire.NoProducer}, {0, 0, 0}, {1<<62 + 3, 32767, wire.MaxSequence - 1}} {
			t.Run(codec.String(), func(t *testing.T) {
				b := buildBatch2(t, varietyRecords(), codec, &c, p.id, p.epoch, p.seq)
				wire.SetBaseOffset(b, 1000)
				wire.SetBatchLeaderEpoch(b, 17)
				bt, err := wire.ParseBatch(b, 1<<20)
				if err != nil {
					t.Fatal(err)
				}
				h := bt.BatchHeader
				if h.Magic != wire.BatchMagic2 || h.HeaderSize() != wire.BatchHeaderSize2 || h.LeaderEpoch != 17 || h.BaseOffset != 1000 ||
					h.ProducerID != p.id || h.ProducerEpoch != p.epoch || h.BaseSequence != p.seq || h.HasProducer() != (p.id >= 0) ||
					h.Codec() != codec || int(h.RecordCount) != len(varietyRecords()) {
					t.Fatalf("header %+v", h)
				}
				if p.id >= 0 && h.LastSequence() != wire.NextSequence(p.seq, h.RecordCount-1) {
					t.Fatalf("last sequence %d", h.LastSequence())
				}
				if re := wire.AppendBatch(nil, &bt); !bytes.Equal(re, b) {
					t.Fatal("AppendBatch differs")
				}
				var v wire.RecordValidator
				defer v.Close()
				if err := v.Validate(&bt, 1<<20); err != nil {
					t.Fatal(err)
				}
				records, err := c.Decompress(nil, &bt)
				if err != nil {
					t.Fatal(err)
				}
				got, err := collectRecords(records, &bt)
				if err != nil {
					t.Fatal(err)
				}
				checkRecords(t, got, varietyRecords(), 1000)
				// The same records in a magic-1 batch: identical records section.
				b1 := buildBatch(t, varietyRecords(), wire.CodecNone, nil)
				if !bytes.Equal(b1[wire.BatchHeaderSize:], records) {
					t.Fatal("magic 1 and magic 2 records sections differ")
				}
			})
		}
	}
}

// The golden headers of both magics: fixed bytes decode to fixed fields, and the builder
// produces exactly these bytes (CRCs computed independently of the wire package).
func TestBatchHeaderGolden(t *testing.T) {
	recs := []testRecord{{ts: exampleTS, key: []byte("k"), value: []byte("v")}}
	for _, tt := range []struct {
		name  string
		build func() []byte
		hex   string
		want  wire.BatchHeader
	}{
		{"magic1", func() []byte { return buildBatch(t, recs, wire.CodecNone, nil) },
			"0000000000000000" + "00000027" + "ae939c96" + "01" + "00" + "0000" + "00000001" +
				"0000018bcfe56800" + "0000018bcfe56800" + "00000007" + "0600016b017600",
			wire.BatchHeader{Length: 39, CRC: 0xae939c96, Magic: 1, LeaderEpoch: -1, RecordCount: 1, FirstTimestamp: exampleTS,
				MaxTimestamp: exampleTS, RecordsSize: 7, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}},
		{"magic2", func() []byte { return buildBatch2(t, recs, wire.CodecNone, nil, 0x0102030405060708, 9, 0x0a0b0c0d) },
			"0000000000000000" + "00000043" + "63924b91" + "02" + "00" + "0000" + "00000000" + "00000001" +
				"0000018bcfe56800" + "0000018bcfe56800" + "00000007" + "0102030405060708" + "0009" + "0000" + "0a0b0c0d" + "0000000000000000" + "0600016b017600",
			wire.BatchHeader{Length: 67, CRC: 0x63924b91, Magic: 2, LeaderEpoch: 0, RecordCount: 1, FirstTimestamp: exampleTS,
				MaxTimestamp: exampleTS, RecordsSize: 7, ProducerID: 0x0102030405060708, ProducerEpoch: 9, BaseSequence: 0x0a0b0c0d}},
		{"magic2-none", func() []byte { return buildBatch2(t, recs, wire.CodecNone, nil, -1, -1, -1) },
			"0000000000000000" + "00000043" + "bd7ffb46" + "02" + "00" + "0000" + "00000000" + "00000001" +
				"0000018bcfe56800" + "0000018bcfe56800" + "00000007" + "ffffffffffffffff" + "ffff" + "0000" + "ffffffff" + "0000000000000000" + "0600016b017600",
			wire.BatchHeader{Length: 67, CRC: 0xbd7ffb46, Magic: 2, LeaderEpoch: 0, RecordCount: 1, FirstTimestamp: exampleTS,
				MaxTimestamp: exampleTS, RecordsSize: 7, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want, err := hex.DecodeString(tt.hex)
			if err != nil {
				t.Fatal(err)
			}
			if got := tt.build(); !bytes.Equal(got, want) {
				t.Fatalf("builder gives\n%x\nwant\n%x", got, want)
			}
			bt, err := wire.ParseBatch(want, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if bt.BatchHeader != tt.want {
				t.Fatalf("header\n%+v\nwant\n%+v", bt.BatchHeader, tt.want)
			}
			if wire.BatchChecksum(want) != tt.want.CRC {
				t.Fatalf("BatchChecksum %08x", wire.BatchChecksum(want))
			}
		})
	}
}

// What the CRC of a magic-2 batch covers: everything after the CRC field but the leader
// epoch and the raft index.
func TestBatch2ChecksumCoverage(t *testing.T) {
	b := buildBatch2(t, varietyRecords()[:2], wire.CodecNone, nil, 5, 0, 0)
	for pos := 16; pos < len(b); pos++ {
		c := bytes.Clone(b)
		c[pos] ^= 0x01
		_, err := wire.ParseBatch(c, 1<<20)
		inEpoch := pos >= 20 && pos < 24 || pos >= 64 && pos < 72 // leader epoch, raft index
		if inEpoch != (err == nil) {
			t.Fatalf("byte %d flipped: ParseBatch %v", pos, err)
		}
		if !inEpoch && !errors.Is(err, wire.ErrCorruptBatch) {
			t.Fatalf("byte %d flipped: %v", pos, err)
		}
		if !inEpoch && wire.BatchChecksumOK(c) {
			t.Fatalf("byte %d flipped: BatchChecksumOK", pos)
		}
	}
	// base offset, leader epoch and raft index: outside the CRC.
	c := bytes.Clone(b)
	wire.SetBaseOffset(c, 1<<40)
	wire.SetBatchLeaderEpoch(c, -7)
	wire.SetBatchRaftIndex(c, 1<<50+3)
	if !wire.BatchChecksumOK(c) {
		t.Fatal("base offset, leader epoch or raft index inside the CRC")
	}
	if h, err := wire.PeekBatchHeader(c); err != nil || h.RaftIndex != 1<<50+3 || h.LeaderEpoch != -7 {
		t.Fatalf("header after the rewrites: %+v, %v", h, err)
	}
	// SetBatchLeaderEpoch leaves a magic-1 batch alone.
	b1 := buildBatch(t, varietyRecords()[:2], wire.CodecNone, nil)
	c1 := bytes.Clone(b1)
	wire.SetBatchLeaderEpoch(c1, 99)
	wire.SetBatchRaftIndex(c1, 99)
	if !bytes.Equal(b1, c1) {
		t.Fatal("SetBatchLeaderEpoch or SetBatchRaftIndex changed a magic-1 batch")
	}
}

func TestBatch2HeaderErrors(t *testing.T) {
	good := buildBatch2(t, varietyRecords()[:2], wire.CodecNone, nil, 3, 1, 10)
	if _, err := wire.ParseBatch(good, 1<<20); err != nil {
		t.Fatal(err)
	}
	put16 := func(pos int, v uint16) func([]byte) []byte {
		return func(b []byte) []byte { binary.BigEndian.PutUint16(b[pos:], v); return b }
	}
	put32 := func(pos int, v uint32) func([]byte) []byte {
		return func(b []byte) []byte { binary.BigEndian.PutUint32(b[pos:], v); return b }
	}
	put64 := func(pos int, v uint64) func([]byte) []byte {
		return func(b []byte) []byte { binary.BigEndian.PutUint64(b[pos:], v); return b }
	}
	for _, tt := range []struct {
		name   string
		mangle func([]byte) []byte
		want   string
	}{
		{"header shorter than magic 2", func(b []byte) []byte { return b[:wire.BatchHeaderSize2-1] }, "shorter than a magic-2 batch header"},
		{"length under the header", put32(8, wire.BatchHeaderSize2-13), "shorter than a magic-2 batch header"},
		{"reserved at 18", put16(18, 1), "reserved"},
		{"reserved at 58", put16(58, 0x100), "reserved"},
		{"negative producer id", put64(48, uint64(1<<63)), "producer id"},
		{"negative epoch", put16(56, 0xfffe), "producer id"},
		{"no sequence", put32(60, 0xffffffff), "producer id"},
		{"no id with an epoch", func(b []byte) []byte { binary.BigEndian.PutUint64(b[48:], ^uint64(0)); return b }, "no producer id"},
		{"no id with a sequence", func(b []byte) []byte {
			binary.BigEndian.PutUint64(b[48:], ^uint64(0))
			binary.BigEndian.PutUint16(b[56:], 0xffff)
			return b
		}, "no producer id"},
		{"magic 3", func(b []byte) []byte { b[16] = 3; return b }, "batch magic 3"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.mangle(bytes.Clone(good))
			if len(c) >= 24 {
				fixCRC(c)
			}
			_, perr := wire.PeekBatchHeader(c)
			_, err := wire.ParseBatch(c, 1<<20)
			if !errors.Is(err, wire.ErrCorruptBatch) || !errors.Is(perr, wire.ErrCorruptBatch) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseBatch %v, PeekBatchHeader %v; want ErrCorruptBatch saying %q", err, perr, tt.want)
			}
			if wire.MayBeBatchHeader(c) && tt.name == "header shorter than magic 2" {
				t.Fatal("MayBeBatchHeader accepts a short magic-2 header")
			}
		})
	}
	if a := testing.AllocsPerRun(100, func() { _, _ = wire.ParseBatch(good, 1<<20) }); a != 0 {
		t.Errorf("ParseBatch of magic 2 allocates %v times", a)
	}
}

// PeekBatchHeaderUnchecked decodes what a 44-byte read of a magic-2 header holds, and the
// rest once it has the whole header.
func TestPeekBatchHeaderUnchecked2(t *testing.T) {
	b := buildBatch2(t, varietyRecords()[:2], wire.CodecS2, nil, 3, 1, 10)
	full := wire.PeekBatchHeaderUnchecked(b)
	if h, err := wire.PeekBatchHeader(b); err != nil || h != full {
		t.Fatalf("%v: %+v vs %+v", err, h, full)
	}
	short := wire.PeekBatchHeaderUnchecked(b[:wire.BatchHeaderSize])
	if short.Size() != full.Size() || short.RecordCount != full.RecordCount || short.MaxTimestamp != full.MaxTimestamp ||
		short.Magic != 2 || short.ProducerID != 0 || short.RecordsSize != 0 {
		t.Fatalf("short %+v, full %+v", short, full)
	}
}

func TestSetBatchProducer(t *testing.T) {
	b := buildBatch2(t, varietyRecords()[:2], wire.CodecNone, nil, 3, 1, 10)
	if err := wire.SetBatchProducer(b, 8, 2, 0); err != nil {
		t.Fatal(err)
	}
	bt, err := wire.ParseBatch(b, 1<<20)
	if err != nil || bt.ProducerID != 8 || bt.ProducerEpoch != 2 || bt.BaseSequence != 0 {
		t.Fatalf("%v %+v", err, bt.BatchHeader)
	}
	if err := wire.SetBatchProducer(b, wire.NoProducer, wire.NoProducer, wire.NoProducer); err != nil {
		t.Fatal(err)
	}
	if bt, err := wire.ParseBatch(b, 1<<20); err != nil || bt.HasProducer() {
		t.Fatalf("%v %+v", err, bt.BatchHeader)
	}
	for _, bad := range []struct {
		name string
		b    []byte
		id   int64
	}{
		{"magic 1", buildBatch(t, varietyRecords()[:2], wire.CodecNone, nil), 1},
		{"not whole", b[:len(b)-1], 1},
		{"bad fields", b, -2},
	} {
		if err := wire.SetBatchProducer(bad.b, bad.id, 0, 0); !errors.Is(err, wire.ErrCorruptBatch) {
			t.Errorf("%s: %v", bad.name, err)
		}
	}
}

func TestNextSequence(t *testing.T) {
	for _, tt := range []struct {
		seq   int32
		count uint32
		want  int32
	}{
		{0, 0, 0}, {0, 5, 5}, {wire.MaxSequence, 1, 0}, {wire.MaxSequence - 1, 3, 1}, {10, 1 << 31, 10},
	} {
		if got := wire.NextSequence(tt.seq, tt.count); got != tt.want {
			t.Errorf("NextSequence(%d, %d) = %d, want %d", tt.seq, tt.count, got, tt.want)
		}
	}
}

func TestBuilderMagic(t *testing.T) {
	var bb wire.BatchBuilder
	if bb.Magic() != wire.BatchMagic || bb.Size() != wire.BatchHeaderSize {
		t.Fatalf("zero builder: magic %d size %d", bb.Magic(), bb.Size())
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("SetProducer on a magic-1 builder did not panic")
			}
		}()
		bb.SetProducer(1, 0, 0)
	}()
	bb.SetMagic(wire.BatchMagic2)
	if bb.Size() != wire.BatchHeaderSize2 {
		t.Fatalf("magic-2 empty size %d", bb.Size())
	}
	bb.Append(exampleTS, nil, []byte("x"), nil)
	bb.SetProducer(4, 0, 7)
	b, err := bb.Finish(wire.CodecNone, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h, err := wire.PeekBatchHeader(b); err != nil || h.ProducerID != 4 || h.BaseSequence != 7 {
		t.Fatalf("%v %+v", err, h)
	}
	// Reset keeps the magic and clears the producer.
	bb.Reset()
	bb.Append(exampleTS, nil, []byte("x"), nil)
	b, _ = bb.Finish(wire.CodecNone, nil)
	if h, err := wire.PeekBatchHeader(b); err != nil || h.Magic != 2 || h.HasProducer() {
		t.Fatalf("after Reset: %v %+v", err, h)
	}
	// Switching back to magic 1 builds magic 1 from the same records.
	bb.SetMagic(wire.BatchMagic)
	b, _ = bb.Finish(wire.CodecNone, nil)
	if h, err := wire.ParseBatch(b, 1<<20); err != nil || h.Magic != 1 || len(b) != bb.Size() {
		t.Fatalf("magic 1 again: %v %+v", err, h)
	}
}
