package wire

import (
	"encoding/binary"
)

// BatchBuilder accumulates records into one batch. The zero value builds magic-1 batches;
// SetMagic(BatchMagic2) makes it build magic-2 batches, which carry producer fields
// (SetProducer) for idempotent produce. Reset makes it reusable without allocating and keeps
// the magic. Not safe for concurrent use.
//
// An idempotent producer numbers a batch as it seals it:
//
//	bb.SetMagic(wire.BatchMagic2)                   // once
//	bb.Append(ts, key, value, headers)              // ...
//	bb.SetProducer(id, epoch, seq)                  // from INIT_PRODUCER, and the partition's next sequence
//	batch, err := bb.Finish(codec, &comp)
//	seq = wire.NextSequence(seq, uint32(bb.Count())) // the partition's next batch
type BatchBuilder struct {
	// buf holds MaxBatchHeaderSize bytes of header space, then the records section. A
	// magic-1 header is written at its end (buf[20:64]), so both magics share the layout of
	// the records.
	buf     []byte
	count   uint32
	firstTS int64
	maxTS   int64
	scratch []byte

	magic2        bool
	producerID    int64 // NoProducer unless SetProducer was called since Reset
	producerEpoch int16
	baseSequence  int32
	producerSet   bool
}

// SetMagic chooses the format of the batches Finish builds: BatchMagic (the default) or
// BatchMagic2. It may be called at any time; Size and SizeWith follow it. It panics on any
// other magic.
func (b *BatchBuilder) SetMagic(magic uint8) {
	switch magic {
	case BatchMagic:
		b.magic2 = false
	case BatchMagic2:
		b.magic2 = true
	default:
		panic("wire: SetMagic: unknown batch magic")
	}
}

// Magic is the magic of the batches Finish builds.
func (b *BatchBuilder) Magic() uint8 {
	if b.magic2 {
		return BatchMagic2
	}
	return BatchMagic
}

// SetProducer sets the producer fields of the next batch Finish builds: the producer id and
// epoch INIT_PRODUCER gave, and the sequence number of the batch's first record in its
// partition (see NextSequence). Reset clears them (the next batch has no producer unless
// SetProducer is called again). It panics unless the builder builds magic 2 and the fields
// are all >= 0 (or all NoProducer).
func (b *BatchBuilder) SetProducer(id int64, epoch int16, baseSequence int32) {
	if !b.magic2 {
		panic("wire: SetProducer on a builder of magic-1 batches (call SetMagic(BatchMagic2))")
	}
	if checkProducer(id, epoch, baseSequence) != nil {
		panic("wire: SetProducer: producer id, epoch and base sequence must be all -1 or all >= 0")
	}
	b.producerID, b.producerEpoch, b.baseSequence, b.producerSet = id, epoch, baseSequence, true
}

// Reset empties the builder, keeping its memory and its magic, and clears the producer
// fields.
func (b *BatchBuilder) Reset() {
	b.buf = b.buf[:0]
	b.count = 0
	b.producerSet = false
}

// Count is the number of records appended since Reset.
func (b *BatchBuilder) Count() int { return int(b.count) }

func (b *BatchBuilder) headerSize() int {
	if b.magic2 {
		return BatchHeaderSize2
	}
	return BatchHeaderSize
}

// Size is the size of the batch Finish would produce without compression.
func (b *BatchBuilder) Size() int {
	if len(b.buf) == 0 {
		return b.headerSize()
	}
	return b.headerSize() + len(b.buf) - MaxBatchHeaderSize
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
		b.buf = append(b.buf[:0], make([]byte, MaxBatchHeaderSize)...)
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
// it: magic 1, or magic 2 with the producer fields of SetProducer (NoProducer when it was not
// called since Reset) and leader epoch 0. The result aliases the builder's memory and is
// valid until the next Reset or Append; Finish may be called again (another codec) and
// builds the batch again. It panics when no record was appended.
func (b *BatchBuilder) Finish(codec Codec, c *Compressor) ([]byte, error) {
	if b.count == 0 {
		panic("wire: Finish on an empty batch")
	}
	records := b.buf[MaxBatchHeaderSize:]
	out := b.buf
	if codec != CodecNone {
		var err error
		b.scratch = append(b.scratch[:0], make([]byte, MaxBatchHeaderSize)...)
		b.scratch, err = c.Compress(b.scratch, codec, records)
		if err != nil {
			return nil, err
		}
		out = b.scratch
	}
	out = out[MaxBatchHeaderSize-b.headerSize():]
	h := out[:b.headerSize()]
	be := binary.BigEndian
	be.PutUint64(h[0:], 0)
	be.PutUint32(h[batchLengthOffset:], uint32(len(out)-batchPrefix))
	h[17], h[18], h[19] = byte(codec), 0, 0
	if !b.magic2 {
		h[batchMagicOffset] = BatchMagic
		be.PutUint32(h[20:], b.count)
		be.PutUint64(h[24:], uint64(b.firstTS))
		be.PutUint64(h[32:], uint64(b.maxTS))
		be.PutUint32(h[40:], uint32(len(records)))
	} else {
		h[batchMagicOffset] = BatchMagic2
		be.PutUint32(h[batchLeaderEpochPos:], 0)
		be.PutUint32(h[24:], b.count)
		be.PutUint64(h[28:], uint64(b.firstTS))
		be.PutUint64(h[36:], uint64(b.maxTS))
		be.PutUint32(h[44:], uint32(len(records)))
		if b.producerSet {
			putProducer(h, b.producerID, b.producerEpoch, b.baseSequence)
		} else {
			putProducer(h, NoProducer, NoProducer, NoProducer)
		}
		be.PutUint64(h[batchRaftIndexPos:], 0)
	}
	be.PutUint32(h[batchCRCOffset:], BatchChecksum(out))
	return out, nil
}
