package wire

import (
	"encoding/binary"
	"fmt"
)

// Frame header layout (16 bytes, big-endian). NEVER CHANGE these constants: they are the wire
// format that every client in every language depends on. A new layout needs a new Version.
//
//	 0               4       6   7   8       10      12              16
//	+---------------+-------+---+---+-------+-------+---------------+-----------
//	| length u32    | magic |ver|op | flags | rsvd  | corr id u32   | body ...
//	+---------------+-------+---+---+-------+-------+---------------+-----------
//
// length counts every byte after the length field itself (12 + len(body)).
const (
	HeaderSize = 16
	Magic      = 0x4C51 // "LQ"
	Version    = 1

	// lengthAfterField is the part of the header that length covers.
	lengthAfterField = HeaderSize - 4
)

// Op is a frame's operation code.
type Op uint8

// Operation codes. Requests travel client to broker; the broker answers a request with the
// same Op and FlagResponse set, or with OpError. OpDeliver is pushed by the broker.
const (
	OpHello          Op = 0x01
	OpAuth           Op = 0x02
	OpPing           Op = 0x03
	OpError          Op = 0x04
	OpCreateTopic    Op = 0x10
	OpDeleteTopic    Op = 0x11
	OpMetadata       Op = 0x12
	OpStats          Op = 0x13
	OpCreateUser     Op = 0x14
	OpDeleteUser     Op = 0x15
	OpSetPassword    Op = 0x16
	OpGrant          Op = 0x17
	OpRevoke         Op = 0x18
	OpListUsers      Op = 0x19
	OpMoveReplicas   Op = 0x1A
	OpDrainBroker    Op = 0x1B
	OpRemoveBroker   Op = 0x1C
	OpAddBroker      Op = 0x1D
	OpMembership     Op = 0x1E
	OpClusterStatus  Op = 0x1F
	OpProduce        Op = 0x20
	OpInitProducer   Op = 0x21
	OpSubscribe      Op = 0x30
	OpUnsubscribe    Op = 0x31
	OpCredit         Op = 0x32
	OpDeliver        Op = 0x33
	OpFetch          Op = 0x40
	OpListOffsets    Op = 0x41
	OpCommitOffset   Op = 0x42
	OpFetchCommitted Op = 0x43
	OpJoinGroup      Op = 0x44
	OpHeartbeat      Op = 0x45
	OpLeaveGroup     Op = 0x46
	OpGroupCommit    Op = 0x47
	OpListGroups     Op = 0x48
	OpDescribeGroup  Op = 0x49
	// OpFindCoordinator asks which broker of a cluster coordinates a consumer group.
	OpFindCoordinator Op = 0x4A
)

var opNames = map[Op]string{
	OpHello: "HELLO", OpAuth: "AUTH", OpPing: "PING", OpError: "ERROR",
	OpCreateTopic: "CREATE_TOPIC", OpDeleteTopic: "DELETE_TOPIC", OpMetadata: "METADATA",
	OpStats: "STATS", OpProduce: "PRODUCE", OpInitProducer: "INIT_PRODUCER", OpSubscribe: "SUBSCRIBE",
	OpUnsubscribe: "UNSUBSCRIBE", OpCredit: "CREDIT", OpDeliver: "DELIVER", OpFetch: "FETCH",
	OpListOffsets: "LIST_OFFSETS", OpCommitOffset: "COMMIT_OFFSET",
	OpFetchCommitted: "FETCH_COMMITTED", OpCreateUser: "CREATE_USER",
	OpDeleteUser: "DELETE_USER", OpSetPassword: "SET_PASSWORD", OpGrant: "GRANT",
	OpRevoke: "REVOKE", OpListUsers: "LIST_USERS",
	OpMoveReplicas: "MOVE_REPLICAS", OpDrainBroker: "DRAIN_BROKER", OpRemoveBroker: "REMOVE_BROKER",
	OpAddBroker: "ADD_BROKER", OpMembership: "MEMBERSHIP",
	OpJoinGroup: "JOIN_GROUP", OpHeartbeat: "HEARTBEAT",
	OpLeaveGroup: "LEAVE_GROUP", OpGroupCommit: "GROUP_COMMIT", OpListGroups: "LIST_GROUPS",
	OpDescribeGroup: "DESCRIBE_GROUP", OpClusterStatus: "CLUSTER_STATUS", OpFindCoordinator: "FIND_COORDINATOR",
}

func (o Op) String() string {
	if s, ok := opNames[o]; ok {
		return s
	}
	return fmt.Sprintf("OP_0x%02x", uint8(o))
}

// Known reports whether o is an operation this version defines.
func (o Op) Known() bool { _, ok := opNames[o]; return ok }

// Flags bits. Bits not defined here must be zero.
const (
	// FlagResponse marks a broker's answer to the request with the same correlation id.
	FlagResponse uint16 = 1 << 0

	knownFlags = FlagResponse
)

// Header is a decoded frame header.
type Header struct {
	Length  uint32 // bytes after the length field: 12 + len(body)
	Version uint8
	Op      Op
	Flags   uint16
	Corr    uint32
}

// BodyLen is the length of the body that follows the header.
func (h Header) BodyLen() int { return int(h.Length) - lengthAfterField }

// AppendHeader appends a header whose length is a placeholder; FinishFrame fills it in once
// the body has been appended after it.
func AppendHeader(dst []byte, op Op, flags uint16, corr uint32) []byte {
	return append(dst,
		0, 0, 0, 0,
		Magic>>8, Magic&0xff, Version, byte(op),
		byte(flags>>8), byte(flags), 0, 0,
		byte(corr>>24), byte(corr>>16), byte(corr>>8), byte(corr))
}

// FinishFrame sets the length of the frame that starts at dst[start:] and runs to the end of
// dst, and returns dst.
func FinishFrame(dst []byte, start int) []byte {
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// AppendFrame appends a whole frame: header and body.
func AppendFrame(dst []byte, op Op, flags uint16, corr uint32, body []byte) []byte {
	start := len(dst)
	dst = AppendHeader(dst, op, flags, corr)
	dst = append(dst, body...)
	return FinishFrame(dst, start)
}

// PutHeader writes a complete header for a body of bodyLen bytes into b[:HeaderSize]. It serves
// writers that send the header and the body separately (writev, sendfile).
func PutHeader(b []byte, op Op, flags uint16, corr uint32, bodyLen int) {
	_ = b[HeaderSize-1]
	binary.BigEndian.PutUint32(b[0:], uint32(lengthAfterField+bodyLen))
	binary.BigEndian.PutUint16(b[4:], Magic)
	b[6] = Version
	b[7] = byte(op)
	binary.BigEndian.PutUint16(b[8:], flags)
	b[10], b[11] = 0, 0
	binary.BigEndian.PutUint32(b[12:], corr)
}

// FrameSize inspects the start of a byte stream. It returns the size of the first frame when
// at least its header is present (the frame itself may still be incomplete), 0 when fewer than
// HeaderSize bytes are present, and an error when the header cannot start a valid frame: a
// length over maxFrame, a bad magic or version, unknown flags or a non-zero reserved field.
// The length is checked before anything else so that a peer claiming 4 GiB costs nothing.
func FrameSize(b []byte, maxFrame int) (int, error) {
	if len(b) < HeaderSize {
		if len(b) >= 6 && binary.BigEndian.Uint16(b[4:]) != Magic {
			return 0, notProtocol(b)
		}
		return 0, nil
	}
	length := binary.BigEndian.Uint32(b)
	if binary.BigEndian.Uint16(b[4:]) != Magic {
		return 0, notProtocol(b)
	}
	if length < lengthAfterField {
		return 0, fmt.Errorf("%w: length %d is shorter than the header", ErrMalformed, length)
	}
	if uint64(length)+4 > uint64(maxFrame) {
		return 0, fmt.Errorf("%w: frame of %d bytes, limit %d", ErrFrameTooLarge, uint64(length)+4, maxFrame)
	}
	if b[6] != Version {
		return 0, fmt.Errorf("%w: version %d, this broker speaks %d", ErrVersion, b[6], Version)
	}
	if flags := binary.BigEndian.Uint16(b[8:]); flags&^knownFlags != 0 {
		return 0, fmt.Errorf("%w: unknown flags 0x%04x", ErrMalformed, flags)
	}
	if b[10] != 0 || b[11] != 0 {
		return 0, fmt.Errorf("%w: reserved header bytes are not zero", ErrMalformed)
	}
	return int(length) + 4, nil
}

// PeekHeader decodes the header at the start of b, which must hold at least HeaderSize bytes;
// the body may be absent or incomplete. It checks nothing (FrameSize does): it serves readers
// that decide what to do with a frame before all of it has arrived. It does not allocate.
func PeekHeader(b []byte) (Header, bool) {
	if len(b) < HeaderSize {
		return Header{}, false
	}
	return Header{
		Length:  binary.BigEndian.Uint32(b),
		Version: b[6],
		Op:      Op(b[7]),
		Flags:   binary.BigEndian.Uint16(b[8:]),
		Corr:    binary.BigEndian.Uint32(b[12:]),
	}, true
}

// Size is the whole frame's size, header included.
func (h Header) Size() int { return int(h.Length) + 4 }

// ParseFrame splits one whole frame (as sized by FrameSize) into header and body. The body
// aliases frame.
func ParseFrame(frame []byte) (Header, []byte, error) {
	h, ok := PeekHeader(frame)
	if !ok {
		return Header{}, nil, fmt.Errorf("%w: %d bytes is shorter than a header", ErrMalformed, len(frame))
	}
	if h.Size() != len(frame) {
		return Header{}, nil, fmt.Errorf("%w: length field %d but frame is %d bytes", ErrMalformed, h.Length, len(frame))
	}
	return h, frame[HeaderSize:], nil
}

// notProtocol names what a peer that is not speaking LightQ looks like, for the error it gets
// and for the broker's log.
func notProtocol(b []byte) error {
	return fmt.Errorf("%w: %s", ErrNotProtocol, DescribePeer(b))
}

// DescribePeer guesses what kind of client sent b, the first bytes of a connection that do not
// start a LightQ frame.
func DescribePeer(b []byte) string {
	switch {
	case len(b) >= 3 && b[0] == 0x16 && b[1] == 0x03 && b[2] <= 0x04:
		return "looks like a TLS ClientHello: this is the broker's plaintext port; connect TLS clients to its TLS port (the broker's tls-addr setting)"
	case hasAnyPrefix(b, "GET ", "POST", "PUT ", "HEAD", "DELE", "OPTI", "PATC", "CONN", "PRI "):
		return "looks like an HTTP request (LightQ speaks its own binary protocol, see PROTOCOL.md)"
	case len(b) >= 4 && b[0] == 0 && b[1] == 0 && b[2] == 0 && b[3] != 0 && len(b) >= 8 && b[4] == 0:
		return "looks like a Kafka request (LightQ is not wire-compatible with Kafka)"
	}
	n := len(b)
	if n > 8 {
		n = 8
	}
	return fmt.Sprintf("bad magic, first bytes % x", b[:n])
}

func hasAnyPrefix(b []byte, prefixes ...string) bool {
	for _, p := range prefixes {
		if len(b) >= len(p) && string(b[:len(p)]) == p {
			return true
		}
	}
	return false
}
