package transport

import (
	"encoding/binary"

	"go.etcd.io/raft/v3/raftpb"
)

// A follower receives every record batch inside a MsgApp. raftpb's generated decoder copies
// each entry's data into memory of its own and grows the entries slice one entry at a time:
// for a follower, one allocation per entry and a second copy of everything the leader
// streams (the first is the one into the segment file). decodeMessage decodes the messages
// raft sends between nodes with entry data and context aliasing the frame instead, and the
// entries of all a frame's messages carved from one slab; raftpb's decoder stays the
// reference: anything the fast path does not know (a snapshot, responses, an unknown field,
// a varint Go's binary package refuses) goes to it, and FuzzDecodeMessage checks that both
// decode every input alike.

// Protobuf field numbers and wire types of raftpb.Message and raftpb.Entry (raft.proto).
const (
	wireVarint = 0
	wireBytes  = 2

	fieldMsgType       = 1
	fieldMsgTo         = 2
	fieldMsgFrom       = 3
	fieldMsgTerm       = 4
	fieldMsgLogTerm    = 5
	fieldMsgIndex      = 6
	fieldMsgEntries    = 7
	fieldMsgCommit     = 8
	fieldMsgReject     = 10
	fieldMsgRejectHint = 11
	fieldMsgContext    = 12
	fieldMsgVote       = 13

	fieldEntryType  = 1
	fieldEntryTerm  = 2
	fieldEntryIndex = 3
	fieldEntryData  = 4
)

// entrySlab hands out the entries slices of one frame's messages from one allocation. A
// slice it returns has its capacity capped, so raft's appends to it cannot reach the next.
//
// Concurrency: one per decoding goroutine.
type entrySlab struct{ free []raftpb.Entry }

// take returns n zeroed entries.
func (s *entrySlab) take(n int) []raftpb.Entry {
	if n > len(s.free) {
		s.free = make([]raftpb.Entry, max(n, 256))
	}
	e := s.free[:n:n]
	s.free = s.free[n:]
	return e
}

// decodeMessage decodes b into m (zero on entry). The entries' data and the context alias b:
// the caller must not reuse b while m lives. aliased reports whether they do.
func decodeMessage(b []byte, m *raftpb.Message, slab *entrySlab) (aliased bool, err error) {
	if n, ok := countEntries(b); ok {
		if n > 0 {
			m.Entries = slab.take(n)[:0]
		}
		if decodeFast(b, m) {
			return true, nil
		}
	}
	*m = raftpb.Message{} // start over on the reference decoder; it reports what is wrong
	return false, m.Unmarshal(b)
}

// countEntries walks b's top-level fields and counts the entries; false when b has a field
// the fast path leaves to raftpb's decoder, or does not parse.
func countEntries(b []byte) (int, bool) {
	n := 0
	for len(b) > 0 {
		field, typ, _, rest, ok := nextField(b)
		if !ok {
			return 0, false
		}
		switch {
		case field == fieldMsgEntries && typ == wireBytes:
			n++
		case typ == wireBytes && field == fieldMsgContext:
		case typ == wireVarint && field >= fieldMsgType && field <= fieldMsgVote && field != fieldMsgEntries && field != 9 && field != fieldMsgContext:
		default:
			return 0, false
		}
		b = rest
	}
	return n, true
}

// decodeFast fills m from b, which countEntries accepted; m.Entries has room for every entry.
// False when an entry holds a field left to raftpb's decoder.
func decodeFast(b []byte, m *raftpb.Message) bool {
	for len(b) > 0 {
		field, _, v, rest, _ := nextField(b) // countEntries parsed it
		switch field {
		case fieldMsgType:
			m.Type = raftpb.MessageType(v)
		case fieldMsgTo:
			m.To = v
		case fieldMsgFrom:
			m.From = v
		case fieldMsgTerm:
			m.Term = v
		case fieldMsgLogTerm:
			m.LogTerm = v
		case fieldMsgIndex:
			m.Index = v
		case fieldMsgCommit:
			m.Commit = v
		case fieldMsgReject:
			m.Reject = v != 0
		case fieldMsgRejectHint:
			m.RejectHint = v
		case fieldMsgVote:
			m.Vote = v
		case fieldMsgContext:
			m.Context = b[len(b)-len(rest)-int(v) : len(b)-len(rest) : len(b)-len(rest)]
		case fieldMsgEntries:
			var e raftpb.Entry
			if !decodeEntry(b[len(b)-len(rest)-int(v):len(b)-len(rest)], &e) {
				return false
			}
			m.Entries = append(m.Entries, e)
		}
		b = rest
	}
	return true
}

// decodeEntry fills e from b, false on anything but the four fields of an entry.
func decodeEntry(b []byte, e *raftpb.Entry) bool {
	for len(b) > 0 {
		field, typ, v, rest, ok := nextField(b)
		if !ok {
			return false
		}
		switch {
		case field == fieldEntryType && typ == wireVarint:
			e.Type = raftpb.EntryType(v)
		case field == fieldEntryTerm && typ == wireVarint:
			e.Term = v
		case field == fieldEntryIndex && typ == wireVarint:
			e.Index = v
		case field == fieldEntryData && typ == wireBytes:
			end := len(b) - len(rest)
			e.Data = b[end-int(v) : end : end] // capped: an append by the holder copies
		default:
			return false
		}
		b = rest
	}
	return true
}

// nextField parses the field at the start of b: its number, wire type, and the varint's value
// (wireVarint) or the length of the bytes (wireBytes, which rest starts after). Only those two
// wire types parse.
func nextField(b []byte) (field uint64, typ int, v uint64, rest []byte, ok bool) {
	tag, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, 0, 0, nil, false
	}
	b = b[n:]
	field, typ = tag>>3, int(tag&7)
	if field == 0 || field > 1<<29-1 {
		return 0, 0, 0, nil, false
	}
	v, n = binary.Uvarint(b)
	if n <= 0 {
		return 0, 0, 0, nil, false
	}
	b = b[n:]
	switch typ {
	case wireVarint:
		return field, typ, v, b, true
	case wireBytes:
		if v > uint64(len(b)) {
			return 0, 0, 0, nil, false
		}
		return field, typ, v, b[v:], true
	}
	return 0, 0, 0, nil, false
}
