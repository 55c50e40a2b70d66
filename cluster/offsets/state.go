package offsets

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"slices"

	"github.com/lightq/lightq/cluster/smlog"
	"github.com/lightq/lightq/wire"
)

// TopicRef names one creation of a topic.
type TopicRef struct {
	Topic   string
	Created int64 // Unix ms
}

// state is the committed offsets of one offsets partition as of one applied entry. It is
// owned by the Store, under Store.mu; the replica's goroutine changes it, applying entries
// in index order, so every replica's state is the same at the same index.
type state struct {
	index    uint64
	offsets  map[Key]int64
	sessions map[GroupRef]uint32 // the longest session timeout granted in each group, ms
	topics   map[TopicRef]int    // how many keys and sessions each topic creation has
	bytes    int64               // the keys', offsets' and sessions' share of a snapshot
}

func newState() *state {
	return &state{offsets: map[Key]int64{}, sessions: map[GroupRef]uint32{}, topics: map[TopicRef]int{}}
}

// apply applies one record, as of entry index.
func (s *state) apply(index uint64, rec *record) {
	s.index = index
	switch rec.kind {
	case kindCommit:
		if _, ok := s.offsets[rec.key]; !ok {
			s.bytes += rec.key.size()
			s.topics[TopicRef{rec.key.Topic, rec.key.Created}]++
		}
		s.offsets[rec.key] = rec.offset
	case kindSession:
		ref := GroupRef{rec.key.Topic, rec.key.Created, rec.key.Group}
		if _, ok := s.sessions[ref]; !ok {
			s.bytes += ref.size()
			s.topics[TopicRef{ref.Topic, ref.Created}]++
		}
		s.sessions[ref] = max(s.sessions[ref], rec.session)
	case kindDrop:
		ref := TopicRef{rec.key.Topic, rec.key.Created}
		if s.topics[ref] == 0 {
			return
		}
		for k := range s.offsets {
			if k.Topic == ref.Topic && k.Created == ref.Created {
				delete(s.offsets, k)
				s.bytes -= k.size()
			}
		}
		for g := range s.sessions {
			if g.Topic == ref.Topic && g.Created == ref.Created {
				delete(s.sessions, g)
				s.bytes -= g.size()
			}
		}
		delete(s.topics, ref)
	}
}

// State snapshot: the whole state as of one index, what raft sends a replica that is too far
// behind (raftpb.Snapshot.Data) and what the snapshot file keeps (snapFormat, below). Big-endian;
// str is a u16 length and the bytes:
//
//	0 magic "LQOS" | 4 version u8 = 1 or 2 | 5 reserved [3] zero | 8 crc32c u32 of bytes 12.. |
//	12 index u64 | count u32 | count × (topic str | created i64 | group str | partition u32 | offset i64) |
//	version 2 only: sessions u32 | sessions × (topic str | created i64 | group str | session u32)
//
// The keys are in (topic, created, group, partition) order and the sessions in (topic,
// created, group) order, each once; a state without sessions is written as version 1 (so a
// broker of the first release reads it), one with sessions as version 2 (sessions at least
// 1): a state has one encoding. The decoder checks every name, offset and session by the
// rules records are checked by. NEVER CHANGE versions 1 and 2: snapshots go between brokers
// of different releases and stay on disk.
const (
	stateMagic   = "LQOS"
	stateVersion = 1
	// stateSessions is the version of a state that holds sessions.
	stateSessions  = 2
	stateHeader    = 12
	minSessionSize = 2 + 1 + 8 + 2 + 1 + 4
	// MaxSnapshot bounds a state snapshot, below the transport's largest frame (64 MiB).
	MaxSnapshot = 32 << 20
	// maxStateBytes is where the leader stops taking new keys, so that a snapshot always fits
	// MaxSnapshot.
	maxStateBytes = MaxSnapshot - MaxSnapshot/8
	minKeySize    = 2 + 1 + 8 + 2 + 1 + 4 + 8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// SnapshotFileName is the snapshot file in the store's directory: the latest raft snapshot
// of the partition's state, which this replica restarts from and sends to replicas too far
// behind (cluster/smlog has its layout and how it is kept with the log).
const SnapshotFileName = "offsets.snap"

// ErrCorrupt wraps the errors of a store directory that cannot be trusted: a damaged snapshot
// file, or a log that was compacted past the snapshot file it needs.
var ErrCorrupt = errors.New("offsets: corrupt offsets store")

// snapFormat is the offsets' snapshot file. NEVER CHANGE its name or magic: it is on disk.
var snapFormat = smlog.Format[*state]{
	Name: "offsets", FileName: SnapshotFileName, Magic: "LQOF", MaxState: MaxSnapshot,
	Corrupt: ErrCorrupt, Malformed: ErrMalformed, Empty: newState,
	Decode: func(b []byte) (*state, uint64, error) {
		st, err := decodeState(b)
		if err != nil {
			return nil, 0, err
		}
		return st, st.index, nil
	},
}

func compareKeys(a, b Key) int {
	if c := cmp.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Created, b.Created); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Group, b.Group); c != 0 {
		return c
	}
	return cmp.Compare(a.Partition, b.Partition)
}

func compareGroups(a, b GroupRef) int {
	if c := cmp.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Created, b.Created); c != 0 {
		return c
	}
	return cmp.Compare(a.Group, b.Group)
}

// appendState appends the snapshot encoding of s to dst.
func appendState(dst []byte, s *state) []byte {
	start := len(dst)
	version := byte(stateVersion)
	if len(s.sessions) > 0 {
		version = stateSessions
	}
	dst = append(dst, stateMagic...)
	dst = append(dst, version, 0, 0, 0, 0, 0, 0, 0)
	dst = wire.AppendU64(dst, s.index)
	dst = wire.AppendU32(dst, uint32(len(s.offsets)))
	for _, k := range slices.SortedFunc(maps.Keys(s.offsets), compareKeys) {
		dst = wire.AppendString(dst, k.Topic)
		dst = wire.AppendI64(dst, k.Created)
		dst = wire.AppendString(dst, k.Group)
		dst = wire.AppendU32(dst, k.Partition)
		dst = wire.AppendI64(dst, s.offsets[k])
	}
	if version == stateSessions {
		dst = wire.AppendU32(dst, uint32(len(s.sessions)))
		for _, g := range slices.SortedFunc(maps.Keys(s.sessions), compareGroups) {
			dst = wire.AppendString(dst, g.Topic)
			dst = wire.AppendI64(dst, g.Created)
			dst = wire.AppendString(dst, g.Group)
			dst = wire.AppendU32(dst, s.sessions[g])
		}
	}
	binary.BigEndian.PutUint32(dst[start+8:], crc32.Checksum(dst[start+stateHeader:], castagnoli))
	return dst
}

// decodeState decodes a state snapshot. Errors wrap ErrMalformed.
func decodeState(b []byte) (*state, error) {
	bad := func(format string, args ...any) (*state, error) {
		return nil, fmt.Errorf("%w state: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	switch {
	case len(b) > MaxSnapshot:
		return bad("%d bytes, limit %d", len(b), MaxSnapshot)
	case len(b) < stateHeader:
		return bad("%d bytes, shorter than its header", len(b))
	case string(b[:4]) != stateMagic:
		return bad("magic %q, want %q", b[:4], stateMagic)
	case b[4] != stateVersion && b[4] != stateSessions:
		return bad("version %d, this broker reads %d and %d (written by a newer broker?)", b[4], stateVersion, stateSessions)
	case b[5]|b[6]|b[7] != 0:
		return bad("reserved bytes not zero")
	}
	if got, want := crc32.Checksum(b[stateHeader:], castagnoli), binary.BigEndian.Uint32(b[8:]); got != want {
		return bad("crc32c %08x, stored %08x", got, want)
	}
	r := wire.NewReader(b[stateHeader:])
	s := newState()
	s.index = r.U64()
	n := r.U32()
	if r.Err() == nil && uint64(n)*minKeySize > uint64(r.Len()) {
		return bad("%d keys in %d bytes", n, r.Len())
	}
	var prev Key
	for i := uint32(0); i < n && r.Err() == nil; i++ {
		var k Key
		k.Topic = r.String(wire.MaxTopicName, "topic")
		k.Created = r.I64()
		k.Group = r.String(wire.MaxGroupName, "group")
		k.Partition = r.U32()
		off := r.I64()
		if r.Err() != nil {
			break
		}
		if err := checkKey(&k, off); err != nil {
			return bad("key %d: %v", i, err)
		}
		if i > 0 && compareKeys(prev, k) >= 0 {
			return bad("key %d (%s/%d/%s/%d) is not after the one before it", i, k.Topic, k.Created, k.Group, k.Partition)
		}
		prev = k
		s.offsets[k] = off
		s.topics[TopicRef{k.Topic, k.Created}]++
		s.bytes += k.size()
	}
	if b[4] == stateSessions && r.Err() == nil {
		if err := decodeSessions(&r, s); err != nil {
			return bad("%v", err)
		}
	}
	if err := r.Done("state"); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return s, nil
}

// decodeSessions decodes a version 2 state's sessions into s: at least one, in order, each
// valid.
func decodeSessions(r *wire.Reader, s *state) error {
	n := r.U32()
	switch {
	case r.Err() != nil:
		return nil // Done reports it
	case n == 0:
		return fmt.Errorf("a version %d state without sessions (written as version %d)", stateSessions, stateVersion)
	case uint64(n)*minSessionSize > uint64(r.Len()):
		return fmt.Errorf("%d sessions in %d bytes", n, r.Len())
	}
	var prev GroupRef
	for i := uint32(0); i < n && r.Err() == nil; i++ {
		var g GroupRef
		g.Topic = r.String(wire.MaxTopicName, "topic")
		g.Created = r.I64()
		g.Group = r.String(wire.MaxGroupName, "group")
		ms := r.U32()
		if r.Err() != nil {
			break
		}
		if err := checkSession(&g, ms); err != nil {
			return fmt.Errorf("session %d: %v", i, err)
		}
		if i > 0 && compareGroups(prev, g) >= 0 {
			return fmt.Errorf("session %d (%s/%d/%s) is not after the one before it", i, g.Topic, g.Created, g.Group)
		}
		prev = g
		s.sessions[g] = ms
		s.topics[TopicRef{g.Topic, g.Created}]++
		s.bytes += g.size()
	}
	return nil
}
