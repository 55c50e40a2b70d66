package wire

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/lightq/lightq/internal/crc32c"
)

// Record batch layouts (big-endian). NEVER CHANGE these constants: they are the wire format
// and the on-disk format of durable topics; the broker stores batches byte for byte as they
// came. Two formats exist, told apart by the magic byte, which both keep at byte 16 (so do
// base offset and batch length), so that one peek at 17 bytes tells them apart and a log may
// hold both.
//
// Magic 1 (44-byte header):
//
//	 0        8        12       16  17  18    20       24              32              40       44
//	+--------+--------+--------+---+---+-----+--------+---------------+---------------+--------+-------
//	| base   | batch  | crc32c |mag|att|rsvd | record | first         | max           | records| records
//	| offset | length |        | 1 |   |     | count  | timestamp ms  | timestamp ms  | size   | ...
//	+--------+--------+--------+---+---+-----+--------+---------------+---------------+--------+-------
//
// base offset is the only field the broker rewrites, so the CRC-32C (Castagnoli) covers bytes
// 16 to the end.
//
// Magic 2 (72-byte header) adds what the log must remember by itself: the producer's id,
// epoch and base sequence (idempotent produce), and two fields the broker writes for
// replication: the leader epoch (the Raft term of the leader that stored the batch) and the
// raft index (the batch's index in the partition's replicated log; 0 when the partition is
// not replicated), so that a replica's segment log is its Raft log, with nothing kept beside:
//
//	 0        8        12       16  17  18    20       24       28              36              44
//	+--------+--------+--------+---+---+-----+--------+--------+---------------+---------------+--------
//	| base   | batch  | crc32c |mag|att|rsvd | leader | record | first         | max           | records
//	| offset | length |        | 2 |   |     | epoch  | count  | timestamp ms  | timestamp ms  | size
//	+--------+--------+--------+---+---+-----+--------+--------+---------------+---------------+--------
//	 48                56     58    60       64                72
//	+-----------------+------+-----+--------+-----------------+-------
//	| producer id     | prod.| rsvd| base   | raft index      | records
//	| i64 (-1 none)   | epoch|     | seq    | u64 (0 none)    | ...
//	+-----------------+------+-----+--------+-----------------+-------
//
// base offset, leader epoch and raft index are the fields the broker rewrites, so the CRC-32C
// covers bytes 16-19, 24-63 and 72 to the end. Every field a walker of a segment needs
// (length, record count, timestamps) is within the first 44 bytes in both magics, so a
// 44-byte read walks either. In both formats batch length counts the bytes after the length
// field, and records size is the size of the records section once decompressed (equal to its
// stored size when the codec is none), so a reader can check it against its limit before
// decompressing. Kafka's RecordBatch v2 has the same fields, but puts the leader epoch
// before the magic, which would move the magic and make the formats two peeks apart.
//
// Attributes (byte 17, both magics): bits 0-2 the codec; bit 5, in magic 2 only, marks a
// control batch (control.go), which the broker writes and consumers skip; the other bits are 0.
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
	// BatchHeaderSize is the header size of magic 1, and the smallest of any magic: the bytes
	// a reader needs to tell the magic and walk batches by their length fields.
	BatchHeaderSize = 44
	// BatchHeaderSize2 is the header size of magic 2.
	BatchHeaderSize2 = 72
	// MaxBatchHeaderSize is the largest header of any magic: read this many bytes (or what is
	// left, when less) to decode any header with PeekBatchHeader.
	MaxBatchHeaderSize = BatchHeaderSize2

	BatchMagic  = 1 // magic 1: no producer fields
	BatchMagic2 = 2 // magic 2: producer id, epoch, base sequence and leader epoch

	batchLengthOffset = 8
	batchCRCOffset    = 12
	batchCRCStart     = 16
	batchMagicOffset  = 16
	batchReservedPos  = 18 // two bytes
	batchPrefix       = 12 // base offset + batch length: what batch length does not count

	// Magic 2 only.
	batchLeaderEpochPos = 20 // four bytes, outside the CRC
	batchCRCResume      = 24 // the CRC covers [16, 20), [24, 64) and [72, end)
	batchReserved2Pos   = 58 // two bytes
	batchRaftIndexPos   = 64 // eight bytes, outside the CRC

	// minRecordSize is the smallest encoded record: five one-byte fields.
	minRecordSize = 5
)

// NoProducer is the producer id, epoch and base sequence of a batch without a producer
// (every magic-1 batch, and magic-2 batches of producers that are not idempotent), and the
// leader epoch of a magic-1 batch.
const NoProducer = -1

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

// Checksum is the CRC-32C of b, the checksum used by record batches. It is internal/crc32c's,
// which folds with VPCLMULQDQ where the CPU has it: the same checksum, a few times faster than
// hash/crc32 on a batch.
func Checksum(b []byte) uint32 { return crc32c.Checksum(b) }

// BatchChecksum is the CRC-32C that the batch b, of either magic, must carry at bytes 12-15:
// of bytes 16 to the end for magic 1, of bytes 16-19, 24-63 and 72 to the end for magic 2
// (the leader epoch at 20-23 and the raft index at 64-71 are outside it, like the base
// offset). b holds the whole batch (at least 72 bytes for magic 2, 16 otherwise); the magic
// byte is not checked otherwise.
func BatchChecksum(b []byte) uint32 {
	if len(b) >= BatchHeaderSize2 && b[batchMagicOffset] == BatchMagic2 {
		c := crc32c.Checksum(b[batchCRCStart:batchLeaderEpochPos])
		c = crc32c.Update(c, b[batchCRCResume:batchRaftIndexPos])
		return crc32c.Update(c, b[BatchHeaderSize2:])
	}
	return Checksum(b[batchCRCStart:])
}

// BatchHeader is the fixed part of a batch, decoded by PeekBatchHeader without the CRC check:
// what a reader needs to walk batches in a segment file or a FETCH answer, and to index them.
// The producer fields and the leader epoch are NoProducer (-1) in a magic-1 batch.
type BatchHeader struct {
	BaseOffset     int64
	Length         uint32 // batch length field: bytes after it
	CRC            uint32
	Magic          uint8
	Attributes     uint8
	LeaderEpoch    int32  // magic 2: written by the broker, outside the CRC
	RaftIndex      uint64 // magic 2: written by the broker, outside the CRC; 0 when not replicated
	RecordCount    uint32
	FirstTimestamp int64
	MaxTimestamp   int64
	RecordsSize    uint32 // decompressed size of the records section
	ProducerID     int64  // NoProducer, or the id INIT_PRODUCER gave
	ProducerEpoch  int16  // NoProducer when ProducerID is
	BaseSequence   int32  // sequence number of the first record; NoProducer when ProducerID is
}

// Codec is the batch's compression codec.
func (h *BatchHeader) Codec() Codec { return Codec(h.Attributes & codecMask) }

// Size is the batch's total encoded size.
func (h *BatchHeader) Size() int { return int(h.Length) + batchPrefix }

// HeaderSize is the size of the batch's header (where its records section starts):
// BatchHeaderSize2 for magic 2, BatchHeaderSize for magic 1 (and for an unknown magic).
func (h *BatchHeader) HeaderSize() int { return headerSize(h.Magic) }

// NextOffset is the offset after the batch's last record.
func (h *BatchHeader) NextOffset() int64 { return h.BaseOffset + int64(h.RecordCount) }

// HasProducer reports whether the batch carries a producer id, so that the broker
// deduplicates it by its sequence numbers.
func (h *BatchHeader) HasProducer() bool { return h.ProducerID != NoProducer }

// LastSequence is the sequence number of the batch's last record: BaseSequence + RecordCount
// - 1, wrapping from MaxSequence to 0 (see NextSequence).
func (h *BatchHeader) LastSequence() int32 {
	return NextSequence(h.BaseSequence, h.RecordCount-1)
}

// MaxSequence is the largest sequence number; the one after it is 0.
const MaxSequence = math.MaxInt32

// NextSequence is the sequence number count records after seq (0 <= seq <= MaxSequence),
// wrapping from MaxSequence to 0: a producer numbers each partition's records 0, 1, 2, ...
// and gives a batch the base sequence NextSequence(previous base, previous record count).
func NextSequence(seq int32, count uint32) int32 {
	return int32((uint64(seq) + uint64(count)) % (MaxSequence + 1))
}

func headerSize(magic uint8) int {
	if magic == BatchMagic2 {
		return BatchHeaderSize2
	}
	return BatchHeaderSize
}

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
	return len(b) >= BatchHeaderSize && binary.BigEndian.Uint32(b[batchCRCOffset:]) == BatchChecksum(b)
}

// PeekBatchHeader decodes the header of the batch at the start of b. b needs to hold only the
// header (BatchHeaderSize bytes for magic 1, BatchHeaderSize2 for magic 2; reading
// MaxBatchHeaderSize bytes suits both); the rest of the batch may lie beyond it. It checks
// what can be checked without the records: the magic, the attributes (codec; the control bit
// only in magic 2, and then uncompressed, one record and no producer: see control.go), the
// reserved fields, the producer fields (all NoProducer, or an id >= 0 with an epoch and a base
// sequence >= 0), and a length that covers at least the header. ParseBatch checks the whole batch. It does
// not allocate unless it fails (the error is formatted); MayBeBatchHeader never does.
//
// This file is the only code that knows the header's byte positions: a new batch magic is
// taught here, and every reader (broker, log, client) follows.
func PeekBatchHeader(b []byte) (BatchHeader, error) {
	if len(b) < BatchHeaderSize {
		return BatchHeader{}, fmt.Errorf("%w: %d bytes is shorter than a batch header", ErrCorruptBatch, len(b))
	}
	switch b[batchMagicOffset] {
	case BatchMagic:
	case BatchMagic2:
		if len(b) < BatchHeaderSize2 {
			return BatchHeader{}, fmt.Errorf("%w: %d bytes is shorter than a magic-2 batch header (%d)", ErrCorruptBatch, len(b), BatchHeaderSize2)
		}
	default:
		return BatchHeader{}, fmt.Errorf("%w: batch magic %d, want %d or %d", ErrCorruptBatch, b[batchMagicOffset], BatchMagic, BatchMagic2)
	}
	h, reserved := decodeBatchHeader(b)
	switch {
	case h.Size() < h.HeaderSize():
		return BatchHeader{}, fmt.Errorf("%w: batch length field %d is shorter than a magic-%d batch header", ErrCorruptBatch, h.Length, h.Magic)
	case h.Attributes&^(codecMask|AttrControl) != 0 || h.Codec() > CodecZstd:
		return BatchHeader{}, fmt.Errorf("%w: unknown attributes 0x%02x", ErrCorruptBatch, h.Attributes)
	case h.IsControl() && h.Magic != BatchMagic2:
		return BatchHeader{}, fmt.Errorf("%w: attributes 0x%02x: the control bit in a magic-%d batch (control batches are format 2)", ErrCorruptBatch, h.Attributes, h.Magic)
	case h.IsControl() && (h.Codec() != CodecNone || h.RecordCount != 1 || h.ProducerID != NoProducer):
		return BatchHeader{}, fmt.Errorf("%w: control batch with codec %v, %d records, producer id %d: want uncompressed, one record, no producer", ErrCorruptBatch, h.Codec(), h.RecordCount, h.ProducerID)
	case reserved != 0:
		return BatchHeader{}, fmt.Errorf("%w: reserved field is %d, want 0", ErrCorruptBatch, reserved)
	case h.ProducerID == NoProducer && (h.ProducerEpoch != NoProducer || h.BaseSequence != NoProducer):
		return BatchHeader{}, fmt.Errorf("%w: no producer id, but producer epoch %d and base sequence %d (want -1)", ErrCorruptBatch, h.ProducerEpoch, h.BaseSequence)
	case h.ProducerID != NoProducer && (h.ProducerID < 0 || h.ProducerEpoch < 0 || h.BaseSequence < 0):
		return BatchHeader{}, fmt.Errorf("%w: producer id %d, epoch %d, base sequence %d: want an id, epoch and sequence >= 0, or all -1", ErrCorruptBatch, h.ProducerID, h.ProducerEpoch, h.BaseSequence)
	}
	return h, nil
}

// MayBeBatchHeader is the first filter of a scan that tries every byte position for the start
// of a batch (log recovery): false means PeekBatchHeader refuses b. It tests only the length,
// the magic and the reserved field, is inlined, and never allocates (PeekBatchHeader does
// when it fails), so the scan calls PeekBatchHeader only where a batch may start. Whatever
// magic PeekBatchHeader learns, this learns too.
func MayBeBatchHeader(b []byte) bool {
	return len(b) >= BatchHeaderSize && b[batchReservedPos]|b[batchReservedPos+1] == 0 &&
		(b[batchMagicOffset] == BatchMagic || b[batchMagicOffset] == BatchMagic2 && len(b) >= BatchHeaderSize2)
}

// PeekBatchHeaderUnchecked decodes the header fields of the batch at the start of b, which
// must hold BatchHeaderSize bytes, without checking any of them: fields of a magic-2 header
// that lie past the end of b read as 0. It is for walkers that go by the length field alone
// and leave damage to the CRC check, so that a flipped bit in one batch does not hide the
// batches after it (log reads), and for reports on a batch that PeekBatchHeader or ParseBatch
// refused. An unknown magic is decoded as magic 1. It does not allocate.
func PeekBatchHeaderUnchecked(b []byte) BatchHeader {
	h, _ := decodeBatchHeader(b)
	return h
}

// decodeBatchHeader decodes the header fields at the start of b, which must hold
// BatchHeaderSize bytes, by the layout of its magic (magic 1 for an unknown one). reserved
// is the OR of the reserved fields. Fields past the end of b are 0.
func decodeBatchHeader(b []byte) (h BatchHeader, reserved uint16) {
	_ = b[BatchHeaderSize-1]
	be := binary.BigEndian
	h.BaseOffset = int64(be.Uint64(b))
	h.Length = be.Uint32(b[batchLengthOffset:])
	h.CRC = be.Uint32(b[batchCRCOffset:])
	h.Magic, h.Attributes = b[batchMagicOffset], b[batchMagicOffset+1]
	reserved = be.Uint16(b[batchReservedPos:])
	if h.Magic != BatchMagic2 {
		h.RecordCount = be.Uint32(b[20:])
		h.FirstTimestamp = int64(be.Uint64(b[24:]))
		h.MaxTimestamp = int64(be.Uint64(b[32:]))
		h.RecordsSize = be.Uint32(b[40:])
		h.LeaderEpoch, h.ProducerID, h.ProducerEpoch, h.BaseSequence = NoProducer, NoProducer, NoProducer, NoProducer
		return h, reserved
	}
	h.LeaderEpoch = int32(be.Uint32(b[batchLeaderEpochPos:]))
	h.RecordCount = be.Uint32(b[24:])
	h.FirstTimestamp = int64(be.Uint64(b[28:]))
	h.MaxTimestamp = int64(be.Uint64(b[36:]))
	if len(b) < BatchHeaderSize2 {
		return h, reserved
	}
	h.RecordsSize = be.Uint32(b[44:])
	h.ProducerID = int64(be.Uint64(b[48:]))
	h.ProducerEpoch = int16(be.Uint16(b[56:]))
	reserved |= be.Uint16(b[batchReserved2Pos:])
	h.BaseSequence = int32(be.Uint32(b[60:]))
	h.RaftIndex = be.Uint64(b[batchRaftIndexPos:])
	return h, reserved
}

// BatchMagicOf is the magic byte of the batch that starts at b, or 0 when b is too short to
// hold it: what a reader checks first to know which header layout follows.
func BatchMagicOf(b []byte) uint8 {
	if len(b) <= batchMagicOffset {
		return 0
	}
	return b[batchMagicOffset]
}

// SetBaseOffset rewrites the base offset of the encoded batch b in place. The CRC does not
// cover it.
func SetBaseOffset(b []byte, base int64) { binary.BigEndian.PutUint64(b, uint64(base)) }

// SetBatchLeaderEpoch writes the leader epoch into the encoded batch b in place, if b is a
// magic-2 batch (a magic-1 batch has no such field and is left alone). The CRC does not cover
// it. The broker calls it on every batch it stores.
func SetBatchLeaderEpoch(b []byte, epoch int32) {
	if len(b) >= BatchHeaderSize2 && b[batchMagicOffset] == BatchMagic2 {
		binary.BigEndian.PutUint32(b[batchLeaderEpochPos:], uint32(epoch))
	}
}

// SetBatchRaftIndex writes the raft index into the encoded batch b in place, if b is a
// magic-2 batch (a magic-1 batch has none and is left alone). The CRC does not cover it. A
// replica writes it, with the leader epoch, into every batch it appends to a replicated
// partition.
func SetBatchRaftIndex(b []byte, index uint64) {
	if len(b) >= BatchHeaderSize2 && b[batchMagicOffset] == BatchMagic2 {
		binary.BigEndian.PutUint64(b[batchRaftIndexPos:], index)
	}
}

// SetBatchProducer rewrites the producer id, producer epoch and base sequence of the encoded
// magic-2 batch b in place and recomputes its CRC (one pass over the batch): for a producer
// that must send a batch it already sealed under new numbers (a new epoch or a new id). Use
// BatchBuilder.SetProducer to number a batch as it is sealed, which costs nothing extra. It
// fails if b is not a whole magic-2 batch, or if the fields are neither all NoProducer nor
// all >= 0.
func SetBatchProducer(b []byte, id int64, epoch int16, baseSequence int32) error {
	if len(b) < BatchHeaderSize2 || b[batchMagicOffset] != BatchMagic2 || BatchSize(b) != len(b) {
		return fmt.Errorf("%w: SetBatchProducer needs one whole magic-2 batch", ErrCorruptBatch)
	}
	if err := checkProducer(id, epoch, baseSequence); err != nil {
		return err
	}
	putProducer(b, id, epoch, baseSequence)
	binary.BigEndian.PutUint32(b[batchCRCOffset:], BatchChecksum(b))
	return nil
}

func checkProducer(id int64, epoch int16, baseSequence int32) error {
	if id == NoProducer && epoch == NoProducer && baseSequence == NoProducer || id >= 0 && epoch >= 0 && baseSequence >= 0 {
		return nil
	}
	return fmt.Errorf("%w: producer id %d, epoch %d, base sequence %d: want all -1, or all >= 0", ErrCorruptBatch, id, epoch, baseSequence)
}

func putProducer(h []byte, id int64, epoch int16, baseSequence int32) {
	binary.BigEndian.PutUint64(h[48:], uint64(id))
	binary.BigEndian.PutUint16(h[56:], uint16(epoch))
	h[batchReserved2Pos], h[batchReserved2Pos+1] = 0, 0
	binary.BigEndian.PutUint32(h[60:], uint32(baseSequence))
}

// ParseBatch validates one whole encoded batch of either magic: its length field matches
// len(b), the size is within maxSize, the CRC matches, the header passes PeekBatchHeader's
// checks, the record count is plausible for the records section, and an uncompressed section
// is exactly records size long. It does not walk the records (see RecordIter); it does not
// allocate.
func ParseBatch(b []byte, maxSize int) (Batch, error) {
	if len(b) > maxSize {
		return Batch{}, fmt.Errorf("%w: %d bytes, limit %d", ErrBatchTooLarge, len(b), maxSize)
	}
	h, err := PeekBatchHeader(b)
	if err != nil {
		return Batch{}, err
	}
	bt := Batch{BatchHeader: h}
	switch {
	case bt.Size() != len(b):
		return Batch{}, fmt.Errorf("%w: batch length field %d, but %d bytes follow it", ErrCorruptBatch, bt.Length, len(b)-batchPrefix)
	case BatchChecksum(b) != bt.CRC:
		return Batch{}, fmt.Errorf("%w: CRC-32C mismatch (stored %08x, computed %08x)", ErrCorruptBatch, bt.CRC, BatchChecksum(b))
	}
	bt.Records = b[h.HeaderSize():]
	switch {
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

// AppendBatch encodes bt (header fields and Records as stored) after dst, by the layout of
// bt.Magic (magic 1 for any magic but 2). Length and CRC are taken from bt as they are, so
// AppendBatch(nil, ParseBatch(x)) reproduces x.
func AppendBatch(dst []byte, bt *Batch) []byte {
	dst = AppendI64(dst, bt.BaseOffset)
	dst = AppendU32(dst, bt.Length)
	dst = AppendU32(dst, bt.CRC)
	dst = append(dst, bt.Magic, bt.Attributes, 0, 0)
	if bt.Magic == BatchMagic2 {
		dst = AppendI32(dst, bt.LeaderEpoch)
	}
	dst = AppendU32(dst, bt.RecordCount)
	dst = AppendI64(dst, bt.FirstTimestamp)
	dst = AppendI64(dst, bt.MaxTimestamp)
	dst = AppendU32(dst, bt.RecordsSize)
	if bt.Magic == BatchMagic2 {
		dst = AppendI64(dst, bt.ProducerID)
		dst = AppendU16(dst, uint16(bt.ProducerEpoch))
		dst = append(dst, 0, 0)
		dst = AppendI32(dst, bt.BaseSequence)
		dst = AppendU64(dst, bt.RaftIndex)
	}
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
