package lqcat

import (
	"context"
	"errors"
	"fmt"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// offsetForTime returns the first offset of a durable partition whose record timestamp is at
// or after ts (unix ms), or the end of the log when there is none.
//
// LIST_OFFSETS by timestamp answers with the first offset of the first batch whose newest
// record is at or after ts (log.OffsetForTime), which can be earlier records of the same
// batch; this reads that batch to find the record. When that batch cannot be decoded, its
// first offset is the answer: the consumer then reaches it and skips it, or stops, saying so.
func offsetForTime(ctx context.Context, conn *client.Conn, topic string, part uint32, ts int64) (int64, error) {
	off, err := conn.ListOffsets(ctx, wire.ListOffsets{Topic: topic, Partition: part, Mode: wire.OffsetTimestamp, Timestamp: ts})
	if err != nil {
		return 0, err
	}
	var comp wire.Compressor
	defer comp.Close()
	var dec []byte
	for {
		res, err := conn.Fetch(ctx, wire.Fetch{Topic: topic, Partition: part, Offset: off, MaxBytes: 64 << 10})
		if err != nil {
			return 0, err
		}
		if off >= res.HighWatermark {
			return off, nil
		}
		it := res.Iter()
		n := 0
		for it.Next() {
			n++
			bt := it.Batch()
			next := bt.BaseOffset + int64(bt.RecordCount)
			if next <= off {
				continue
			}
			if bt.MaxTimestamp < ts {
				off = next
				continue
			}
			records, err := it.Records(&comp, dec)
			if bad := (*client.CorruptBatchError)(nil); errors.As(err, &bad) {
				return max(off, bad.FirstOffset), nil
			}
			if err != nil {
				return 0, err
			}
			if bt.Codec() != wire.CodecNone {
				dec = records
			}
			ri := wire.NewRecordIter(records, bt.RecordCount, bt.BaseOffset, bt.FirstTimestamp)
			var rec wire.Record
			for ri.Next(&rec) {
				if rec.Offset >= off && rec.Timestamp >= ts {
					return rec.Offset, nil
				}
			}
			if err := ri.Err(); err != nil {
				return 0, fmt.Errorf("batch at offset %d: %w", bt.BaseOffset, err)
			}
			off = next
		}
		if bad := (*client.CorruptBatchError)(nil); errors.As(it.Err(), &bad) && bad.FirstOffset >= 0 {
			return max(off, bad.FirstOffset), nil
		}
		if err := it.Err(); err != nil {
			return 0, err
		}
		if n == 0 {
			return off, nil
		}
	}
}
