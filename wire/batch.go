package wire

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Record batch layout (big-endian). NEVER CHANGE these constants: this is the wire format and
// the on-disk format of durable topics; the broker stores batches byte for byte as they came.
//
//	 0        8        12       16  17  18    20       24              32              40       44
//	+--------+--------+--------+---+---+-----+--------+---------------+---------------+--------+-------
//	| base   | batch  | crc32c |mag|att|rsvd | record | first         | max           | records| records
//	| offset | length |        |   |   |     | count  | timestamp ms  | timestamp ms  | size   | ...
//	+--------+--------+--------+---+---+-----+--------+---------------+---------------+--------+-------
//
// base offset is the only field the broker rewrites, so the CRC-32C (Castagnoli) covers bytes
// 16 to the end. batch length counts the bytes after the length field. records size is the size
// of the records section once decompressed (equal to its stored size when the codec is none),
// so a reader can check it against its limit before decompressing.
//
// Each record, in the (decompressed) records section:
//
//	uvarint length             bytes after this field
//	varint  timestamp delta    ms after first timestamp (zig-zag)
//	uvarint key length,   key bytes
//	uvarint value length, value bytes
//	uvarint header count, then per header: uvarint name length, name, uvarint value length, value
//
// Record i of a batch has offset base offset + i.
const (
	BatchHeaderSize = 44
	BatchMagic      = 1

	batchLengthOffset = 8
	batchCRCOffset    = 12
	batchCRCStart     = 16
	batchMagicOffset  = 16
	batchReservedPos  = 18 // two bytes
	batchPrefix       = 12 // base offset + batch length: what batch length does not count

	// minRecordSize is the smallest encoded record: five one-byte fields.
	minRecordSize = 5
)

// Codec is the compression codec of a batch's records section, in attributes bits 0-2.
type Codec uint8

const (
	CodecNone Codec = 0
	CodecS2   Codec = 1
	CodecZstd Codec = 2

	codecMask = 0x07
)

func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecS2:
		return "s2"
	case CodecZstd:
		return "zstd"
	}
	return fmt.Sprintf("codec(%d)", uint8(c))
}

// ParseCodec maps a codec name ("none", "s2", "zstd") to its Codec.
func ParseCodec(s string) (Codec, error) {
	switch s {
	case "none", "":
		return CodecNone, nil
	case "s2":
		return CodecS2, nil
	case "zstd":
		return CodecZstd, nil
	}
	return 0, fmt.Errorf("unknown compression codec %q (want none, s2 or zstd)", s)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC-32C of b, the checksum used by record batches.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// BatchHeader is the fixed part of a batch, decoded by PeekBatchHeader without the CRC check:
// what a reader needs to walk batches in a segment file or a FETCH answer, and to index them.
type BatchHeader struct {
	BaseOffset     int64
	Length         uint32 // batch length field: bytes after it
	CRC            uint32
	Magic          uint8
	Attributes     uint8
	RecordCount    uint32
	FirstTimestamp int64
	MaxTimestamp   int64
	RecordsSize    uint32 // decompressed size of the records section
}

// Codec is the batch's compression codec.
func (h *BatchHeader) Codec() Codec { return Codec(h.Attributes & codecMask) }

// Size is the batch's total encoded size.
func (h *BatchHeader) Size() int { return int(h.Length) + batchPrefix }

// NextOffset is the offset after the batch's last record.
func (h *BatchHeader) NextOffset() int64 { return h.BaseOffset + int64(h.RecordCount) }

// Batch is a parsed batch header plus its records section, which aliases the input.
type Batch struct {
	BatchHeader
	Records []byte // stored records section (compressed when Codec() != CodecNone)
}

// BatchSize reads the total size of the batch that starts at b from its length field. It
// returns 0 when b holds fewer than 12 bytes. It checks nothing else: PeekBatchHeader does.
func BatchSize(b []byte) int {
	if len(b) < batchPrefix {
		return 0
	}
	return int(binary.BigEndian.Uint32(b[batchLengthOffset:])) + batchPrefix
}

// BatchBaseOffset reads the base offset of the batch that starts at b, unchecked, so that an
// error about a batch PeekBatchHeader or ParseBatch refuses can still name it. It returns 0
// when b holds fewer than 8 bytes.
func BatchBaseOffset(b []byte) int64 {
	if len(b) < 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(b))
}

// BatchChecksumOK reports whether the whole batch b (as framed by its length field) matches
// its CRC-32C, so that its header fields can be trusted even when ParseBatch refuses the batch
// for another reason (its records). It checks nothing else.
func BatchChecksumOK(b []byte) bool {
	return len(b) >= BatchHeaderSize && binary.BigEndian.Uint32(b[batchCRCOffset:]) == Checksum(b[batchCRCStart:])
}

// PeekBatchHeader decodes the header of the batch at the start of b. b needs to hold only the
// header (BatchHeaderSize bytes); the rest of the batch may lie beyond it. It checks what can
// be checked without the records: the magic, the attributes, the reserved field, and a length
// that covers at least a header. ParseBatch checks the whole batch. It does not allocate
// unless it fails (the error is formatted); MayBeBatchHeader never does.
//
// This file is the only code that knows the header's byte positions: a new batch magic is
// taught here, and every reader (broker, log, client) follows.
func PeekBatchHeader(b []byte) (BatchHeader, error) {
	if len(b) < BatchHeaderSize {
		return BatchHeader{}, fmt.Errorf("%w: %d bytes is shorter than a batch header", ErrCorruptBatch, len(b))
	}
	switch b[batchMagicOffset] {
	case BatchMagic:
	default:
		return BatchHeader{}, fmt.Errorf("%w: batch magic %d, want %d", ErrCorruptBatch, b[batchMagicOffset], BatchMagic)
	}
	h, reserved := decodeBatchHeader(b)
	switch {
	case h.Size() < BatchHeaderSize:
		return BatchHeader{}, fmt.Errorf("%w: batch length field %d is shorter than a batch header", ErrCorruptBatch, h.Length)
	case h.Attributes&^codecMask != 0 || h.Codec() > CodecZstd:
		return BatchHeader{}, fmt.Errorf("%w: unknown attributes 0x%02x", ErrCorruptBatch, h.Attributes)
	case reserved != 0:
		return BatchHeader{}, fmt.Errorf("%w: reserved field is %d, want 0", ErrCorruptBatch, reserved)
	}
	return h, nil
}

// MayBeBatchHeader is the first filter of a scan that tries every byte position for the start
// of a batch (log recovery): false means PeekBatchHeader refuses b. It tests only the length,
// the magic and the reserved field, is inlined, and never allocates (PeekBatchHeader does
// when it fails), so the scan calls PeekBatchHeader only where a batch may start. Whatever
// magic PeekBatchHeader learns, this learns too.
func MayBeBatchHeader(b []byte) bool {
	return len(b) >= BatchHeaderSize && b[batchMagicOffset] == BatchMagic && b[batchReservedPos]|b[batchReservedPos+1] == 0
}

// PeekBatchHeaderUnchecked decodes the header fields of the batch at the start of b, which
// must hold BatchHeaderSize bytes, without checking any of them. It is for walkers that go by
// the length field alone and leave damage to the CRC check, so that a flipped bit in one
// batch does not hide the batches after it (log reads), and for reports on a batch that
// PeekBatchHeader or ParseBatch refused. It does not allocate.
func PeekBatchHeaderUnchecked(b []byte) BatchHeader {
	h, _ := decodeBatchHeader(b)
	return h
}

// decodeBatchHeader decodes the header fields at the start of b, which must hold
// BatchHeaderSize bytes.
func decodeBatchHeader(b []byte) (h BatchHeader, reserved uint16) {
	r := NewReader(b[:BatchHeaderSize])
	h = BatchHeader{
		BaseOffset: r.I64(),
		Length:     r.U32(),
		CRC:        r.U32(),
		Magic:      r.U8(),
		Attributes: r.U8(),
	}
	reserved = r.U16()
	h.RecordCount = r.U32()
	h.FirstTimestamp = r.I64()
	h.MaxTimestamp = r.I64()
	h.RecordsSize = r.U32()
	return h, reserved
}

// SetBaseOffset rewrites the base offset of the encoded batch b in place. The CRC does not
// cover it.
func SetBaseOffset(b []byte, base int64) { binary.BigEndian.PutUint64(b, uint64(base)) }

// ParseBatch validates one whole encoded batch: its length field matches len(b), the size is
// within maxSize, the CRC matches, magic and attributes are known, the record count is
// plausible for the records section, and an uncompressed section is exactly records size long.
// It does not walk the records (see RecordIter); it does not allocate.
func ParseBatch(b []byte, maxSize int) (Batch, error) {
	if len(b) > maxSize {
		return Batch{}, fmt.Errorf("%w: %d bytes, limit %d", ErrBatchTooLarge, len(b), maxSize)
	}
	h, err := PeekBatchHeader(b)
	if err != nil {
		return Batch{}, err
	}
	bt := Batch{BatchHeader: h, Records: b[BatchHeaderSize:]}
	switch {
	case bt.Size() != len(b):
		return Batch{}, fmt.Errorf("%w: batch length field %d, but %d bytes follow it", ErrCorruptBatch, bt.Length, len(b)-batchPrefix)
	case Checksum(b[batchCRCStart:]) != bt.CRC:
		return Batch{}, fmt.Errorf("%w: CRC-32C mismatch (stored %08x, computed %08x)", ErrCorruptBatch, bt.CRC, Checksum(b[batchCRCStart:]))
	case bt.RecordCount == 0:
		return Batch{}, fmt.Errorf("%w: batch holds no records", ErrCorruptBatch)
	case uint64(bt.RecordsSize) > uint64(maxSize) || uint64(bt.RecordCount)*minRecordSize > uint64(bt.RecordsSize):
		return Batch{}, fmt.Errorf("%w: %d records in a %d-byte records section", ErrCorruptBatch, bt.RecordCount, bt.RecordsSize)
	case bt.Codec() == CodecNone && int(bt.RecordsSize) != len(bt.Records):
		return Batch{}, fmt.Errorf("%w: records size %d but section is %d bytes", ErrCorruptBatch, bt.RecordsSize, len(bt.Records))
	case bt.MaxTimestamp < bt.FirstTimestamp:
		return Batch{}, fmt.Errorf("%w: max timestamp before first timestamp", ErrCorruptBatch)
	}
	return bt, nil
}

// AppendBatch encodes bt (header fields and Records as stored) after dst. Length and CRC are
// taken from bt as they are, so AppendBatch(nil, ParseBatch(x)) reproduces x.
func AppendBatch(dst []byte, bt *Batch) []byte {
	dst = AppendI64(dst, bt.BaseOffset)
	dst = AppendU32(dst, bt.Length)
	dst = AppendU32(dst, bt.CRC)
	dst = append(dst, bt.Magic, bt.Attributes, 0, 0)
	dst = AppendU32(dst, bt.RecordCount)
	dst = AppendI64(dst, bt.FirstTimestamp)
	dst = AppendI64(dst, bt.MaxTimestamp)
	dst = AppendU32(dst, bt.RecordsSize)
	return append(dst, bt.Records...)
}

// RecordHeader is one header of a record. Name and Value alias the batch.
type RecordHeader struct {
	Name  []byte
	Value []byte
}

// Record is one decoded record. Key, Value and the headers alias the records section; the
// Headers slice is reused by the next RecordIter.Next call.
type Record struct {
	Offset         int64
	Timestamp      int64 // unix ms
	TimestampDelta int64
	Key            []byte
	Value          []byte
	Headers        []RecordHeader
}

// RecordSize is the encoded size of a record, including its length prefix.
func RecordSize(tsDelta int64, key, value []byte, headers []RecordHeader) int {
	n := recordBodySize(tsDelta, key, value, headers)
	return UvarintLen(uint64(n)) + n
}

func recordBodySize(tsDelta int64, key, value []byte, headers []RecordHeader) int {
	n := UvarintLen(uint64(tsDelta<<1)^uint64(tsDelta>>63)) +
		UvarintLen(uint64(len(key))) + len(key) +
		UvarintLen(uint64(len(value))) + len(value) +
		UvarintLen(uint64(len(headers)))
	for _, h := range headers {
		n += UvarintLen(uint64(len(h.Name))) + len(h.Name) + UvarintLen(uint64(len(h.Value))) + len(h.Value)
	}
	return n
}

// AppendRecord appends one encoded record.
func AppendRecord(dst []byte, tsDelta int64, key, value []byte, headers []RecordHeader) []byte {
	dst = AppendUvarint(dst, uint64(recordBodySize(tsDelta, key, value, headers)))
	dst = AppendVarint(dst, tsDelta)
	dst = AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	dst = AppendUvarint(dst, uint64(len(value)))
	dst = append(dst, value...)
	dst = AppendUvarint(dst, uint64(len(headers)))
	for _, h := range headers {
		dst = AppendUvarint(dst, uint64(len(h.Name)))
		dst = append(dst, h.Name...)
		dst = AppendUvarint(dst, uint64(len(h.Value)))
		dst = append(dst, h.Value...)
	}
	return dst
}

// RecordIter walks the records of an uncompressed records section without allocating (after
// the first record with headers grows Record.Headers).
//
//	it := wire.NewRecordIter(records, bt.RecordCount, bt.BaseOffset, bt.FirstTimestamp)
//	for it.Next(&rec) { ... }
//	if err := it.Err(); err != nil { ... }
type RecordIter struct {
	r         Reader
	remaining uint32
	offset    int64
	firstTS   int64
}

// NewRecordIter iterates count records in records.
func NewRecordIter(records []byte, count uint32, baseOffset, firstTimestamp int64) RecordIter {
	return RecordIter{r: NewReader(records), remaining: count, offset: baseOffset, firstTS: firstTimestamp}
}

// Next decodes the next record into rec. It returns false at the end or on error; Err tells
// which.
func (it *RecordIter) Next(rec *Record) bool {
	if it.remaining == 0 {
		it.r.Done("the last record")
		return false
	}
	if it.r.err != nil {
		return false
	}
	n := it.r.Uvarint("record length")
	if it.r.err == nil && n > uint64(it.r.Len()) {
		it.r.Fail(fmt.Errorf("%w: record length %d at offset %d, %d bytes left", ErrCorruptBatch, n, it.r.off, it.r.Len()))
	}
	body := NewReader(it.r.Raw(int(n), "record"))
	rec.TimestampDelta = body.Varint("timestamp delta")
	rec.Key = body.Raw(int(min(body.Uvarint("key length"), uint64(body.Len()+1))), "key")
	rec.Value = body.Raw(int(min(body.Uvarint("value length"), uint64(body.Len()+1))), "value")
	hc := body.Uvarint("header count")
	if body.err == nil && hc*2 > uint64(body.Len()) {
		body.Fail(fmt.Errorf("%w: %d headers in %d bytes", ErrCorruptBatch, hc, body.Len()))
	}
	rec.Headers = rec.Headers[:0]
	for i := uint64(0); i < hc && body.err == nil; i++ {
		name := body.Raw(int(min(body.Uvarint("header name length"), uint64(body.Len()+1))), "header name")
		val := body.Raw(int(min(body.Uvarint("header value length"), uint64(body.Len()+1))), "header value")
		rec.Headers = append(rec.Headers, RecordHeader{Name: name, Value: val})
	}
	body.Done("record")
	if body.err != nil {
		it.r.Fail(body.err)
		return false
	}
	rec.Offset = it.offset
	rec.Timestamp = it.firstTS + rec.TimestampDelta
	it.offset++
	it.remaining--
	return true
}

// Err is the first decoding error, if any.
func (it *RecordIter) Err() error { return it.r.err }

// BatchBuilder accumulates records into one uncompressed batch. The zero value is ready; Reset
// makes it reusable without allocating. Not safe for concurrent use.
type BatchBuilder struct {
	buf     []byte // BatchHeaderSize bytes of header space, then the records section
	count   uint32
	firstTS int64
	maxTS   int64
	scratch []byte
}

// Reset empties the builder, keeping its memory.
func (b *BatchBuilder) Reset() {
	b.buf = b.buf[:0]
	b.count = 0
}

// Count is the number of records appended since Reset.
func (b *BatchBuilder) Count() int { return int(b.count) }

// Size is the size of the batch Finish would produce without compression.
func (b *BatchBuilder) Size() int {
	if len(b.buf) == 0 {
		return BatchHeaderSize
	}
	return len(b.buf)
}

// SizeWith is Size after appending a record with these fields at timestamp ts.
func (b *BatchBuilder) SizeWith(ts int64, key, value []byte, headers []RecordHeader) int {
	delta := int64(0)
	if b.count > 0 {
		delta = ts - b.firstTS
	}
	return b.Size() + RecordSize(delta, key, value, headers)
}

// Append adds a record with timestamp ts (unix ms).
func (b *BatchBuilder) Append(ts int64, key, value []byte, headers []RecordHeader) {
	if len(b.buf) == 0 {
		b.buf = append(b.buf[:0], make([]byte, BatchHeaderSize)...)
	}
	if b.count == 0 {
		b.firstTS, b.maxTS = ts, ts
	}
	if ts > b.maxTS {
		b.maxTS = ts
	}
	b.buf = AppendRecord(b.buf, ts-b.firstTS, key, value, headers)
	b.count++
}

// Finish completes the batch, compressed with codec through c (nil for CodecNone), and returns
// it. The result aliases the builder's memory and is valid until the next Reset or Append. It
// panics when no record was appended.
func (b *BatchBuilder) Finish(codec Codec, c *Compressor) ([]byte, error) {
	if b.count == 0 {
		panic("wire: Finish on an empty batch")
	}
	records := b.buf[BatchHeaderSize:]
	out := b.buf
	if codec != CodecNone {
		var err error
		b.scratch = append(b.scratch[:0], make([]byte, BatchHeaderSize)...)
		b.scratch, err = c.Compress(b.scratch, codec, records)
		if err != nil {
			return nil, err
		}
		out = b.scratch
	}
	h := out[:BatchHeaderSize]
	binary.BigEndian.PutUint64(h[0:], 0)
	binary.BigEndian.PutUint32(h[batchLengthOffset:], uint32(len(out)-batchPrefix))
	h[batchMagicOffset], h[17], h[18], h[19] = BatchMagic, byte(codec), 0, 0
	binary.BigEndian.PutUint32(h[20:], b.count)
	binary.BigEndian.PutUint64(h[24:], uint64(b.firstTS))
	binary.BigEndian.PutUint64(h[32:], uint64(b.maxTS))
	binary.BigEndian.PutUint32(h[40:], uint32(len(records)))
	binary.BigEndian.PutUint32(h[batchCRCOffset:], Checksum(out[batchCRCStart:]))
	return out, nil
}

// PartitionForKey is the partition a keyed message goes to among n partitions: FNV-1a 32 of the
// key, modulo n. Every client must use this function so that one key always lands in one
// partition, whichever client produced it.
func PartitionForKey(key []byte, n int) int {
	if n <= 0 {
		return 0
	}
	h := uint32(2166136261)
	for _, c := range key {
		h ^= uint32(c)
		h *= 16777619
	}
	return int(h % uint32(n))
}
