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
const (
	handshakeMagic   = "LQRC"
	handshakeVersion = 1
	nonceSize        = 16
	macSize          = sha256.Size
	helloSize        = 4 + 1 + 8 + 8 + nonceSize
	answerSize       = 1 + nonceSize + macSize

	statusOK        = 0
	statusWrongNode = 1
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

// dialHandshake runs the dialer's side of a message stream on rw.
func dialHandshake(rw io.ReadWriter, secret []byte, from, to uint64) error {
	return dialHandshakeKind(rw, secret, from, to, handshakeMagic)
}

// dialHandshakeKind runs the dialer's side on rw for a stream of the kind magic names.
func dialHandshakeKind(rw io.ReadWriter, secret []byte, from, to uint64, magic string) error {
	h := hello{magic: magic, from: from, to: to}
	if _, err := rand.Read(h.nonce[:]); err != nil {
		return err
	}
	if _, err := rw.Write(h.append(nil)); err != nil {
		return fmt.Errorf("send hello: %w", err)
	}
	var ans [answerSize]byte
	if _, err := io.ReadFull(rw, ans[:]); err != nil {
		return fmt.Errorf("%w: no answer to hello: %v", ErrAuth, err)
	}
	nonceL := ans[1 : 1+nonceSize]
	if !hmac.Equal(ans[1+nonceSize:], handshakeMAC(secret, roleListener, &h, nonceL)) {
		return fmt.Errorf("%w: the peer does not know the cluster secret", ErrAuth)
	}
	switch ans[0] {
	case statusOK:
	case statusWrongNode:
		return fmt.Errorf("%w: dialled node %d", ErrWrongNode, to)
	default:
		return fmt.Errorf("%w: unknown status %d", ErrAuth, ans[0])
	}
	if _, err := rw.Write(handshakeMAC(secret, roleDialer, &h, nonceL)); err != nil {
		return fmt.Errorf("send proof: %w", err)
	}
	return nil
}

// acceptHandshake runs the listener's side on rw and returns the dialer's node id and the
// kind of stream it opens (handshakeMagic or segMagic).
func acceptHandshake(rw io.ReadWriter, secret []byte, self uint64) (uint64, string, error) {
	var b [helloSize]byte
	if _, err := io.ReadFull(rw, b[:]); err != nil {
		return 0, "", fmt.Errorf("%w: read hello: %v", ErrAuth, err)
	}
	h, err := parseHello(b[:])
	if err != nil {
		return 0, "", err
	}
	var ans [answerSize]byte
	if h.to != self {
		ans[0] = statusWrongNode
	}
	if _, err := rand.Read(ans[1 : 1+nonceSize]); err != nil {
		return 0, "", err
	}
	copy(ans[1+nonceSize:], handshakeMAC(secret, roleListener, &h, ans[1:1+nonceSize]))
	if _, err := rw.Write(ans[:]); err != nil {
		return 0, "", fmt.Errorf("send answer: %w", err)
	}
	if h.to != self {
		return 0, "", fmt.Errorf("%w: node %d dialled %d, this is %d", ErrWrongNode, h.from, h.to, self)
	}
	var proof [macSize]byte
	if _, err := io.ReadFull(rw, proof[:]); err != nil {
		return 0, "", fmt.Errorf("%w: read proof from node %d: %v", ErrAuth, h.from, err)
	}
	if !hmac.Equal(proof[:], handshakeMAC(secret, roleDialer, &h, ans[1:1+nonceSize])) {
		return 0, "", fmt.Errorf("%w: node %d does not know the cluster secret", ErrAuth, h.from)
	}
	return h.from, h.magic, nil
}
