package transport

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Handshake (big-endian), dialer D to listener L:
//
//	D -> L  hello:  magic "LQRC" | version u8 | from u64 | to u64 | nonceD [16]
//	L -> D  answer: status u8 | nonceL [16] | macL [32]
//	D -> L  proof:  macD [32]
//
// macL = HMAC-SHA256(secret, "lightq cluster listener" | from | to | nonceD | nonceL) and
// macD the same with "lightq cluster dialer". Each side checks the other's MAC before it trusts
// a byte more, so neither a stranger nor a replay of an old exchange (fresh nonces on both
// sides) gets in, and the secret itself never crosses the wire. status is statusOK, or
// statusWrongNode when "to" is not the listener's id (a stale address book: the dialer logs it
// and retries later); the MACs are still sent so the dialer can trust that answer.
//
// Features (message streams only), after the proof, on the direction the message stream
// does not otherwise use:
//
//	L -> D  features: magic "LQFT" | features u64 | macF [32]
//
// macF = HMAC-SHA256(secret, "lightq cluster features" | from | to | nonceD | nonceL |
// features): the listener's features (Feature* bits), for the dialer to record as the peer's
// for the life of this connection. A broker of the previous release never sends it and never
// reads it (its dialer does not read its message streams), so neither side of a rolling
// upgrade has to know the other's release: a dialer that has not received it (yet) treats
// the peer as having no features, which is the previous release's behaviour. Unknown bits
// are kept and ignored. The hello and answer are unchanged, so the handshake version stays 1.
const (
	handshakeMagic   = "LQRC"
	handshakeVersion = 1
	nonceSize        = 16
	macSize          = sha256.Size
	helloSize        = 4 + 1 + 8 + 8 + nonceSize
	answerSize       = 1 + nonceSize + macSize

	statusOK        = 0
	statusWrongNode = 1

	featuresMagic = "LQFT"
	featuresSize  = 4 + 8 + macSize
	roleFeatures  = "lightq cluster features"
)

// Features a broker announces on its message streams' handshakes (a bit set).
const (
	// FeatureSegmentCatchUp: the broker installs snapshots of snapshot data version 2
	// (cluster/raftlog, snapdata.go) and fetches their segments over the segment stream
	// (segments.go). A leader sends such a snapshot only to a peer that announced it.
	FeatureSegmentCatchUp uint64 = 1 << 0

	// Features is what this release announces.
	Features = FeatureSegmentCatchUp
)

var (
	// ErrAuth is the handshake failing for a wrong secret (or a peer that is not a broker).
	ErrAuth = errors.New("cluster handshake refused")
	// ErrWrongNode is a listener whose node id is not the one dialled.
	ErrWrongNode = errors.New("cluster peer has another node id")
)

type hello struct {
	magic    string // handshakeMagic (message stream) or segMagic (segment stream)
	from, to uint64
	nonce    [nonceSize]byte
}

func (h *hello) append(dst []byte) []byte {
	dst = append(dst, h.magic...)
	dst = append(dst, handshakeVersion)
	dst = binary.BigEndian.AppendUint64(dst, h.from)
	dst = binary.BigEndian.AppendUint64(dst, h.to)
	return append(dst, h.nonce[:]...)
}

func parseHello(b []byte) (hello, error) {
	var h hello
	if len(b) != helloSize {
		return h, fmt.Errorf("%w: hello of %d bytes", ErrAuth, len(b))
	}
	h.magic = string(b[:4])
	if h.magic != handshakeMagic && h.magic != segMagic {
		return h, fmt.Errorf("%w: not a LightQ cluster peer (first bytes %q)", ErrAuth, b[:4])
	}
	if b[4] != handshakeVersion {
		return h, fmt.Errorf("%w: handshake version %d, this broker speaks %d", ErrAuth, b[4], handshakeVersion)
	}
	h.from = binary.BigEndian.Uint64(b[5:])
	h.to = binary.BigEndian.Uint64(b[13:])
	copy(h.nonce[:], b[21:])
	return h, nil
}

func handshakeMAC(secret []byte, role string, h *hello, nonceL []byte) []byte {
	if h.magic == segMagic { // a proof for one kind of stream is no proof for the other
		role = map[string]string{roleListener: roleSegListener, roleDialer: roleSegDialer}[role]
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(role))
	var ids [16]byte
	binary.BigEndian.PutUint64(ids[:], h.from)
	binary.BigEndian.PutUint64(ids[8:], h.to)
	m.Write(ids[:])
	m.Write(h.nonce[:])
	m.Write(nonceL)
	return m.Sum(nil)
}

const (
	roleListener = "lightq cluster listener"
	roleDialer   = "lightq cluster dialer"
)

// session is one handshake's identity: the hello (ids and the dialer's nonce) and the
// listener's nonce, which the features MAC covers.
type session struct {
	h      hello
	nonceL [nonceSize]byte
}

// dialHandshake runs the dialer's side of a message stream on rw.
func dialHandshake(rw io.ReadWriter, secret []byte, from, to uint64) (session, error) {
	return dialHandshakeKind(rw, secret, from, to, handshakeMagic)
}

// dialHandshakeKind runs the dialer's side on rw for a stream of the kind magic names.
func dialHandshakeKind(rw io.ReadWriter, secret []byte, from, to uint64, magic string) (session, error) {
	ss := session{h: hello{magic: magic, from: from, to: to}}
	h := &ss.h
	if _, err := rand.Read(h.nonce[:]); err != nil {
		return ss, err
	}
	if _, err := rw.Write(h.append(nil)); err != nil {
		return ss, fmt.Errorf("send hello: %w", err)
	}
	var ans [answerSize]byte
	if _, err := io.ReadFull(rw, ans[:]); err != nil {
		return ss, fmt.Errorf("%w: no answer to hello: %v", ErrAuth, err)
	}
	nonceL := ans[1 : 1+nonceSize]
	copy(ss.nonceL[:], nonceL)
	if !hmac.Equal(ans[1+nonceSize:], handshakeMAC(secret, roleListener, h, nonceL)) {
		return ss, fmt.Errorf("%w: the peer does not know the cluster secret", ErrAuth)
	}
	switch ans[0] {
	case statusOK:
	case statusWrongNode:
		return ss, fmt.Errorf("%w: dialled node %d", ErrWrongNode, to)
	default:
		return ss, fmt.Errorf("%w: unknown status %d", ErrAuth, ans[0])
	}
	if _, err := rw.Write(handshakeMAC(secret, roleDialer, h, nonceL)); err != nil {
		return ss, fmt.Errorf("send proof: %w", err)
	}
	return ss, nil
}

func featuresMAC(secret []byte, ss *session, features uint64) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(roleFeatures))
	var b [24]byte
	binary.BigEndian.PutUint64(b[:], ss.h.from)
	binary.BigEndian.PutUint64(b[8:], ss.h.to)
	binary.BigEndian.PutUint64(b[16:], features)
	m.Write(b[:16])
	m.Write(ss.h.nonce[:])
	m.Write(ss.nonceL[:])
	m.Write(b[16:])
	return m.Sum(nil)
}

// appendFeatures appends the listener's features message of session ss.
func appendFeatures(dst, secret []byte, ss *session, features uint64) []byte {
	dst = append(dst, featuresMagic...)
	dst = binary.BigEndian.AppendUint64(dst, features)
	return append(dst, featuresMAC(secret, ss, features)...)
}

// parseFeatures checks and decodes a features message of session ss (the dialer's side).
func parseFeatures(b, secret []byte, ss *session) (uint64, error) {
	switch {
	case len(b) != featuresSize:
		return 0, fmt.Errorf("%w: features message of %d bytes", ErrAuth, len(b))
	case string(b[:4]) != featuresMagic:
		return 0, fmt.Errorf("%w: features message magic %q", ErrAuth, b[:4])
	}
	f := binary.BigEndian.Uint64(b[4:])
	if !hmac.Equal(b[12:], featuresMAC(secret, ss, f)) {
		return 0, fmt.Errorf("%w: features message MAC", ErrAuth)
	}
	return f, nil
}

// acceptHandshake runs the listener's side on rw and returns the session: the dialer's node
// id (h.from) and the kind of stream it opens (h.magic: handshakeMagic or segMagic).
func acceptHandshake(rw io.ReadWriter, secret []byte, self uint64) (session, error) {
	var ss session
	var b [helloSize]byte
	if _, err := io.ReadFull(rw, b[:]); err != nil {
		return ss, fmt.Errorf("%w: read hello: %v", ErrAuth, err)
	}
	h, err := parseHello(b[:])
	if err != nil {
		return ss, err
	}
	ss.h = h
	var ans [answerSize]byte
	if h.to != self {
		ans[0] = statusWrongNode
	}
	if _, err := rand.Read(ans[1 : 1+nonceSize]); err != nil {
		return ss, err
	}
	copy(ss.nonceL[:], ans[1:1+nonceSize])
	copy(ans[1+nonceSize:], handshakeMAC(secret, roleListener, &h, ans[1:1+nonceSize]))
	if _, err := rw.Write(ans[:]); err != nil {
		return ss, fmt.Errorf("send answer: %w", err)
	}
	if h.to != self {
		return ss, fmt.Errorf("%w: node %d dialled %d, this is %d", ErrWrongNode, h.from, h.to, self)
	}
	var proof [macSize]byte
	if _, err := io.ReadFull(rw, proof[:]); err != nil {
		return ss, fmt.Errorf("%w: read proof from node %d: %v", ErrAuth, h.from, err)
	}
	if !hmac.Equal(proof[:], handshakeMAC(secret, roleDialer, &h, ans[1:1+nonceSize])) {
		return ss, fmt.Errorf("%w: node %d does not know the cluster secret", ErrAuth, h.from)
	}
	return ss, nil
}
