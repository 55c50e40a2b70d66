package broker

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/cpu"

	"github.com/lightq/lightq/broker/auth"
)

// This file holds what the broker counts for /metrics as it works (Config.HTTPAddr set):
// per-partition counters, latency histograms and event counters. Everything else /metrics
// shows (offsets, log sizes, connection counts, committed offsets) is read from the broker's
// own state when Prometheus scrapes, in metrics_collect.go.
//
// Rules, because these calls sit on the event loops' hot path:
//   - nothing per message: one call per batch, per FETCH response, per fsync, per login;
//   - no lookup by label there: every series is resolved once (histograms at New, partition
//     counters with the partition), so an observation is a few atomic adds (client_golang's
//     histogram is lock-free; a scrape never blocks an observer);
//   - with metrics off (s.metrics nil) each hook is a nil check and nothing else, so the hot
//     path does what it did before;
//   - label values are chosen by the broker (durability, path, reason), never by a client.
//     Topic names come from the admin; group names come from clients and are capped
//     (groupTracker).

// latencyBuckets are the upper bounds of every latency histogram: 10 µs to 30 s, three per
// decade. A produce ack on this 2-core VM takes tens of µs, an fsync ~3.5 ms, a long-polled
// FETCH up to its max wait (at most 30 s).
var latencyBuckets = []float64{
	.00001, .000025, .00005, .0001, .00025, .0005,
	.001, .0025, .005, .01, .025, .05,
	.1, .25, .5, 1, 2.5, 5, 10, 30,
}

// Label values of lightq_produce_ack_duration_seconds: what the acknowledgement waited for.
const (
	ackTransient = iota // stored in a transient partition's ring
	ackWritten          // written to a durable partition's log (page cache)
	ackFsynced          // written and fsynced (fsync=always, or acks=2)
	ackKinds
)

// Label values of lightq_fetch_duration_seconds: how a FETCH was served.
const (
	fetchHot      = iota // its data was in the page cache (or there was none and it did not wait)
	fetchCold            // an I/O worker read its data into the page cache first
	fetchLongPoll        // it waited for data, or for its max wait, at the end of the log
	fetchPaths
)

// brokerMetrics is the broker's live metrics. It exists only when metrics are on. Its
// histograms and counters are concurrency-safe (atomics); its fields are set in
// newBrokerMetrics and never change.
type brokerMetrics struct {
	produceAck [ackKinds]prometheus.Observer
	fsync      prometheus.Observer
	fetch      [fetchPaths]prometheus.Observer

	authFailures       prometheus.Counter
	loginsBlocked      prometheus.Counter // TOO_MANY_ATTEMPTS
	loginsBusy         prometheus.Counter // RESOURCE_LIMIT: too many logins in flight
	subscriberStalls   prometheus.Counter
	connectionsRefused prometheus.Counter

	groups *groupTracker
}

// partitionStats are one partition's counters for /metrics. They live and die with the
// partition (so its series appear when the topic is created and go when it is deleted) and
// are read at scrape time. Updated with atomics from any loop, only while metrics are on:
// the producers' loops add to the first line, the consumers' loops to the second, which is
// padded off so that the two sides do not contend for one cache line.
type partitionStats struct {
	msgsIn, bytesIn atomic.Uint64
	_               cpu.CacheLinePad
	msgsOut         atomic.Uint64
	bytesOut        atomic.Uint64
	dropped         atomic.Uint64 // transient: messages subscribers lost
	_               cpu.CacheLinePad
}

// newBrokerMetrics creates the histograms and counters and registers them, with the
// collector of the broker's state (s), in reg.
func newBrokerMetrics(s *Server, reg *prometheus.Registry) *brokerMetrics {
	m := &brokerMetrics{groups: newGroupTracker(s.cfg.MetricsMaxGroups, func(format string, args ...any) {
		s.log.Warn().Msgf(format, args...)
	})}
	ack := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "lightq_produce_ack_duration_seconds",
		Help:    "Time from the broker reading a PRODUCE (the start of the event-loop turn that read it) to queueing its acknowledgement, by what the acknowledgement waited for: transient (stored in the ring), written (written to the log), fsynced (written and fsynced). Batches sent with acks 0 are not counted.",
		Buckets: latencyBuckets,
	}, []string{"durability"})
	for i, v := range [ackKinds]string{"transient", "written", "fsynced"} {
		m.produceAck[i] = ack.WithLabelValues(v)
	}
	fsync := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "lightq_fsync_duration_seconds",
		Help:    "Duration of one fsync of a durable partition's active segment by its syncer; one fsync covers every batch appended before it (group commit).",
		Buckets: latencyBuckets,
	})
	m.fsync = fsync
	fetch := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "lightq_fetch_duration_seconds",
		Help:    "Time from the broker reading a FETCH to its response starting to go out, by how it was served: hot (data in the page cache, answered at once), cold (read into the page cache by an I/O worker first), long_poll (waited at the end of the log for data or for its max wait).",
		Buckets: latencyBuckets,
	}, []string{"path"})
	for i, v := range [fetchPaths]string{"hot", "cold", "long_poll"} {
		m.fetch[i] = fetch.WithLabelValues(v)
	}
	m.authFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lightq_auth_failures_total",
		Help: "AUTH attempts whose user or password was wrong (checked and failed).",
	})
	throttled := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lightq_logins_throttled_total",
		Help: "AUTH attempts the login throttle answered with TOO_MANY_ATTEMPTS (reason blocked: too many failures; the failure that sets the block is also in lightq_auth_failures_total, later attempts are refused unchecked) or RESOURCE_LIMIT (reason busy: too many logins in progress).",
	}, []string{"reason"})
	m.loginsBlocked = throttled.WithLabelValues("blocked")
	m.loginsBusy = throttled.WithLabelValues("busy")
	m.subscriberStalls = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lightq_subscriber_stalls_total",
		Help: "Times deliveries to a connection stopped because its queued output reached the high-water mark (a slow subscriber); it loses the oldest messages if the ring moves on meanwhile.",
	})
	m.connectionsRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lightq_connections_refused_total",
		Help: "Connections refused with TOO_MANY_CONNECTIONS (max-connections or max-connections-per-addr reached).",
	})
	reg.MustRegister(ack, fsync, fetch, m.authFailures, throttled, m.subscriberStalls,
		m.connectionsRefused, m.groups.untracked, &stateCollector{s: s})
	return m
}

// Hooks. Each is called once per batch, response, fsync or event, on whatever goroutine did
// the work, and does nothing when metrics are off.

// countIn counts a batch of count messages and size bytes stored in p.
func (m *brokerMetrics) countIn(p *partition, count uint32, size int) {
	if m != nil {
		p.stats.msgsIn.Add(uint64(count))
		p.stats.bytesIn.Add(uint64(size))
	}
}

// countOut counts a batch sent to a consumer, and the messages it lost before it (dropped).
func (m *brokerMetrics) countOut(p *partition, count uint64, size int, dropped uint64) {
	if m != nil {
		p.stats.msgsOut.Add(count)
		p.stats.bytesOut.Add(uint64(size))
		if dropped > 0 {
			p.stats.dropped.Add(dropped)
		}
	}
}

// acked observes the time since start of a PRODUCE acknowledged now.
func (m *brokerMetrics) acked(kind int, start time.Time) {
	if m != nil && !start.IsZero() {
		m.produceAck[kind].Observe(time.Since(start).Seconds())
	}
}

// fetched observes the time since start of a FETCH whose response starts now.
func (m *brokerMetrics) fetched(path int, start time.Time) {
	if m != nil && !start.IsZero() {
		m.fetch[path].Observe(time.Since(start).Seconds())
	}
}

// synced observes one fsync that started at start.
func (m *brokerMetrics) synced(start time.Time) {
	if m != nil {
		m.fsync.Observe(time.Since(start).Seconds())
	}
}

// now is the time a hook measures from: the zero time (which the hooks skip) when metrics are
// off, so that no clock is read for them.
func (m *brokerMetrics) now() time.Time {
	if m == nil {
		return time.Time{}
	}
	return time.Now()
}

// authFailed counts a wrong user or password.
func (m *brokerMetrics) authFailed() {
	if m != nil {
		m.authFailures.Inc()
	}
}

// loginRefused counts an AUTH the throttle refused.
func (m *brokerMetrics) loginRefused(r auth.Refusal) {
	switch {
	case m == nil:
	case r.Busy():
		m.loginsBusy.Inc()
	default:
		m.loginsBlocked.Inc()
	}
}

// subscriberStalled counts a connection whose deliveries stopped at the high-water mark.
func (m *brokerMetrics) subscriberStalled() {
	if m != nil {
		m.subscriberStalls.Inc()
	}
}

// connectionRefused counts a connection refused by a connection cap.
func (m *brokerMetrics) connectionRefused() {
	if m != nil {
		m.connectionsRefused.Inc()
	}
}

// path is how fw was served, for lightq_fetch_duration_seconds. Runs on the loop.
func (fw *fetchWait) path() int {
	switch {
	case fw.timer != nil:
		return fetchLongPoll
	case fw.cold:
		return fetchCold
	}
	return fetchHot
}
