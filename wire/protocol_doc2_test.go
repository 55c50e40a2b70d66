package wire_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/lightq/lightq/wire"
)

// exampleProducer is the producer of PROTOCOL.md's format-2 and INIT_PRODUCER examples.
type exampleProducer struct {
	id    int64
	epoch int16
	seq   int32
}

// annotatedBatch2 encodes an uncompressed format-2 batch from the layout in PROTOCOL.md.
func annotatedBatch2(base int64, leaderEpoch int32, p exampleProducer, recs []exampleRecord) *annotated {
	return annotatedReplicated(base, leaderEpoch, 0, p, recs)
}

// annotatedReplicated is annotatedBatch2 with the raft index a replica writes.
func annotatedReplicated(base int64, leaderEpoch int32, raftIndex uint64, p exampleProducer, recs []exampleRecord) *annotated {
	one := annotatedBatch(base, recs) // format 1: its records section is the same
	var section annotated
	section.fields = one.fields[10:] // after the ten header fields
	size := len(section.bytes())
	first, maxTS := recs[0].ts, recs[0].ts
	for _, r := range recs {
		maxTS = max(maxTS, r.ts)
	}
	var b annotated
	b.i64(base, "batch: base offset %d", base)
	b.u32(uint32(wire.BatchHeaderSize2-12+size), "batch length %d = %d + %d", wire.BatchHeaderSize2-12+size, wire.BatchHeaderSize2-12, size)
	crcField := len(b.fields)
	b.u32(0, "placeholder for the CRC")
	b.u8(2, "batch magic 2")
	b.u8(0, "attributes: codec 0 (none)")
	b.u16(0, "reserved, zero")
	b.i32(leaderEpoch, "leader epoch %d (written by the broker, outside the CRC)", leaderEpoch)
	b.u32(uint32(len(recs)), "record count %d", len(recs))
	b.i64(first, "first timestamp %d (unix ms)", first)
	b.i64(maxTS, "max timestamp %d (unix ms)", maxTS)
	b.u32(uint32(size), "records size %d", size)
	if p.id == wire.NoProducer {
		b.i64(-1, "producer id -1 (none)")
		b.u16(0xffff, "producer epoch -1")
		b.u16(0, "reserved, zero")
		b.i32(-1, "base sequence -1")
	} else {
		b.i64(p.id, "producer id %d", p.id)
		b.u16(uint16(p.epoch), "producer epoch %d", p.epoch)
		b.u16(0, "reserved, zero")
		b.i32(p.seq, "base sequence %d (records %d-%d of this producer in this partition)", p.seq, p.seq, int(p.seq)+len(recs)-1)
	}
	if raftIndex == 0 {
		b.i64(0, "raft index 0 (not replicated; written by the broker, outside the CRC)")
	} else {
		b.u64(raftIndex, "raft index %d (written by the broker, outside the CRC)", raftIndex)
	}
	b.concat(&section)
	raw := b.bytes()
	crc := crc32.Update(crc32.Update(crc32.Checksum(raw[16:20], castagnoli), castagnoli, raw[24:64]), castagnoli, raw[72:])
	b.fields[crcField] = annotatedField{b: binary.BigEndian.AppendUint32(nil, crc), note: fmt.Sprintf("CRC-32C of batch bytes 16..19, 24..63 and 72..end = 0x%08x", crc)}
	return &b
}

// wireBatch2 builds the same batch with the wire package.
func wireBatch2(base int64, leaderEpoch int32, p exampleProducer, recs []exampleRecord) []byte {
	var bb wire.BatchBuilder
	bb.SetMagic(wire.BatchMagic2)
	for _, r := range recs {
		var hs []wire.RecordHeader
		for _, h := range r.headers {
			hs = append(hs, wire.RecordHeader{Name: []byte(h[0]), Value: []byte(h[1])})
		}
		bb.Append(r.ts, []byte(r.key), []byte(r.value), hs)
	}
	bb.SetProducer(p.id, p.epoch, p.seq)
	b, err := bb.Finish(wire.CodecNone, nil)
	if err != nil {
		panic(err)
	}
	b = bytes.Clone(b)
	wire.SetBaseOffset(b, base)
	wire.SetBatchLeaderEpoch(b, leaderEpoch)
	return b
}

// idempotenceExamples are PROTOCOL.md's examples of format 2 and idempotent produce.
func idempotenceExamples() []protocolExample {
	var ex []protocolExample
	add := func(name string, doc *annotated, frame []byte) {
		ex = append(ex, protocolExample{name: name, doc: doc, frame: frame})
	}
	body := func(fill func(a *annotated)) *annotated {
		var a annotated
		fill(&a)
		return &a
	}
	prod := exampleProducer{id: 4097, epoch: 0, seq: 40}
	recs := []exampleRecord{
		{ts: exampleTS, key: "k1", value: "hello"},
		{ts: exampleTS + 5, key: "", value: "world", headers: [][2]string{{"trace", "abc"}}},
	}
	add("init-producer-request",
		frame(wire.OpInitProducer, 0, 20, body(func(a *annotated) {
			a.i64(-1, "previous producer id -1 (a new producer)")
			a.u16(0xffff, "previous epoch -1")
		})),
		wireFrame(wire.OpInitProducer, 0, 20, &wire.InitProducer{PreviousID: wire.NoProducer, PreviousEpoch: wire.NoProducer}))
	add("init-producer-response",
		frame(wire.OpInitProducer, wire.FlagResponse, 20, body(func(a *annotated) {
			a.i64(prod.id, "producer id %d", prod.id)
			a.u16(uint16(prod.epoch), "producer epoch %d", prod.epoch)
			a.u16(8, "window 8 batches per partition")
			a.u32(86400000, "expiry 86400000 ms (24 h)")
		})),
		wireFrame(wire.OpInitProducer, wire.FlagResponse, 20, &wire.InitProducerResponse{ProducerID: prod.id, ProducerEpoch: prod.epoch, Window: 8, ExpiryMs: 86400000}))
	// The broker's text: broker.TestIdempotentProduceExamples checks that it answers this.
	const oooMsg = "out of order sequence: producer 4097 epoch 0 in partition 1 of orders: base sequence 40, expected 38 (a gap): nothing stored"
	add("error-out-of-order-sequence",
		frame(wire.OpError, 0, 21, body(func(a *annotated) {
			a.u16(31, "code 31 OUT_OF_ORDER_SEQUENCE")
			a.str(oooMsg, "message")
		})),
		wireFrame(wire.OpError, 0, 21, &wire.ErrorBody{Code: wire.CodeOutOfOrderSequence, Message: oooMsg}))
	add("produce-request-idempotent",
		frame(wire.OpProduce, 0, 21, body(func(a *annotated) {
			a.str("orders", "topic name")
			a.i32(1, "partition 1")
			a.u8(1, "acks 1 (written)")
			a.concat(annotatedBatch2(0, 0, prod, recs))
		})),
		wireFrame(wire.OpProduce, 0, 21, &wire.Produce{Topic: []byte("orders"), Partition: 1, Acks: wire.AcksWritten, Batch: wireBatch2(0, 0, prod, recs)}))
	return ex
}

// annotatedControl encodes a control batch (PROTOCOL.md section 7) of type typ whose value is
// value, from the documented layout.
func annotatedControl(base int64, leaderEpoch int32, raftIndex uint64, typ uint8, typNote string, value []byte) *annotated {
	var rec annotated
	rec.add(binary.AppendVarint(nil, 0), "  timestamp delta +0 ms (zig-zag varint)")
	rec.add([]byte{1, typ}, "  key: uvarint length 1, control type %d (%s)", typ, typNote)
	rec.add(append(binary.AppendUvarint(nil, uint64(len(value))), value...), "  value: uvarint length %d, the entry's data", len(value))
	rec.add(binary.AppendUvarint(nil, 0), "  header count 0 (uvarint)")
	n := len(rec.bytes())
	var section annotated
	section.add(binary.AppendUvarint(nil, uint64(n)), "the one record (offset base+0): length %d (uvarint)", n)
	section.concat(&rec)
	size := len(section.bytes())
	var b annotated
	b.i64(base, "control batch: base offset %d", base)
	b.u32(uint32(wire.BatchHeaderSize2-12+size), "batch length %d = %d + %d", wire.BatchHeaderSize2-12+size, wire.BatchHeaderSize2-12, size)
	crcField := len(b.fields)
	b.u32(0, "placeholder for the CRC")
	b.u8(2, "batch magic 2")
	b.u8(0x20, "attributes: bit 5 control batch, codec 0 (none)")
	b.u16(0, "reserved, zero")
	b.i32(leaderEpoch, "leader epoch %d (the Raft term; outside the CRC)", leaderEpoch)
	b.u32(1, "record count 1")
	b.i64(0, "first timestamp 0")
	b.i64(0, "max timestamp 0")
	b.u32(uint32(size), "records size %d", size)
	b.i64(-1, "producer id -1 (none)")
	b.u16(0xffff, "producer epoch -1")
	b.u16(0, "reserved, zero")
	b.i32(-1, "base sequence -1")
	b.u64(raftIndex, "raft index %d (outside the CRC)", raftIndex)
	b.concat(&section)
	raw := b.bytes()
	crc := crc32.Update(crc32.Update(crc32.Checksum(raw[16:20], castagnoli), castagnoli, raw[24:64]), castagnoli, raw[72:])
	b.fields[crcField] = annotatedField{b: binary.BigEndian.AppendUint32(nil, crc), note: fmt.Sprintf("CRC-32C of batch bytes 16..19, 24..63 and 72..end = 0x%08x", crc)}
	return &b
}

// replicationExamples are PROTOCOL.md's examples of what a replicated partition's log holds.
func replicationExamples() []protocolExample {
	recs := []exampleRecord{{ts: exampleTS, key: "k1", value: "hello"}}
	none := exampleProducer{id: wire.NoProducer, epoch: wire.NoProducer, seq: wire.NoProducer}
	control := wire.AppendControlBatch(nil, wire.ControlEmptyEntry, nil)
	wire.SetBaseOffset(control, 40)
	wire.SetBatchLeaderEpoch(control, 5)
	wire.SetBatchRaftIndex(control, 17)
	data := wireBatch2(41, 5, none, recs)
	wire.SetBatchRaftIndex(data, 18)
	return []protocolExample{{
		name: "fetch-response-control",
		doc: frame(wire.OpFetch, wire.FlagResponse, 30, func() *annotated {
			var a annotated
			a.u32(2, "partition 2")
			a.i64(42, "high watermark 42")
			a.i64(0, "log start offset 0")
			a.concat(annotatedControl(40, 5, 17, wire.ControlEmptyEntry, "a new leader's first entry", nil))
			a.concat(annotatedReplicated(41, 5, 18, none, recs))
			return &a
		}()),
		frame: wireFrame(wire.OpFetch, wire.FlagResponse, 30, &wire.FetchResponse{Partition: 2, HighWatermark: 42, Batches: append(control, data...)}),
	}}
}
