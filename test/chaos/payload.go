package chaos

import (
	"encoding/binary"
	"hash/crc32"
)

// Payloads. Every message the workload produces carries who sent it, so that the checker can
// tell each one apart in any log:
//
//	0       4          8                16       20
//	+-------+----------+----------------+--------+-------------------
//	| magic | producer | seq u64        | crc32  | random bytes ...
//	+-------+----------+----------------+--------+-------------------
//
// magic is "LQCX" for the workload's messages and "LQCP" for the probes that time a
// failover (sent without a producer id, so a re-sent probe may be stored twice); crc32
// (IEEE) covers bytes 0-16 and 20 to the end, so a damaged id is caught too. producer is
// unique per producer over a run and seq counts its messages from 0.
const (
	PayloadHeader = 20
	MinPayload    = PayloadHeader
	magicMessage  = "LQCX"
	magicProbe    = "LQCP"
)

// Kind is what a record's value is.
type Kind uint8

const (
	KindForeign Kind = iota // not a payload of this package (no magic)
	KindMessage             // a workload message
	KindProbe               // a failover probe
	KindCorrupt             // a magic, but the CRC does not match: damaged
)

func (k Kind) String() string {
	return [...]string{"foreign", "message", "probe", "corrupt"}[k]
}

// MsgID names one produced message (or probe).
type MsgID struct {
	Producer uint32
	Seq      uint64
}

// FillPayload writes the header of message (producer, seq) into b, which must hold at least
// PayloadHeader bytes, fills the rest from rnd, and seals it with the CRC. probe makes it a
// probe.
func FillPayload(b []byte, probe bool, id MsgID, rnd func() uint64) {
	if probe {
		copy(b, magicProbe)
	} else {
		copy(b, magicMessage)
	}
	binary.BigEndian.PutUint32(b[4:], id.Producer)
	binary.BigEndian.PutUint64(b[8:], id.Seq)
	for i := PayloadHeader; i < len(b); i += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], rnd())
		copy(b[i:], w[:])
	}
	binary.BigEndian.PutUint32(b[16:], payloadCRC(b))
}

func payloadCRC(b []byte) uint32 {
	c := crc32.ChecksumIEEE(b[:16])
	return crc32.Update(c, crc32.IEEETable, b[PayloadHeader:])
}

// ParsePayload reads a record's value: its kind and, for a message or a probe, its id.
func ParsePayload(b []byte) (Kind, MsgID) {
	if len(b) < PayloadHeader {
		return KindForeign, MsgID{}
	}
	var k Kind
	switch string(b[:4]) {
	case magicMessage:
		k = KindMessage
	case magicProbe:
		k = KindProbe
	default:
		return KindForeign, MsgID{}
	}
	id := MsgID{Producer: binary.BigEndian.Uint32(b[4:]), Seq: binary.BigEndian.Uint64(b[8:])}
	if binary.BigEndian.Uint32(b[16:]) != payloadCRC(b) {
		return KindCorrupt, id
	}
	return k, id
}
