package broker

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// What /metrics shows of a cluster member, read at scrape time like the rest of
// stateCollector: per replicated partition held here, its replica's status (readStatuses:
// a leader's waits one turn of its Raft loop, statusWorkers partitions at a time, on the
// scrape's goroutine); per replica of a partition led here, the leader's view of it; the
// metadata group's status (a copy under the replica's lock); the cluster transport's
// per-peer counters (transport.PeerStats: atomics). Nothing is counted on the hot path.
//
// A partition's series exist on the brokers that hold one of its replicas; the replica
// series only on its leader, so `lightq_cluster_partition_leading == 1` is true on one broker
// per partition once an election is won.

var (
	replicaLabels = []string{"topic", "partition", "replica"}

	descRaftTerm      = prometheus.NewDesc("lightq_cluster_partition_term", "The Raft term this broker's replica of the partition is in.", partLabels, nil)
	descLeading       = prometheus.NewDesc("lightq_cluster_partition_leading", "1 when this broker leads the partition, else 0.", partLabels, nil)
	descLeaderNode    = prometheus.NewDesc("lightq_cluster_partition_leader_node", "The node id of the partition's leader as this broker's replica knows it; 0 while none is known (an election is under way).", partLabels, nil)
	descCommitIndex   = prometheus.NewDesc("lightq_cluster_partition_commit_index", "The Raft commit index this broker's replica knows.", partLabels, nil)
	descAppliedIndex  = prometheus.NewDesc("lightq_cluster_partition_applied_index", "The last Raft index this broker's replica applied.", partLabels, nil)
	descHighWatermark = prometheus.NewDesc("lightq_cluster_partition_high_watermark", "The offset after the last committed batch this broker's replica applied (consumers of the leader read below it).", partLabels, nil)
	descScrubbed      = prometheus.NewDesc("lightq_cluster_partition_scrubbed_bytes_total", "Bytes of sealed segments this broker's replica verified again (CRC, raft index, term) since it was opened.", partLabels, nil)
	descDamaged       = prometheus.NewDesc("lightq_cluster_partition_damaged_batches_total", "Damaged batches this broker's replica found (by the scrub, or when raft read them) since it was opened.", partLabels, nil)
	descRepairs       = prometheus.NewDesc("lightq_cluster_partition_repairs_total", "Times this broker's replica cut its log at a damaged batch to be filled again from the other replicas, since it was opened.", partLabels, nil)
	descLeaderChanges = prometheus.NewDesc("lightq_cluster_partition_leader_changes_total", "Terms in which this broker's replica learned of a leader since it was opened (each election it saw won, the first included).", partLabels, nil)
	descPending       = prometheus.NewDesc("lightq_cluster_partition_proposals_pending", "Batches this broker proposed as the partition's leader that are not committed or refused yet.", partLabels, nil)

	descReplicaMatch  = prometheus.NewDesc("lightq_cluster_replica_match_index", "On the partition's leader: the highest Raft index known stored on the replica.", replicaLabels, nil)
	descReplicaLag    = prometheus.NewDesc("lightq_cluster_replica_lag_offsets", "On the partition's leader: offsets the replica's log is behind the leader's end (0 caught up); -1 while a snapshot brings it up from below the leader's log start.", replicaLabels, nil)
	descReplicaActive = prometheus.NewDesc("lightq_cluster_replica_active", "On the partition's leader: 1 when it heard from the replica within an election timeout, else 0.", replicaLabels, nil)

	descMetaTerm    = prometheus.NewDesc("lightq_cluster_meta_term", "The Raft term of the cluster's metadata group as this broker sees it.", nil, nil)
	descMetaLeader  = prometheus.NewDesc("lightq_cluster_meta_leader_node", "The node id of the metadata group's leader as this broker knows it; 0 while none is known.", nil, nil)
	descMetaCommit  = prometheus.NewDesc("lightq_cluster_meta_commit_index", "The metadata group's commit index this broker knows.", nil, nil)
	descMetaApplied = prometheus.NewDesc("lightq_cluster_meta_applied_index", "The last metadata group index this broker applied.", nil, nil)

	peerLabels         = []string{"peer"}
	descPeerConnected  = prometheus.NewDesc("lightq_cluster_peer_connected", "1 while this broker's connection to the peer's cluster port is up, else 0.", peerLabels, nil)
	descPeerQueued     = prometheus.NewDesc("lightq_cluster_peer_queued_messages", "Raft messages waiting in this broker's send queue to the peer.", peerLabels, nil)
	descPeerSent       = prometheus.NewDesc("lightq_cluster_peer_sent_messages_total", "Raft messages written to the peer's connection.", peerLabels, nil)
	descPeerSentBytes  = prometheus.NewDesc("lightq_cluster_peer_sent_bytes_total", "Bytes of the frames that carried them.", peerLabels, nil)
	descPeerDropped    = prometheus.NewDesc("lightq_cluster_peer_dropped_messages_total", "Raft messages to the peer given up on (queue full, no connection, failed write); Raft resends what it needs.", peerLabels, nil)
	descPeerDialFailed = prometheus.NewDesc("lightq_cluster_peer_dial_failures_total", "Connections to the peer's cluster port that failed (dial or handshake).", peerLabels, nil)

	clusterDescs = []*prometheus.Desc{descRaftTerm, descLeading, descLeaderNode, descCommitIndex, descAppliedIndex,
		descHighWatermark, descLeaderChanges, descScrubbed, descDamaged, descRepairs, descPending, descReplicaMatch, descReplicaLag, descReplicaActive,
		descMetaTerm, descMetaLeader, descMetaCommit, descMetaApplied,
		descPeerConnected, descPeerQueued, descPeerSent, descPeerSentBytes, descPeerDropped, descPeerDialFailed}
)

// collectCluster emits the cluster series of a cluster member (nothing without cluster
// settings).
func (c *stateCollector) collectCluster(ch chan<- prometheus.Metric, topics map[string]*topic) {
	n := c.s.cluster
	if n == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	bit := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}

	ms := n.meta.Status()
	gauge(descMetaTerm, float64(ms.Term))
	gauge(descMetaLeader, float64(ms.Leader))
	gauge(descMetaCommit, float64(ms.Commit))
	gauge(descMetaApplied, float64(ms.Applied))

	for _, ps := range n.tr.PeerStats() {
		peer := strconv.FormatUint(ps.Node, 10)
		gauge(descPeerConnected, bit(ps.Connected), peer)
		gauge(descPeerQueued, float64(ps.Queued), peer)
		counter(descPeerSent, float64(ps.Sent), peer)
		counter(descPeerSentBytes, float64(ps.SentBytes), peer)
		counter(descPeerDropped, float64(ps.Dropped), peer)
		counter(descPeerDialFailed, float64(ps.DialFailures), peer)
	}

	vs := replicatedViews(topics, "", "", 0)
	held := vs[:0]
	for _, v := range vs {
		if v.part != nil {
			held = append(held, v)
		}
	}
	readStatuses(held)
	for i := range held {
		v := &held[i]
		st := &v.st
		t, id := v.t.name, strconv.FormatUint(uint64(v.p.id), 10)
		gauge(descRaftTerm, float64(st.Term), t, id)
		gauge(descLeading, bit(st.IsLeader), t, id)
		gauge(descLeaderNode, float64(st.Leader), t, id)
		gauge(descCommitIndex, float64(st.Commit), t, id)
		gauge(descAppliedIndex, float64(st.Applied), t, id)
		gauge(descHighWatermark, float64(st.HighWatermark), t, id)
		counter(descLeaderChanges, float64(st.LeaderChanges), t, id)
		counter(descScrubbed, float64(st.ScrubbedBytes), t, id)
		counter(descDamaged, float64(st.DamagedBatches), t, id)
		counter(descRepairs, float64(st.Repairs), t, id)
		gauge(descPending, float64(st.Pending), t, id)
		for _, r := range st.Replicas {
			rid := strconv.FormatUint(r.ID, 10)
			gauge(descReplicaMatch, float64(r.Match), t, id, rid)
			gauge(descReplicaLag, float64(r.Lag), t, id, rid)
			gauge(descReplicaActive, bit(r.Active), t, id, rid)
		}
	}
}
