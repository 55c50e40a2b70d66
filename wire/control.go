package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Control batches. A replicated partition's log is its Raft log, one stored batch per Raft
// entry, and some entries carry no messages: the empty entry a new leader appends at the start
// of its term, and membership changes. The broker stores each of them as a control batch:
// a format-2 batch with attributes bit 5 set, uncompressed, without producer, holding one
// record whose key is the control type (1 byte) and whose value is the entry's data, with
// first and max timestamp 0 (every replica writes the same bytes, so no clock is read). A
// control batch takes one offset, like any one-record batch, and carries no message:
// consumers skip it. Only the broker writes them; PRODUCE refuses a batch with the bit.
//
//	 0      8      12     16 17  18   20      24      28      36      44      48      56  58  60   64      72
//	+------+------+------+--+---+----+-------+-------+-------+-------+-------+-------+---+---+----+-------+---------
//	| base |length| crc  |2 |x20| 0  |leader | 1     | 0     | 0     |records| -1    |-1 | 0 | -1 | raft  | record:
//	|offset|      |      |  |   |    |epoch  |       |       |       |size   |       |   |   |    | index | key = type
//	+------+------+------+--+---+----+-------+-------+-------+-------+-------+-------+---+---+----+-------+---------
//
// NEVER CHANGE the bit or the type numbers: they are on disk in every replicated log.
const (
	// AttrControl is attributes bit 5: the batch is a control batch (format 2 only).
	AttrControl = 1 << 5

	// Control types, the key of a control batch's record. They are the Raft entry types
	// (raftpb.EntryType) of the entries a replicated partition stores as control batches.
	ControlEmptyEntry   = 0 // a normal entry without data: a new leader's first entry; value empty
	ControlConfChange   = 1 // a membership change: value is a raftpb.ConfChange
	ControlConfChangeV2 = 2 // a membership change: value is a raftpb.ConfChangeV2
)

// IsControl reports whether the batch is a control batch (attributes bit 5), which carries no
// message: a consumer skips it, and its one offset.
func (h *BatchHeader) IsControl() bool { return h.Attributes&AttrControl != 0 }

// IsControlBatch reports, from its first 18 bytes, whether the batch that starts at b is a
// control batch of format 2: what a receiver of PRODUCE peeks to refuse one before it stores
// anything. It checks nothing else (ParseBatch does).
func IsControlBatch(b []byte) bool {
	return len(b) > batchMagicOffset+1 && b[batchMagicOffset] == BatchMagic2 && b[batchMagicOffset+1]&AttrControl != 0
}

// AppendControlBatch appends a control batch of control type typ and value to dst (see the
// layout above): base offset, leader epoch and raft index 0, for the writer to set (they are
// outside the CRC). It allocates only when dst is too small.
func AppendControlBatch(dst []byte, typ uint8, value []byte) []byte {
	key := [1]byte{typ}
	recSize := RecordSize(0, key[:], value, nil)
	start := len(dst)
	be := binary.BigEndian
	dst = be.AppendUint64(dst, 0)                                   // base offset
	dst = be.AppendUint32(dst, uint32(BatchHeaderSize2-12+recSize)) // batch length
	dst = be.AppendUint32(dst, 0)                                   // CRC, below
	dst = append(dst, BatchMagic2, AttrControl, 0, 0)
	dst = be.AppendUint32(dst, 0) // leader epoch
	dst = be.AppendUint32(dst, 1) // record count
	dst = be.AppendUint64(dst, 0) // first timestamp
	dst = be.AppendUint64(dst, 0) // max timestamp
	dst = be.AppendUint32(dst, uint32(recSize))
	dst = be.AppendUint64(dst, ^uint64(0)) // producer id -1
	dst = be.AppendUint16(dst, 0xffff)     // producer epoch -1
	dst = append(dst, 0, 0)
	dst = be.AppendUint32(dst, 0xffffffff) // base sequence -1
	dst = be.AppendUint64(dst, 0)          // raft index
	dst = AppendRecord(dst, 0, key[:], value, nil)
	be.PutUint32(dst[start+batchCRCOffset:], BatchChecksum(dst[start:]))
	return dst
}

// ParseControl decodes the record of bt, a control batch ParseBatch accepted: its control
// type and value (which aliases bt). The record must be exactly one key byte, a value and no
// header; anything else wraps ErrCorruptBatch. It does not allocate unless it fails. The type
// is not checked against the known ones: a reader that does not know it skips the batch all
// the same.
func ParseControl(bt *Batch) (typ uint8, value []byte, err error) {
	if !bt.IsControl() {
		return 0, nil, fmt.Errorf("%w: not a control batch", ErrCorruptBatch)
	}
	it := NewRecordIter(bt.Records, bt.RecordCount, bt.BaseOffset, bt.FirstTimestamp)
	var rec Record
	if !it.Next(&rec) {
		return 0, nil, controlRecordErr(it.Err())
	}
	switch {
	case len(rec.Key) != 1:
		return 0, nil, fmt.Errorf("%w: control batch: key of %d bytes, want 1 (the control type)", ErrCorruptBatch, len(rec.Key))
	case len(rec.Headers) != 0:
		return 0, nil, fmt.Errorf("%w: control batch: %d record headers, want none", ErrCorruptBatch, len(rec.Headers))
	}
	if it.Next(&rec) || it.Err() != nil { // one record (PeekBatchHeader): Next checks nothing follows it
		return 0, nil, controlRecordErr(it.Err())
	}
	return rec.Key[0], rec.Value, nil
}

// controlRecordErr wraps a RecordIter error (ErrCorruptBatch or ErrMalformed) so that it is
// ErrCorruptBatch.
func controlRecordErr(err error) error {
	if errors.Is(err, ErrCorruptBatch) {
		return fmt.Errorf("control batch: %w", err)
	}
	return fmt.Errorf("%w: control batch: %w", ErrCorruptBatch, err)
}
