package transport

import (
	"encoding/binary"
	"fmt"
	"net"
	"slices"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/internal/crc32c"
)

// A leader's frames are mostly entry data, which appendFrame copies into the frame buffer
// (once per follower) only to hand it to write(2), which copies it again. vecFrame builds the
// same bytes as appendFrame, byte for byte, with the large entry data left where it is: the
// frame is the peer's buffer (headers, message fields, small data) cut where each large
// entry's data goes, written with one writev, and the CRC folded over the pieces in order.

// vecMinData is the entry data length from which vecFrame writes the data from its own slice
// rather than copying it: below it, another iovec costs more than the copy.
const vecMinData = 4 << 10

// vecFrame is one frame as pieces for writev.
//
// Concurrency: one per peer goroutine. Between build and reset it refers to the envelopes'
// entry data, which the caller must not change meanwhile (Transport.Send's rule).
type vecFrame struct {
	buf  []byte      // the frame's bytes but the large entry data
	cuts []vecCut    // where in buf each large entry's data goes, in order
	bufs net.Buffers // the pieces, for writev (consumed by WriteTo)
	vec  net.Buffers // bufs' backing array, kept across frames
	size int         // the whole frame's length
}

type vecCut struct {
	at   int // offset in buf the data follows
	data []byte
}

// build makes f the frame holding envs (appendFrame's bytes). Errors as appendFrame's.
func (f *vecFrame) build(envs []Envelope) error {
	f.reset()
	f.buf = append(f.buf[:0], 0, 0, 0, 0, 0, 0, 0, 0) // frameHeaderSize, written last
	large := 0
	for i := range envs {
		e := &envs[i]
		size := e.Msg.Size()
		f.buf = binary.AppendUvarint(f.buf, e.Group)
		f.buf = binary.AppendUvarint(f.buf, uint64(size))
		if e.Msg.Snapshot != nil || len(e.Msg.Responses) > 0 || !hasLargeData(&e.Msg) {
			at := len(f.buf)
			f.buf = slices.Grow(f.buf, size)[:at+size]
			if _, err := e.Msg.MarshalToSizedBuffer(f.buf[at:]); err != nil {
				f.reset()
				return fmt.Errorf("encode raft message: %w", err)
			}
			continue
		}
		before := len(f.buf) + large
		f.appendMessage(&e.Msg)
		for _, c := range f.cuts[len(f.cuts)-countLarge(&e.Msg):] {
			large += len(c.data)
		}
		if got := len(f.buf) + large - before; got != size {
			f.reset()
			return fmt.Errorf("encode raft message: %d bytes, its size said %d", got, size)
		}
	}
	body := len(f.buf) - frameHeaderSize + large
	if body+4 > MaxFrame {
		f.reset()
		return fmt.Errorf("frame of %d bytes is over the %d-byte limit", body+4, MaxFrame)
	}
	var crc uint32
	prev := frameHeaderSize
	for _, c := range f.cuts {
		crc = crc32c.Update(crc, f.buf[prev:c.at])
		crc = crc32c.Update(crc, c.data)
		prev = c.at
	}
	crc = crc32c.Update(crc, f.buf[prev:])
	binary.BigEndian.PutUint32(f.buf, uint32(body+4))
	binary.BigEndian.PutUint32(f.buf[4:], crc)
	// The pieces: buf up to the first cut, its data, buf up to the next cut, ...
	f.vec = f.vec[:0]
	prev = 0
	for _, c := range f.cuts {
		f.vec = append(f.vec, f.buf[prev:c.at], c.data)
		prev = c.at
	}
	f.vec = append(f.vec, f.buf[prev:])
	f.bufs = f.vec
	f.size = frameHeaderSize + body
	return nil
}

// reset drops the references to the last frame's entry data.
func (f *vecFrame) reset() {
	clear(f.cuts)
	f.cuts = f.cuts[:0]
	clear(f.vec[:cap(f.vec)])
	f.vec = f.vec[:0]
	f.bufs = nil
	f.size = 0
}

// hasLargeData reports whether m has an entry whose data vecFrame leaves in place.
func hasLargeData(m *raftpb.Message) bool { return countLarge(m) > 0 }

func countLarge(m *raftpb.Message) int {
	n := 0
	for i := range m.Entries {
		if len(m.Entries[i].Data) >= vecMinData {
			n++
		}
	}
	return n
}

// appendMessage appends m's encoding as raftpb's MarshalToSizedBuffer lays it out (every
// scalar field, zero or not, in field order; Data, Snapshot, Context and Responses only when
// set), the large entries' data as cuts. m has no Snapshot and no Responses.
func (f *vecFrame) appendMessage(m *raftpb.Message) {
	b := f.buf
	b = appendField(b, 0x08, uint64(m.Type))
	b = appendField(b, 0x10, m.To)
	b = appendField(b, 0x18, m.From)
	b = appendField(b, 0x20, m.Term)
	b = appendField(b, 0x28, m.LogTerm)
	b = appendField(b, 0x30, m.Index)
	for i := range m.Entries {
		e := &m.Entries[i]
		b = appendField(b, 0x3a, uint64(e.Size()))
		b = appendField(b, 0x08, uint64(e.Type))
		b = appendField(b, 0x10, e.Term)
		b = appendField(b, 0x18, e.Index)
		if e.Data != nil {
			b = appendField(b, 0x22, uint64(len(e.Data)))
			if len(e.Data) >= vecMinData {
				f.cuts = append(f.cuts, vecCut{at: len(b), data: e.Data})
			} else {
				b = append(b, e.Data...)
			}
		}
	}
	b = appendField(b, 0x40, m.Commit)
	reject := uint64(0)
	if m.Reject {
		reject = 1
	}
	b = appendField(b, 0x50, reject)
	b = appendField(b, 0x58, m.RejectHint)
	if m.Context != nil {
		b = appendField(b, 0x62, uint64(len(m.Context)))
		b = append(b, m.Context...)
	}
	b = appendField(b, 0x68, m.Vote)
	f.buf = b
}

// appendField appends a one-byte tag and a varint (a value, or the length of what follows).
func appendField(b []byte, tag byte, v uint64) []byte {
	return binary.AppendUvarint(append(b, tag), v)
}
