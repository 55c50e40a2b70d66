package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/internal/crc32c"
)

// Frame layout (big-endian). NEVER CHANGE without a new handshake version: brokers of two
// releases exchange these during a rolling upgrade.
//
//	0        4        8
//	+--------+--------+----------------------------------------------+
//	| length | crc32c | envelopes ...                                |
//	+--------+--------+----------------------------------------------+
//
// length counts the bytes after the length field (crc + envelopes); the CRC-32C (Castagnoli)
// covers the envelopes. Each envelope is
//
//	uvarint group   the Raft group (one per partition; group 0 is the metadata group)
//	uvarint size    bytes of the message that follows
//	bytes   msg     a raftpb.Message in its protobuf encoding
//
// A frame holds at least one envelope.
const (
	frameHeaderSize = 8
	// MaxFrame bounds a frame a peer may send: raft's MaxSizePerMsg bounds one append
	// (Config.MaxSizePerMsg in the cluster package), and a frame batches a few of them.
	MaxFrame = 64 << 20
)

// ErrBadFrame wraps every decoding failure: the connection is closed and redialled, and
// raft resends what it needs.
var ErrBadFrame = errors.New("bad cluster frame")

// checksum is the frame CRC-32C, internal/crc32c's: the same checksum as hash/crc32 with the
// Castagnoli table, folded with VPCLMULQDQ where the CPU has it (a frame carries whole batches).
func checksum(b []byte) uint32 { return crc32c.Checksum(b) }

// Envelope is one Raft message for one group.
type Envelope struct {
	Group uint64
	Msg   raftpb.Message
	// Needs are features (Feature* bits) the peer's connection must have announced when the
	// message is written, else the message is dropped as undeliverable (the sender checked
	// PeerFeatures when it made the message, and the connection changed since). Not sent.
	Needs uint64
}

// envelopeSize is the encoded size of e.
func envelopeSize(e *Envelope) int {
	n := e.Msg.Size()
	return uvarintLen(e.Group) + uvarintLen(uint64(n)) + n
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// appendFrame appends one frame holding envs to dst: the reference encoding, which vecFrame
// (what a peer writes) builds byte for byte without copying large entry data, and the tests'
// and the fuzz targets' frames. It allocates only when dst is too small,
// and does not clear the bytes it then writes (a peer's buffer is reused, and clearing each
// message's room before marshalling into it was 3-6 % of a leader's CPU): the marshaller
// writes every byte of the size it is given.
func appendFrame(dst []byte, envs []Envelope) ([]byte, error) {
	start := len(dst)
	total := frameHeaderSize
	for i := range envs {
		total += envelopeSize(&envs[i])
	}
	dst = slices.Grow(dst, total)
	dst = dst[:start+frameHeaderSize] // written below, once the body is known
	for i := range envs {
		e := &envs[i]
		size := e.Msg.Size()
		dst = binary.AppendUvarint(dst, e.Group)
		dst = binary.AppendUvarint(dst, uint64(size))
		at := len(dst)
		if at+size > cap(dst) {
			return dst[:start], fmt.Errorf("encode raft message: %d bytes, more than its size said", size)
		}
		dst = dst[:at+size]
		if _, err := e.Msg.MarshalToSizedBuffer(dst[at : at+size]); err != nil {
			return dst[:start], fmt.Errorf("encode raft message: %w", err)
		}
	}
	body := dst[start+frameHeaderSize:]
	if len(body)+4 > MaxFrame {
		return dst[:start], fmt.Errorf("frame of %d bytes is over the %d-byte limit", len(body)+4, MaxFrame)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(len(body)+4))
	binary.BigEndian.PutUint32(dst[start+4:], checksum(body))
	return dst, nil
}

// frameSize reads the total size of the frame that starts with hdr (at least 8 bytes) and
// checks it against the limit.
func frameSize(hdr []byte) (int, error) {
	n := binary.BigEndian.Uint32(hdr)
	if n < 4+2 || n > MaxFrame {
		return 0, fmt.Errorf("%w: length %d outside 6..%d", ErrBadFrame, n, MaxFrame)
	}
	return int(n) + 4, nil
}

// decodeFrame decodes a whole frame (header included) and calls fn for each envelope, with a
// slab of its own; see decodeFrameInto.
func decodeFrame(frame []byte, fn func(Envelope)) error {
	var slab entrySlab
	_, err := decodeFrameInto(frame, &slab, fn)
	return err
}

// decodeFrameInto decodes a whole frame (header included) and calls fn for each envelope.
// Entry data and contexts alias frame (decodeMessage): aliased reports whether any does, and
// then frame must not be reused while the messages live. Entries slices come from slab.
func decodeFrameInto(frame []byte, slab *entrySlab, fn func(Envelope)) (aliased bool, err error) {
	if len(frame) < frameHeaderSize {
		return false, fmt.Errorf("%w: %d bytes, shorter than a header", ErrBadFrame, len(frame))
	}
	size, err := frameSize(frame)
	if err != nil {
		return false, err
	}
	if size != len(frame) {
		return false, fmt.Errorf("%w: length field says %d bytes, frame has %d", ErrBadFrame, size, len(frame))
	}
	body := frame[frameHeaderSize:]
	if got, want := checksum(body), binary.BigEndian.Uint32(frame[4:]); got != want {
		return false, fmt.Errorf("%w: crc 0x%08x, want 0x%08x", ErrBadFrame, got, want)
	}
	for i := 0; len(body) > 0; i++ {
		group, n := binary.Uvarint(body)
		if n <= 0 {
			return aliased, fmt.Errorf("%w: envelope %d: bad group varint", ErrBadFrame, i)
		}
		body = body[n:]
		msgLen, n := binary.Uvarint(body)
		if n <= 0 || msgLen > uint64(len(body)-n) {
			return aliased, fmt.Errorf("%w: envelope %d: message length runs past the frame", ErrBadFrame, i)
		}
		body = body[n:]
		var e Envelope
		e.Group = group
		a, err := decodeMessage(body[:msgLen:msgLen], &e.Msg, slab)
		aliased = aliased || a
		if err != nil {
			return aliased, fmt.Errorf("%w: envelope %d: %v", ErrBadFrame, i, err)
		}
		body = body[msgLen:]
		fn(e)
	}
	return aliased, nil
}
