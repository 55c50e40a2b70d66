package wire_test

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/lightq/lightq/wire"
)

func TestUvarint(t *testing.T) {
	ff9 := bytes.Repeat([]byte{0xff}, 9)
	tests := []struct {
		name string
		in   []byte
		want uint64
		n    int    // bytes consumed
		err  string // in the error text; empty when valid
	}{
		{name: "0", in: []byte{0x00}, want: 0, n: 1},
		{name: "1", in: []byte{0x01}, want: 1, n: 1},
		{name: "127", in: []byte{0x7f}, want: 127, n: 1},
		{name: "128", in: []byte{0x80, 0x01}, want: 128, n: 2},
		{name: "300", in: []byte{0xac, 0x02}, want: 300, n: 2},
		{name: "16383", in: []byte{0xff, 0x7f}, want: 16383, n: 2},
		{name: "max uint64", in: append(bytes.Clone(ff9), 0x01), want: math.MaxUint64, n: 10},
		{name: "trailing bytes are not read", in: []byte{0x05, 0xff}, want: 5, n: 1},
		{name: "over-long 0", in: []byte{0x80, 0x00}, err: "over-long"},
		{name: "over-long 1", in: []byte{0x81, 0x00}, err: "over-long"},
		{name: "over-long 127 in 3", in: []byte{0xff, 0x80, 0x00}, err: "over-long"},
		{name: "over-long 10 bytes", in: append(bytes.Repeat([]byte{0x80}, 9), 0x00), err: "over-long"},
		{name: "overflow 10th byte 2", in: append(bytes.Clone(ff9), 0x02), err: "overflow"},
		{name: "overflow 10th byte 0x7f", in: append(bytes.Clone(ff9), 0x7f), err: "overflow"},
		{name: "overflow 11 bytes", in: append(bytes.Repeat([]byte{0xff}, 10), 0x01), err: "overflow"},
		{name: "overflow 10th byte continues", in: append(bytes.Clone(ff9), 0x81, 0x00), err: "overflow"},
		{name: "empty", in: nil, err: "truncated"},
		{name: "truncated", in: []byte{0x80}, err: "truncated"},
		{name: "truncated 9", in: ff9, err: "truncated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := wire.NewReader(tt.in)
			v := r.Uvarint("test")
			if tt.err != "" {
				if !errors.Is(r.Err(), wire.ErrMalformed) || !strings.Contains(r.Err().Error(), tt.err) {
					t.Fatalf("Uvarint = %d, err %v; want an error about %q", v, r.Err(), tt.err)
				}
				return
			}
			if r.Err() != nil || v != tt.want || r.Offset() != tt.n {
				t.Fatalf("Uvarint = %d after %d bytes, err %v; want %d after %d", v, r.Offset(), r.Err(), tt.want, tt.n)
			}
		})
	}
}

func TestVarintRoundTrip(t *testing.T) {
	values := []int64{0, 1, -1, 2, -2, 63, -64, 64, -65, 1 << 20, -(1 << 20), math.MaxInt32, math.MinInt32, math.MaxInt64, math.MinInt64}
	zigzag := map[int64][]byte{0: {0}, -1: {1}, 1: {2}, -2: {3}, 63: {0x7e}, -64: {0x7f}, 64: {0x80, 0x01}}
	for _, v := range values {
		b := wire.AppendVarint(nil, v)
		if want, ok := zigzag[v]; ok && !bytes.Equal(b, want) {
			t.Errorf("AppendVarint(%d) = % x, want % x", v, b, want)
		}
		r := wire.NewReader(b)
		if got := r.Varint("v"); got != v || r.Err() != nil || r.Len() != 0 {
			t.Errorf("Varint(% x) = %d, %v; want %d", b, got, r.Err(), v)
		}
		u := uint64(v)
		ub := wire.AppendUvarint(nil, u)
		if len(ub) != wire.UvarintLen(u) {
			t.Errorf("UvarintLen(%d) = %d, encoded %d bytes", u, wire.UvarintLen(u), len(ub))
		}
		r = wire.NewReader(ub)
		if got := r.Uvarint("u"); got != u || r.Err() != nil {
			t.Errorf("Uvarint(% x) = %d, %v; want %d", ub, got, r.Err(), u)
		}
	}
	for shift := 0; shift < 64; shift++ {
		for _, u := range []uint64{1<<shift - 1, 1 << shift} {
			if n := len(wire.AppendUvarint(nil, u)); n != wire.UvarintLen(u) {
				t.Errorf("UvarintLen(%d) = %d, encoded %d bytes", u, wire.UvarintLen(u), n)
			}
		}
	}
}

func TestReaderFixed(t *testing.T) {
	var b []byte
	b = append(b, 0xab)
	b = wire.AppendU16(b, 0x1234)
	b = wire.AppendU32(b, 0xdeadbeef)
	b = wire.AppendU64(b, 0x0102030405060708)
	b = wire.AppendI32(b, -2)
	b = wire.AppendI64(b, math.MinInt64)
	b = wire.AppendString(b, "héllo")
	b = wire.AppendBytes(b, []byte{9, 8, 7})
	want := []byte{0xab, 0x12, 0x34, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8,
		0xff, 0xff, 0xff, 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 6, 'h', 0xc3, 0xa9, 'l', 'l', 'o', 0, 0, 0, 3, 9, 8, 7}
	if !bytes.Equal(b, want) {
		t.Fatalf("encoded % x\nwant    % x", b, want)
	}
	r := wire.NewReader(b)
	if v := r.U8(); v != 0xab {
		t.Errorf("U8 = %x", v)
	}
	if v := r.U16(); v != 0x1234 {
		t.Errorf("U16 = %x", v)
	}
	if v := r.U32(); v != 0xdeadbeef {
		t.Errorf("U32 = %x", v)
	}
	if v := r.U64(); v != 0x0102030405060708 {
		t.Errorf("U64 = %x", v)
	}
	if v := r.I32(); v != -2 {
		t.Errorf("I32 = %d", v)
	}
	if v := r.I64(); v != math.MinInt64 {
		t.Errorf("I64 = %d", v)
	}
	if v := r.String(6, "s"); v != "héllo" {
		t.Errorf("String = %q", v)
	}
	if v := r.Bytes(3, "b"); !bytes.Equal(v, []byte{9, 8, 7}) {
		t.Errorf("Bytes = % x", v)
	}
	if err := r.Done("all"); err != nil {
		t.Fatal(err)
	}
}

func TestReaderErrors(t *testing.T) {
	str := wire.AppendString(nil, "abcdef")
	byt := wire.AppendBytes(nil, []byte("abcdef"))
	tests := []struct {
		name string
		in   []byte
		read func(r *wire.Reader)
	}{
		{"u8 empty", nil, func(r *wire.Reader) { r.U8() }},
		{"u16 short", []byte{1}, func(r *wire.Reader) { r.U16() }},
		{"u32 short", []byte{1, 2, 3}, func(r *wire.Reader) { r.U32() }},
		{"u64 short", []byte{1, 2, 3, 4, 5, 6, 7}, func(r *wire.Reader) { r.U64() }},
		{"string over limit", str, func(r *wire.Reader) { r.String(5, "s") }},
		{"string truncated", str[:7], func(r *wire.Reader) { r.String(10, "s") }},
		{"bytes over limit", byt, func(r *wire.Reader) { r.Bytes(5, "b") }},
		{"bytes truncated", byt[:9], func(r *wire.Reader) { r.Bytes(10, "b") }},
		{"bytes 4 GiB", []byte{0xff, 0xff, 0xff, 0xff}, func(r *wire.Reader) { r.Bytes(math.MaxInt32, "b") }},
		{"raw negative", []byte{1}, func(r *wire.Reader) { r.Raw(-1, "raw") }},
		{"trailing", []byte{1, 2}, func(r *wire.Reader) { r.U8(); _ = r.Done("x") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := wire.NewReader(tt.in)
			tt.read(&r)
			first := r.Err()
			if !errors.Is(first, wire.ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", first)
			}
			// Sticky: later reads return zero values and keep the first error.
			if r.U8() != 0 || r.U64() != 0 || r.Rest() != nil || r.Uvarint("v") != 0 || r.String(10, "s") != "" {
				t.Error("a read after an error returned data")
			}
			r.Fail(errors.New("second"))
			if r.Err() != first || r.Done("x") != first {
				t.Errorf("error changed from %v to %v", first, r.Err())
			}
		})
	}
}

func TestAppendStringTooLongPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("AppendString of 65536 bytes did not panic")
		}
	}()
	wire.AppendString(nil, strings.Repeat("x", 65536))
}
