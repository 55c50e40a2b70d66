package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/lightq/lightq/wire"
)

// A control batch of every type round-trips: it parses, takes one offset, carries its type
// and value, and keeps a valid CRC when the broker writes base offset, leader epoch and raft
// index.
func TestControlBatchRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		typ   uint8
		value []byte
	}{
		{wire.ControlEmptyEntry, nil},
		{wire.ControlConfChange, []byte{0x08, 0x00, 0x10, 0x03}},
		{wire.ControlConfChangeV2, bytes.Repeat([]byte{0xab}, 300)}, // a two-byte value length
		{200, []byte("a type nobody knows yet")},
	} {
		prefix := []byte("dst holds this already")
		out := wire.AppendControlBatch(bytes.Clone(prefix), tc.typ, tc.value)
		if !bytes.Equal(out[:len(prefix)], prefix) {
			t.Fatal("AppendControlBatch changed what dst held")
		}
		b := out[len(prefix):]
		wire.SetBaseOffset(b, 41)
		wire.SetBatchLeaderEpoch(b, 7)
		wire.SetBatchRaftIndex(b, 99)
		bt, err := wire.ParseBatch(b, 1<<20)
		if err != nil {
			t.Fatalf("type %d: %v", tc.typ, err)
		}
		if !bt.IsControl() || !wire.IsControlBatch(b) || bt.Magic != wire.BatchMagic2 || bt.HasProducer() ||
			bt.RecordCount != 1 || bt.NextOffset() != 42 || bt.LeaderEpoch != 7 || bt.RaftIndex != 99 ||
			bt.FirstTimestamp != 0 || bt.MaxTimestamp != 0 || bt.Codec() != wire.CodecNone {
			t.Fatalf("type %d: header %+v", tc.typ, bt.BatchHeader)
		}
		typ, value, err := wire.ParseControl(&bt)
		if err != nil || typ != tc.typ || !bytes.Equal(value, tc.value) {
			t.Fatalf("ParseControl: %d %q %v, want %d %q", typ, value, err, tc.typ, tc.value)
		}
		var v wire.RecordValidator
		if err := v.Validate(&bt, 1<<20); err != nil {
			t.Fatalf("Validate: %v", err)
		}
		if a := testing.AllocsPerRun(50, func() { _, _, _ = wire.ParseControl(&bt) }); a != 0 {
			t.Fatalf("ParseControl allocates %v times", a)
		}
	}
	// A record batch is not a control batch.
	plain := buildBatch2(t, varietyRecords()[:1], wire.CodecNone, nil, wire.NoProducer, wire.NoProducer, wire.NoProducer)
	bt, err := wire.ParseBatch(plain, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if bt.IsControl() || wire.IsControlBatch(plain) {
		t.Fatal("a record batch reads as a control batch")
	}
	if _, _, err := wire.ParseControl(&bt); !errors.Is(err, wire.ErrCorruptBatch) {
		t.Fatalf("ParseControl of a record batch: %v", err)
	}
	for n := range wire.BatchHeaderSize2 {
		if wire.IsControlBatch(wire.AppendControlBatch(nil, 0, nil)[:min(n, 17)]) {
			t.Fatalf("IsControlBatch of %d bytes", n)
		}
	}
}

// controlWith builds a control batch whose record section is section (count records) and
// whose header the mangle changes, with a correct CRC.
func controlWith(count uint32, section []byte, mangle func(h []byte)) []byte {
	b := wire.AppendControlBatch(nil, wire.ControlConfChange, nil)[:wire.BatchHeaderSize2]
	b = append(b, section...)
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[24:], count)
	binary.BigEndian.PutUint32(b[44:], uint32(len(section)))
	if mangle != nil {
		mangle(b)
	}
	fixCRC(b)
	return b
}

// Every way a control batch can be wrong is refused, by PeekBatchHeader and ParseBatch for
// the header, by ParseControl and Validate for the record.
func TestControlBatchErrors(t *testing.T) {
	rec := func(key, value string, headers ...wire.RecordHeader) []byte {
		return wire.AppendRecord(nil, 0, []byte(key), []byte(value), headers)
	}
	header := []struct {
		name string
		b    []byte
		want string
	}{
		{"control bit in magic 1", func() []byte {
			b := wireBatch(0, []exampleRecord{{ts: exampleTS, value: "v"}})
			b[17] |= wire.AttrControl
			fixCRC(b)
			return b
		}(), "control bit in a magic-1 batch"},
		{"compressed", controlWith(1, rec("\x01", "v"), func(h []byte) { h[17] |= byte(wire.CodecS2) }), "control batch with codec s2"},
		{"two records", controlWith(2, append(rec("\x01", "v"), rec("\x01", "w")...), nil), "2 records"},
		{"with a producer", controlWith(1, rec("\x01", "v"), func(h []byte) {
			binary.BigEndian.PutUint64(h[48:], 5)
			binary.BigEndian.PutUint16(h[56:], 0)
			binary.BigEndian.PutUint32(h[60:], 0)
		}), "producer id 5"},
		{"bit 6 beside the control bit", controlWith(1, rec("\x01", "v"), func(h []byte) { h[17] |= 0x40 }), "unknown attributes 0x60"},
	}
	for _, tc := range header {
		t.Run(tc.name, func(t *testing.T) {
			_, perr := wire.PeekBatchHeader(tc.b)
			_, err := wire.ParseBatch(tc.b, 1<<20)
			if !errors.Is(err, wire.ErrCorruptBatch) || !errors.Is(perr, wire.ErrCorruptBatch) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseBatch %v, PeekBatchHeader %v; want ErrCorruptBatch saying %q", err, perr, tc.want)
			}
		})
	}
	record := []struct {
		name    string
		section []byte
		want    string
	}{
		{"empty key", rec("", "v"), "key of 0 bytes"},
		{"two-byte key", rec("\x01\x02", "v"), "key of 2 bytes"},
		{"a record header", rec("\x01", "v", hdr("h", "x")), "1 record headers"},
		{"bytes after the record", append(rec("\x01", "v"), 0), "after"},
		{"record cut short", rec("\x01", "value")[:5], "record length 10"},
	}
	for _, tc := range record {
		t.Run(tc.name, func(t *testing.T) {
			b := controlWith(1, tc.section, nil)
			bt, err := wire.ParseBatch(b, 1<<20)
			if err != nil {
				t.Fatalf("ParseBatch: %v (the header is fine)", err)
			}
			_, _, cerr := wire.ParseControl(&bt)
			var v wire.RecordValidator
			verr := v.Validate(&bt, 1<<20)
			if !errors.Is(cerr, wire.ErrCorruptBatch) || !errors.Is(verr, wire.ErrCorruptBatch) || !strings.Contains(cerr.Error(), tc.want) {
				t.Fatalf("ParseControl %v, Validate %v; want ErrCorruptBatch saying %q", cerr, verr, tc.want)
			}
		})
	}
}

// FuzzControl: ParseControl accepts a control batch only if it re-encodes, through
// AppendControlBatch, to the same type and value in a batch that parses; and never panics.
func FuzzControl(f *testing.F) {
	f.Add(wire.AppendControlBatch(nil, wire.ControlEmptyEntry, nil), false)
	f.Add(wire.AppendControlBatch(nil, wire.ControlConfChangeV2, bytes.Repeat([]byte{1}, 200)), false)
	f.Add(controlWith(1, wire.AppendRecord(nil, 0, []byte{1, 2}, nil, nil), nil), true)
	f.Fuzz(func(t *testing.T, data []byte, fix bool) {
		if fix && len(data) >= wire.BatchHeaderSize2 {
			data = bytes.Clone(data)
			fixCRC(data)
		}
		bt, err := wire.ParseBatch(data, 1<<20)
		if err != nil {
			return
		}
		typ, value, err := wire.ParseControl(&bt)
		if (err == nil) != bt.IsControl() && err == nil {
			t.Fatal("ParseControl accepted a record batch")
		}
		if err != nil {
			return
		}
		again := wire.AppendControlBatch(nil, typ, value)
		bt2, err := wire.ParseBatch(again, 1<<20)
		if err != nil {
			t.Fatalf("re-encoded control batch: %v", err)
		}
		typ2, value2, err := wire.ParseControl(&bt2)
		if err != nil || typ2 != typ || !bytes.Equal(value2, value) {
			t.Fatalf("re-encoded: %d %q %v, want %d %q", typ2, value2, err, typ, value)
		}
	})
}
