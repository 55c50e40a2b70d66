package wire

import (
	"fmt"
)

// RecordValidator checks that a batch's records decode, completely: what ParseBatch leaves
// out because it does not walk the records. The broker runs it on every PRODUCE before the
// batch is stored, so that every stored batch decodes with RecordIter.
//
// A RecordValidator keeps a decompression scratch buffer and a Compressor (zstd state) and
// reuses them, so Validate does not allocate in steady state. The scratch never grows past
// 1.25 × the largest records size it was given, which ParseBatch bounds by its batch limit.
// Not safe for concurrent use: give each goroutine (each broker event loop) its own.
type RecordValidator struct {
	comp    Compressor
	scratch []byte // decompressed records section of the last compressed batch
}

// Close releases the zstd state. The validator may not be used afterwards.
func (v *RecordValidator) Close() {
	v.comp.Close()
	v.scratch = nil
}

// Validate checks the records of bt, a batch ParseBatch accepted, decompressing them into the
// validator's scratch first when the batch is compressed:
//   - the section decompresses to exactly records size bytes (see Compressor.Decompress);
//   - it holds exactly record count records, with no byte after the last one;
//   - every varint is minimal and fits in 64 bits;
//   - every record's fields (timestamp delta, key, value, header count, each header's name and
//     value) fill its length exactly, and no length runs past the record;
//   - each record's key + value + header names and values is at most maxRecord bytes;
//   - a control batch's record is one key byte and a value, without headers (ParseControl).
//
// The error wraps ErrMessageTooLarge for a record over maxRecord and ErrCorruptBatch for
// anything else (or is an internal error when zstd state cannot be created), and names what
// is wrong and in which record (counted from 0). Once the scratch has grown to the largest
// compressed batch, it does not allocate unless it fails.
func (v *RecordValidator) Validate(bt *Batch, maxRecord int) error {
	records := bt.Records
	if bt.Codec() != CodecNone {
		out, err := v.comp.Decompress(v.scratch[:0], bt)
		if err != nil {
			return err
		}
		v.scratch = out
		records = out
	}
	if err := ValidateRecords(records, bt.RecordCount, maxRecord); err != nil {
		return err
	}
	if bt.IsControl() { // uncompressed (PeekBatchHeader): its record is bt.Records
		_, _, err := ParseControl(bt)
		return err
	}
	return nil
}

// ValidateRecords checks an uncompressed records section as Validate does: count records,
// nothing after them, minimal varints, exact lengths, each record at most maxRecord bytes of
// key, value and headers. It does not allocate unless it fails.
func ValidateRecords(records []byte, count uint32, maxRecord int) error {
	if recordsValid(records, count, maxRecord) {
		return nil
	}
	if err := explainRecords(records, count, maxRecord); err != nil {
		return err
	}
	// recordsValid and explainRecords make the same checks; FuzzBatch holds them to it.
	return fmt.Errorf("%w: records section refused, reason unexplained", ErrCorruptBatch)
}

// recordsValid is the hot path of ValidateRecords: the same checks as explainRecords, with
// one-byte varints (most varints of small records) and the two-byte lengths of records and
// values from 128 B to 16 KiB decoded inline, and no error to build. It is 2-3 times as fast
// as the walk that explains, which matters at 100-byte messages, and the inline two-byte
// lengths cut a third of its time at 1 KiB (BenchmarkValidateParts, walk). Positions are
// offsets into b; a record's fields are read from rec, which is b up to the record's end, so
// no field can reach past it. Each varint is read by the same line: the inline cases (a
// function would not be inlined), anything else by uvarintFrom.
func recordsValid(b []byte, count uint32, maxRecord int) bool {
	pos := 0
	for ; count > 0; count-- {
		var n uint64
		p := pos
		if p < len(b) && b[p] < 0x80 { // record length
			n, p = uint64(b[p]), p+1
		} else if p+1 < len(b) && b[p+1]-1 < 0x7f { // b[p] >= 0x80, b[p+1] in 1-127: minimal
			n, p = uint64(b[p]&0x7f)|uint64(b[p+1])<<7, p+2
		} else if n, p = uvarintFrom(b, p); p < 0 {
			return false
		}
		if n > uint64(len(b)-p) {
			return false
		}
		pos = p + int(n)
		rec := b[:pos]
		if p < len(rec) && rec[p] < 0x80 { // timestamp delta
			p++
		} else if _, p = uvarintFrom(rec, p); p < 0 {
			return false
		}
		if p < len(rec) && rec[p] < 0x80 { // key length
			n, p = uint64(rec[p]), p+1
		} else if n, p = uvarintFrom(rec, p); p < 0 {
			return false
		}
		if n > uint64(len(rec)-p) {
			return false
		}
		p += int(n)
		size := n
		if p < len(rec) && rec[p] < 0x80 { // value length
			n, p = uint64(rec[p]), p+1
		} else if p+1 < len(rec) && rec[p+1]-1 < 0x7f {
			n, p = uint64(rec[p]&0x7f)|uint64(rec[p+1])<<7, p+2
		} else if n, p = uvarintFrom(rec, p); p < 0 {
			return false
		}
		if n > uint64(len(rec)-p) {
			return false
		}
		p += int(n)
		size += n
		var hc uint64
		if p < len(rec) && rec[p] < 0x80 {
			hc, p = uint64(rec[p]), p+1
		} else if hc, p = uvarintFrom(rec, p); p < 0 {
			return false
		}
		if hc > uint64(len(rec)-p)/2 {
			return false
		}
		for h := 2 * hc; h > 0; h-- { // names and values
			if p < len(rec) && rec[p] < 0x80 {
				n, p = uint64(rec[p]), p+1
			} else if n, p = uvarintFrom(rec, p); p < 0 {
				return false
			}
			if n > uint64(len(rec)-p) {
				return false
			}
			p += int(n)
			size += n
		}
		if p != len(rec) || size > uint64(maxRecord) {
			return false
		}
	}
	return pos == len(b)
}

// uvarintFrom decodes the uvarint at b[pos:] and returns it with the position after it, or a
// negative position when uvarintAt refuses it. Two-byte varints (values 128-16383: lengths
// of 1 KiB values, timestamp deltas of a busy batch) take a straight line.
func uvarintFrom(b []byte, pos int) (uint64, int) {
	if pos+1 < len(b) {
		if c0, c1 := b[pos], b[pos+1]; c0 >= 0x80 && c1 < 0x80 && c1 != 0 {
			return uint64(c0&0x7f) | uint64(c1)<<7, pos + 2
		}
	}
	n, w := uvarintAt(b, pos)
	if w <= 0 {
		return 0, -1
	}
	return n, pos + w
}

// explainRecords makes recordsValid's checks and says what is wrong, in which record.
func explainRecords(records []byte, count uint32, maxRecord int) error {
	pos := 0
	for i := uint32(0); i < count; i++ {
		if pos == len(records) {
			return fmt.Errorf("%w: record count is %d, but the records section ends after %d records", ErrCorruptBatch, count, i)
		}
		n, w := uvarintAt(records, pos)
		if w <= 0 {
			return badVarint(w, i, "record length")
		}
		start := pos + w
		if n > uint64(len(records)-start) {
			return fmt.Errorf("%w: record %d: length %d at byte %d of the records section, but only %d bytes follow", ErrCorruptBatch, i, n, pos, len(records)-start)
		}
		pos = start + int(n)
		if err := checkRecord(records[start:pos], i, maxRecord); err != nil {
			return err
		}
	}
	if pos != len(records) {
		return fmt.Errorf("%w: record count is %d, but %d bytes follow the last record", ErrCorruptBatch, count, len(records)-pos)
	}
	return nil
}

// checkRecord checks the body of record i (the bytes after its length).
func checkRecord(rec []byte, i uint32, maxRecord int) error {
	_, w := uvarintAt(rec, 0)
	if w <= 0 {
		return badVarint(w, i, "timestamp delta")
	}
	pos := w
	size := uint64(0) // key + value + header names and values
	var err error
	if pos, err = skipField(rec, pos, i, "key", &size); err != nil {
		return err
	}
	if pos, err = skipField(rec, pos, i, "value", &size); err != nil {
		return err
	}
	hc, w := uvarintAt(rec, pos)
	if w <= 0 {
		return badVarint(w, i, "header count")
	}
	pos += w
	if hc > uint64(len(rec)-pos)/2 { // every header takes at least two bytes
		return fmt.Errorf("%w: record %d: %d headers in the %d bytes left of the record", ErrCorruptBatch, i, hc, len(rec)-pos)
	}
	for h := uint64(0); h < hc; h++ {
		if pos, err = skipField(rec, pos, i, "header name", &size); err != nil {
			return err
		}
		if pos, err = skipField(rec, pos, i, "header value", &size); err != nil {
			return err
		}
	}
	if pos != len(rec) {
		return fmt.Errorf("%w: record %d: %d bytes after its last field, inside its length", ErrCorruptBatch, i, len(rec)-pos)
	}
	if size > uint64(maxRecord) {
		return fmt.Errorf("%w: record %d: %d bytes of key, value and headers, limit %d", ErrMessageTooLarge, i, size, maxRecord)
	}
	return nil
}

// skipField skips a uvarint-length-prefixed field of record i at rec[pos:], adds its length
// to size and returns the position after it.
func skipField(rec []byte, pos int, i uint32, what string, size *uint64) (int, error) {
	n, w := uvarintAt(rec, pos)
	if w <= 0 {
		return 0, badVarint(w, i, what+" length")
	}
	pos += w
	if n > uint64(len(rec)-pos) {
		return 0, fmt.Errorf("%w: record %d: %s length %d, but only %d bytes are left of the record", ErrCorruptBatch, i, what, n, len(rec)-pos)
	}
	*size += n
	return pos + int(n), nil
}

// Results of uvarintAt that are not a width.
const (
	varintTruncated = 0
	varintOverLong  = -1
	varintOverflow  = -2
)

// uvarintAt decodes the uvarint at b[pos:] by Reader.Uvarint's rules (minimal, at most 64
// bits) and returns it with its width, or a width of varintTruncated, varintOverLong or
// varintOverflow. One-byte varints, most lengths of small records, take the first branch.
func uvarintAt(b []byte, pos int) (uint64, int) {
	if pos < len(b) && b[pos] < 0x80 {
		return uint64(b[pos]), 1
	}
	var v uint64
	for i, shift := 0, uint(0); i < maxVarintLen; i, shift = i+1, shift+7 {
		if pos+i >= len(b) {
			return 0, varintTruncated
		}
		c := b[pos+i]
		if i == maxVarintLen-1 && c > 1 {
			return 0, varintOverflow
		}
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			if c == 0 {
				return 0, varintOverLong // i > 0 here: a one-byte 00 took the first branch
			}
			return v, i + 1
		}
	}
	return 0, varintOverflow // not reached: the tenth byte ends the loop
}

// maxVarintLen is the longest uvarint of 64 bits.
const maxVarintLen = 10

// badVarint describes a varint uvarintAt refused (width w) in record i.
func badVarint(w int, i uint32, what string) error {
	why := "truncated varint"
	switch w {
	case varintOverLong:
		why = "over-long varint (not minimal)"
	case varintOverflow:
		why = "varint overflows 64 bits"
	}
	return fmt.Errorf("%w: record %d: %s: %s", ErrCorruptBatch, i, what, why)
}
