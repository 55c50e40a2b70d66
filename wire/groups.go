package wire

import (
	"encoding/hex"
	"fmt"
)

// Bodies of the consumer group requests (ops 0x44-0x49): a group of a durable topic whose
// members JOIN_GROUP, HEARTBEAT and LEAVE_GROUP while the broker assigns them the topic's
// partitions, GROUP_COMMIT (a member's commit, fenced by generation), LIST_GROUPS and
// DESCRIBE_GROUP. PROTOCOL.md section 10.1 has the rules; these are only the layouts.
//
// Partition lists are strictly ascending, at most MaxPartitions long: a list in any other
// order makes the body invalid, so that every body has one encoding.

// MemberIDSize is the size of a member id.
const MemberIDSize = 16

// MemberID names one member of a consumer group. The client chooses it at random (16 bytes
// of crypto/rand, like a UUIDv4) once per consumer instance and keeps it across rejoins; the
// all-zero id is invalid.
type MemberID [MemberIDSize]byte

// String is the id in hex, as DESCRIBE_GROUP output shows it.
func (id MemberID) String() string { return hex.EncodeToString(id[:]) }

// IsZero reports whether id is the invalid all-zero id.
func (id MemberID) IsZero() bool { return id == MemberID{} }

// ParseMemberID reads a member id written by String.
func ParseMemberID(s string) (MemberID, error) {
	var id MemberID
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != MemberIDSize {
		return id, fmt.Errorf("member id %q: want %d hex digits", s, 2*MemberIDSize)
	}
	copy(id[:], b)
	return id, nil
}

func appendMemberID(dst []byte, id MemberID) []byte { return append(dst, id[:]...) }

func readMemberID(r *Reader) MemberID {
	var id MemberID
	copy(id[:], r.Raw(MemberIDSize, "member id"))
	if r.Err() == nil && id.IsZero() {
		r.Fail(fmt.Errorf("%w: member id is all zero", ErrMalformed))
	}
	return id
}

func appendPartitions(dst []byte, ps []uint32) []byte {
	dst = AppendU32(dst, uint32(len(ps)))
	for _, p := range ps {
		dst = AppendU32(dst, p)
	}
	return dst
}

// readPartitions reads a count and a strictly ascending list of partition ids. An empty list
// decodes as nil.
func readPartitions(r *Reader, what string) []uint32 {
	n := r.U32()
	if r.Err() == nil && (n > MaxPartitions || uint64(n)*4 > uint64(r.Len())) {
		r.Fail(fmt.Errorf("%w: %s: %d partitions in %d bytes (limit %d)", ErrMalformed, what, n, r.Len(), MaxPartitions))
	}
	if n == 0 || r.Err() != nil {
		return nil
	}
	out := make([]uint32, 0, n)
	for i := uint32(0); i < n && r.Err() == nil; i++ {
		p := r.U32()
		if len(out) > 0 && p <= out[len(out)-1] {
			r.Fail(fmt.Errorf("%w: %s: partition %d after %d: the list must be strictly ascending", ErrMalformed, what, p, out[len(out)-1]))
		}
		out = append(out, p)
	}
	return out
}

// readGroupTopic reads the group and topic that start every group request.
func readGroupTopic(r *Reader) (string, string) {
	g := r.String(MaxGroupName, "group")
	t := r.String(MaxTopicName, "topic name")
	checkName(r, ValidGroupName(g))
	return g, t
}

// JoinGroup is the body of JOIN_GROUP: a consumer becomes (or, with an id the group already
// has, becomes again) a member of Group on Topic.
type JoinGroup struct {
	Group  string
	Topic  string
	Member MemberID
	// SessionTimeoutMs: the member is removed when the broker has had no HEARTBEAT from it
	// for this long; 0 asks for the broker's default. Outside the broker's bounds:
	// INVALID_REQUEST.
	SessionTimeoutMs uint32
	ClientID         string // free text for DESCRIBE_GROUP, at most MaxClientName bytes
}

func (m *JoinGroup) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, m.Group)
	dst = AppendString(dst, m.Topic)
	dst = appendMemberID(dst, m.Member)
	dst = AppendU32(dst, m.SessionTimeoutMs)
	return AppendString(dst, m.ClientID)
}

func (m *JoinGroup) Decode(b []byte) error {
	r := NewReader(b)
	m.Group, m.Topic = readGroupTopic(&r)
	m.Member = readMemberID(&r)
	m.SessionTimeoutMs = r.U32()
	m.ClientID = r.String(MaxClientName, "client id")
	return r.Done("JOIN_GROUP")
}

// JoinGroupResponse answers JOIN_GROUP: the group's generation, the timeouts in force for
// the member and the partitions it may process now.
type JoinGroupResponse struct {
	Generation          uint32
	SessionTimeoutMs    uint32
	HeartbeatIntervalMs uint32
	Partitions          []uint32
}

func (m *JoinGroupResponse) AppendTo(dst []byte) []byte {
	dst = AppendU32(dst, m.Generation)
	dst = AppendU32(dst, m.SessionTimeoutMs)
	dst = AppendU32(dst, m.HeartbeatIntervalMs)
	return appendPartitions(dst, m.Partitions)
}

func (m *JoinGroupResponse) Decode(b []byte) error {
	r := NewReader(b)
	m.Generation = r.U32()
	m.SessionTimeoutMs = r.U32()
	m.HeartbeatIntervalMs = r.U32()
	m.Partitions = readPartitions(&r, "assignment")
	return r.Done("JOIN_GROUP response")
}

// Heartbeat is the body of HEARTBEAT: the member is alive, has seen the answers up to
// Generation and processes the Owned partitions. The broker may hold it up to MaxWaitMs
// (bounded by the heartbeat interval) until the member's assignment changes.
type Heartbeat struct {
	Group      string
	Topic      string
	Member     MemberID
	Generation uint32
	MaxWaitMs  uint32
	Owned      []uint32
}

func (m *Heartbeat) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, m.Group)
	dst = AppendString(dst, m.Topic)
	dst = appendMemberID(dst, m.Member)
	dst = AppendU32(dst, m.Generation)
	dst = AppendU32(dst, m.MaxWaitMs)
	return appendPartitions(dst, m.Owned)
}

func (m *Heartbeat) Decode(b []byte) error {
	r := NewReader(b)
	m.Group, m.Topic = readGroupTopic(&r)
	m.Member = readMemberID(&r)
	m.Generation = r.U32()
	m.MaxWaitMs = r.U32()
	m.Owned = readPartitions(&r, "owned")
	return r.Done("HEARTBEAT")
}

// HeartbeatResponse answers HEARTBEAT: the generation and the member's whole assignment.
type HeartbeatResponse struct {
	Generation          uint32
	HeartbeatIntervalMs uint32
	Partitions          []uint32
}

func (m *HeartbeatResponse) AppendTo(dst []byte) []byte {
	dst = AppendU32(dst, m.Generation)
	dst = AppendU32(dst, m.HeartbeatIntervalMs)
	return appendPartitions(dst, m.Partitions)
}

func (m *HeartbeatResponse) Decode(b []byte) error {
	r := NewReader(b)
	m.Generation = r.U32()
	m.HeartbeatIntervalMs = r.U32()
	m.Partitions = readPartitions(&r, "assignment")
	return r.Done("HEARTBEAT response")
}

// LeaveGroup is the body of LEAVE_GROUP; its answer is empty.
type LeaveGroup struct {
	Group  string
	Topic  string
	Member MemberID
}

func (m *LeaveGroup) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, m.Group)
	dst = AppendString(dst, m.Topic)
	return appendMemberID(dst, m.Member)
}

func (m *LeaveGroup) Decode(b []byte) error {
	r := NewReader(b)
	m.Group, m.Topic = readGroupTopic(&r)
	m.Member = readMemberID(&r)
	return r.Done("LEAVE_GROUP")
}

// GroupCommit is the body of GROUP_COMMIT: a member commits the next offset of a partition
// it holds, as of Generation. Its answer is empty, sent once the commit is durable.
type GroupCommit struct {
	Group      string
	Topic      string
	Member     MemberID
	Generation uint32
	Partition  uint32
	Offset     int64
}

func (m *GroupCommit) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, m.Group)
	dst = AppendString(dst, m.Topic)
	dst = appendMemberID(dst, m.Member)
	dst = AppendU32(dst, m.Generation)
	dst = AppendU32(dst, m.Partition)
	return AppendI64(dst, m.Offset)
}

func (m *GroupCommit) Decode(b []byte) error {
	r := NewReader(b)
	m.Group, m.Topic = readGroupTopic(&r)
	m.Member = readMemberID(&r)
	m.Generation = r.U32()
	m.Partition = r.U32()
	m.Offset = r.I64()
	return r.Done("GROUP_COMMIT")
}

// ListGroups is the body of LIST_GROUPS: the groups of Topic (empty: of every durable topic
// the caller may see) that have live members or committed offsets, in (group, topic) order,
// starting after (AfterGroup, AfterTopic) (both empty: from the first).
type ListGroups struct {
	Topic      string
	AfterGroup string
	AfterTopic string
}

func (m *ListGroups) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, m.Topic)
	dst = AppendString(dst, m.AfterGroup)
	return AppendString(dst, m.AfterTopic)
}

func (m *ListGroups) Decode(b []byte) error {
	r := NewReader(b)
	m.Topic = r.String(MaxTopicName, "topic name")
	m.AfterGroup = r.String(MaxGroupName, "after group")
	m.AfterTopic = r.String(MaxTopicName, "after topic")
	return r.Done("LIST_GROUPS")
}

// GroupListing is one group of a LIST_GROUPS answer.
type GroupListing struct {
	Group      string
	Topic      string
	Members    uint32 // live members; 0 for a group that only has committed offsets
	Generation uint32 // 0 without members
	Committed  uint32 // partitions with a committed offset
	Lag        uint64 // the sum over those partitions of end offset - committed offset
}

// ListGroupsResponse answers LIST_GROUPS. More says that groups after the last one listed
// did not fit in the frame: ask again after it.
type ListGroupsResponse struct {
	More   bool
	Groups []GroupListing
}

// groupListingMinSize is the smallest encoded GroupListing: two empty strings and the fixed
// fields.
const groupListingMinSize = 2 + 2 + 4 + 4 + 4 + 8

func (m *ListGroupsResponse) AppendTo(dst []byte) []byte {
	more := byte(0)
	if m.More {
		more = 1
	}
	dst = append(dst, more)
	dst = AppendU32(dst, uint32(len(m.Groups)))
	for i := range m.Groups {
		dst = m.Groups[i].appendTo(dst)
	}
	return dst
}

func (g *GroupListing) appendTo(dst []byte) []byte {
	dst = AppendString(dst, g.Group)
	dst = AppendString(dst, g.Topic)
	dst = AppendU32(dst, g.Members)
	dst = AppendU32(dst, g.Generation)
	dst = AppendU32(dst, g.Committed)
	return AppendU64(dst, g.Lag)
}

// Size is the encoded size of g in a LIST_GROUPS answer.
func (g *GroupListing) Size() int { return groupListingMinSize + len(g.Group) + len(g.Topic) }

func (m *ListGroupsResponse) Decode(b []byte) error {
	r := NewReader(b)
	switch more := r.U8(); {
	case more > 1:
		r.Fail(fmt.Errorf("%w: more flag %d", ErrMalformed, more))
	default:
		m.More = more == 1
	}
	n := r.U32()
	if r.Err() == nil && uint64(n)*groupListingMinSize > uint64(r.Len()) {
		r.Fail(fmt.Errorf("%w: %d groups in %d bytes", ErrMalformed, n, r.Len()))
	}
	m.Groups = nil
	for i := uint32(0); i < n && r.Err() == nil; i++ {
		var g GroupListing
		g.Group = r.String(MaxGroupName, "group")
		g.Topic = r.String(MaxTopicName, "topic name")
		g.Members = r.U32()
		g.Generation = r.U32()
		g.Committed = r.U32()
		g.Lag = r.U64()
		m.Groups = append(m.Groups, g)
	}
	return r.Done("LIST_GROUPS response")
}

// DescribeGroup is the body of DESCRIBE_GROUP.
type DescribeGroup struct {
	Group string
	Topic string
}

func (m *DescribeGroup) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, m.Group)
	return AppendString(dst, m.Topic)
}

func (m *DescribeGroup) Decode(b []byte) error {
	r := NewReader(b)
	m.Group, m.Topic = readGroupTopic(&r)
	return r.Done("DESCRIBE_GROUP")
}

// GroupMember is one member in a DESCRIBE_GROUP answer.
type GroupMember struct {
	Member           MemberID
	ClientID         string
	Address          string // the address of the connection of its last JOIN_GROUP or HEARTBEAT
	SessionTimeoutMs uint32
	Assigned         []uint32 // partitions it may process
	Revoking         []uint32 // partitions taken from it that it has not released yet
}

// GroupPartition is one partition in a DESCRIBE_GROUP answer. Committed is -1 and Lag -1 when
// the group has committed nothing for it; else Lag = EndOffset - Committed.
type GroupPartition struct {
	Partition uint32
	Committed int64
	EndOffset int64
	Lag       int64
}

// DescribeGroupResponse answers DESCRIBE_GROUP: the generation (0 without members), the
// live members and every partition of the topic.
type DescribeGroupResponse struct {
	Generation uint32
	Members    []GroupMember
	Partitions []GroupPartition
}

// groupMemberMinSize is the smallest encoded GroupMember.
const groupMemberMinSize = MemberIDSize + 2 + 2 + 4 + 4 + 4

func (m *DescribeGroupResponse) AppendTo(dst []byte) []byte {
	dst = AppendU32(dst, m.Generation)
	dst = AppendU32(dst, uint32(len(m.Members)))
	for i := range m.Members {
		g := &m.Members[i]
		dst = appendMemberID(dst, g.Member)
		dst = AppendString(dst, g.ClientID)
		dst = AppendString(dst, g.Address)
		dst = AppendU32(dst, g.SessionTimeoutMs)
		dst = appendPartitions(dst, g.Assigned)
		dst = appendPartitions(dst, g.Revoking)
	}
	dst = AppendU32(dst, uint32(len(m.Partitions)))
	for _, p := range m.Partitions {
		dst = AppendU32(dst, p.Partition)
		dst = AppendI64(dst, p.Committed)
		dst = AppendI64(dst, p.EndOffset)
		dst = AppendI64(dst, p.Lag)
	}
	return dst
}

func (m *DescribeGroupResponse) Decode(b []byte) error {
	r := NewReader(b)
	m.Generation = r.U32()
	n := r.U32()
	if r.Err() == nil && uint64(n)*groupMemberMinSize > uint64(r.Len()) {
		r.Fail(fmt.Errorf("%w: %d members in %d bytes", ErrMalformed, n, r.Len()))
	}
	m.Members = nil
	for i := uint32(0); i < n && r.Err() == nil; i++ {
		var g GroupMember
		g.Member = readMemberID(&r)
		g.ClientID = r.String(MaxClientName, "client id")
		g.Address = r.String(MaxClientName, "address")
		g.SessionTimeoutMs = r.U32()
		g.Assigned = readPartitions(&r, "assigned")
		g.Revoking = readPartitions(&r, "revoking")
		m.Members = append(m.Members, g)
	}
	np := r.U32()
	if r.Err() == nil && (np > MaxPartitions || uint64(np)*28 > uint64(r.Len())) {
		r.Fail(fmt.Errorf("%w: %d partitions in %d bytes", ErrMalformed, np, r.Len()))
	}
	m.Partitions = nil
	for i := uint32(0); i < np && r.Err() == nil; i++ {
		m.Partitions = append(m.Partitions, GroupPartition{Partition: r.U32(), Committed: r.I64(), EndOffset: r.I64(), Lag: r.I64()})
	}
	return r.Done("DESCRIBE_GROUP response")
}
