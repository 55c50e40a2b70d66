package broker

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lightq/lightq/log/offsetlog"
)

// groupTracker is the bounded set of consumer groups whose committed offsets and lag /metrics
// shows, as (topic, group) pairs. Group names are chosen by clients (any user of a durable
// topic may commit under any name), so the set holds at most max pairs
// (Config.MetricsMaxGroups; each pair is two series per partition with a commit): the groups
// stored when the broker starts (by name, per topic, while room is left), then groups as they
// commit for the first time. Commits of pairs left out are counted
// (lightq_consumer_groups_untracked_commits_total) and the first is logged. A pair leaves the
// set, making room, when its topic is deleted or recreated, or when it no longer has a
// committed offset.
//
// The offsets themselves are not copied here: a scrape reads them from the topic's
// offsetlog.Store (Get, a map look-up under the store's mutex, per pair and partition).
//
// Concurrency: note runs on the offset stores' syncers (from a commit's callback, which runs
// after the store released its mutex) and reads the set without a lock: it is copy-on-write.
// Changes take mu; under it, drop takes offsetlog.Store.mu (Get) and nothing else.
type groupTracker struct {
	max       int
	set       atomic.Pointer[map[trackedGroup]struct{}]
	mu        sync.Mutex // serialises changes of set; lock order: before offsetlog.Store.mu
	untracked prometheus.Counter
	full      atomic.Bool          // the cap was reached once (logged)
	logf      func(string, ...any) // the broker's warning log
}

// trackedGroup is one tracked pair. store is the topic's store when the pair was noted: a
// topic deleted and created again has another, and the pair is then stale.
type trackedGroup struct {
	store *offsetlog.Store
	topic string
	group string
}

func newGroupTracker(max int, logf func(string, ...any)) *groupTracker {
	g := &groupTracker{max: max, logf: logf, untracked: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lightq_consumer_groups_untracked_commits_total",
		Help: "Offset commits of consumer groups that /metrics does not show, because metrics-max-groups (topic, group) pairs are shown already.",
	})}
	g.set.Store(&map[trackedGroup]struct{}{})
	return g
}

// note makes (topic, group) tracked if there is room, after a commit of it succeeded. Safe
// for concurrent use; lock-free when the pair is tracked already.
func (g *groupTracker) note(st *offsetlog.Store, topic, group string) {
	k := trackedGroup{st, topic, group}
	if _, ok := (*g.set.Load())[k]; ok {
		return
	}
	if !g.add(k) {
		g.untracked.Inc()
		if g.full.CompareAndSwap(false, true) {
			g.logf("metrics: %d consumer groups (topic, group pairs) are shown already, the metrics-max-groups cap; commits of group %q of topic %q and of other new groups are not shown (lightq_consumer_groups_untracked_commits_total counts them)", g.max, group, topic)
		}
	}
}

// add tracks k if there is room and reports whether it is tracked.
func (g *groupTracker) add(k trackedGroup) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := *g.set.Load()
	if _, ok := old[k]; ok {
		return true
	}
	if len(old) >= g.max {
		return false
	}
	m := make(map[trackedGroup]struct{}, len(old)+1)
	for k := range old {
		m[k] = struct{}{}
	}
	m[k] = struct{}{}
	g.set.Store(&m)
	return true
}

// snapshot is the tracked set, not to be changed.
func (g *groupTracker) snapshot() map[trackedGroup]struct{} { return *g.set.Load() }

// drop untracks the pairs of stale for which stillStale (asked again under mu, since a
// commit may have made one live meanwhile) holds.
func (g *groupTracker) drop(stale []trackedGroup, stillStale func(trackedGroup) bool) {
	if len(stale) == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	old := *g.set.Load()
	m := make(map[trackedGroup]struct{}, len(old))
	for k := range old {
		m[k] = struct{}{}
	}
	for _, k := range stale {
		if stillStale(k) {
			delete(m, k)
		}
	}
	g.set.Store(&m)
}

// trackStoredGroups tracks, while there is room, the groups the durable topics' offset
// stores hold at start, topic by topic in name order, each topic's groups in name order.
// Runs in New, before any connection.
func (s *Server) trackStoredGroups() {
	m := s.metrics
	if m == nil {
		return
	}
	for _, t := range sortedTopics(*s.topics.Load()) {
		to := s.offsets.lookup(t.name)
		if to == nil || to.st == nil {
			continue
		}
		for _, group := range to.st.Groups(m.groups.max) {
			if !m.groups.add(trackedGroup{to.st, t.name, group}) {
				m.groups.full.Store(true)
				s.log.Warn().Int("metrics_max_groups", m.groups.max).Msg("metrics: more stored consumer groups than metrics-max-groups; /metrics shows the first by topic and group name")
				return
			}
		}
	}
}

// noteGroup tracks a group of a topic once a commit of it is durable (from the commit's
// callback, on the store's syncer).
func (m *brokerMetrics) noteGroup(st *offsetlog.Store, topic, group string) {
	if m != nil {
		m.groups.note(st, topic, group)
	}
}
