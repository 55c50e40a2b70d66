package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/lightq/lightq/wire"
)

// header returns a 16-byte frame header whose fields can then be corrupted.
func header(length uint32) []byte {
	h := make([]byte, wire.HeaderSize)
	binary.BigEndian.PutUint32(h, length)
	binary.BigEndian.PutUint16(h[4:], wire.Magic)
	h[6] = wire.Version
	h[7] = byte(wire.OpPing)
	return h
}

func with(b []byte, f func(b []byte)) []byte {
	b = bytes.Clone(b)
	f(b)
	return b
}

// tlsClientHello is the start of a real TLS 1.2/1.3 ClientHello record.
var tlsClientHello = []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03, 0x5a, 0x1b, 0x9c, 0x00, 0x11, 0x22}

func TestFrameSize(t *testing.T) {
	const limit = 4096
	tests := []struct {
		name     string
		in       []byte
		want     int
		err      error
		contains string // in the error text
	}{
		{name: "empty", in: nil, want: 0},
		{name: "5 bytes", in: header(12)[:5], want: 0},
		{name: "6 bytes, good magic", in: header(12)[:6], want: 0},
		{name: "15 bytes", in: header(12)[:15], want: 0},
		{name: "empty body", in: header(12), want: 16},
		{name: "body not yet here", in: header(112), want: 116},
		{name: "exactly the limit", in: header(limit - 4), want: limit},
		{name: "one over the limit", in: header(limit - 3), err: wire.ErrFrameTooLarge},
		{name: "4 GiB", in: header(0xFFFFFFFF), err: wire.ErrFrameTooLarge},
		{name: "length 0", in: header(0), err: wire.ErrMalformed, contains: "shorter than the header"},
		{name: "length 11", in: header(11), err: wire.ErrMalformed},
		{name: "HTTP GET", in: []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), err: wire.ErrNotProtocol, contains: "HTTP"},
		{name: "HTTP GET, 6 bytes", in: []byte("GET / "), err: wire.ErrNotProtocol, contains: "HTTP"},
		{name: "HTTP GET, 5 bytes", in: []byte("GET /"), want: 0},
		{name: "HTTP POST", in: []byte("POST /api HTTP/1.1\r\n"), err: wire.ErrNotProtocol, contains: "HTTP"},
		{name: "HTTP/2 preface", in: []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), err: wire.ErrNotProtocol, contains: "HTTP"},
		{name: "TLS ClientHello", in: tlsClientHello, err: wire.ErrNotProtocol, contains: "TLS"},
		{name: "TLS ClientHello, 6 bytes", in: tlsClientHello[:6], err: wire.ErrNotProtocol, contains: "TLS"},
		{name: "Kafka request", in: []byte{0, 0, 0, 0x2a, 0, 0x12, 0, 3, 0, 0, 0, 1, 0, 0, 0, 0}, err: wire.ErrNotProtocol, contains: "Kafka"},
		{name: "bad magic", in: with(header(12), func(b []byte) { b[4] = 'X' }), err: wire.ErrNotProtocol, contains: "bad magic"},
		{name: "bad magic beats bad length", in: with(header(0xFFFFFFFF), func(b []byte) { b[5] = 0 }), err: wire.ErrNotProtocol},
		{name: "version 0", in: with(header(12), func(b []byte) { b[6] = 0 }), err: wire.ErrVersion},
		{name: "version 2", in: with(header(12), func(b []byte) { b[6] = 2 }), err: wire.ErrVersion},
		{name: "FlagResponse", in: with(header(12), func(b []byte) { b[9] = 1 }), want: 16},
		{name: "flag bit 1", in: with(header(12), func(b []byte) { b[9] = 2 }), err: wire.ErrMalformed, contains: "flags"},
		{name: "flag bit 15", in: with(header(12), func(b []byte) { b[8] = 0x80 }), err: wire.ErrMalformed, contains: "flags"},
		{name: "reserved high byte", in: with(header(12), func(b []byte) { b[10] = 1 }), err: wire.ErrMalformed, contains: "reserved"},
		{name: "reserved low byte", in: with(header(12), func(b []byte) { b[11] = 1 }), err: wire.ErrMalformed, contains: "reserved"},
		{name: "unknown op is not a framing error", in: with(header(12), func(b []byte) { b[7] = 0xee }), want: 16},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := wire.FrameSize(tt.in, limit)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("FrameSize = %d, %v; want error %v", n, err, tt.err)
				}
				if !strings.Contains(err.Error(), tt.contains) {
					t.Fatalf("error %q does not mention %q", err, tt.contains)
				}
				return
			}
			if err != nil || n != tt.want {
				t.Fatalf("FrameSize = %d, %v; want %d, nil", n, err, tt.want)
			}
		})
	}
}

// TestFrameSizeHugeLengthDoesNotAllocate: a header claiming 4 GiB is refused from the header
// alone; the error costs a few small allocations, never the announced size.
func TestFrameSizeHugeLengthDoesNotAllocate(t *testing.T) {
	h := header(0xFFFFFFFF)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const runs = 100
	for i := 0; i < runs; i++ {
		if _, err := wire.FrameSize(h, wire.DefaultLimits().MaxFrame); !errors.Is(err, wire.ErrFrameTooLarge) {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 1024 {
		t.Fatalf("FrameSize allocated %d bytes per call for a 4 GiB header", per)
	}
	// The success path allocates nothing.
	ok := header(12)
	if a := testing.AllocsPerRun(100, func() { _, _ = wire.FrameSize(ok, 1<<20) }); a != 0 {
		t.Fatalf("FrameSize allocates %v times on a valid header", a)
	}
}

func TestParseFrame(t *testing.T) {
	good := wire.AppendFrame(nil, wire.OpMetadata, wire.FlagResponse, 0xDEADBEEF, []byte{1, 2, 3})
	tests := []struct {
		name string
		in   []byte
		ok   bool
	}{
		{"whole frame", good, true},
		{"short", good[:15], false},
		{"truncated body", good[:len(good)-1], false},
		{"extra byte", append(bytes.Clone(good), 0), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, body, err := wire.ParseFrame(tt.in)
			if !tt.ok {
				if !errors.Is(err, wire.ErrMalformed) {
					t.Fatalf("ParseFrame err = %v, want ErrMalformed", err)
				}
				return
			}
			want := wire.Header{Length: 15, Version: 1, Op: wire.OpMetadata, Flags: wire.FlagResponse, Corr: 0xDEADBEEF}
			if err != nil || h != want || !bytes.Equal(body, []byte{1, 2, 3}) || h.BodyLen() != 3 {
				t.Fatalf("ParseFrame = %+v, % x, %v", h, body, err)
			}
		})
	}
}

// TestHeaderWriters checks that the three ways of writing a header agree.
func TestHeaderWriters(t *testing.T) {
	body := []byte("some body bytes")
	a := wire.AppendFrame([]byte("prefix"), wire.OpProduce, 0, 77, body)[len("prefix"):]

	b := wire.AppendHeader([]byte("xx"), wire.OpProduce, 0, 77)
	b = append(b, body...)
	b = wire.FinishFrame(b, 2)[2:]

	c := make([]byte, wire.HeaderSize)
	wire.PutHeader(c, wire.OpProduce, 0, 77, len(body))
	c = append(c, body...)

	if !bytes.Equal(a, b) || !bytes.Equal(a, c) {
		t.Fatalf("AppendFrame % x\nAppendHeader+FinishFrame % x\nPutHeader % x", a, b, c)
	}
	if n, err := wire.FrameSize(a, 1<<20); err != nil || n != len(a) {
		t.Fatalf("FrameSize = %d, %v", n, err)
	}
}

// TestFrameStreamSplits feeds every example frame of PROTOCOL.md, back to back, to the stream
// decoder cut at every position and in small chunks, and checks the frames come out the same.
func TestFrameStreamSplits(t *testing.T) {
	var stream []byte
	for _, ex := range protocolExamples() {
		stream = append(stream, ex.frame...)
	}
	limit := wire.DefaultLimits().MaxFrame
	want := decodeStream(limit, stream)
	if want.err != nil || len(want.frames) != len(protocolExamples()) || want.consumed != len(stream) {
		t.Fatalf("whole stream: %v", want)
	}
	for cut := 0; cut <= len(stream); cut++ {
		if got := decodeStream(limit, stream[:cut], stream[cut:]); !got.equal(want) {
			t.Fatalf("cut at %d: %v; whole: %v", cut, got, want)
		}
	}
	for chunk := 1; chunk <= 7; chunk++ {
		if got := decodeStream(limit, chunks(stream, chunk)...); !got.equal(want) {
			t.Fatalf("%d-byte chunks: %v; whole: %v", chunk, got, want)
		}
	}
}

func chunks(b []byte, n int) [][]byte {
	var out [][]byte
	for len(b) > n {
		out = append(out, b[:n])
		b = b[n:]
	}
	return append(out, b)
}

// streamResult is what a stream decoder made of a byte stream: the frames in order, the bytes
// they took, and the first error (nil when the stream ended between or inside frames).
type streamResult struct {
	frames   []streamFrame
	consumed int
	err      error
	over     bool // a frame over the limit was accepted: never allowed
}

type streamFrame struct {
	h    wire.Header
	body []byte
}

func (r streamResult) equal(o streamResult) bool {
	if len(r.frames) != len(o.frames) || r.consumed != o.consumed || r.over != o.over {
		return false
	}
	for i := range r.frames {
		if r.frames[i].h != o.frames[i].h || !bytes.Equal(r.frames[i].body, o.frames[i].body) {
			return false
		}
	}
	// The error text may describe a peer from fewer bytes; the class must match.
	return (r.err == nil) == (o.err == nil) && wire.CodeOf(r.err) == wire.CodeOf(o.err)
}

func (r streamResult) String() string {
	return fmt.Sprintf("%d frames in %d bytes, err %v", len(r.frames), r.consumed, r.err)
}

// decodeStream is a minimal connection reader: it accumulates input in a scratch buffer, sizes
// the next frame with FrameSize as soon as it can, and parses frames once they are whole. It
// copies every body it keeps, as a reader over a shared buffer must.
func decodeStream(limit int, pieces ...[]byte) streamResult {
	var res streamResult
	var buf []byte
	for _, p := range pieces {
		buf = append(buf, p...)
		for {
			n, err := wire.FrameSize(buf, limit)
			if err != nil {
				res.err = err
				return res
			}
			if n == 0 || len(buf) < n {
				break
			}
			if n > limit || n < wire.HeaderSize {
				res.over = true
			}
			h, body, err := wire.ParseFrame(buf[:n])
			if err != nil {
				res.err = err
				return res
			}
			res.frames = append(res.frames, streamFrame{h: h, body: bytes.Clone(body)})
			buf = buf[n:]
			res.consumed += n
		}
	}
	return res
}

func TestOpNames(t *testing.T) {
	known := 0
	for i := 0; i < 256; i++ {
		op := wire.Op(i)
		if op.Known() {
			known++
			if strings.HasPrefix(op.String(), "OP_") {
				t.Errorf("op 0x%02x is known but has no name", i)
			}
		} else if op.String() != fmt.Sprintf("OP_0x%02x", i) {
			t.Errorf("unknown op 0x%02x prints as %q", i, op.String())
		}
	}
	if known != 37 {
		t.Errorf("%d known ops, want 37", known)
	}
}

func TestCodes(t *testing.T) {
	codes := wire.Codes()
	if len(codes) != 42 {
		t.Fatalf("%d codes, want 42", len(codes))
	}
	for i, c := range codes {
		// Codes are allocated in ranges, so there may be gaps; the list is in order.
		if c == 0 || i > 0 && c <= codes[i-1] || strings.HasPrefix(c.String(), "CODE_") {
			t.Fatalf("Codes()[%d] = %d (%v) after %v: want named codes from 1, in increasing order", i, c, c, codes[max(i-1, 0)])
		}
	}
	if len(codes) < 31 {
		t.Fatalf("%d codes, want at least 31", len(codes))
	}
	fatal := map[wire.Code]bool{
		wire.CodeMalformedFrame: true, wire.CodeUnsupportedVersion: true, wire.CodeFrameTooLarge: true,
		wire.CodeAuthTimeout: true, wire.CodeTooManyAttempts: true, wire.CodeShuttingDown: true,
		wire.CodeNotProtocol: true, wire.CodeTooMuchInput: true, wire.CodeTimeout: true,
		wire.CodeTooManyConnections: true,
	}
	for _, c := range codes {
		if c.Fatal() != fatal[c] {
			t.Errorf("%v.Fatal() = %v", c, c.Fatal())
		}
	}
	if s := wire.Code(999).String(); s != "CODE_999" {
		t.Errorf("unknown code prints as %q", s)
	}
	if wire.Code(999).Fatal() {
		t.Error("an unknown code must not be fatal")
	}
}

func TestCodeOf(t *testing.T) {
	tests := []struct {
		err  error
		want wire.Code
	}{
		{fmt.Errorf("x: %w", wire.ErrNotProtocol), wire.CodeNotProtocol},
		{fmt.Errorf("x: %w", wire.ErrVersion), wire.CodeUnsupportedVersion},
		{fmt.Errorf("x: %w", wire.ErrFrameTooLarge), wire.CodeFrameTooLarge},
		{fmt.Errorf("x: %w", wire.ErrCorruptBatch), wire.CodeCorruptBatch},
		{fmt.Errorf("x: %w", wire.ErrBatchTooLarge), wire.CodeMessageTooLarge},
		{fmt.Errorf("x: %w", wire.ErrMessageTooLarge), wire.CodeMessageTooLarge},
		{fmt.Errorf("x: %w", wire.ErrMalformed), wire.CodeMalformedFrame},
		{fmt.Errorf("x: %w", &wire.Error{Code: wire.CodeTopicExists}), wire.CodeTopicExists},
		{errors.New("other"), wire.CodeInternal},
	}
	for _, tt := range tests {
		if got := wire.CodeOf(tt.err); got != tt.want {
			t.Errorf("CodeOf(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestErrorType(t *testing.T) {
	err := fmt.Errorf("produce: %w", &wire.Error{Code: wire.CodeUnknownTopic, Message: "no topic x"})
	if !errors.Is(err, &wire.Error{Code: wire.CodeUnknownTopic}) {
		t.Error("errors.Is does not match on the code")
	}
	if errors.Is(err, &wire.Error{Code: wire.CodeTopicExists}) {
		t.Error("errors.Is matches another code")
	}
	if got := err.Error(); got != "produce: lightq: UNKNOWN_TOPIC: no topic x" {
		t.Errorf("Error() = %q", got)
	}
	if got := (&wire.Error{Code: wire.CodeInternal}).Error(); got != "lightq: INTERNAL" {
		t.Errorf("Error() = %q", got)
	}
}

func TestPeekHeader(t *testing.T) {
	f := wire.AppendFrame(nil, wire.OpProduce, wire.FlagResponse, 0xdeadbeef, []byte("body"))
	h, ok := wire.PeekHeader(f[:wire.HeaderSize])
	if !ok || h.Op != wire.OpProduce || h.Flags != wire.FlagResponse || h.Corr != 0xdeadbeef || h.Size() != len(f) || h.BodyLen() != 4 {
		t.Fatalf("PeekHeader = %+v, %v", h, ok)
	}
	if _, ok := wire.PeekHeader(f[:wire.HeaderSize-1]); ok {
		t.Fatal("PeekHeader accepted a short header")
	}
}
