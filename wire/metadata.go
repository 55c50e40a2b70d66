package wire

import "fmt"

// METADATA's bodies (PROTOCOL.md, METADATA, and section 16 for the cluster layout).

// MetadataRequest asks for topics (none named: every topic the caller may see). Cluster asks
// for the cluster layout too (PROTOCOL.md, METADATA): each partition's leader and replicas
// and the brokers' addresses. It travels as an optional flags byte after the names, so a
// request without it is the one older clients send, and gets the older response.
type MetadataRequest struct {
	Topics  []string
	Cluster bool
}

// MetadataFlagCluster is bit 0 of METADATA's optional flags byte.
const MetadataFlagCluster = 1

func (m *MetadataRequest) AppendTo(dst []byte) []byte {
	dst = AppendU32(dst, uint32(len(m.Topics)))
	for _, t := range m.Topics {
		dst = AppendString(dst, t)
	}
	if m.Cluster {
		dst = append(dst, MetadataFlagCluster)
	}
	return dst
}

func (m *MetadataRequest) Decode(b []byte) error {
	r := NewReader(b)
	n := r.U32()
	if r.Err() == nil && (n > MaxListTopics || int(n)*2 > r.Len()) {
		r.Fail(fmt.Errorf("%w: %d topic names in %d bytes", ErrMalformed, n, r.Len()))
	}
	m.Topics = nil
	for i := uint32(0); i < n && r.Err() == nil; i++ {
		m.Topics = append(m.Topics, r.String(MaxTopicName, "topic name"))
	}
	m.Cluster = false
	if r.Err() == nil && r.Len() > 0 {
		switch f := r.U8(); f {
		case MetadataFlagCluster:
			m.Cluster = true
		default:
			r.Fail(fmt.Errorf("%w: METADATA flags %#x: only bit 0 (cluster) is defined, and flags 0 are sent by leaving the byte out", ErrMalformed, f))
		}
	}
	return r.Done("METADATA")
}

// PartitionMetadata describes one partition. For transient topics the offsets are message
// sequence numbers: Start is the oldest message still in the ring, End the next to be assigned.
//
// Leader and Replicas are present only in a response to a request with Cluster set: the node
// id of the broker that leads the partition (0: none known now, an election is under way) and
// of every broker that holds a replica, the leader among them.
type PartitionMetadata struct {
	ID          uint32
	StartOffset int64
	EndOffset   int64
	Leader      uint32
	Replicas    []uint32
}

// BrokerMetadata is one broker of the cluster in a METADATA response with Cluster set.
// Addr and TLSAddr are the addresses clients reach it at ("": that listener is off; Addr ""
// from a broker without cluster settings: the address the client used).
type BrokerMetadata struct {
	NodeID  uint32
	Addr    string
	TLSAddr string
}

// MaxReplicas bounds a partition's replica list and MaxBrokers a cluster's broker list in
// METADATA.
const (
	MaxReplicas = 16
	MaxBrokers  = 1024
	MaxAddr     = 255
)

// TopicMetadata describes one topic.
type TopicMetadata struct {
	Name       string
	Kind       Kind
	User       string
	Options    []Option
	Partitions []PartitionMetadata
}

// MetadataResponse answers METADATA. Cluster says which layout it has: the one a request
// with Cluster set gets (partitions with leader and replicas, then NodeID and Brokers) or the
// older one; Decode reads the layout m.Cluster names, so set it from the request first.
type MetadataResponse struct {
	Topics  []TopicMetadata
	Cluster bool
	// NodeID is the answering broker's node id, Brokers every broker of its cluster (itself
	// alone without cluster settings). Cluster layout only.
	NodeID  uint32
	Brokers []BrokerMetadata
}

func (m *MetadataResponse) AppendTo(dst []byte) []byte {
	dst = AppendU32(dst, uint32(len(m.Topics)))
	for i := range m.Topics {
		t := &m.Topics[i]
		dst = AppendString(dst, t.Name)
		dst = append(dst, byte(t.Kind))
		dst = AppendString(dst, t.User)
		dst = appendOptions(dst, t.Options)
		dst = AppendU32(dst, uint32(len(t.Partitions)))
		for _, p := range t.Partitions {
			dst = AppendU32(dst, p.ID)
			dst = AppendI64(dst, p.StartOffset)
			dst = AppendI64(dst, p.EndOffset)
			if m.Cluster {
				dst = AppendU32(dst, p.Leader)
				dst = AppendU16(dst, uint16(len(p.Replicas)))
				for _, id := range p.Replicas {
					dst = AppendU32(dst, id)
				}
			}
		}
	}
	if m.Cluster {
		dst = AppendU32(dst, m.NodeID)
		dst = AppendU32(dst, uint32(len(m.Brokers)))
		for _, b := range m.Brokers {
			dst = AppendU32(dst, b.NodeID)
			dst = AppendString(dst, b.Addr)
			dst = AppendString(dst, b.TLSAddr)
		}
	}
	return dst
}

func (m *MetadataResponse) Decode(b []byte) error {
	r := NewReader(b)
	n := r.U32()
	if r.Err() == nil && uint64(n)*8 > uint64(r.Len()) {
		r.Fail(fmt.Errorf("%w: %d topics in %d bytes", ErrMalformed, n, r.Len()))
	}
	partSize := 20
	if m.Cluster {
		partSize = 26
	}
	m.Topics, m.NodeID, m.Brokers = nil, 0, nil
	for i := uint32(0); i < n && r.Err() == nil; i++ {
		var t TopicMetadata
		t.Name = r.String(MaxTopicName, "topic name")
		t.Kind = Kind(r.U8())
		t.User = r.String(MaxUser, "user")
		t.Options = readOptions(&r)
		np := r.U32()
		if r.Err() == nil && (np > MaxPartitions || int(np)*partSize > r.Len()) {
			r.Fail(fmt.Errorf("%w: %d partitions in %d bytes", ErrMalformed, np, r.Len()))
		}
		for j := uint32(0); j < np && r.Err() == nil; j++ {
			p := PartitionMetadata{ID: r.U32(), StartOffset: r.I64(), EndOffset: r.I64()}
			if m.Cluster {
				p.Leader = r.U32()
				nr := r.U16()
				if r.Err() == nil && (nr > MaxReplicas || int(nr)*4 > r.Len()) {
					r.Fail(fmt.Errorf("%w: %d replicas in %d bytes", ErrMalformed, nr, r.Len()))
				}
				for k := uint16(0); k < nr && r.Err() == nil; k++ {
					p.Replicas = append(p.Replicas, r.U32())
				}
			}
			t.Partitions = append(t.Partitions, p)
		}
		m.Topics = append(m.Topics, t)
	}
	if m.Cluster {
		m.NodeID = r.U32()
		nb := r.U32()
		if r.Err() == nil && (nb > MaxBrokers || int(nb)*8 > r.Len()) {
			r.Fail(fmt.Errorf("%w: %d brokers in %d bytes", ErrMalformed, nb, r.Len()))
		}
		for k := uint32(0); k < nb && r.Err() == nil; k++ {
			m.Brokers = append(m.Brokers, BrokerMetadata{NodeID: r.U32(), Addr: r.String(MaxAddr, "broker address"), TLSAddr: r.String(MaxAddr, "broker TLS address")})
		}
	}
	return r.Done("METADATA response")
}
