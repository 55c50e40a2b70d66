package broker

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lightq/lightq/wire"
)

// stateCollector reads what /metrics shows of the broker's state when Prometheus scrapes,
// from what the broker keeps anyway: the topic table (copy-on-write, no lock), partition
// counters and log offsets (atomics), ring spans (lock-free, ring.Span), log sizes (the
// segment list's read lock, one pass), connection sets (Server.connsMu, held to read four
// lengths) and committed offsets (offsetlog.Store.Get per tracked group and partition). No
// scrape holds a lock an event loop waits for longer than a map look-up or a loop over a
// partition's segments, and nothing here runs on an event loop. A cluster member's series
// (metrics_cluster.go) read each replica's status, which waits for its Raft loop.
//
// Series come and go with what they describe: a partition's with its topic, a group's with
// its tracking (groupTracker).
type stateCollector struct{ s *Server }

var (
	partLabels  = []string{"topic", "partition"}
	groupLabels = []string{"topic", "group", "partition"}

	descBuildInfo = prometheus.NewDesc("lightq_build_info", "The broker's version (as HELLO announces it); always 1.", []string{"version"}, nil)

	descMsgsIn   = prometheus.NewDesc("lightq_partition_messages_in_total", "Messages stored in the partition (counted per accepted batch).", partLabels, nil)
	descBytesIn  = prometheus.NewDesc("lightq_partition_bytes_in_total", "Bytes of record batches stored in the partition (batch headers included).", partLabels, nil)
	descMsgsOut  = prometheus.NewDesc("lightq_partition_messages_out_total", "Messages sent from the partition: delivered to subscribers (transient; once per subscriber) or in FETCH responses (durable; once per response).", partLabels, nil)
	descBytesOut = prometheus.NewDesc("lightq_partition_bytes_out_total", "Bytes of record batches sent from the partition, counted like lightq_partition_messages_out_total.", partLabels, nil)
	descStart    = prometheus.NewDesc("lightq_partition_start_offset", "Offset of the oldest message the partition holds (its ring, or its log after retention).", partLabels, nil)
	descEnd      = prometheus.NewDesc("lightq_partition_end_offset", "Offset the partition's next message gets; for a durable topic with fsync=always, the end of what is fsynced (what consumers can read, as METADATA reports).", partLabels, nil)
	descLogSize  = prometheus.NewDesc("lightq_partition_log_size_bytes", "Bytes of record batches in a durable partition's segment files (what retention.bytes counts; index files excluded).", partLabels, nil)
	descDropped  = prometheus.NewDesc("lightq_partition_dropped_messages_total", "Messages of a transient partition that subscribers lost because the ring evicted them before they were sent (counted once per subscriber that lost them, as DELIVER's dropped field tells it).", partLabels, nil)

	descPublishers  = prometheus.NewDesc("lightq_topic_publishers", "Connections that have produced to the topic and are still open.", []string{"topic"}, nil)
	descSubscribers = prometheus.NewDesc("lightq_topic_subscribers", "Subscriptions to the (transient) topic.", []string{"topic"}, nil)
	descRejected    = prometheus.NewDesc("lightq_topic_rejected_batches_total", "Produced batches the topic refused (corrupt, invalid records, too large, storage errors).", []string{"topic"}, nil)

	descCommitted = prometheus.NewDesc("lightq_consumer_group_committed_offset", "The consumer group's committed offset in the partition (the next offset it will read); groups beyond metrics-max-groups are not shown.", groupLabels, nil)
	descLag       = prometheus.NewDesc("lightq_consumer_group_lag", "Messages between the consumer group's committed offset and the partition's end offset (lightq_partition_end_offset minus the committed offset, at least 0).", groupLabels, nil)
	descGroups    = prometheus.NewDesc("lightq_consumer_groups_tracked", "Consumer groups ((topic, group) pairs) /metrics shows; at most metrics-max-groups.", nil, nil)

	descConns   = prometheus.NewDesc("lightq_connections", "Open client connections, by state: unauthenticated (no successful AUTH yet) or authenticated.", []string{"state"}, nil)
	descStalled = prometheus.NewDesc("lightq_connections_stalled", "Connections the broker has stopped sending to, or reading requests from, because their queued output reached the high-water mark: it waits for them to read.", nil, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBuildInfo, descMsgsIn, descBytesIn, descMsgsOut, descBytesOut,
		descStart, descEnd, descLogSize, descDropped, descPublishers, descSubscribers, descRejected,
		descCommitted, descLag, descGroups, descConns, descStalled} {
		ch <- d
	}
	for _, d := range clusterDescs {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	ch <- prometheus.MustNewConstMetric(descBuildInfo, prometheus.GaugeValue, 1, Version)
	c.collectConnections(ch)
	topics := s.topics.Load()
	if topics == nil { // New is still loading them
		return
	}
	for _, t := range *topics {
		if !t.deleted.Load() {
			collectTopic(ch, t)
		}
	}
	c.collectGroups(ch, *topics)
	c.collectCluster(ch, *topics)
}

func (c *stateCollector) collectConnections(ch chan<- prometheus.Metric) {
	s := c.s
	s.connsMu.Lock()
	open, unauth, stalled := len(s.conns), len(s.preauth), len(s.stalled)
	s.connsMu.Unlock()
	ch <- prometheus.MustNewConstMetric(descConns, prometheus.GaugeValue, float64(unauth), "unauthenticated")
	ch <- prometheus.MustNewConstMetric(descConns, prometheus.GaugeValue, float64(max(open-unauth, 0)), "authenticated")
	ch <- prometheus.MustNewConstMetric(descStalled, prometheus.GaugeValue, float64(stalled))
}

func collectTopic(ch chan<- prometheus.Metric, t *topic) {
	st := &t.stats
	ch <- prometheus.MustNewConstMetric(descPublishers, prometheus.GaugeValue, float64(max(st.publishers.Load(), 0)), t.name)
	if t.kind == wire.KindTransient {
		ch <- prometheus.MustNewConstMetric(descSubscribers, prometheus.GaugeValue, float64(max(st.subscribers.Load(), 0)), t.name)
	}
	ch <- prometheus.MustNewConstMetric(descRejected, prometheus.CounterValue, float64(st.rejected.Load()), t.name)
	for _, p := range t.parts {
		id := strconv.FormatUint(uint64(p.id), 10)
		ps := &p.stats
		counter := func(d *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), t.name, id)
		}
		gauge := func(d *prometheus.Desc, v int64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), t.name, id)
		}
		counter(descMsgsIn, ps.msgsIn.Load())
		counter(descBytesIn, ps.bytesIn.Load())
		counter(descMsgsOut, ps.msgsOut.Load())
		counter(descBytesOut, ps.bytesOut.Load())
		switch {
		case p.ring != nil:
			oldest, next := p.ring.Span()
			gauge(descStart, int64(oldest))
			gauge(descEnd, int64(next))
			counter(descDropped, ps.dropped.Load())
		case p.dlog() != nil && p.dlog().log != nil: // not a partition that failed recovery
			gauge(descStart, p.dlog().log.StartOffset())
			gauge(descEnd, p.dlog().visibleLimit(wire.IsolationDurable))
			gauge(descLogSize, p.dlog().log.Size())
		}
	}
}

// collectGroups shows each tracked group's committed offset and lag per partition, and
// untracks the pairs that have gone stale (see groupTracker).
func (c *stateCollector) collectGroups(ch chan<- prometheus.Metric, topics map[string]*topic) {
	s := c.s
	g := s.metrics.groups
	tracked := g.snapshot()
	ch <- prometheus.MustNewConstMetric(descGroups, prometheus.GaugeValue, float64(len(tracked)))
	var stale []trackedGroup
	for k := range tracked {
		t := s.liveGroupTopic(topics, k)
		if t == nil {
			stale = append(stale, k)
			continue
		}
		shown := false
		for _, p := range t.parts {
			off, ok := k.store.Get(k.group, p.id)
			if !ok || p.dlog().log == nil {
				continue
			}
			shown = true
			id := strconv.FormatUint(uint64(p.id), 10)
			end := p.dlog().visibleLimit(wire.IsolationDurable)
			ch <- prometheus.MustNewConstMetric(descCommitted, prometheus.GaugeValue, float64(off), k.topic, k.group, id)
			ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(max(end-off, 0)), k.topic, k.group, id)
		}
		if !shown {
			stale = append(stale, k)
		}
	}
	g.drop(stale, func(k trackedGroup) bool {
		t := s.liveGroupTopic(*s.topics.Load(), k)
		if t == nil {
			return true
		}
		for _, p := range t.parts {
			if _, ok := k.store.Get(k.group, p.id); ok {
				return false
			}
		}
		return true
	})
}

// liveGroupTopic returns the topic of a tracked pair, or nil when the topic is gone or is
// another topic of the same name (its offsets store is not the one the pair was noted in).
func (s *Server) liveGroupTopic(topics map[string]*topic, k trackedGroup) *topic {
	t := topics[k.topic]
	if t == nil || t.deleted.Load() || t.kind != wire.KindDurable {
		return nil
	}
	if to := s.offsets.lookup(k.topic); to == nil || to.st != k.store {
		return nil
	}
	return t
}
