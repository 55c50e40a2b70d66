package wire

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Primitive encodings used by request and response bodies:
//
//	u8/u16/u32/u64, i32/i64   fixed width, big-endian (i as two's complement)
//	string                    u16 length, then that many bytes of UTF-8
//	bytes                     u32 length, then that many bytes
//
// Inside record batches, lengths are uvarints (LEB128, minimal) and signed values zig-zag
// varints, as in Protocol Buffers.

// AppendU16 appends v big-endian.
func AppendU16(dst []byte, v uint16) []byte { return binary.BigEndian.AppendUint16(dst, v) }

// AppendU32 appends v big-endian.
func AppendU32(dst []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(dst, v) }

// AppendU64 appends v big-endian.
func AppendU64(dst []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(dst, v) }

// AppendI32 appends v as a big-endian two's complement.
func AppendI32(dst []byte, v int32) []byte { return AppendU32(dst, uint32(v)) }

// AppendI64 appends v as a big-endian two's complement.
func AppendI64(dst []byte, v int64) []byte { return AppendU64(dst, uint64(v)) }

// AppendString appends a u16-length-prefixed string. Strings longer than 65535 bytes are a
// programming error: every string field has a smaller limit that callers check first.
func AppendString(dst []byte, s string) []byte {
	if len(s) > math.MaxUint16 {
		panic("wire: string longer than 65535 bytes")
	}
	dst = AppendU16(dst, uint16(len(s)))
	return append(dst, s...)
}

// AppendBytes appends a u32-length-prefixed byte string.
func AppendBytes(dst []byte, b []byte) []byte {
	dst = AppendU32(dst, uint32(len(b)))
	return append(dst, b...)
}

// AppendUvarint appends v as a minimal LEB128 varint.
func AppendUvarint(dst []byte, v uint64) []byte { return binary.AppendUvarint(dst, v) }

// AppendVarint appends v zig-zag encoded.
func AppendVarint(dst []byte, v int64) []byte { return binary.AppendVarint(dst, v) }

// UvarintLen is the encoded size of v.
func UvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// Reader decodes primitives from a byte slice. The first error is sticky: after it every read
// returns a zero value, so a decoder reads all its fields and checks Err once. Byte slices it
// returns alias the input.
type Reader struct {
	buf []byte
	off int
	err error
}

// NewReader returns a Reader over b.
func NewReader(b []byte) Reader { return Reader{buf: b} }

// Err is the first error met, if any.
func (r *Reader) Err() error { return r.err }

// Len is the number of unread bytes.
func (r *Reader) Len() int { return len(r.buf) - r.off }

// Offset is the number of bytes consumed so far.
func (r *Reader) Offset() int { return r.off }

// Fail records err unless an error is already recorded.
func (r *Reader) Fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *Reader) need(n int, what string) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || len(r.buf)-r.off < n {
		r.err = fmt.Errorf("%w: %s needs %d bytes at offset %d, %d left", ErrMalformed, what, n, r.off, len(r.buf)-r.off)
		return false
	}
	return true
}

// U8 reads one byte.
func (r *Reader) U8() uint8 {
	if !r.need(1, "u8") {
		return 0
	}
	v := r.buf[r.off]
	r.off++
	return v
}

// U16 reads a big-endian uint16.
func (r *Reader) U16() uint16 {
	if !r.need(2, "u16") {
		return 0
	}
	v := binary.BigEndian.Uint16(r.buf[r.off:])
	r.off += 2
	return v
}

// U32 reads a big-endian uint32.
func (r *Reader) U32() uint32 {
	if !r.need(4, "u32") {
		return 0
	}
	v := binary.BigEndian.Uint32(r.buf[r.off:])
	r.off += 4
	return v
}

// U64 reads a big-endian uint64.
func (r *Reader) U64() uint64 {
	if !r.need(8, "u64") {
		return 0
	}
	v := binary.BigEndian.Uint64(r.buf[r.off:])
	r.off += 8
	return v
}

// I32 reads a big-endian int32.
func (r *Reader) I32() int32 { return int32(r.U32()) }

// I64 reads a big-endian int64.
func (r *Reader) I64() int64 { return int64(r.U64()) }

// Raw reads n bytes, aliased.
func (r *Reader) Raw(n int, what string) []byte {
	if !r.need(n, what) {
		return nil
	}
	b := r.buf[r.off : r.off+n : r.off+n]
	r.off += n
	return b
}

// StringBytes reads a u16-length-prefixed string without copying it. max bounds its length.
func (r *Reader) StringBytes(max int, what string) []byte {
	n := int(r.U16())
	if r.err == nil && n > max {
		r.err = fmt.Errorf("%w: %s of %d bytes, limit %d", ErrMalformed, what, n, max)
		return nil
	}
	return r.Raw(n, what)
}

// String reads a u16-length-prefixed string and copies it.
func (r *Reader) String(max int, what string) string { return string(r.StringBytes(max, what)) }

// Bytes reads a u32-length-prefixed byte string without copying it. max bounds its length.
func (r *Reader) Bytes(max int, what string) []byte {
	n := r.U32()
	if r.err == nil && uint64(n) > uint64(max) {
		r.err = fmt.Errorf("%w: %s of %d bytes, limit %d", ErrMalformed, what, n, max)
		return nil
	}
	return r.Raw(int(n), what)
}

// Rest returns every unread byte, aliased.
func (r *Reader) Rest() []byte {
	if r.err != nil {
		return nil
	}
	b := r.buf[r.off:]
	r.off = len(r.buf)
	return b
}

// Uvarint reads a minimal LEB128 varint. Over-long encodings are rejected so that every value
// has exactly one encoding, which keeps decode-then-encode an identity.
//
// A one-byte varint, most of a record's (small lengths and deltas), is decoded here, small
// enough to be inlined into the record decoders; uvarint takes the rest and every error.
func (r *Reader) Uvarint(what string) uint64 {
	if off := r.off; uint(off) < uint(len(r.buf)) && r.buf[off] < 0x80 && r.err == nil {
		r.off = off + 1
		return uint64(r.buf[off])
	}
	return r.uvarint(what)
}

// uvarint is Uvarint's general case: two bytes (a 1 KiB value's length) without the loop.
func (r *Reader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	if r.off+1 < len(r.buf) {
		if b0, b1 := r.buf[r.off], r.buf[r.off+1]; b0 >= 0x80 && b1 < 0x80 && b1 != 0 {
			r.off += 2
			return uint64(b0&0x7f) | uint64(b1)<<7
		}
	}
	var v uint64
	for i, shift := 0, uint(0); i < binary.MaxVarintLen64; i, shift = i+1, shift+7 {
		if r.off+i >= len(r.buf) {
			r.err = fmt.Errorf("%w: %s: truncated varint at offset %d", ErrMalformed, what, r.off)
			return 0
		}
		b := r.buf[r.off+i]
		if i == binary.MaxVarintLen64-1 && b > 1 {
			break
		}
		v |= uint64(b&0x7f) << shift
		if b < 0x80 {
			if b == 0 && i > 0 {
				r.err = fmt.Errorf("%w: %s: over-long varint at offset %d", ErrMalformed, what, r.off)
				return 0
			}
			r.off += i + 1
			return v
		}
	}
	r.err = fmt.Errorf("%w: %s: varint overflows 64 bits at offset %d", ErrMalformed, what, r.off)
	return 0
}

// Varint reads a zig-zag varint.
func (r *Reader) Varint(what string) int64 {
	u := r.Uvarint(what)
	return int64(u>>1) ^ -int64(u&1)
}

// Done fails the reader if bytes remain: bodies have no trailing garbage.
func (r *Reader) Done(what string) error {
	if r.err == nil && r.off != len(r.buf) {
		r.err = fmt.Errorf("%w: %d trailing bytes after %s", ErrMalformed, len(r.buf)-r.off, what)
	}
	return r.err
}
