package broker

import (
	"sort"
	"sync"
	"sync/atomic"

	"github.com/lightq/lightq/broker/ring"
	"github.com/lightq/lightq/log/producerstate"
	"github.com/lightq/lightq/wire"
)

// topic is a live topic, transient or durable. Its immutable fields are set at creation; mu
// guards the partitions' subscriber tables and queue groups (lock order: see doc.go).
type topic struct {
	name    string
	kind    wire.Kind
	user    atomic.Pointer[string] // the user CREATE_TOPIC named, for METADATA ("" once deleted)
	options []wire.Option
	parts   []*partition
	rr      atomic.Uint32 // round-robin partition chooser
	deleted atomic.Bool
	stats   topicStats
	// cluster is set for a topic of the cluster's metadata (clustertopics.go), nil for the
	// broker's own. Immutable.
	cluster *clusterTopic

	mu sync.Mutex
}

// partition is one partition of a topic: its ring (transient) or log (durable), and who to
// wake when it grows.
type partition struct {
	id   uint32
	ring *ring.Ring // transient topics
	// dl is a durable partition's log (dlog reads it): set before the topic is published and
	// never changed, but in a replicated topic's partition, which gets one when this broker
	// gains a replica (clustertopics.go) and a new one when it gains it again after losing it.
	// Once set it is never nil again: a lost replica's stays, closed (reads fail with the
	// log's ErrClosed), so that code loading it twice never meets nil the second time.
	dl   atomic.Pointer[durablePart]
	repl *replPart // a replicated topic's partition (replicated.go); nil otherwise
	// logf reports the log's and the syncer's warnings, tagged with topic and partition.
	// Set once by openDurable before the topic is published, then only read (by the
	// partition's syncer); nil for a transient partition.
	logf func(format string, args ...any)

	// wakers is the copy-on-write list of connections with a subscription here; producers
	// read it without locks. waiterCount (under topic.mu) is the source it is rebuilt from.
	wakers      atomic.Pointer[[]*conn]
	waiterCount map[*conn]int
	queueGroups map[string]*queueGroup // under topic.mu

	// idem is a transient partition's producer state (idempotent produce; a durable
	// partition's is in its log), created with the first batch with a producer id. idemMu
	// guards it; it is a leaf, taken alone or under the ring's writer lock (between
	// Reserve and Commit), never across I/O.
	idemMu sync.Mutex
	idem   *producerstate.Table

	stats   partitionStats // for /metrics, counted while metrics are on (metrics.go)
	metrics *brokerMetrics // nil: metrics off; set before the partition's syncer starts
}

// dlog is the partition's durable log (see dl): nil for a transient partition and for a
// replicated partition this broker never held. Safe from any goroutine.
func (p *partition) dlog() *durablePart { return p.dl.Load() }

// queueGroup is a queue group's shared position in one partition: members claim batches from
// it, so each batch goes to one member. (Not a consumer group: those are named in
// COMMIT_OFFSET and live in offsetStore.)
type queueGroup struct {
	mu      sync.Mutex // guards seq and nextMsg: members on different loops claim batches
	seq     uint64     // next batch to claim
	nextMsg uint64     // message the queue group expects next; a gap is reported as dropped
	members int        // under topic.mu
}

// topicStats are the counters STATS reports, the original LightQ's plus drop counts.
type topicStats struct {
	msgsIn, bytesIn, msgsOut, bytesOut atomic.Uint64
	batchesIn, rejected, dropped       atomic.Uint64
	duplicates                         atomic.Uint64 // batches answered as already stored
	publishers, subscribers            atomic.Int64
}

func newTopic(name string, kind wire.Kind, user string, options []wire.Option, partitions int, ringBytes, ringSlots int) *topic {
	t := &topic{name: name, kind: kind, options: options}
	t.user.Store(&user)
	for i := 0; i < partitions; i++ {
		p := &partition{id: uint32(i), waiterCount: map[*conn]int{}, queueGroups: map[string]*queueGroup{}}
		if kind == wire.KindTransient {
			p.ring = ring.New(ringBytes, ringSlots)
		}
		p.wakers.Store(&[]*conn{})
		t.parts = append(t.parts, p)
	}
	return t
}

// addWaiter registers c to be woken when p grows. Caller holds t.mu.
func (p *partition) addWaiter(c *conn) {
	p.waiterCount[c]++
	p.rebuildWakers()
}

// removeWaiter undoes one addWaiter. Caller holds t.mu.
func (p *partition) removeWaiter(c *conn) {
	if p.waiterCount[c]--; p.waiterCount[c] <= 0 {
		delete(p.waiterCount, c)
	}
	p.rebuildWakers()
}

func (p *partition) rebuildWakers() {
	list := make([]*conn, 0, len(p.waiterCount))
	for c := range p.waiterCount {
		list = append(list, c)
	}
	p.wakers.Store(&list)
}

// wakeAll asks every subscribed connection's event loop to deliver. Safe from any goroutine.
func (p *partition) wakeAll() {
	for _, c := range *p.wakers.Load() {
		c.wake()
	}
}

// ringMemory is the memory the topic's rings preallocated: arenas and slot indexes.
func (t *topic) ringMemory() int64 {
	var n int64
	for _, p := range t.parts {
		if p.ring != nil {
			n += p.ring.Memory()
		}
	}
	return n
}

// queueSize is the number of messages held in the topic's rings or logs.
func (t *topic) queueSize() uint64 {
	var n uint64
	for _, p := range t.parts {
		switch {
		case p.ring != nil:
			oldest, next := p.ring.Messages()
			n += next - oldest
		case p.dlog() != nil && p.dlog().log != nil:
			n += uint64(p.dlog().log.NextOffset() - p.dlog().log.StartOffset())
		}
	}
	return n
}

// closeLogs stops the syncers and closes the logs of a durable topic, and gives back the
// producer states of a transient one (the topic is going away).
func (t *topic) closeLogs() error {
	var first error
	for _, p := range t.parts {
		p.idemMu.Lock()
		if p.idem != nil {
			p.idem.Release()
		}
		p.idemMu.Unlock()
		if p.dlog() != nil {
			if err := p.dlog().close(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

func (t *topic) counters() []wire.Counter {
	s := &t.stats
	return []wire.Counter{
		{Name: "messages_in", Value: s.msgsIn.Load()},
		{Name: "messages_out", Value: s.msgsOut.Load()},
		{Name: "bytes_in", Value: s.bytesIn.Load()},
		{Name: "bytes_out", Value: s.bytesOut.Load()},
		{Name: "batches_in", Value: s.batchesIn.Load()},
		{Name: "publishers", Value: uint64(max(s.publishers.Load(), 0))},
		{Name: "subscribers", Value: uint64(max(s.subscribers.Load(), 0))},
		{Name: "queue_size", Value: t.queueSize()},
		{Name: "dropped_messages", Value: s.dropped.Load()},
		{Name: "rejected_batches", Value: s.rejected.Load()},
		{Name: "duplicate_batches", Value: s.duplicates.Load()},
		{Name: "producer_states", Value: uint64(t.producerStates())},
	}
}

// producerStates is the number of producer states the topic's partitions hold.
func (t *topic) producerStates() int {
	n := 0
	for _, p := range t.parts {
		switch {
		case p.dlog() != nil && p.dlog().log != nil:
			n += p.dlog().log.ProducerStates()
		case p.ring != nil:
			p.idemMu.Lock()
			if p.idem != nil {
				n += p.idem.Len()
			}
			p.idemMu.Unlock()
		}
	}
	return n
}

func (t *topic) metadata() wire.TopicMetadata {
	md := wire.TopicMetadata{Name: t.name, Kind: t.kind, User: *t.user.Load(), Options: t.options}
	for _, p := range t.parts {
		pm := wire.PartitionMetadata{ID: p.id}
		switch {
		case p.ring != nil:
			oldest, next := p.ring.Messages()
			pm.StartOffset, pm.EndOffset = int64(oldest), int64(next)
		case p.dlog() != nil && p.dlog().log != nil:
			pm.StartOffset, pm.EndOffset = p.dlog().log.StartOffset(), p.dlog().visibleLimit(wire.IsolationDurable)
		}
		md.Partitions = append(md.Partitions, pm)
	}
	return md
}

// sortedTopics lists a topic table in name order (METADATA and STATS answer in it).
func sortedTopics(m map[string]*topic) []*topic {
	out := make([]*topic, 0, len(m))
	for _, t := range m {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}
