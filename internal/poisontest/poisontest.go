// Package poisontest puts record batches that consumers cannot decode into the partition logs
// of a stopped broker's data directory, for tests of what consumers do with them. A broker
// that checks the records of every PRODUCE refuses such batches, but batches stored before it
// did, or damaged later by a faulty disk, stay on disk: these tests write them there directly,
// with the log package (whose Append checks only a batch's header and record count) or by
// changing stored bytes in place, and then restart the broker on the directory.
//
// Only tests import it. Nothing here is safe while a broker has the directory open.
//
//	srv.Shutdown(ctx)
//	bases := poisontest.Append(t, poisontest.PartitionDir(dir, "audit", 0), log.Options{},
//		poisontest.Batch(1000, "a", "b"), poisontest.CountMismatch(), poisontest.Batch(2000, "c"))
//	poisontest.Damage(t, poisontest.PartitionDir(dir, "audit", 0), bases[0], poisontest.FlipRecordsByte)
//	srv = brokertest.StartWith(t, cfg) // same DataDir
package poisontest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/lightq/lightq/log"
	"github.com/lightq/lightq/wire"
)

// crcStart is where the bytes a batch's CRC covers begin (PROTOCOL.md section 7: bytes 16 to
// the end; the base offset and length before it are not covered).
const crcStart = 16

// PartitionDir is the directory of a durable partition's log in a broker's data directory.
func PartitionDir(dataDir, topic string, partition int) string {
	return filepath.Join(dataDir, "topics", topic, strconv.Itoa(partition))
}

// Batch returns a valid uncompressed batch holding one record per value (no key, no
// headers), the first at timestamp ts (unix ms) and each next one a millisecond later.
func Batch(ts int64, values ...string) []byte {
	var bb wire.BatchBuilder
	for i, v := range values {
		bb.Append(ts+int64(i), nil, []byte(v), nil)
	}
	b, err := bb.Finish(wire.CodecNone, nil)
	if err != nil {
		panic(err)
	}
	return slices.Clone(b)
}

// seal encodes bt with a correct length and CRC: a batch that passes wire.ParseBatch whatever
// its records hold.
func seal(bt wire.Batch) []byte {
	bt.Magic = wire.BatchMagic
	bt.Length = uint32(wire.BatchHeaderSize - 12 + len(bt.Records))
	if bt.MaxTimestamp < bt.FirstTimestamp {
		bt.MaxTimestamp = bt.FirstTimestamp
	}
	b := wire.AppendBatch(nil, &bt)
	bt.CRC = wire.Checksum(b[crcStart:])
	return wire.AppendBatch(b[:0], &bt)
}

// records encodes one uncompressed record per value, as a batch's records section.
func records(values ...string) []byte {
	var b []byte
	for _, v := range values {
		b = wire.AppendRecord(b, 0, nil, []byte(v), nil)
	}
	return b
}

// CountMismatch is a batch whose header says 3 records while its section holds 2 (the
// broker once gave such a batch 3 offsets). CRC and structure are right.
func CountMismatch() []byte {
	r := records("count-1", "count-2")
	return seal(wire.Batch{BatchHeader: wire.BatchHeader{RecordCount: 3, FirstTimestamp: 1, RecordsSize: uint32(len(r))}, Records: r})
}

// ExtraRecord is a batch whose header says 2 records while its section holds 3: the third
// got no offset. CRC and structure are right.
func ExtraRecord() []byte {
	r := records("extra-1", "extra-2", "extra-3")
	return seal(wire.Batch{BatchHeader: wire.BatchHeader{RecordCount: 2, FirstTimestamp: 1, RecordsSize: uint32(len(r))}, Records: r})
}

// GarbageRecords is a batch of 2 records whose section is 0xFF bytes: over-long varints.
func GarbageRecords() []byte {
	r := bytes.Repeat([]byte{0xff}, 24)
	return seal(wire.Batch{BatchHeader: wire.BatchHeader{RecordCount: 2, FirstTimestamp: 1, RecordsSize: uint32(len(r))}, Records: r})
}

// KeyPastRecord is a batch of 1 record whose key length runs past the end of the record.
func KeyPastRecord() []byte {
	r := wire.AppendRecord(nil, 0, []byte("key"), []byte("value"), nil)
	r[2] = 100 // the key length, after the record length and the timestamp delta
	return seal(wire.Batch{BatchHeader: wire.BatchHeader{RecordCount: 1, FirstTimestamp: 1, RecordsSize: uint32(len(r))}, Records: r})
}

// ZstdGarbage is a batch of 2 records marked zstd whose section is not zstd at all.
func ZstdGarbage() []byte {
	r := []byte("this is not a zstd frame, though the header says so")
	return seal(wire.Batch{BatchHeader: wire.BatchHeader{Attributes: uint8(wire.CodecZstd), RecordCount: 2, FirstTimestamp: 1, RecordsSize: 64}, Records: r})
}

// Append appends batches to the log in dir (see PartitionDir) through the log package, and
// returns the base offset each got. opts may set SegmentBytes small to put batches in
// sealed segments of their own.
func Append(t testing.TB, dir string, opts log.Options, batches ...[]byte) []int64 {
	t.Helper()
	l, err := log.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	var bases []int64
	for _, b := range batches {
		h := wire.PeekBatchHeaderUnchecked(b)
		base, err := l.Append(slices.Clone(b), h.RecordCount)
		if err != nil {
			t.Fatal(err)
		}
		bases = append(bases, base)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return bases
}

// Damage changes in place, on disk, the stored batch with base offset base in the log in dir:
// damage gets a copy of its bytes and changes them, keeping their length. It is what a
// faulty disk does; nothing fixes the CRC.
func Damage(t testing.TB, dir string, base int64, damage func(batch []byte)) {
	t.Helper()
	if err := damageIn(dir, base, damage); err != nil {
		t.Fatal(err)
	}
}

func damageIn(dir string, base int64, damage func(batch []byte)) error {
	segs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return err
	}
	slices.Sort(segs) // zero-padded names sort by base offset
	for _, path := range segs {
		seg, err := strconv.ParseInt(strings.TrimSuffix(filepath.Base(path), ".log"), 10, 64)
		if err != nil || seg > base {
			continue
		}
		done, err := damageSegment(path, base, damage)
		if err != nil || done {
			return err
		}
	}
	return fmt.Errorf("poisontest: no batch with base offset %d in %s", base, dir)
}

// damageSegment looks for the batch at base in one segment file, walking its length fields.
func damageSegment(path string, base int64, damage func(batch []byte)) (bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return false, err
	}
	defer f.Close()
	head := make([]byte, wire.BatchHeaderSize)
	for pos := int64(0); ; {
		if _, err := f.ReadAt(head, pos); err != nil {
			if errors.Is(err, io.EOF) {
				return false, nil
			}
			return false, err
		}
		size := wire.BatchSize(head)
		if wire.BatchBaseOffset(head) != base {
			pos += int64(size)
			continue
		}
		b := make([]byte, size)
		if _, err := f.ReadAt(b, pos); err != nil {
			return false, err
		}
		damage(b)
		if len(b) != size {
			return false, fmt.Errorf("poisontest: damage changed the batch's size from %d to %d", size, len(b))
		}
		if _, err := f.WriteAt(b, pos); err != nil {
			return false, err
		}
		return true, f.Sync()
	}
}

// FlipRecordsByte is a Damage: one byte inside the records section flipped, so that the CRC
// no longer matches.
func FlipRecordsByte(b []byte) { b[wire.BatchHeaderSize+1] ^= 0xff }

// BreakMagic is a Damage: the magic byte (position 16, PROTOCOL.md section 7) changed, so that
// the header itself fails its checks; the length field still frames the batch.
func BreakMagic(b []byte) { b[crcStart] = 0x7f }

// BreakLength is a Damage: the batch length field (bytes 8-11, PROTOCOL.md section 7) changed
// by 4, so that it no longer frames the batch. The broker reads its log by these fields.
func BreakLength(b []byte) { b[11] ^= 0x04 }
