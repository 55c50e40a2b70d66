package wire

import "fmt"

// CLUSTER_STATUS (PROTOCOL.md section 16.1): the answering broker's view of the replicated
// partitions, and on the partitions it leads, how far behind each replica is.
//
// Decoders accept only the canonical form the broker sends, so that Decode then AppendTo is
// the identity: topics in strictly ascending name order, partition ids strictly ascending
// within a topic (below MaxPartitions), replica node ids strictly ascending and not zero; a
// partition this broker holds no replica of has every field zero; only a leader's view lists
// replicas.

// ClusterStatus asks for the status of the replicated partitions, one page at a time.
// Topic empty: every replicated topic. The page starts at partition FromPartition of topic
// FromTopic, or at the first partition after it in (topic name bytewise, partition id) order
// ("" and 0: from the start).
type ClusterStatus struct {
	Topic         string
	FromTopic     string
	FromPartition uint32
}

func (m *ClusterStatus) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, m.Topic)
	dst = AppendString(dst, m.FromTopic)
	return AppendU32(dst, m.FromPartition)
}

func (m *ClusterStatus) Decode(b []byte) error {
	r := NewReader(b)
	m.Topic = r.String(MaxTopicName, "topic name")
	m.FromTopic = r.String(MaxTopicName, "from topic")
	m.FromPartition = r.U32()
	return r.Done("CLUSTER_STATUS")
}

// StatusView says whose view a partition's status is.
type StatusView uint8

const (
	// ViewNone: the answering broker holds no replica of the partition (or its replica
	// cannot be served); every other field is zero. Ask its leader (METADATA).
	ViewNone StatusView = 0
	// ViewFollower: this broker's replica, which does not lead: the leader it knows, its
	// own indexes and log. It does not know the other replicas' progress.
	ViewFollower StatusView = 1
	// ViewLeader: the leader's view, with every replica's progress.
	ViewLeader StatusView = 2
)

func (v StatusView) String() string {
	switch v {
	case ViewNone:
		return "none"
	case ViewFollower:
		return "follower"
	case ViewLeader:
		return "leader"
	}
	return fmt.Sprintf("view(%d)", uint8(v))
}

// ReplicaState is raft's replication state of one replica, as its leader tracks it.
type ReplicaState uint8

const (
	ReplicaStateUnknown   ReplicaState = 0
	ReplicaStateProbe     ReplicaState = 1 // the leader looks for where the replica's log matches
	ReplicaStateReplicate ReplicaState = 2 // entries stream to it
	ReplicaStateSnapshot  ReplicaState = 3 // a snapshot brings it up (it is below the leader's log start)
)

func (s ReplicaState) String() string {
	switch s {
	case ReplicaStateProbe:
		return "probe"
	case ReplicaStateReplicate:
		return "replicate"
	case ReplicaStateSnapshot:
		return "snapshot"
	case ReplicaStateUnknown:
		return "unknown"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// ReplicaStatus is one replica of a partition as its leader sees it.
type ReplicaStatus struct {
	NodeID uint32
	Match  uint64 // the highest raft index known stored there
	// Lag is how many offsets the replica's log is behind the leader's end; -1 while it is
	// below the leader's log start (a snapshot is bringing it up).
	Lag    int64
	State  ReplicaState
	Active bool // the leader heard from it within an election timeout
}

// PartitionStatus is one replicated partition as the answering broker's replica sees it
// (View says whose view it is).
type PartitionStatus struct {
	ID     uint32
	View   StatusView
	Leader uint32 // the leader's node id; 0 while none is known
	Term   uint64
	Commit uint64 // raft indexes
	// Applied is the last raft index applied here, HighWatermark the offset after the last
	// committed batch applied here, LogStart and LogEnd the offsets its log holds (LogEnd is
	// past the high watermark by the uncommitted tail).
	Applied                         uint64
	HighWatermark, LogStart, LogEnd int64
	Replicas                        []ReplicaStatus // ViewLeader only: every member, the leader included
}

// TopicStatus is the partitions of one topic in a page; a topic may continue in the next.
type TopicStatus struct {
	Name       string
	Partitions []PartitionStatus
}

// ClusterStatusResponse answers CLUSTER_STATUS. Member is false from a broker without
// cluster settings (no metadata group, no replicated topics). More says that partitions
// were left out: ask again from the one after the last listed.
type ClusterStatusResponse struct {
	NodeID uint32
	Member bool
	// The metadata group as this broker sees it.
	MetaLeader                        uint32
	MetaTerm, MetaCommit, MetaApplied uint64
	More                              bool
	Topics                            []TopicStatus
}

// ClusterStatusFlagMember is bit 0 of the response's flags: the broker is a cluster member.
const ClusterStatusFlagMember = 1

// Encoded sizes, for the broker's paging and the decoders' count checks.
const (
	ClusterStatusHeaderSize    = 4 + 1 + 4 + 8 + 8 + 8 + 1 + 4         // up to the topic count, included
	ClusterTopicStatusSize     = 2 + 4                                 // plus the name's bytes
	ClusterPartitionStatusSize = 4 + 1 + 4 + 8 + 8 + 8 + 8 + 8 + 8 + 2 // plus its replicas
	ClusterReplicaStatusSize   = 4 + 8 + 8 + 1 + 1
)

func (m *ClusterStatusResponse) AppendTo(dst []byte) []byte {
	dst = AppendU32(dst, m.NodeID)
	var flags byte
	if m.Member {
		flags = ClusterStatusFlagMember
	}
	dst = append(dst, flags)
	dst = AppendU32(dst, m.MetaLeader)
	dst = AppendU64(dst, m.MetaTerm)
	dst = AppendU64(dst, m.MetaCommit)
	dst = AppendU64(dst, m.MetaApplied)
	dst = appendBool(dst, m.More)
	dst = AppendU32(dst, uint32(len(m.Topics)))
	for i := range m.Topics {
		t := &m.Topics[i]
		dst = AppendString(dst, t.Name)
		dst = AppendU32(dst, uint32(len(t.Partitions)))
		for j := range t.Partitions {
			dst = t.Partitions[j].appendTo(dst)
		}
	}
	return dst
}

func (p *PartitionStatus) appendTo(dst []byte) []byte {
	dst = AppendU32(dst, p.ID)
	dst = append(dst, byte(p.View))
	dst = AppendU32(dst, p.Leader)
	dst = AppendU64(dst, p.Term)
	dst = AppendU64(dst, p.Commit)
	dst = AppendU64(dst, p.Applied)
	dst = AppendI64(dst, p.HighWatermark)
	dst = AppendI64(dst, p.LogStart)
	dst = AppendI64(dst, p.LogEnd)
	dst = AppendU16(dst, uint16(len(p.Replicas)))
	for _, r := range p.Replicas {
		dst = AppendU32(dst, r.NodeID)
		dst = AppendU64(dst, r.Match)
		dst = AppendI64(dst, r.Lag)
		dst = append(dst, byte(r.State))
		dst = appendBool(dst, r.Active)
	}
	return dst
}

// EncodedSize is the partition's size in a CLUSTER_STATUS response.
func (p *PartitionStatus) EncodedSize() int {
	return ClusterPartitionStatusSize + len(p.Replicas)*ClusterReplicaStatusSize
}

func appendBool(dst []byte, v bool) []byte {
	if v {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// readBool reads a u8 that must be 0 or 1.
func readBool(r *Reader, what string) bool {
	v := r.U8()
	if v > 1 {
		r.Fail(fmt.Errorf("%w: %s %d: want 0 or 1", ErrMalformed, what, v))
	}
	return v == 1
}

func (m *ClusterStatusResponse) Decode(b []byte) error {
	r := NewReader(b)
	m.NodeID = r.U32()
	switch f := r.U8(); f {
	case 0, ClusterStatusFlagMember:
		m.Member = f == ClusterStatusFlagMember
	default:
		r.Fail(fmt.Errorf("%w: CLUSTER_STATUS flags %#x: only bit 0 (member) is defined", ErrMalformed, f))
	}
	m.MetaLeader = r.U32()
	m.MetaTerm, m.MetaCommit, m.MetaApplied = r.U64(), r.U64(), r.U64()
	m.More = readBool(&r, "more")
	n := r.U32()
	if r.Err() == nil && uint64(n)*ClusterTopicStatusSize > uint64(r.Len()) {
		r.Fail(fmt.Errorf("%w: %d topics in %d bytes", ErrMalformed, n, r.Len()))
	}
	m.Topics = nil
	for i := uint32(0); i < n && r.Err() == nil; i++ {
		var t TopicStatus
		t.Name = r.String(MaxTopicName, "topic name")
		if i > 0 && r.Err() == nil && t.Name <= m.Topics[i-1].Name {
			r.Fail(fmt.Errorf("%w: topic %q after %q: topics must be in ascending order", ErrMalformed, t.Name, m.Topics[i-1].Name))
		}
		np := r.U32()
		if r.Err() == nil && (np > MaxPartitions || uint64(np)*ClusterPartitionStatusSize > uint64(r.Len())) {
			r.Fail(fmt.Errorf("%w: %d partitions in %d bytes", ErrMalformed, np, r.Len()))
		}
		for j := uint32(0); j < np && r.Err() == nil; j++ {
			p := readPartitionStatus(&r)
			if r.Err() == nil && (p.ID >= MaxPartitions || j > 0 && p.ID <= t.Partitions[j-1].ID) {
				r.Fail(fmt.Errorf("%w: topic %q: partition %d out of order or over %d", ErrMalformed, t.Name, p.ID, MaxPartitions-1))
			}
			t.Partitions = append(t.Partitions, p)
		}
		m.Topics = append(m.Topics, t)
	}
	return r.Done("CLUSTER_STATUS response")
}

func readPartitionStatus(r *Reader) PartitionStatus {
	p := PartitionStatus{ID: r.U32(), View: StatusView(r.U8()), Leader: r.U32(), Term: r.U64(), Commit: r.U64(), Applied: r.U64(),
		HighWatermark: r.I64(), LogStart: r.I64(), LogEnd: r.I64()}
	nr := r.U16()
	if r.Err() != nil {
		return p
	}
	switch {
	case p.View > ViewLeader:
		r.Fail(fmt.Errorf("%w: partition %d: view %d", ErrMalformed, p.ID, p.View))
	case p.View == ViewNone && (p.Leader != 0 || p.Term != 0 || p.Commit != 0 || p.Applied != 0 || p.HighWatermark != 0 || p.LogStart != 0 || p.LogEnd != 0):
		r.Fail(fmt.Errorf("%w: partition %d: no replica here, but fields are set", ErrMalformed, p.ID))
	case p.View != ViewLeader && nr != 0:
		r.Fail(fmt.Errorf("%w: partition %d: %d replicas in a %s's view (only a leader lists them)", ErrMalformed, p.ID, nr, p.View))
	case nr > MaxReplicas || int(nr)*ClusterReplicaStatusSize > r.Len():
		r.Fail(fmt.Errorf("%w: partition %d: %d replicas in %d bytes", ErrMalformed, p.ID, nr, r.Len()))
	}
	for k := uint16(0); k < nr && r.Err() == nil; k++ {
		rs := ReplicaStatus{NodeID: r.U32(), Match: r.U64(), Lag: r.I64(), State: ReplicaState(r.U8())}
		rs.Active = readBool(r, "active")
		switch {
		case r.Err() != nil:
		case rs.NodeID == 0 || k > 0 && rs.NodeID <= p.Replicas[k-1].NodeID:
			r.Fail(fmt.Errorf("%w: partition %d: replica node %d is zero or out of order", ErrMalformed, p.ID, rs.NodeID))
		case rs.Lag < -1:
			r.Fail(fmt.Errorf("%w: partition %d: replica %d lag %d", ErrMalformed, p.ID, rs.NodeID, rs.Lag))
		case rs.State > ReplicaStateSnapshot:
			r.Fail(fmt.Errorf("%w: partition %d: replica %d state %d", ErrMalformed, p.ID, rs.NodeID, rs.State))
		}
		p.Replicas = append(p.Replicas, rs)
	}
	return p
}
