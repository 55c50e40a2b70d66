package meta

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"slices"
	"time"

	"github.com/lightq/lightq/cluster/smlog"
	"github.com/lightq/lightq/wire"
)

// State snapshot: the whole metadata as of one index, what raft sends a member that is too far
// behind (raftpb.Snapshot.Data) and what the snapshot file keeps (snapFormat, below). Big-endian;
// str is u16 length + bytes, bytes u32 length + bytes:
//
//	0 magic "LQMS" | 4 version u8 = 2 | 5 reserved [3] zero | 8 crc32c u32 of bytes 12.. |
//	12 index u64 | next group u64 |
//	brokers u32 × (id u64 | state u8 | client addr str | tls addr str | cluster addr str)
//	topics u32 × (name str | kind u8 | user str | created unix ms i64 |
//	              options u8 × (key str | value str) |
//	              partitions u16 × (group u64 | replicas u8 × id u64 | previous u8 × id u64 | moves u32))
//	users u32 × (name str | hash bytes | admin u8 (0 or 1) | grants u32 × (topic str | roles u8))
//	coordinators u32 × (group str | node u64)
//	recent request ids u16 × [16]
//
// Brokers are in node id order, topics, users, grants and coordinators in name order, each
// key once, so a state has one encoding (equal states, equal bytes). The decoder checks the
// whole state: names and values by the rules commands are checked by, every replica and
// coordinator an existing broker, every group id unique and below next group, every grant on
// an existing topic, every topic user an existing user.
//
// Version 1 is the same without a partition's previous replicas and moves (read as none and
// 0): it is still read, and written no more. Version 2 adds them for moves (moves.go). NEVER
// CHANGE a version: snapshots go between brokers of different releases and stay on disk. A
// broker that reads only version 1 cannot take a version-2 snapshot, so every member must run
// a release that reads version 2 before any member writes one.
const (
	stateMagic   = "LQMS"
	stateVersion = 2
	stateHeader  = 12
	// MaxSnapshot bounds a state snapshot, below the transport's largest frame (64 MiB).
	MaxSnapshot = 32 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// SnapshotFileName is the snapshot file in the store's directory: the latest raft snapshot
// of the metadata, which this member restarts from and sends to members too far behind
// (cluster/smlog has its layout and how it is kept with the log).
const SnapshotFileName = "meta.snap"

// ErrCorrupt wraps the errors of a store directory that cannot be trusted: a damaged snapshot
// file, or a log that was compacted past the snapshot file it needs.
var ErrCorrupt = errors.New("meta: corrupt metadata store")

// snapFormat is the metadata's snapshot file. NEVER CHANGE its name or magic: it is on disk.
var snapFormat = smlog.Format[*State]{
	Name: "meta", FileName: SnapshotFileName, Magic: "LQMF", MaxState: MaxSnapshot,
	Corrupt: ErrCorrupt, Malformed: ErrMalformed, Empty: emptyState,
	Decode: func(b []byte) (*State, uint64, error) {
		st, err := decodeState(b)
		if err != nil {
			return nil, 0, err
		}
		return st, st.index, nil
	},
}

// appendState appends the snapshot encoding of s to dst.
func appendState(dst []byte, s *State) []byte {
	start := len(dst)
	dst = append(dst, stateMagic...)
	dst = append(dst, stateVersion, 0, 0, 0, 0, 0, 0, 0)
	dst = wire.AppendU64(dst, s.index)
	dst = wire.AppendU64(dst, s.nextGroup)
	dst = wire.AppendU32(dst, uint32(len(s.brokers)))
	for _, id := range slices.Sorted(maps.Keys(s.brokers)) {
		b := s.brokers[id]
		dst = wire.AppendU64(dst, b.ID)
		dst = append(dst, byte(b.State))
		dst = appendStr(appendStr(appendStr(dst, b.ClientAddr), b.TLSAddr), b.ClusterAddr)
	}
	dst = wire.AppendU32(dst, uint32(len(s.topics)))
	for _, name := range slices.Sorted(maps.Keys(s.topics)) {
		t := s.topics[name]
		dst = appendStr(dst, t.Name)
		dst = append(dst, byte(t.Kind))
		dst = appendStr(dst, t.User)
		dst = wire.AppendI64(dst, t.CreatedAt.UnixMilli())
		dst = appendOptions(dst, t.Options)
		dst = wire.AppendU16(dst, uint16(len(t.Partitions)))
		for _, p := range t.Partitions {
			dst = wire.AppendU64(dst, p.Group)
			dst = appendIDs(dst, p.Replicas)
			dst = appendIDs(dst, p.Previous)
			dst = wire.AppendU32(dst, p.Moves)
		}
	}
	dst = wire.AppendU32(dst, uint32(len(s.users)))
	for _, name := range slices.Sorted(maps.Keys(s.users)) {
		u := s.users[name]
		dst = appendStr(dst, u.Name)
		dst = wire.AppendBytes(dst, u.Hash)
		dst = append(dst, boolByte(u.Admin))
		dst = wire.AppendU32(dst, uint32(len(u.Grants)))
		for _, topic := range slices.Sorted(maps.Keys(u.Grants)) {
			dst = append(appendStr(dst, topic), byte(u.Grants[topic]))
		}
	}
	dst = wire.AppendU32(dst, uint32(len(s.coordinators)))
	for _, g := range slices.Sorted(maps.Keys(s.coordinators)) {
		dst = wire.AppendU64(appendStr(dst, g), s.coordinators[g])
	}
	dst = wire.AppendU16(dst, uint16(len(s.recent)))
	for _, id := range s.recent {
		dst = append(dst, id[:]...)
	}
	binary.BigEndian.PutUint32(dst[start+8:], crc32.Checksum(dst[start+stateHeader:], castagnoli))
	return dst
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// decodeState decodes and checks a state snapshot (see above). Errors wrap ErrMalformed.
// Nothing returned aliases b.
func decodeState(b []byte) (*State, error) {
	bad := func(format string, args ...any) (*State, error) {
		return nil, fmt.Errorf("%w snapshot: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	switch {
	case len(b) > MaxSnapshot:
		return bad("%d bytes, limit %d", len(b), MaxSnapshot)
	case len(b) < stateHeader:
		return bad("%d bytes, shorter than its header", len(b))
	case string(b[:4]) != stateMagic:
		return bad("magic %q, want %q", b[:4], stateMagic)
	case b[4] != 1 && b[4] != stateVersion:
		return bad("version %d, this broker reads 1 and %d (written by a newer broker?)", b[4], stateVersion)
	case b[5]|b[6]|b[7] != 0:
		return bad("reserved bytes not zero")
	}
	if got, want := crc32.Checksum(b[stateHeader:], castagnoli), binary.BigEndian.Uint32(b[8:]); got != want {
		return bad("crc32c %08x, stored %08x", got, want)
	}
	version := b[4]
	r := wire.NewReader(b[stateHeader:])
	s := emptyState()
	s.index, s.nextGroup = r.U64(), r.U64()
	// count reads a list's length, refusing one that the bytes left cannot hold (each item
	// takes at least min bytes), so nothing is allocated for a forged count.
	count := func(n uint32, min uint64, what string) int {
		if r.Err() != nil {
			return 0
		}
		if uint64(n)*min > uint64(r.Len()) {
			r.Fail(fmt.Errorf("%d %s cannot fit in %d bytes", n, what, r.Len()))
			return 0
		}
		return int(n)
	}
	var err error
	fail := func(format string, args ...any) {
		if err == nil && r.Err() == nil {
			err = fmt.Errorf("%w snapshot: %s", ErrMalformed, fmt.Sprintf(format, args...))
		}
	}
	var prevID uint64
	for i := range count(r.U32(), 15, "brokers") {
		br := &Broker{ID: r.U64(), State: BrokerState(r.U8())}
		br.ClientAddr = r.String(MaxAddr, "client address")
		br.TLSAddr = r.String(MaxAddr, "TLS address")
		br.ClusterAddr = r.String(MaxAddr, "cluster address")
		if i > 0 && br.ID <= prevID {
			fail("broker %d after broker %d: not in order", br.ID, prevID)
		}
		if br.State != BrokerActive && br.State != BrokerRemoving {
			fail("broker %d: state %d", br.ID, br.State)
		}
		if cerr := (&AddBroker{ID: br.ID, ClientAddr: br.ClientAddr, TLSAddr: br.TLSAddr, ClusterAddr: br.ClusterAddr}).check(); cerr != nil {
			fail("%v", cerr)
		}
		prevID = br.ID
		s.brokers[br.ID] = br
	}
	groups := map[uint64]bool{}
	var prev string
	for i := range count(r.U32(), 15, "topics") {
		t := &Topic{Name: r.String(wire.MaxTopicName, "topic name"), Kind: wire.Kind(r.U8())}
		t.User = r.String(wire.MaxUser, "user name")
		t.CreatedAt = time.UnixMilli(r.I64()).UTC()
		t.Options = readOptions(&r)
		minPart := uint64(9)
		if version >= 2 {
			minPart = 14 // group, two counts, moves
		}
		parts := make([]Partition, count(uint32(r.U16()), minPart, "partitions"))
		placement := make([][]uint64, len(parts))
		for j := range parts {
			parts[j].Group = r.U64()
			parts[j].Replicas = readIDs(&r)
			if version >= 2 {
				parts[j].Previous = readIDs(&r)
				parts[j].Moves = r.U32()
			}
			placement[j] = parts[j].Replicas
			if p := parts[j].Previous; p != nil {
				if cerr := checkReplicas(fmt.Sprintf("topic %q partition %d (previous replicas)", t.Name, j), p); cerr != nil {
					fail("%v", cerr)
				}
				if n := len(parts[j].Holders()); n > MaxReplicas {
					fail("topic %q partition %d: %d brokers hold replicas, limit %d", t.Name, j, n, MaxReplicas)
				}
				if parts[j].Moves == 0 {
					fail("topic %q partition %d: a move under way, and 0 moves", t.Name, j)
				}
			}
			switch g := parts[j].Group; {
			case g < FirstPartitionGroup || g >= s.nextGroup:
				fail("topic %q partition %d: group %d outside [%d, %d)", t.Name, j, g, FirstPartitionGroup, s.nextGroup)
			case groups[g]:
				fail("topic %q partition %d: group %d is another partition's", t.Name, j, g)
			}
			groups[parts[j].Group] = true
			for _, id := range parts[j].Holders() {
				if _, ok := s.brokers[id]; !ok {
					fail("topic %q partition %d: replica %d is no broker", t.Name, j, id)
				}
			}
		}
		t.Partitions = parts
		if i > 0 && t.Name <= prev {
			fail("topic %q after %q: not in order", t.Name, prev)
		}
		if cerr := (&CreateTopic{Name: t.Name, Kind: t.Kind, User: t.User, Options: t.Options, Placement: placement}).check(); cerr != nil {
			fail("%v", cerr)
		}
		prev = t.Name
		s.topics[t.Name] = t
	}
	for i := range count(r.U32(), 8, "users") {
		u := &User{Name: r.String(wire.MaxUser, "user name")}
		u.Hash = cloneBytes(r.Bytes(MaxHash, "password hash"))
		switch a := r.U8(); a {
		case 0, 1:
			u.Admin = a == 1
		default:
			fail("user %q: admin flag %d", u.Name, a)
		}
		var prevTopic string
		for j := range count(r.U32(), 3, "grants") {
			topic := r.String(wire.MaxTopicName, "topic name")
			roles := wire.Roles(r.U8())
			if u.Grants == nil {
				u.Grants = map[string]wire.Roles{}
			}
			if j > 0 && topic <= prevTopic {
				fail("user %q: grant on %q after %q: not in order", u.Name, topic, prevTopic)
			}
			if _, ok := s.topics[topic]; !ok {
				fail("user %q: grant on topic %q, which does not exist", u.Name, topic)
			}
			if cerr := checkRoles(u.Name, topic, roles); cerr != nil {
				fail("%v", cerr)
			}
			prevTopic = topic
			u.Grants[topic] = roles
		}
		if i > 0 && u.Name <= prev {
			fail("user %q after %q: not in order", u.Name, prev)
		}
		if cerr := (&CreateUser{Name: u.Name, Hash: u.Hash}).check(); cerr != nil {
			fail("%v", cerr)
		}
		prev = u.Name
		s.users[u.Name] = u
	}
	for i := range count(r.U32(), 10, "coordinators") {
		g, node := r.String(wire.MaxGroupName, "group name"), r.U64()
		if i > 0 && g <= prev {
			fail("consumer group %q after %q: not in order", g, prev)
		}
		if cerr := (&SetCoordinator{Group: g, Node: node}).check(); cerr != nil {
			fail("%v", cerr)
		}
		if _, ok := s.brokers[node]; !ok {
			fail("consumer group %q: coordinator %d is no broker", g, node)
		}
		prev = g
		s.coordinators[g] = node
	}
	n := count(uint32(r.U16()), 16, "request ids")
	if n > dedupWindow {
		r.Fail(fmt.Errorf("%d request ids, limit %d", n, dedupWindow))
		n = 0
	}
	if n > 0 {
		s.recent = make([][16]byte, n)
	}
	for i := range s.recent {
		copy(s.recent[i][:], r.Raw(16, "request id"))
	}
	if err != nil { // recorded before any error of the reader
		return nil, err
	}
	if rerr := r.Done("snapshot"); rerr != nil {
		return nil, fmt.Errorf("%w snapshot: %w", ErrMalformed, rerr)
	}
	for name, t := range s.topics {
		if _, ok := s.users[t.User]; t.User != "" && !ok {
			return bad("topic %q: its user %q does not exist", name, t.User)
		}
	}
	return s, nil
}
