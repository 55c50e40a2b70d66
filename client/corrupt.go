package client

import (
	"fmt"

	"github.com/lightq/lightq/wire"
)

// Batches the client cannot decode: the error that names them, and how far each one reaches,
// so that a consumer can move past it.

// CorruptBatchError reports a record batch the client cannot decode: it fails its CRC or
// structure check (wire.ParseBatch), its records section does not decompress, or its records
// do not decode (a record count that does not match the records, a bad varint, a length past
// the end). errors.Is(err, wire.ErrCorruptBatch) holds for it; Err is the cause.
//
// The broker sends stored batches byte for byte, so fetching one again gives the same bytes:
// a consumer gets past it only by skipping its offsets (ConsumerOptions.OnCorruptBatch,
// SubscribeOptions.OnCorruptBatch, BatchIter.SkipCorrupt).
type CorruptBatchError struct {
	Topic     string
	Partition int32
	// FirstOffset is the first offset the error covers: the batch's base offset, which the
	// broker writes (and which its CRC does not cover), or -1 when not even that could be
	// read. A Consumer or Subscription reports the offsets it could not deliver: from its
	// position when it started inside the batch, from the first record that did not decode
	// when the records before it were delivered.
	FirstOffset int64
	// LastOffset is the offset of the batch's last record, -1 when the batch's extent is
	// unknown (see Skippable). It comes from the base offset of the batch that follows it in
	// the same FETCH answer when there is one (the broker walks its log by length fields and
	// checks that base offsets increase), else from the header's record count, which a CRC
	// mismatch makes a best guess (bounded by the answer's high watermark).
	LastOffset int64
	Err        error
}

func (e *CorruptBatchError) Error() string {
	if !e.Skippable() {
		return fmt.Sprintf("lightq: topic %s partition %d: batch at offset %d: cannot decode batch, nor tell where it ends: %v", e.Topic, e.Partition, e.FirstOffset, e.Err)
	}
	return fmt.Sprintf("lightq: topic %s partition %d offsets %d-%d: cannot decode batch: %v", e.Topic, e.Partition, e.FirstOffset, e.LastOffset, e.Err)
}

// Unwrap returns the cause.
func (e *CorruptBatchError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, wire.ErrCorruptBatch) hold whatever the cause wraps (a record that
// does not decode wraps wire.ErrMalformed).
func (e *CorruptBatchError) Is(target error) bool { return target == wire.ErrCorruptBatch }

// Skippable reports whether the batch's offset range is known, so that a consumer can move
// past it. It is not when the batch's length field does not frame it within the answer, or
// when the range its header gives ends before the offset asked for (the broker sends only
// batches that reach it). A broker walks its log by those length fields and answers
// STORAGE_ERROR where they are damaged, so a batch it sends can normally be skipped.
func (e *CorruptBatchError) Skippable() bool {
	return e.FirstOffset >= 0 && e.LastOffset >= e.FirstOffset
}

// batchNext is the offset after the batch of n bytes at the start of b, a sequence of whole
// batches (a FETCH answer): the base offset of the batch that follows when b holds one, else
// the end the header's record count gives, at most hw. That count is trusted when the CRC
// vouches for it, or when the batch is uncompressed and its bytes could hold that many
// records; otherwise the end is -1, unknown. A damaged count at the end of an answer (the end
// of a segment, often) could otherwise send a skip past good batches of the next segment.
func batchNext(b []byte, n int, hw int64) int64 {
	if rest := b[n:]; wholeBatchSize(rest) != 0 {
		return wire.BatchBaseOffset(rest)
	}
	h := wire.PeekBatchHeaderUnchecked(b)
	if !wire.BatchChecksumOK(b[:n]) {
		const minRecordBytes = 5 // five one-byte fields (wire/batch.go)
		if h.Codec() != wire.CodecNone || int64(h.RecordCount)*minRecordBytes > int64(n-wire.BatchHeaderSize) {
			return -1
		}
	}
	return min(h.NextOffset(), hw)
}

// corruptBatch describes the corrupt batch at the start of b, a sequence of whole batches of
// which it takes n bytes (0: its length field does not frame it), met by a read from offset
// from with high watermark hw (unbounded: max int64).
func corruptBatch(topic string, partition int32, b []byte, n int, from, hw int64, cause error) *CorruptBatchError {
	e := &CorruptBatchError{Topic: topic, Partition: partition, FirstOffset: -1, LastOffset: -1, Err: cause}
	if len(b) < 8 {
		return e
	}
	e.FirstOffset = wire.BatchBaseOffset(b)
	if n == 0 {
		return e
	}
	if next := batchNext(b, n, hw); next > e.FirstOffset && next > from {
		e.LastOffset = next - 1
	}
	return e
}

// checkRecords walks the records of a batch's (decompressed) records section, so that a batch
// is delivered whole or not at all. rec is the caller's scratch.
func checkRecords(records []byte, bt *wire.Batch, rec *wire.Record) error {
	it := wire.NewRecordIter(records, bt.RecordCount, bt.BaseOffset, bt.FirstTimestamp)
	for it.Next(rec) {
	}
	return it.Err()
}
