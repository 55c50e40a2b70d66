package producerstate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/lightq/lightq/wire"
)

// Snapshot layout constants (see the package doc). NEVER CHANGE.
const (
	snapMagic      = "LQPS"
	snapVersion    = 1
	snapHeaderSize = 32
	snapEntryHead  = 20 // id, epoch, n, zero, last seen
	snapBatchSize  = 16
)

// ErrBadSnapshot: a snapshot's bytes fail a check (see the package doc for what is checked).
var ErrBadSnapshot = errors.New("producer state snapshot invalid")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// AppendSnapshot appends the table's states to dst in the snapshot format, stamped with
// offset (every batch below it is reflected) and written (unix ms).
func (t *Table) AppendSnapshot(dst []byte, offset, written int64) []byte {
	start := len(dst)
	dst = append(dst, snapMagic...)
	dst = append(dst, 0, 0, 0, 0, snapVersion, 0, 0, 0)
	dst = binary.BigEndian.AppendUint64(dst, uint64(offset))
	dst = binary.BigEndian.AppendUint64(dst, uint64(written))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(t.m)))
	for e := t.tail; e != nil; e = e.prev {
		dst = binary.BigEndian.AppendUint64(dst, uint64(e.id))
		dst = binary.BigEndian.AppendUint16(dst, uint16(e.epoch))
		dst = append(dst, e.n, 0)
		dst = binary.BigEndian.AppendUint64(dst, uint64(e.lastSeen))
		first := (int(e.newest) - int(e.n) + 1 + Window) % Window
		for i := 0; i < int(e.n); i++ {
			b := &e.batches[(first+i)%Window]
			dst = binary.BigEndian.AppendUint32(dst, uint32(b.first))
			dst = binary.BigEndian.AppendUint32(dst, b.count)
			dst = binary.BigEndian.AppendUint64(dst, uint64(b.base))
		}
	}
	binary.BigEndian.PutUint32(dst[start+4:], crc32.Checksum(dst[start+8:], castagnoli))
	return dst
}

// SnapshotInfo is what a snapshot's header says.
type SnapshotInfo struct {
	Offset    int64 // every batch below this log offset is reflected
	Written   int64 // unix ms
	Producers int
}

// LoadSnapshot replaces the table's states with those of the snapshot b, whole or not at
// all: an invalid snapshot (the error wraps ErrBadSnapshot and says what is wrong) leaves the
// table as it was. States past the table's cap are dropped, least recently seen first. It
// does not expire states: call Expire.
func (t *Table) LoadSnapshot(b []byte) (SnapshotInfo, error) {
	info, err := checkSnapshot(b)
	if err != nil {
		return SnapshotInfo{}, err
	}
	t.Release()
	pos := snapHeaderSize
	var h wire.BatchHeader
	for i := 0; i < info.Producers; i++ {
		id := int64(binary.BigEndian.Uint64(b[pos:]))
		epoch := int16(binary.BigEndian.Uint16(b[pos+8:]))
		n := int(b[pos+10])
		lastSeen := int64(binary.BigEndian.Uint64(b[pos+12:]))
		pos += snapEntryHead
		h.ProducerID, h.ProducerEpoch = id, epoch
		for j := 0; j < n; j++ {
			h.BaseSequence = int32(binary.BigEndian.Uint32(b[pos:]))
			h.RecordCount = binary.BigEndian.Uint32(b[pos+4:])
			t.record(&h, int64(binary.BigEndian.Uint64(b[pos+8:])), lastSeen, false)
			pos += snapBatchSize
		}
	}
	return info, nil
}

// checkSnapshot validates a whole snapshot without building anything.
func checkSnapshot(b []byte) (SnapshotInfo, error) {
	bad := func(format string, args ...any) (SnapshotInfo, error) {
		return SnapshotInfo{}, fmt.Errorf("%w: %s", ErrBadSnapshot, fmt.Sprintf(format, args...))
	}
	if len(b) < snapHeaderSize {
		return bad("%d bytes, shorter than its header", len(b))
	}
	if string(b[:4]) != snapMagic {
		return bad("magic %q", b[:4])
	}
	if got, want := binary.BigEndian.Uint32(b[4:]), crc32.Checksum(b[8:], castagnoli); got != want {
		return bad("CRC-32C mismatch (stored %08x, computed %08x)", got, want)
	}
	if b[8] != snapVersion || b[9]|b[10]|b[11] != 0 {
		return bad("version %d (reserved %x), want %d", b[8], b[9:12], snapVersion)
	}
	info := SnapshotInfo{
		Offset:    int64(binary.BigEndian.Uint64(b[12:])),
		Written:   int64(binary.BigEndian.Uint64(b[20:])),
		Producers: int(binary.BigEndian.Uint32(b[28:])),
	}
	if info.Offset < 0 {
		return bad("offset %d", info.Offset)
	}
	if uint64(info.Producers)*(snapEntryHead+snapBatchSize) > uint64(len(b)-snapHeaderSize) {
		return bad("%d producers in %d bytes", info.Producers, len(b)-snapHeaderSize)
	}
	seen := make(map[int64]struct{}, info.Producers)
	pos := snapHeaderSize
	for i := 0; i < info.Producers; i++ {
		if len(b)-pos < snapEntryHead {
			return bad("producer %d: entry cut short at byte %d", i, pos)
		}
		id := int64(binary.BigEndian.Uint64(b[pos:]))
		epoch := int16(binary.BigEndian.Uint16(b[pos+8:]))
		n := int(b[pos+10])
		switch {
		case id < 0 || epoch < 0:
			return bad("producer %d: id %d epoch %d", i, id, epoch)
		case n < 1 || n > Window || b[pos+11] != 0:
			return bad("producer %d (id %d): %d batches (want 1 to %d), reserved %d", i, id, n, Window, b[pos+11])
		case len(b)-pos-snapEntryHead < n*snapBatchSize:
			return bad("producer %d (id %d): batches cut short at byte %d", i, id, pos)
		}
		if _, dup := seen[id]; dup {
			return bad("producer id %d listed twice", id)
		}
		seen[id] = struct{}{}
		pos += snapEntryHead
		var prevNext int32
		prevBase := int64(-1)
		for j := 0; j < n; j++ {
			first := int32(binary.BigEndian.Uint32(b[pos:]))
			count := binary.BigEndian.Uint32(b[pos+4:])
			base := int64(binary.BigEndian.Uint64(b[pos+8:]))
			switch {
			case first < 0 || count == 0 || base < 0:
				return bad("producer %d batch %d: base sequence %d, count %d, base offset %d", id, j, first, count, base)
			case j > 0 && (first != prevNext || base <= prevBase):
				return bad("producer %d batch %d: base sequence %d after %d, base offset %d after %d", id, j, first, prevNext, base, prevBase)
			}
			prevNext, prevBase = wire.NextSequence(first, count), base
			pos += snapBatchSize
		}
	}
	if pos != len(b) {
		return bad("%d bytes after the last producer", len(b)-pos)
	}
	return info, nil
}
