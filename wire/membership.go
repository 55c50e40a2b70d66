package wire

import "fmt"

// Cluster membership: the bodies of ADD_BROKER, MOVE_REPLICAS, DRAIN_BROKER, REMOVE_BROKER
// and MEMBERSHIP (all admin only; PROTOCOL.md section 16.2). Node ids are u32, as in
// METADATA's cluster layout; replica lists are u16 counts of node ids, at most MaxReplicas.

// AddBroker is the body of ADD_BROKER: a broker started to join the cluster (cluster-join),
// and where clients (Addr, TLSAddr: "" without a TLS listener) and the other brokers
// (ClusterAddr) reach it.
type AddBroker struct {
	NodeID                     uint32
	Addr, TLSAddr, ClusterAddr string
}

func (m *AddBroker) AppendTo(dst []byte) []byte {
	dst = AppendU32(dst, m.NodeID)
	dst = AppendString(dst, m.Addr)
	dst = AppendString(dst, m.TLSAddr)
	return AppendString(dst, m.ClusterAddr)
}

func (m *AddBroker) Decode(b []byte) error {
	r := NewReader(b)
	m.NodeID = r.U32()
	m.Addr = r.String(MaxAddr, "client address")
	m.TLSAddr = r.String(MaxAddr, "TLS address")
	m.ClusterAddr = r.String(MaxAddr, "cluster address")
	return r.Done("ADD_BROKER")
}

// MoveReplicas is the body of MOVE_REPLICAS: the new replicas of a partition of a replicated
// topic, the preferred leader first.
type MoveReplicas struct {
	Topic     string
	Partition uint32
	Replicas  []uint32
}

func (m *MoveReplicas) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, m.Topic)
	dst = AppendU32(dst, m.Partition)
	return appendNodeList(dst, m.Replicas)
}

func (m *MoveReplicas) Decode(b []byte) error {
	r := NewReader(b)
	m.Topic = r.String(MaxTopicName, "topic name")
	m.Partition = r.U32()
	m.Replicas = readNodeList(&r, "replicas")
	return r.Done("MOVE_REPLICAS")
}

// BrokerID is the body of DRAIN_BROKER and REMOVE_BROKER.
type BrokerID struct{ NodeID uint32 }

func (m *BrokerID) AppendTo(dst []byte) []byte { return AppendU32(dst, m.NodeID) }

func (m *BrokerID) Decode(b []byte) error {
	r := NewReader(b)
	m.NodeID = r.U32()
	return r.Done("broker id body")
}

// DrainBrokerResponse answers DRAIN_BROKER: how many partitions it started moving off the
// broker (0 when none lists it among its replicas any more).
type DrainBrokerResponse struct{ Moves uint32 }

func (m *DrainBrokerResponse) AppendTo(dst []byte) []byte { return AppendU32(dst, m.Moves) }

func (m *DrainBrokerResponse) Decode(b []byte) error {
	r := NewReader(b)
	m.Moves = r.U32()
	return r.Done("DRAIN_BROKER response")
}

// Membership is the body of MEMBERSHIP. Topic, when not empty, limits the partitions
// listed to that topic's; MovingOnly to those whose move is under way. A response lists the
// partitions after (AfterTopic, AfterPartition) in topic then partition order: empty
// AfterTopic starts at the first; ask again with the last one listed while More is set.
type Membership struct {
	Topic          string
	AfterTopic     string
	AfterPartition uint32
	MovingOnly     bool
}

// membershipMovingOnly is bit 0 of MEMBERSHIP's flags.
const membershipMovingOnly = 1 << 0

func (m *Membership) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, m.Topic)
	dst = AppendString(dst, m.AfterTopic)
	dst = AppendU32(dst, m.AfterPartition)
	var flags uint8
	if m.MovingOnly {
		flags |= membershipMovingOnly
	}
	return append(dst, flags)
}

func (m *Membership) Decode(b []byte) error {
	r := NewReader(b)
	m.Topic = r.String(MaxTopicName, "topic name")
	m.AfterTopic = r.String(MaxTopicName, "after topic")
	m.AfterPartition = r.U32()
	f := r.U8()
	if r.Err() == nil && f&^membershipMovingOnly != 0 {
		r.Fail(fmt.Errorf("%w: MEMBERSHIP flags %#x: only bit 0 (moving only) is defined", ErrMalformed, f))
	}
	m.MovingOnly = f&membershipMovingOnly != 0
	return r.Done("MEMBERSHIP")
}

// BrokerState is a broker's place in the cluster, in MEMBERSHIP.
type BrokerState uint8

const (
	BrokerActive   BrokerState = 1 // takes new replicas
	BrokerRemoving BrokerState = 2 // drained: takes none, its replicas are moved off it
)

func (s BrokerState) String() string {
	switch s {
	case BrokerActive:
		return "active"
	case BrokerRemoving:
		return "removing"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// MetaMember is a broker's membership of the cluster's metadata group.
type MetaMember uint8

const (
	MetaNone    MetaMember = 0 // not a member (yet: ADD_BROKER adds it)
	MetaVoter   MetaMember = 1
	MetaLearner MetaMember = 2
)

func (m MetaMember) String() string {
	switch m {
	case MetaNone:
		return "none"
	case MetaVoter:
		return "voter"
	case MetaLearner:
		return "learner"
	}
	return fmt.Sprintf("member(%d)", uint8(m))
}

// MemberBroker is one broker in MEMBERSHIP: its addresses, state, membership of the
// metadata group, the partitions it is a replica of (Replicas) and those it is leaving whose
// moves have not finished (Leaving).
type MemberBroker struct {
	NodeID                     uint32
	State                      BrokerState
	Meta                       MetaMember
	Addr, TLSAddr, ClusterAddr string
	Replicas, Leaving          uint32
}

// MemberPartition is one partition of a replicated topic in MEMBERSHIP: what the cluster's
// metadata says (Replicas, the preferred leader first; Previous, the replicas a move under
// way started from, empty when none is), and what the answering broker's replica sees, when
// it holds one (Held): the leader it knows, whether it leads (Leads), the group's voters and
// learners.
type MemberPartition struct {
	Topic     string
	Partition uint32
	Group     uint64
	Replicas  []uint32
	Previous  []uint32

	Held, Leads bool
	Leader      uint32
	Voters      []uint32
	Learners    []uint32
}

const (
	partitionHeld  = 1 << 0
	partitionLeads = 1 << 1
)

// MembershipResponse answers MEMBERSHIP: the answering broker, the metadata group's
// leader as it knows it (0: none now), every broker of the metadata, and the partitions
// asked for (More: more follow, ask again after the last).
type MembershipResponse struct {
	NodeID     uint32
	MetaLeader uint32
	Brokers    []MemberBroker
	Partitions []MemberPartition
	More       bool
}

// MaxMembershipPartitions bounds the partitions of one MEMBERSHIP response.
const MaxMembershipPartitions = 4096

func (m *MembershipResponse) AppendTo(dst []byte) []byte {
	dst = AppendU32(dst, m.NodeID)
	dst = AppendU32(dst, m.MetaLeader)
	dst = AppendU16(dst, uint16(len(m.Brokers)))
	for _, b := range m.Brokers {
		dst = AppendU32(dst, b.NodeID)
		dst = append(dst, byte(b.State), byte(b.Meta))
		dst = AppendString(dst, b.Addr)
		dst = AppendString(dst, b.TLSAddr)
		dst = AppendString(dst, b.ClusterAddr)
		dst = AppendU32(dst, b.Replicas)
		dst = AppendU32(dst, b.Leaving)
	}
	dst = AppendU32(dst, uint32(len(m.Partitions)))
	for i := range m.Partitions {
		p := &m.Partitions[i]
		dst = AppendString(dst, p.Topic)
		dst = AppendU32(dst, p.Partition)
		dst = AppendU64(dst, p.Group)
		dst = appendNodeList(dst, p.Replicas)
		dst = appendNodeList(dst, p.Previous)
		var flags uint8
		if p.Held {
			flags |= partitionHeld
		}
		if p.Leads {
			flags |= partitionLeads
		}
		dst = append(dst, flags)
		dst = AppendU32(dst, p.Leader)
		dst = appendNodeList(dst, p.Voters)
		dst = appendNodeList(dst, p.Learners)
	}
	return append(dst, boolU8(m.More))
}

func (m *MembershipResponse) Decode(b []byte) error {
	r := NewReader(b)
	m.NodeID, m.MetaLeader = r.U32(), r.U32()
	m.Brokers, m.Partitions = nil, nil
	nb := r.U16()
	if r.Err() == nil && (int(nb) > MaxBrokers || int(nb)*20 > r.Len()) {
		r.Fail(fmt.Errorf("%w: %d brokers in %d bytes", ErrMalformed, nb, r.Len()))
	}
	for i := uint16(0); i < nb && r.Err() == nil; i++ {
		br := MemberBroker{NodeID: r.U32(), State: BrokerState(r.U8()), Meta: MetaMember(r.U8())}
		br.Addr = r.String(MaxAddr, "client address")
		br.TLSAddr = r.String(MaxAddr, "TLS address")
		br.ClusterAddr = r.String(MaxAddr, "cluster address")
		br.Replicas, br.Leaving = r.U32(), r.U32()
		if r.Err() == nil && (br.State != BrokerActive && br.State != BrokerRemoving || br.Meta > MetaLearner) {
			r.Fail(fmt.Errorf("%w: broker %d: state %d, metadata membership %d", ErrMalformed, br.NodeID, br.State, br.Meta))
		}
		m.Brokers = append(m.Brokers, br)
	}
	np := r.U32()
	if r.Err() == nil && (np > MaxMembershipPartitions || uint64(np)*27 > uint64(r.Len())) {
		r.Fail(fmt.Errorf("%w: %d partitions in %d bytes", ErrMalformed, np, r.Len()))
	}
	for i := uint32(0); i < np && r.Err() == nil; i++ {
		var p MemberPartition
		p.Topic = r.String(MaxTopicName, "topic name")
		p.Partition = r.U32()
		p.Group = r.U64()
		p.Replicas = readNodeList(&r, "replicas")
		p.Previous = readNodeList(&r, "previous replicas")
		flags := r.U8()
		if r.Err() == nil && flags&^(partitionHeld|partitionLeads) != 0 {
			r.Fail(fmt.Errorf("%w: partition flags %#x: only bits 0 and 1 are defined", ErrMalformed, flags))
		}
		p.Held, p.Leads = flags&partitionHeld != 0, flags&partitionLeads != 0
		p.Leader = r.U32()
		p.Voters = readNodeList(&r, "voters")
		p.Learners = readNodeList(&r, "learners")
		m.Partitions = append(m.Partitions, p)
	}
	m.More = readBoolU8(&r, "more")
	return r.Done("MEMBERSHIP response")
}

// appendNodeList appends a u16 count of node ids, then the ids.
func appendNodeList(dst []byte, ids []uint32) []byte {
	dst = AppendU16(dst, uint16(len(ids)))
	for _, id := range ids {
		dst = AppendU32(dst, id)
	}
	return dst
}

// readNodeList reads what appendNodeList wrote: at most MaxReplicas ids; nil for none.
func readNodeList(r *Reader, what string) []uint32 {
	n := r.U16()
	if r.Err() != nil || n == 0 {
		return nil
	}
	if n > MaxReplicas || int(n)*4 > r.Len() {
		r.Fail(fmt.Errorf("%w: %d %s in %d bytes (at most %d)", ErrMalformed, n, what, r.Len(), MaxReplicas))
		return nil
	}
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = r.U32()
	}
	return ids
}

func boolU8(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// readBoolU8 reads a u8 that must be 0 or 1.
func readBoolU8(r *Reader, what string) bool {
	v := r.U8()
	if r.Err() == nil && v > 1 {
		r.Fail(fmt.Errorf("%w: %s %d, want 0 or 1", ErrMalformed, what, v))
	}
	return v == 1
}
