package wire

import (
	"fmt"
	"time"
)

// Bodies of requests and responses. Each type appends its body with AppendTo and decodes it
// with Decode; see PROTOCOL.md for the byte layouts. Decode copies strings (these messages are
// not on the per-message path) except where a field says it aliases the input.

// Kind is a topic's kind.
type Kind uint8

const (
	KindTransient Kind = 1 // in memory, pushed to subscribers
	KindDurable   Kind = 2 // on disk, fetched by offset
)

func (k Kind) String() string {
	switch k {
	case KindTransient:
		return "transient"
	case KindDurable:
		return "durable"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ParseKind maps "transient" or "durable" to its Kind.
func ParseKind(s string) (Kind, error) {
	switch s {
	case "transient":
		return KindTransient, nil
	case "durable":
		return KindDurable, nil
	}
	return 0, fmt.Errorf("unknown topic kind %q (want transient or durable)", s)
}

// Role is what a successful AUTH made the connection.
type Role uint8

const (
	RoleAdmin Role = 1 // may do everything
	RoleUser  Role = 2 // may use the topics it holds roles on (GRANT), as those roles allow
)

// Acks is a producer's acknowledgement level.
type Acks uint8

const (
	AcksNone    Acks = 0 // no response unless the batch is refused
	AcksWritten Acks = 1 // answered once stored (ring or page cache)
	AcksDurable Acks = 2 // answered once fsynced (durable topics; transient treats it as written)
)

// PartitionAny in a PRODUCE asks the broker to choose (round robin); in a SUBSCRIBE it means
// every partition.
const PartitionAny int32 = -1

// Hello is the body of a HELLO request.
type Hello struct {
	ClientName    string
	ClientVersion string
}

func (m *Hello) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, m.ClientName)
	return AppendString(dst, m.ClientVersion)
}

func (m *Hello) Decode(b []byte) error {
	r := NewReader(b)
	m.ClientName = r.String(MaxClientName, "client name")
	m.ClientVersion = r.String(MaxClientName, "client version")
	return r.Done("HELLO")
}

// HelloResponse answers HELLO with the broker's limits.
type HelloResponse struct {
	ProtocolVersion uint8
	BrokerVersion   string
	Limits          Limits
}

func (m *HelloResponse) AppendTo(dst []byte) []byte {
	dst = append(dst, m.ProtocolVersion)
	dst = AppendString(dst, m.BrokerVersion)
	dst = AppendU32(dst, uint32(m.Limits.MaxFrame))
	dst = AppendU32(dst, uint32(m.Limits.MaxBatch))
	dst = AppendU32(dst, uint32(m.Limits.MaxMessage))
	dst = AppendU32(dst, uint32(m.Limits.PreAuthMaxFrame))
	return AppendU32(dst, uint32(m.Limits.AuthTimeout/time.Millisecond))
}

func (m *HelloResponse) Decode(b []byte) error {
	r := NewReader(b)
	m.ProtocolVersion = r.U8()
	m.BrokerVersion = r.String(MaxClientName, "broker version")
	m.Limits.MaxFrame = int(r.U32())
	m.Limits.MaxBatch = int(r.U32())
	m.Limits.MaxMessage = int(r.U32())
	m.Limits.PreAuthMaxFrame = int(r.U32())
	m.Limits.AuthTimeout = time.Duration(r.U32()) * time.Millisecond
	return r.Done("HELLO response")
}

// Auth is the body of an AUTH request.
type Auth struct {
	User     string
	Password string
}

func (m *Auth) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, m.User)
	return AppendString(dst, m.Password)
}

func (m *Auth) Decode(b []byte) error {
	r := NewReader(b)
	m.User = r.String(MaxUser, "user")
	m.Password = r.String(MaxPassword, "password")
	return r.Done("AUTH")
}

// AuthResponse answers a successful AUTH.
type AuthResponse struct{ Role Role }

func (m *AuthResponse) AppendTo(dst []byte) []byte { return append(dst, byte(m.Role)) }

func (m *AuthResponse) Decode(b []byte) error {
	r := NewReader(b)
	m.Role = Role(r.U8())
	return r.Done("AUTH response")
}

// ErrorBody is the body of an ERROR frame.
type ErrorBody struct {
	Code    Code
	Message string
}

func (m *ErrorBody) AppendTo(dst []byte) []byte {
	dst = AppendU16(dst, uint16(m.Code))
	msg := m.Message
	if len(msg) > MaxErrorText {
		msg = msg[:MaxErrorText]
	}
	return AppendString(dst, msg)
}

func (m *ErrorBody) Decode(b []byte) error {
	r := NewReader(b)
	m.Code = Code(r.U16())
	m.Message = r.String(MaxErrorText, "error message")
	return r.Done("ERROR")
}

// checkName records the error of a name rule (ValidGroupName, ...) as the decoder's error,
// unless the body already failed to decode.
func checkName(r *Reader, err error) {
	if err != nil && r.Err() == nil {
		r.Fail(fmt.Errorf("%w: %w", ErrMalformed, err))
	}
}

// NoBody checks the body of a frame that has none (a PING request, and the responses that
// carry nothing): any byte in it is a trailing byte, which makes the request invalid.
func NoBody(b []byte) error {
	if len(b) != 0 {
		return fmt.Errorf("%w: the body must be empty, got %d trailing bytes", ErrMalformed, len(b))
	}
	return nil
}

// Option is one key=value topic option (for example retention.bytes=1073741824).
type Option struct {
	Key   string
	Value string
}

func appendOptions(dst []byte, opts []Option) []byte {
	dst = AppendU16(dst, uint16(len(opts)))
	for _, o := range opts {
		dst = AppendString(dst, o.Key)
		dst = AppendString(dst, o.Value)
	}
	return dst
}

func readOptions(r *Reader) []Option {
	n := int(r.U16())
	if r.Err() == nil && n > MaxOptions {
		r.Fail(fmt.Errorf("%w: %d options, limit %d", ErrMalformed, n, MaxOptions))
		return nil
	}
	if n == 0 || r.Err() != nil {
		return nil
	}
	opts := make([]Option, 0, n)
	for i := 0; i < n && r.Err() == nil; i++ {
		opts = append(opts, Option{Key: r.String(MaxOptionKey, "option key"), Value: r.String(MaxOptionValue, "option value")})
	}
	return opts
}

// CreateTopic is the body of a CREATE_TOPIC request (admin only).
type CreateTopic struct {
	Name       string
	Kind       Kind
	Partitions uint32
	User       string // the topic's user; created if new, else Password must match it
	Password   string
	Options    []Option
}

func (m *CreateTopic) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, m.Name)
	dst = append(dst, byte(m.Kind))
	dst = AppendU32(dst, m.Partitions)
	dst = AppendString(dst, m.User)
	dst = AppendString(dst, m.Password)
	return appendOptions(dst, m.Options)
}

func (m *CreateTopic) Decode(b []byte) error {
	r := NewReader(b)
	m.Name = r.String(MaxTopicName, "topic name")
	m.Kind = Kind(r.U8())
	m.Partitions = r.U32()
	m.User = r.String(MaxUser, "user")
	m.Password = r.String(MaxPassword, "password")
	m.Options = readOptions(&r)
	return r.Done("CREATE_TOPIC")
}

// TopicName is the body of DELETE_TOPIC and STATS requests: one topic name (empty in STATS
// means every topic the caller may see).
type TopicName struct{ Name string }

func (m *TopicName) AppendTo(dst []byte) []byte { return AppendString(dst, m.Name) }

func (m *TopicName) Decode(b []byte) error {
	r := NewReader(b)
	m.Name = r.String(MaxTopicName, "topic name")
	return r.Done("topic name body")
}

// MetadataRequest lists topic names to describe; none means every topic the caller may see.
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

// Counter is one named statistic.
type Counter struct {
	Name  string
	Value uint64
}

// TopicStats holds a topic's counters, named so that new ones can be added without a new
// protocol version.
type TopicStats struct {
	Name     string
	Counters []Counter
}

// Get returns the value of the named counter and whether it is present.
func (t *TopicStats) Get(name string) (uint64, bool) {
	for _, c := range t.Counters {
		if c.Name == name {
			return c.Value, true
		}
	}
	return 0, false
}

// StatsResponse answers STATS.
type StatsResponse struct{ Topics []TopicStats }

func (m *StatsResponse) AppendTo(dst []byte) []byte {
	dst = AppendU32(dst, uint32(len(m.Topics)))
	for i := range m.Topics {
		t := &m.Topics[i]
		dst = AppendString(dst, t.Name)
		dst = AppendU16(dst, uint16(len(t.Counters)))
		for _, c := range t.Counters {
			dst = AppendString(dst, c.Name)
			dst = AppendU64(dst, c.Value)
		}
	}
	return dst
}

func (m *StatsResponse) Decode(b []byte) error {
	r := NewReader(b)
	n := r.U32()
	if r.Err() == nil && uint64(n)*4 > uint64(r.Len()) {
		r.Fail(fmt.Errorf("%w: %d topics in %d bytes", ErrMalformed, n, r.Len()))
	}
	m.Topics = nil
	for i := uint32(0); i < n && r.Err() == nil; i++ {
		var t TopicStats
		t.Name = r.String(MaxTopicName, "topic name")
		nc := int(r.U16())
		if r.Err() == nil && nc*10 > r.Len() {
			r.Fail(fmt.Errorf("%w: %d counters in %d bytes", ErrMalformed, nc, r.Len()))
		}
		for j := 0; j < nc && r.Err() == nil; j++ {
			t.Counters = append(t.Counters, Counter{Name: r.String(MaxOptionKey, "counter name"), Value: r.U64()})
		}
		m.Topics = append(m.Topics, t)
	}
	return r.Done("STATS response")
}

// Produce is the body of a PRODUCE request. Topic and Batch alias the frame after Decode.
type Produce struct {
	Topic     []byte
	Partition int32 // PartitionAny: broker chooses round robin
	Acks      Acks
	Batch     []byte // one whole record batch, base offset 0
}

// AppendProduceHeader appends the part of a PRODUCE body before the batch, for writers that
// build the batch in place after it.
func AppendProduceHeader(dst []byte, topic string, partition int32, acks Acks) []byte {
	dst = AppendString(dst, topic)
	dst = AppendI32(dst, partition)
	return append(dst, byte(acks))
}

func (m *Produce) AppendTo(dst []byte) []byte {
	dst = AppendU16(dst, uint16(len(m.Topic)))
	dst = append(dst, m.Topic...)
	dst = AppendI32(dst, m.Partition)
	dst = append(dst, byte(m.Acks))
	return append(dst, m.Batch...)
}

// MaxProduceHeader is the longest part of a PRODUCE body before its batch.
const MaxProduceHeader = 2 + MaxTopicName + 4 + 1

func (m *Produce) Decode(b []byte) error {
	n, err := m.DecodeHeader(b)
	if err != nil {
		return err
	}
	m.Batch = b[n:]
	return nil
}

// DecodeHeader decodes the part of a PRODUCE body before the batch (topic, partition, acks)
// from the start of b, which may go on into the batch, and returns its length. It leaves
// m.Batch alone. It lets the broker route a batch before the batch is read.
func (m *Produce) DecodeHeader(b []byte) (int, error) {
	r := NewReader(b)
	m.Topic = r.StringBytes(MaxTopicName, "topic name")
	m.Partition = r.I32()
	m.Acks = Acks(r.U8())
	if r.Err() == nil && m.Acks > AcksDurable {
		r.Fail(fmt.Errorf("%w: acks level %d", ErrMalformed, m.Acks))
	}
	if err := r.Err(); err != nil {
		return 0, err
	}
	return len(b) - len(r.Rest()), nil
}

// ProduceResponse acknowledges a batch: the partition it went to and the offset of its first
// record.
type ProduceResponse struct {
	Partition  uint32
	BaseOffset int64
}

// ProduceResponseSize is the fixed size of a PRODUCE response body.
const ProduceResponseSize = 12

func (m *ProduceResponse) AppendTo(dst []byte) []byte {
	dst = AppendU32(dst, m.Partition)
	return AppendI64(dst, m.BaseOffset)
}

func (m *ProduceResponse) Decode(b []byte) error {
	r := NewReader(b)
	m.Partition = r.U32()
	m.BaseOffset = r.I64()
	return r.Done("PRODUCE response")
}

// Subscribe is the body of a SUBSCRIBE request for push delivery from a transient topic.
type Subscribe struct {
	Topic      string
	Partition  int32  // PartitionAny for every partition
	QueueGroup string // empty: fan-out (every subscriber gets every message); else a queue group
	Credit     uint32 // initial credit in bytes of batches
}

func (m *Subscribe) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, m.Topic)
	dst = AppendI32(dst, m.Partition)
	dst = AppendString(dst, m.QueueGroup)
	return AppendU32(dst, m.Credit)
}

func (m *Subscribe) Decode(b []byte) error {
	r := NewReader(b)
	m.Topic = r.String(MaxTopicName, "topic name")
	m.Partition = r.I32()
	m.QueueGroup = r.String(MaxGroupName, "group")
	m.Credit = r.U32()
	if m.QueueGroup != "" {
		checkName(&r, ValidGroupName(m.QueueGroup))
	}
	return r.Done("SUBSCRIBE")
}

// SubscribeResponse answers SUBSCRIBE. DELIVER frames of the subscription carry its id as
// their correlation id.
type SubscribeResponse struct {
	SubscriptionID uint32
	Partitions     uint32 // number of partitions subscribed
}

func (m *SubscribeResponse) AppendTo(dst []byte) []byte {
	dst = AppendU32(dst, m.SubscriptionID)
	return AppendU32(dst, m.Partitions)
}

func (m *SubscribeResponse) Decode(b []byte) error {
	r := NewReader(b)
	m.SubscriptionID = r.U32()
	m.Partitions = r.U32()
	return r.Done("SUBSCRIBE response")
}

// Credit is the body of CREDIT: it adds Bytes to a subscription's credit.
type Credit struct {
	SubscriptionID uint32
	Bytes          uint32
}

func (m *Credit) AppendTo(dst []byte) []byte {
	dst = AppendU32(dst, m.SubscriptionID)
	return AppendU32(dst, m.Bytes)
}

func (m *Credit) Decode(b []byte) error {
	r := NewReader(b)
	m.SubscriptionID = r.U32()
	m.Bytes = r.U32()
	return r.Done("CREDIT")
}

// Unsubscribe is the body of UNSUBSCRIBE.
type Unsubscribe struct{ SubscriptionID uint32 }

func (m *Unsubscribe) AppendTo(dst []byte) []byte { return AppendU32(dst, m.SubscriptionID) }

func (m *Unsubscribe) Decode(b []byte) error {
	r := NewReader(b)
	m.SubscriptionID = r.U32()
	return r.Done("UNSUBSCRIBE")
}

// Deliver is the body of a DELIVER frame (broker push; its correlation id is the subscription
// id). Dropped counts the messages of this partition the subscriber lost since its previous
// DELIVER because it fell too far behind. Batch aliases the frame after Decode.
type Deliver struct {
	Partition uint32
	Dropped   uint64
	Batch     []byte
}

// DeliverHeaderSize is the size of a DELIVER body before its batch.
const DeliverHeaderSize = 12

// PutDeliverHeader writes the part of a DELIVER body before the batch into b.
func PutDeliverHeader(b []byte, partition uint32, dropped uint64) {
	_ = b[DeliverHeaderSize-1]
	b[0], b[1], b[2], b[3] = byte(partition>>24), byte(partition>>16), byte(partition>>8), byte(partition)
	for i := 0; i < 8; i++ {
		b[4+i] = byte(dropped >> (56 - 8*i))
	}
}

func (m *Deliver) AppendTo(dst []byte) []byte {
	dst = AppendU32(dst, m.Partition)
	dst = AppendU64(dst, m.Dropped)
	return append(dst, m.Batch...)
}

func (m *Deliver) Decode(b []byte) error {
	r := NewReader(b)
	m.Partition = r.U32()
	m.Dropped = r.U64()
	m.Batch = r.Rest()
	return r.Err()
}

// Isolation says how far a FETCH may read.
type Isolation uint8

const (
	IsolationDurable Isolation = 0 // only data that is as safe as the topic's fsync policy makes it
	IsolationWritten Isolation = 1 // anything written, even if not yet fsynced
)

// Fetch is the body of a FETCH request (durable topics).
type Fetch struct {
	Topic     string
	Partition uint32
	Offset    int64
	MaxBytes  uint32
	MaxWaitMs uint32
	Isolation Isolation
}

func (m *Fetch) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, m.Topic)
	dst = AppendU32(dst, m.Partition)
	dst = AppendI64(dst, m.Offset)
	dst = AppendU32(dst, m.MaxBytes)
	dst = AppendU32(dst, m.MaxWaitMs)
	return append(dst, byte(m.Isolation))
}

func (m *Fetch) Decode(b []byte) error {
	r := NewReader(b)
	m.Topic = r.String(MaxTopicName, "topic name")
	m.Partition = r.U32()
	m.Offset = r.I64()
	m.MaxBytes = r.U32()
	m.MaxWaitMs = r.U32()
	m.Isolation = Isolation(r.U8())
	return r.Done("FETCH")
}

// FetchResponse answers FETCH: offsets of the partition, then zero or more whole batches.
// Batches aliases the frame after Decode.
type FetchResponse struct {
	Partition      uint32
	HighWatermark  int64 // next offset a consumer can read up to
	LogStartOffset int64 // oldest offset still stored
	Batches        []byte
}

// FetchResponseHeaderSize is the size of a FETCH response body before its batches.
const FetchResponseHeaderSize = 20

func (m *FetchResponse) AppendTo(dst []byte) []byte {
	dst = AppendU32(dst, m.Partition)
	dst = AppendI64(dst, m.HighWatermark)
	dst = AppendI64(dst, m.LogStartOffset)
	return append(dst, m.Batches...)
}

func (m *FetchResponse) Decode(b []byte) error {
	r := NewReader(b)
	m.Partition = r.U32()
	m.HighWatermark = r.I64()
	m.LogStartOffset = r.I64()
	m.Batches = r.Rest()
	return r.Err()
}

// OffsetMode selects what LIST_OFFSETS looks up.
type OffsetMode uint8

const (
	OffsetEarliest  OffsetMode = 1
	OffsetLatest    OffsetMode = 2
	OffsetTimestamp OffsetMode = 3 // first offset whose timestamp is >= Timestamp
)

// ListOffsets is the body of a LIST_OFFSETS request.
type ListOffsets struct {
	Topic     string
	Partition uint32
	Mode      OffsetMode
	Timestamp int64 // unix ms, for OffsetTimestamp
}

func (m *ListOffsets) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, m.Topic)
	dst = AppendU32(dst, m.Partition)
	dst = append(dst, byte(m.Mode))
	return AppendI64(dst, m.Timestamp)
}

func (m *ListOffsets) Decode(b []byte) error {
	r := NewReader(b)
	m.Topic = r.String(MaxTopicName, "topic name")
	m.Partition = r.U32()
	m.Mode = OffsetMode(r.U8())
	m.Timestamp = r.I64()
	return r.Done("LIST_OFFSETS")
}

// OffsetResponse answers LIST_OFFSETS and FETCH_COMMITTED. In FETCH_COMMITTED, -1 means the
// group has committed nothing for the partition.
type OffsetResponse struct{ Offset int64 }

func (m *OffsetResponse) AppendTo(dst []byte) []byte { return AppendI64(dst, m.Offset) }

func (m *OffsetResponse) Decode(b []byte) error {
	r := NewReader(b)
	m.Offset = r.I64()
	return r.Done("offset response")
}

// CommitOffset is the body of COMMIT_OFFSET: the group's next offset to read.
type CommitOffset struct {
	Group     string
	Topic     string
	Partition uint32
	Offset    int64
}

func (m *CommitOffset) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, m.Group)
	dst = AppendString(dst, m.Topic)
	dst = AppendU32(dst, m.Partition)
	return AppendI64(dst, m.Offset)
}

func (m *CommitOffset) Decode(b []byte) error {
	r := NewReader(b)
	m.Group = r.String(MaxGroupName, "group")
	m.Topic = r.String(MaxTopicName, "topic name")
	m.Partition = r.U32()
	m.Offset = r.I64()
	checkName(&r, ValidGroupName(m.Group))
	return r.Done("COMMIT_OFFSET")
}

// FetchCommitted is the body of FETCH_COMMITTED.
type FetchCommitted struct {
	Group     string
	Topic     string
	Partition uint32
}

func (m *FetchCommitted) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, m.Group)
	dst = AppendString(dst, m.Topic)
	return AppendU32(dst, m.Partition)
}

func (m *FetchCommitted) Decode(b []byte) error {
	r := NewReader(b)
	m.Group = r.String(MaxGroupName, "group")
	m.Topic = r.String(MaxTopicName, "topic name")
	m.Partition = r.U32()
	checkName(&r, ValidGroupName(m.Group))
	return r.Done("FETCH_COMMITTED")
}
