package wire_test

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/lightq/lightq/wire"
)

// Fuzz targets. `go test ./wire` runs their seeds; fuzz one with
//
//	go test ./wire -run '^$' -fuzz FuzzFrameStream -fuzztime 60s
//
// The seeds are the frames of PROTOCOL.md's examples plus a few hostile inputs.

// FuzzFrameStream feeds a byte stream to the stream decoder whole, cut in two at a
// fuzzer-chosen point, and in 1-7-byte chunks. All three must give the same frames and the
// same error class; no frame over the limit may be accepted; and every accepted frame must
// re-encode to exactly its input bytes.
func FuzzFrameStream(f *testing.F) {
	var session []byte
	for _, ex := range protocolExamples() {
		f.Add(ex.frame, uint16(len(ex.frame)/2), uint8(255))
		f.Add(ex.frame, uint16(3), uint8(0)) // limit 16: everything but an empty body is too large
		session = append(session, ex.frame...)
	}
	f.Add(session, uint16(1000), uint8(255))
	f.Add(append(bytes.Clone(session), 0x00, 0x00, 0x00), uint16(7), uint8(1))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: broker\r\n\r\n"), uint16(4), uint8(255))
	f.Add(tlsClientHello, uint16(2), uint8(255))
	f.Add(header(0xFFFFFFFF), uint16(5), uint8(255))
	f.Add(with(header(12), func(b []byte) { b[9] = 2 }), uint16(9), uint8(255))

	f.Fuzz(func(t *testing.T, data []byte, cut uint16, limitSel uint8) {
		limit := wire.HeaderSize + int(limitSel)*64
		whole := decodeStream(limit, data)
		if whole.over {
			t.Fatalf("a frame over the limit %d was accepted", limit)
		}
		var re []byte
		for _, fr := range whole.frames {
			if fr.h.BodyLen() != len(fr.body) || int(fr.h.Length)+4 > limit {
				t.Fatalf("header %+v with a %d-byte body, limit %d", fr.h, len(fr.body), limit)
			}
			re = wire.AppendFrame(re, fr.h.Op, fr.h.Flags, fr.h.Corr, fr.body)
		}
		if !bytes.Equal(re, data[:whole.consumed]) {
			t.Fatalf("re-encoded frames differ from the %d bytes they were decoded from", whole.consumed)
		}

		c := int(cut) % (len(data) + 1)
		if split := decodeStream(limit, data[:c], data[c:]); !split.equal(whole) {
			t.Fatalf("cut at %d: %v; whole: %v", c, split, whole)
		}
		var pieces [][]byte
		for i, rest := 0, data; len(rest) > 0; i++ {
			n := min(1+(i+int(cut))%7, len(rest))
			pieces = append(pieces, rest[:n])
			rest = rest[n:]
		}
		if chunked := decodeStream(limit, pieces...); !chunked.equal(whole) {
			t.Fatalf("in small chunks: %v; whole: %v", chunked, whole)
		}
	})
}

var (
	fuzzCompressorMu sync.Mutex
	fuzzCompressor   wire.Compressor
	fuzzValidator    wire.RecordValidator
)

// FuzzBatch: an accepted batch re-encodes to exactly its bytes; when its records iterate, they
// re-encode to exactly the records section; a compressed section decompresses to exactly
// records size bytes or fails. RecordValidator.Validate accepts exactly the batches that
// decompress and iterate to record count records (the invariant the broker relies on: every
// batch it stores decodes), and its per-record limit is exact. With fix set, the CRC is
// recomputed before parsing, so that mutations get past it to the header checks, the records
// and the decompressors.
func FuzzBatch(f *testing.F) {
	for _, ex := range protocolExamples() {
		h, body, _ := wire.ParseFrame(ex.frame)
		switch h.Op {
		case wire.OpProduce:
			var p wire.Produce
			if p.Decode(body) == nil {
				f.Add(p.Batch, false)
			}
		case wire.OpDeliver:
			var d wire.Deliver
			if d.Decode(body) == nil {
				f.Add(d.Batch, true)
			}
		}
	}
	var c wire.Compressor
	defer c.Close()
	for _, codec := range []wire.Codec{wire.CodecNone, wire.CodecS2, wire.CodecZstd} {
		f.Add(buildBatch(f, varietyRecords()[:2], codec, &c), true)
	}
	for _, codec := range []wire.Codec{wire.CodecNone, wire.CodecS2, wire.CodecZstd} {
		f.Add(buildBatch2(f, varietyRecords()[:2], codec, &c, 7, 1, 40), true)
	}
	f.Add(buildBatch2(f, varietyRecords()[:1], wire.CodecNone, nil, wire.NoProducer, wire.NoProducer, wire.NoProducer), true)
	f.Add(wire.AppendControlBatch(nil, wire.ControlConfChange, []byte{8, 0, 16, 3}), false)
	f.Add(wire.AppendControlBatch(nil, wire.ControlEmptyEntry, nil), true)
	f.Add(rawBatch(wire.CodecNone, 1, 5, []byte{4, 0, 0, 0, 0}), true)
	f.Add(rawBatch(wire.CodecZstd, 1, 4096, []byte{0x28, 0xb5, 0x2f, 0xfd}), true)

	const limit = 1 << 20
	f.Fuzz(func(t *testing.T, data []byte, fix bool) {
		if fix && len(data) >= 16 {
			data = bytes.Clone(data)
			fixCRC(data)
		}
		// The header decoders agree.
		h, herr := wire.PeekBatchHeader(data)
		if herr == nil && (!wire.MayBeBatchHeader(data) || wire.PeekBatchHeaderUnchecked(data) != h) {
			t.Fatal("MayBeBatchHeader or PeekBatchHeaderUnchecked disagrees with PeekBatchHeader")
		}
		bt, err := wire.ParseBatch(data, limit)
		if err != nil {
			return
		}
		if re := wire.AppendBatch(nil, &bt); !bytes.Equal(re, data) {
			t.Fatalf("AppendBatch(ParseBatch(x)) != x")
		}
		if !wire.BatchChecksumOK(data) || bt.HeaderSize() != len(data)-len(bt.Records) {
			t.Fatalf("accepted batch: checksum %v, header size %d of %d bytes with %d of records", wire.BatchChecksumOK(data), bt.HeaderSize(), len(data), len(bt.Records))
		}
		if bt.Magic == wire.BatchMagic2 {
			// The leader epoch is outside the CRC: the broker's rewrite keeps the batch valid.
			again := bytes.Clone(data)
			wire.SetBatchLeaderEpoch(again, bt.LeaderEpoch^0x5a5a)
			if bt2, err := wire.ParseBatch(again, limit); err != nil || bt2.LeaderEpoch != bt.LeaderEpoch^0x5a5a {
				t.Fatalf("after SetBatchLeaderEpoch: %v, epoch %d", err, bt2.LeaderEpoch)
			}
		}
		fuzzCompressorMu.Lock()
		defer fuzzCompressorMu.Unlock()
		verr := fuzzValidator.Validate(&bt, limit)
		if verr != nil && (!errors.Is(verr, wire.ErrCorruptBatch) || strings.Contains(verr.Error(), "unexplained")) {
			t.Fatalf("Validate: %v (its fast path and its explanation must agree)", verr)
		}
		records := bt.Records
		if bt.Codec() != wire.CodecNone {
			out, err := fuzzCompressor.Decompress(nil, &bt)
			if err != nil {
				if verr == nil {
					t.Fatalf("Validate accepts a batch that does not decompress: %v", err)
				}
				return
			}
			if len(out) != int(bt.RecordsSize) {
				t.Fatalf("Decompress returned %d bytes, records size is %d", len(out), bt.RecordsSize)
			}
			records = out
		}
		recs, err := collectRecords(records, &bt)
		if err == nil && bt.IsControl() {
			_, _, err = wire.ParseControl(&bt) // Validate checks a control batch's record too
		}
		if (err == nil) != (verr == nil) {
			t.Fatalf("RecordIter (and ParseControl) says %v, Validate says %v", err, verr)
		}
		if err != nil {
			return
		}
		// The per-record limit: the largest record fits exactly.
		largest := 0
		for _, rec := range recs {
			size := len(rec.Key) + len(rec.Value)
			for _, h := range rec.Headers {
				size += len(h.Name) + len(h.Value)
			}
			largest = max(largest, size)
		}
		if err := fuzzValidator.Validate(&bt, largest); err != nil {
			t.Fatalf("Validate with maxRecord %d, the largest record: %v", largest, err)
		}
		if err := fuzzValidator.Validate(&bt, largest-1); largest > 0 && !errors.Is(err, wire.ErrMessageTooLarge) {
			t.Fatalf("Validate with maxRecord %d, one below the largest record: %v", largest-1, err)
		}
		var re []byte
		for i, rec := range recs {
			if rec.Offset != bt.BaseOffset+int64(i) || rec.Timestamp != bt.FirstTimestamp+rec.TimestampDelta {
				t.Fatalf("record %d: offset %d timestamp %d", i, rec.Offset, rec.Timestamp)
			}
			re = wire.AppendRecord(re, rec.TimestampDelta, rec.Key, rec.Value, rec.Headers)
		}
		if !bytes.Equal(re, records) {
			t.Fatalf("records re-encode differently")
		}
	})
}

// fuzzBodyTypes are the body types with a non-empty body.
var fuzzBodyTypes = func() []func() wireBody {
	var out []func() wireBody
	for _, bt := range bodyTypes {
		if bt.newBody != nil && !(bt.op == wire.OpError && bt.response) { // ERROR listed once
			out = append(out, bt.newBody)
		}
	}
	return out
}()

func fuzzBodyIndex(op wire.Op, flags uint16) int {
	nb, _ := bodyFor(op, flags)
	if nb == nil {
		return -1
	}
	want := nb()
	for i, f := range fuzzBodyTypes {
		if sameType(f(), want) {
			return i
		}
	}
	return -1
}

func sameType(a, b wireBody) bool { return reflect.TypeOf(a) == reflect.TypeOf(b) }

// FuzzBodies: every body type is canonical, Decode(x) accepted implies AppendTo gives x back.
// (ErrorBody truncates messages over 1024 bytes when encoding, but Decode refuses them, so it
// is canonical too.)
func FuzzBodies(f *testing.F) {
	for _, ex := range protocolExamples() {
		h, body, _ := wire.ParseFrame(ex.frame)
		if i := fuzzBodyIndex(h.Op, h.Flags); i >= 0 {
			f.Add(uint8(i), body)
		}
	}
	for _, tc := range bodyCases() {
		for i, nb := range fuzzBodyTypes {
			if sameType(nb(), tc.newBody()) {
				f.Add(uint8(i), tc.msg.AppendTo(nil))
			}
		}
	}
	f.Fuzz(func(t *testing.T, kind uint8, data []byte) {
		m := fuzzBodyTypes[int(kind)%len(fuzzBodyTypes)]()
		if err := m.Decode(data); err != nil {
			return
		}
		if re := m.AppendTo(nil); !bytes.Equal(re, data) {
			t.Fatalf("%T: Decode then AppendTo is not the identity:\n in  % x\n out % x", m, data, re)
		}
	})
}

// FuzzProduceHeader: DecodeHeader agrees with Decode on any input, however much of the batch
// follows the header, and never reads past MaxProduceHeader.
func FuzzProduceHeader(f *testing.F) {
	f.Add((&wire.Produce{Topic: []byte("events"), Partition: 3, Acks: wire.AcksDurable, Batch: []byte("batch")}).AppendTo(nil))
	f.Add([]byte{0, 1, 'a', 0xff, 0xff, 0xff, 0xff, 1})
	f.Add([]byte{0, 1, 'a', 0, 0, 0, 0, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		var full, head wire.Produce
		ferr := full.Decode(data)
		n, herr := head.DecodeHeader(data)
		if (ferr == nil) != (herr == nil) {
			t.Fatalf("Decode error %v, DecodeHeader error %v", ferr, herr)
		}
		if ferr != nil {
			return
		}
		if n > wire.MaxProduceHeader || n+len(full.Batch) != len(data) {
			t.Fatalf("header of %d bytes, batch of %d, body of %d", n, len(full.Batch), len(data))
		}
		if !bytes.Equal(head.Topic, full.Topic) || head.Partition != full.Partition || head.Acks != full.Acks {
			t.Fatalf("DecodeHeader %+v, Decode %+v", head, full)
		}
		// A prefix holding the whole header decodes the same.
		var pre wire.Produce
		if m, err := pre.DecodeHeader(data[:n]); err != nil || m != n {
			t.Fatalf("the header alone: %d, %v", m, err)
		}
	})
}
