package producerstate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/lightq/lightq/wire"
)

func sampleTable(t testing.TB) *Table {
	tb := New(Config{Expiry: time.Hour, MaxProducers: 100, Label: "p"})
	base := int64(0)
	rec := func(id int64, epoch int16, seq int32, count uint32, at int64) {
		h := hdr(id, epoch, seq, count)
		if _, err := tb.Check(&h, at); err != nil {
			t.Fatal(err)
		}
		tb.Record(&h, base, at)
		base += int64(count)
	}
	rec(1, 0, 0, 3, 10)
	rec(2, 4, 0, 1, 11)
	for i := range Window + 3 { // wraps producer 3's ring
		rec(3, 0, int32(i*2), 2, 12+int64(i))
	}
	rec(1, 0, 3, 1, 40)
	return tb
}

func TestSnapshotRoundTrip(t *testing.T) {
	tb := sampleTable(t)
	snap := tb.AppendSnapshot([]byte("prefix"), 1234, 99)
	if !bytes.HasPrefix(snap, []byte("prefix")) {
		t.Fatal("AppendSnapshot does not append")
	}
	snap = snap[len("prefix"):]
	loaded := New(Config{Expiry: time.Hour, MaxProducers: 100})
	info, err := loaded.LoadSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	if info != (SnapshotInfo{Offset: 1234, Written: 99, Producers: 3}) {
		t.Fatalf("info %+v", info)
	}
	if a, b := tb.Producers(), loaded.Producers(); !equalStates(a, b) {
		t.Fatalf("loaded\n%+v\nwant\n%+v", b, a)
	}
	if again := loaded.AppendSnapshot(nil, 1234, 99); !bytes.Equal(again, snap) {
		t.Fatal("a loaded snapshot re-encodes differently")
	}
	// The loaded table deduplicates as the original did.
	h := hdr(3, 0, 2*(Window+2), 2)
	if res, err := loaded.Check(&h, 50); err != nil || !res.Duplicate {
		t.Fatalf("%v %+v", err, res)
	}
	// A table with a smaller cap keeps the most recently seen.
	small := New(Config{Expiry: time.Hour, MaxProducers: 2})
	if _, err := small.LoadSnapshot(snap); err != nil {
		t.Fatal(err)
	}
	if ps := small.Producers(); len(ps) != 2 || ps[0].ProducerID != 3 || ps[1].ProducerID != 1 {
		t.Fatalf("capped load: %+v", ps)
	}
	// Empty.
	empty := New(Config{Expiry: time.Hour, MaxProducers: 2}).AppendSnapshot(nil, 0, 0)
	if info, err := loaded.LoadSnapshot(empty); err != nil || info.Producers != 0 || loaded.Len() != 0 {
		t.Fatalf("empty: %v %+v %d", err, info, loaded.Len())
	}
}

func equalStates(a, b []State) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ProducerID != b[i].ProducerID || a[i].Epoch != b[i].Epoch || a[i].LastSeen != b[i].LastSeen || len(a[i].Batches) != len(b[i].Batches) {
			return false
		}
		for j := range a[i].Batches {
			if a[i].Batches[j] != b[i].Batches[j] {
				return false
			}
		}
	}
	return true
}

// fixSnapCRC recomputes a mangled snapshot's CRC, so that the other checks are reached.
func fixSnapCRC(b []byte) []byte {
	if len(b) >= 8 {
		binary.BigEndian.PutUint32(b[4:], crc32.Checksum(b[8:], castagnoli))
	}
	return b
}

func TestSnapshotCorrupt(t *testing.T) {
	good := sampleTable(t).AppendSnapshot(nil, 1234, 99)
	first := snapHeaderSize // producer 2's entry (least recently seen first)
	tests := []struct {
		name   string
		mangle func([]byte) []byte
		fix    bool // recompute the CRC after mangling
		want   string
	}{
		{"empty", func(b []byte) []byte { return nil }, false, "shorter than its header"},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }, true, "magic"},
		{"crc", func(b []byte) []byte { b[len(b)-1] ^= 1; return b }, false, "CRC-32C mismatch"},
		{"version", func(b []byte) []byte { b[8] = 2; return b }, true, "version"},
		{"reserved", func(b []byte) []byte { b[10] = 1; return b }, true, "version"},
		{"negative offset", func(b []byte) []byte { b[12] = 0x80; return b }, true, "offset"},
		{"count too large", func(b []byte) []byte { binary.BigEndian.PutUint32(b[28:], 1<<30); return b }, true, "producers in"},
		{"count one more", func(b []byte) []byte { binary.BigEndian.PutUint32(b[28:], 4); return b }, true, "cut short"},
		{"count one less", func(b []byte) []byte { binary.BigEndian.PutUint32(b[28:], 2); return b }, true, "after the last producer"},
		{"trailing byte", func(b []byte) []byte { return append(b, 0) }, true, "after the last producer"},
		{"truncated", func(b []byte) []byte { return b[:len(b)-1] }, true, "cut short"},
		{"negative id", func(b []byte) []byte { b[first] = 0x80; return b }, true, "id"},
		{"negative epoch", func(b []byte) []byte { b[first+8] = 0x80; return b }, true, "epoch"},
		{"no batches", func(b []byte) []byte { b[first+10] = 0; return b }, true, "batches (want 1"},
		{"too many batches", func(b []byte) []byte { b[first+10] = Window + 1; return b }, true, "batches (want 1"},
		{"entry reserved", func(b []byte) []byte { b[first+11] = 1; return b }, true, "reserved"},
		{"duplicate id", func(b []byte) []byte {
			copy(b[first+snapEntryHead+snapBatchSize:], b[first:first+8]) // producer 2's id over the next
			return b
		}, true, "listed twice"},
		{"zero count", func(b []byte) []byte { binary.BigEndian.PutUint32(b[first+snapEntryHead+4:], 0); return b }, true, "count 0"},
		{"negative sequence", func(b []byte) []byte { b[first+snapEntryHead] = 0x80; return b }, true, "base sequence"},
		{"sequences not consecutive", func(b []byte) []byte {
			// producer 3 comes next, with Window batches: bump its second batch's sequence.
			p3 := first + snapEntryHead + snapBatchSize
			pos := p3 + snapEntryHead + snapBatchSize
			binary.BigEndian.PutUint32(b[pos:], binary.BigEndian.Uint32(b[pos:])+1)
			return b
		}, true, "after"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.mangle(bytes.Clone(good))
			if tt.fix {
				c = fixSnapCRC(c)
			}
			tb := sampleTable(t)
			before := tb.AppendSnapshot(nil, 1234, 99)
			_, err := tb.LoadSnapshot(c)
			if !errors.Is(err, ErrBadSnapshot) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("LoadSnapshot: %v, want ErrBadSnapshot saying %q", err, tt.want)
			}
			if after := tb.AppendSnapshot(nil, 1234, 99); !bytes.Equal(before, after) {
				t.Fatal("a refused snapshot changed the table")
			}
		})
	}
}

// FuzzSnapshot: LoadSnapshot never panics; a snapshot it accepts re-encodes to exactly its
// bytes, and every state in it deduplicates its newest batch.
func FuzzSnapshot(f *testing.F) {
	f.Add(sampleTable(f).AppendSnapshot(nil, 1234, 99), false)
	f.Add(New(Config{Expiry: time.Hour, MaxProducers: 1}).AppendSnapshot(nil, 0, 0), false)
	f.Add([]byte("LQPS"), true)
	f.Fuzz(func(t *testing.T, data []byte, fix bool) {
		if fix {
			data = fixSnapCRC(bytes.Clone(data))
		}
		tb := New(Config{Expiry: time.Hour, MaxProducers: 1 << 20})
		info, err := tb.LoadSnapshot(data)
		if err != nil {
			if !errors.Is(err, ErrBadSnapshot) || tb.Len() != 0 {
				t.Fatalf("refused with %v, table holds %d", err, tb.Len())
			}
			return
		}
		if tb.Len() != info.Producers {
			t.Fatalf("%d producers loaded, header says %d", tb.Len(), info.Producers)
		}
		if re := tb.AppendSnapshot(nil, info.Offset, info.Written); !bytes.Equal(re, data) {
			t.Fatalf("re-encoded differently:\n% x\n% x", re, data)
		}
		for _, s := range tb.Producers() {
			last := s.Batches[len(s.Batches)-1]
			h := wire.BatchHeader{ProducerID: s.ProducerID, ProducerEpoch: s.Epoch, BaseSequence: last.BaseSequence, RecordCount: last.RecordCount}
			if res, err := tb.Check(&h, s.LastSeen); err != nil || !res.Duplicate || res.Base != last.BaseOffset {
				t.Fatalf("producer %d: newest batch not a duplicate: %v %+v", s.ProducerID, err, res)
			}
		}
	})
}
