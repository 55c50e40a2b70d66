package transport

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/lightq/lightq/log"
)

// Segment streams: a follower catching up from whole segments (cluster/raftlog, catchup.go)
// reads its leader's segment files over the cluster port, on a connection of its own. The
// dialer's hello carries segMagic instead of handshakeMagic (MACs with their own role
// strings); after the handshake, the dialer sends one request and the listener answers with
// frames until the end or an error, then closes. Big-endian. NEVER CHANGE without a new
// magic: brokers of two releases exchange these.
//
//	request (dialer -> listener), 32 bytes:
//	0 crc32c of 4..32 | 4 flags u8 (bit 0: from the start of the segment holding from, or the
//	log start if from is below it) | 5 zero [3] | 8 group u64 | 16 from i64 | 24 to i64
//
//	frame (listener -> dialer): 28-byte header, then length bytes:
//	0 kind u8 | 1 zero [3] | 4 length u32 | 8 a i64 | 16 b i64 | 24 crc32c of 0..24
//	  kind 1 data:  a segment base, b byte position in that segment's file; length bytes
//	                of whole or partial batches (at most MaxSegmentChunk) follow
//	  kind 2 end:   a the offset reached (to); length 0
//	  kind 3 error: a the code (SegGone, SegNoGroup, SegBadRequest), b the source's log
//	                start; length bytes (at most 1 KiB) of text
//
// The header CRC protects the framing; the data is protected by the batches' own CRCs,
// which the receiver checks, so that the sender can hand the file range to the kernel
// (sendfile) without reading it. Flow control is TCP's: the sender writes a frame only as
// fast as the receiver reads, and each side holds at most one chunk in memory. A stream
// cut short is resumed by a new request from the offset after the last whole batch
// received (flags 0), or restarted.
const (
	segMagic        = "LQSG"
	segRequestSize  = 32
	segHeaderSize   = 28
	MaxSegmentChunk = 1 << 20
	maxSegErrorText = 1 << 10

	segKindData  = 1
	segKindEnd   = 2
	segKindError = 3

	segFlagRoundDown = 1

	roleSegListener = "lightq segments listener"
	roleSegDialer   = "lightq segments dialer"
)

// Error codes of a segment stream.
const (
	SegGone       = 1 // the offset asked for is below the source's log start (retention)
	SegNoGroup    = 2 // the source holds no replica of the group
	SegBadRequest = 3 // to below from, or past the source's log
)

// SegmentError is a source's refusal of a segment request.
type SegmentError struct {
	Code  int
	Start int64 // the source's log start
	Text  string
}

func (e *SegmentError) Error() string {
	return fmt.Sprintf("segment stream refused (code %d, source log starts at %d): %s", e.Code, e.Start, e.Text)
}

// SegmentSource is what a group's replica serves segments from: its segment log
// (*log.Log is one).
type SegmentSource interface {
	Read(offset, limit int64, maxBytes int) (*log.Chunk, error)
	StartOffset() int64
}

// SentCounter, when a SegmentSource implements it, is told of every data frame a segment
// stream sent from it: n bytes, first when the frame is the stream's first of its segment
// file (so a stream counts each segment it carried bytes of once). Called on the stream's
// goroutine; it must not block.
type SentCounter interface {
	SegmentSent(n int64, first bool)
}

// segRequest is a decoded request.
type segRequest struct {
	group     uint64
	from, to  int64
	roundDown bool
}

func appendSegRequest(dst []byte, r segRequest) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
	if r.roundDown {
		dst[start+4] = segFlagRoundDown
	}
	dst = binary.BigEndian.AppendUint64(dst, r.group)
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.from))
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.to))
	binary.BigEndian.PutUint32(dst[start:], checksum(dst[start+4:]))
	return dst
}

func decodeSegRequest(b []byte) (segRequest, error) {
	var r segRequest
	switch {
	case len(b) != segRequestSize:
		return r, fmt.Errorf("%w: segment request of %d bytes", ErrBadFrame, len(b))
	case checksum(b[4:]) != binary.BigEndian.Uint32(b):
		return r, fmt.Errorf("%w: segment request crc", ErrBadFrame)
	case b[4]&^segFlagRoundDown != 0 || b[5]|b[6]|b[7] != 0:
		return r, fmt.Errorf("%w: segment request flags 0x%x", ErrBadFrame, b[4])
	}
	r.roundDown = b[4]&segFlagRoundDown != 0
	r.group = binary.BigEndian.Uint64(b[8:])
	r.from = int64(binary.BigEndian.Uint64(b[16:]))
	r.to = int64(binary.BigEndian.Uint64(b[24:]))
	if r.from < 0 || r.to < r.from {
		return r, fmt.Errorf("%w: segment request [%d, %d)", ErrBadFrame, r.from, r.to)
	}
	return r, nil
}

// segHeader is a decoded frame header.
type segHeader struct {
	kind   uint8
	length uint32
	a, b   int64
}

func putSegHeader(dst []byte, h segHeader) {
	dst[0], dst[1], dst[2], dst[3] = h.kind, 0, 0, 0
	binary.BigEndian.PutUint32(dst[4:], h.length)
	binary.BigEndian.PutUint64(dst[8:], uint64(h.a))
	binary.BigEndian.PutUint64(dst[16:], uint64(h.b))
	binary.BigEndian.PutUint32(dst[24:], checksum(dst[:24]))
}

// decodeSegHeader decodes and checks a frame header (its limits included).
func decodeSegHeader(b []byte) (segHeader, error) {
	var h segHeader
	if len(b) != segHeaderSize {
		return h, fmt.Errorf("%w: segment frame header of %d bytes", ErrBadFrame, len(b))
	}
	if checksum(b[:24]) != binary.BigEndian.Uint32(b[24:]) {
		return h, fmt.Errorf("%w: segment frame header crc", ErrBadFrame)
	}
	h = segHeader{kind: b[0], length: binary.BigEndian.Uint32(b[4:]), a: int64(binary.BigEndian.Uint64(b[8:])), b: int64(binary.BigEndian.Uint64(b[16:]))}
	switch {
	case b[1]|b[2]|b[3] != 0:
		return h, fmt.Errorf("%w: segment frame reserved bytes", ErrBadFrame)
	case h.kind == segKindData && (h.length == 0 || h.length > MaxSegmentChunk || h.a < 0 || h.b < 0):
		return h, fmt.Errorf("%w: data frame of %d bytes at %d of segment %d", ErrBadFrame, h.length, h.b, h.a)
	case h.kind == segKindEnd && (h.length != 0 || h.a < 0):
		return h, fmt.Errorf("%w: end frame", ErrBadFrame)
	case h.kind == segKindError && h.length > maxSegErrorText:
		return h, fmt.Errorf("%w: error frame of %d bytes", ErrBadFrame, h.length)
	case h.kind < segKindData || h.kind > segKindError:
		return h, fmt.Errorf("%w: segment frame kind %d", ErrBadFrame, h.kind)
	}
	return h, nil
}

// serveSegments answers one segment request on c (authenticated as node from).
func (t *Transport) serveSegments(c net.Conn, from uint64) {
	var rb [segRequestSize]byte
	_ = c.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
	if _, err := io.ReadFull(c, rb[:]); err != nil {
		t.cfg.Logf("segment request from node %d: %v", from, err)
		return
	}
	_ = c.SetDeadline(time.Time{})
	req, err := decodeSegRequest(rb[:])
	if err != nil {
		t.cfg.Logf("segment request from node %d: %v", from, err)
		return
	}
	var hdr [segHeaderSize]byte
	refuse := func(code int, start int64, text string) {
		text = text[:min(len(text), maxSegErrorText)]
		putSegHeader(hdr[:], segHeader{kind: segKindError, length: uint32(len(text)), a: int64(code), b: start})
		_ = c.SetWriteDeadline(time.Now().Add(t.cfg.WriteTimeout))
		_, _ = c.Write(append(hdr[:], text...)) // the peer learns why, or retries
	}
	var src SegmentSource
	if t.cfg.Segments != nil {
		src = t.cfg.Segments(req.group)
	}
	if src == nil {
		refuse(SegNoGroup, 0, fmt.Sprintf("no replica of group %d here", req.group))
		return
	}
	off := req.from
	if req.roundDown {
		off = max(off, src.StartOffset())
		if ch, err := src.Read(off, req.to, 1); err == nil && ch != nil {
			off = max(ch.SegmentBase(), src.StartOffset())
			ch.Release()
		}
	}
	// The armed fault (tests) is taken by the first stream that has a chunk to send, not by
	// one refused before any: the test means the stream that carries the segments.
	var (
		cut   int64
		stall <-chan struct{}
		armed bool
	)
	counter, _ := src.(SentCounter)
	lastBase := int64(-1)
	var sent int64
	var buf []byte
	for off < req.to {
		ch, err := src.Read(off, req.to, MaxSegmentChunk)
		if err != nil || ch == nil {
			var re *log.RangeError
			switch {
			case errors.As(err, &re) && off < re.Start:
				refuse(SegGone, re.Start, err.Error())
			case err != nil:
				refuse(SegBadRequest, src.StartOffset(), err.Error())
			default:
				refuse(SegBadRequest, src.StartOffset(), fmt.Sprintf("offset %d is past the log (wanted up to %d)", off, req.to))
			}
			return
		}
		// One frame per MaxSegmentChunk of the range (a batch larger than that spans frames).
		for pos, end := ch.Pos, ch.Pos+ch.Len; pos < end; {
			n := min(end-pos, MaxSegmentChunk)
			putSegHeader(hdr[:], segHeader{kind: segKindData, length: uint32(n), a: ch.SegmentBase(), b: pos})
			_ = c.SetWriteDeadline(time.Now().Add(t.cfg.WriteTimeout))
			if !armed {
				cut, stall = t.cfg.Faults.segmentCut()
				armed = true
			}
			if cut > 0 && sent+n > cut {
				// Fault injection: the header, then the connection drops (or, for a stall,
				// stays open and silent until released or the transport closes).
				_, _ = c.Write(hdr[:])
				ch.Release()
				if stall != nil {
					select {
					case <-stall:
					case <-t.done:
					}
				}
				return
			}
			if _, err := c.Write(hdr[:]); err != nil {
				ch.Release()
				return
			}
			if buf, err = sendRange(c, ch, pos, n, buf); err != nil {
				ch.Release()
				t.cfg.Logf("segment stream to node %d: %v", from, err)
				return
			}
			if counter != nil {
				counter.SegmentSent(n, ch.SegmentBase() != lastBase)
			}
			lastBase = ch.SegmentBase()
			sent += n
			pos += n
		}
		off = ch.NextOffset
		ch.Release()
	}
	putSegHeader(hdr[:], segHeader{kind: segKindEnd, a: off})
	_ = c.SetWriteDeadline(time.Now().Add(t.cfg.WriteTimeout))
	_, _ = c.Write(hdr[:])
}

// sendRange writes the n bytes at position at of ch's file to c: sendfile when both allow
// it, else through buf (at most 64 KiB at a time), which it returns for reuse.
func sendRange(c net.Conn, ch *log.Chunk, at, n int64, buf []byte) ([]byte, error) {
	if ok, err := sendfile(c, ch.File, at, n); ok {
		return buf, err
	}
	if buf == nil {
		buf = make([]byte, 64<<10)
	}
	for pos, end := at, at+n; pos < end; {
		k := int(min(int64(len(buf)), end-pos))
		if _, err := ch.File.ReadAt(buf[:k], pos); err != nil {
			return buf, fmt.Errorf("read %s at %d: %w", ch.Path(), pos, err)
		}
		if _, err := c.Write(buf[:k]); err != nil {
			return buf, err
		}
		pos += int64(k)
	}
	return buf, nil
}

// SegmentSink receives a stream's data: data is position pos of segment base's file, valid
// only during the call.
type SegmentSink func(base, pos int64, data []byte) error

// FetchSegments asks node for group's segment bytes from offset from up to offset to (from
// the start of the segment holding from when roundDown) and hands them to sink in order,
// over a connection of its own, authenticated as the message streams are. It returns the
// offset reached, which is to on success; on a cut connection, what sink saw stands and a
// new call may go on from the offset after the last whole batch. A refusal is a
// *SegmentError. ctx cancels it. progress, if not nil, is called with the count of bytes
// each read from the connection brought (at most 64 KiB each, on the calling goroutine),
// so that a caller can tell a slow stream from a stalled one within a chunk. Memory: one
// chunk (MaxSegmentChunk). Safe for concurrent use.
func (t *Transport) FetchSegments(ctx context.Context, node, group uint64, from, to int64, roundDown bool, sink SegmentSink, progress func(n int)) (int64, error) {
	t.mu.Lock()
	p := t.peers[node]
	t.mu.Unlock()
	if p == nil {
		return 0, fmt.Errorf("segment stream: node %d is not a known peer", node)
	}
	d := net.Dialer{Timeout: t.cfg.DialTimeout}
	c, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return 0, fmt.Errorf("segment stream: dial node %d: %w", node, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.Close() }) // unblocks the reads
	defer stop()
	_ = c.SetDeadline(time.Now().Add(t.cfg.DialTimeout))
	if _, err := dialHandshakeKind(c, t.cfg.Secret, t.cfg.NodeID, node, segMagic); err != nil {
		return 0, fmt.Errorf("segment stream to node %d: %w", node, err)
	}
	if _, err := c.Write(appendSegRequest(nil, segRequest{group: group, from: from, to: to, roundDown: roundDown})); err != nil {
		return 0, fmt.Errorf("segment stream to node %d: send the request: %w", node, err)
	}
	var rd io.Reader = c
	if progress != nil {
		rd = progressReader{c, progress}
	}
	r := bufio.NewReaderSize(rd, 64<<10)
	var hb [segHeaderSize]byte
	var buf []byte
	for {
		_ = c.SetReadDeadline(time.Now().Add(t.cfg.HandshakeTimeout + t.cfg.WriteTimeout))
		if _, err := io.ReadFull(r, hb[:]); err != nil {
			return 0, t.ctxErr(ctx, fmt.Errorf("segment stream from node %d: %w", node, err))
		}
		h, err := decodeSegHeader(hb[:])
		if err != nil {
			return 0, err
		}
		if cap(buf) < int(h.length) {
			buf = make([]byte, h.length)
		}
		buf = buf[:h.length]
		if _, err := io.ReadFull(r, buf); err != nil {
			// A partial chunk is dropped: the sink saw whole chunks only.
			return 0, t.ctxErr(ctx, fmt.Errorf("segment stream from node %d: cut in a chunk: %w", node, err))
		}
		switch h.kind {
		case segKindData:
			if err := sink(h.a, h.b, buf); err != nil {
				return 0, err
			}
		case segKindEnd:
			return h.a, nil
		case segKindError:
			return 0, &SegmentError{Code: int(h.a), Start: h.b, Text: string(buf)}
		}
	}
}

// progressReader reports each read's byte count (FetchSegments' progress).
type progressReader struct {
	r io.Reader
	f func(n int)
}

func (p progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.f(n)
	}
	return n, err
}

func (t *Transport) ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
