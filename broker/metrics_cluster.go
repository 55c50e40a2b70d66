package broker

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	cpart "github.com/lightq/lightq/cluster/partition"
	"github.com/lightq/lightq/cluster/raftlog"
	"github.com/lightq/lightq/cluster/transport"
)

// What /metrics shows of a cluster member, read at scrape time like the rest of
// stateCollector: per replicated partition held here, its replica's status (readStatuses:
// a leader's waits one turn of its Raft loop, statusWorkers partitions at a time, on the
// scrape's goroutine); per replica of a partition led here, the leader's view of it; the
// metadata group's status (a copy under the replica's lock); the cluster transport's
// per-peer counters (transport.PeerStats: atomics). Nothing is counted on the hot path: the
// replicas' catch-up, snapshot and damage counters (cpart.Counts, collectCounts) are atomics
// added to once per event, read by Status.
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

	// Catch-ups, snapshots and damage (cluster/partition counters.go: atomics, read here).
	descCatchUpsStarted   = prometheus.NewDesc("lightq_cluster_partition_catchups_started_total", "Catch-ups from whole segments this broker's replica started (a snapshot whose segments it fetches).", partLabels, nil)
	descCatchUpsCompleted = prometheus.NewDesc("lightq_cluster_partition_catchups_completed_total", "Catch-ups from whole segments installed with their segments.", partLabels, nil)
	descCatchUpsAbandoned = prometheus.NewDesc("lightq_cluster_partition_catchups_abandoned_total", "Snapshots a catch-up gave up without installing, so that the replica votes again (raft restarted), by reason: stall (no bytes for an election timeout), term (a newer term or pre-vote heard), no_answer (the source refused or failed before the first chunk).", append(partLabels, "reason"), nil)
	descCatchUpsTimedOut  = prometheus.NewDesc("lightq_cluster_partition_catchups_timed_out_total", "Catch-ups given up after the catch-up timeout: the snapshot was installed without the segments below it.", partLabels, nil)
	descSegBytesIn        = prometheus.NewDesc("lightq_cluster_partition_segment_bytes_received_total", "Bytes this broker's replica received on segment streams (catch-ups), restarted streams included.", partLabels, nil)
	descSegsIn            = prometheus.NewDesc("lightq_cluster_partition_segments_received_total", "Segment files this broker's replica received bytes of on segment streams (a stream counts each once).", partLabels, nil)
	descSegBytesOut       = prometheus.NewDesc("lightq_cluster_partition_segment_bytes_sent_total", "Bytes of this broker's replica's segments sent on segment streams to other replicas catching up.", partLabels, nil)
	descSegsOut           = prometheus.NewDesc("lightq_cluster_partition_segments_sent_total", "Segment files of this broker's replica sent bytes of on segment streams (a stream counts each once).", partLabels, nil)
	descSnapsSent         = prometheus.NewDesc("lightq_cluster_partition_snapshots_sent_total", "Snapshots this broker's replica sent to followers as leader, by snapshot data version: 2 (the follower fetches the segments below it) or 1 (to a peer that did not announce it takes version 2: a broker of the previous release).", append(partLabels, "data_version"), nil)
	descSnapsReceived     = prometheus.NewDesc("lightq_cluster_partition_snapshots_received_total", "Snapshots this broker's replica received from its leader (abandoned ones included).", partLabels, nil)
	descSnapsApplied      = prometheus.NewDesc("lightq_cluster_partition_snapshots_applied_total", "Snapshots this broker's replica installed, with or without segments.", partLabels, nil)
	descDamageFound       = prometheus.NewDesc("lightq_cluster_partition_damage_found_total", "Damaged batches this broker's replica found since it was opened, by where: open (its Open), scrub, read (a raft read).", append(partLabels, "found_by"), nil)
	descDamageRepaired    = prometheus.NewDesc("lightq_cluster_partition_damage_repaired_total", "Damaged batches this broker's replica cut its log at, to be filled again from the other replicas, by where they were found.", append(partLabels, "found_by"), nil)
	descCheckFailures     = prometheus.NewDesc("lightq_cluster_partition_check_failures_total", "Damaged batches this broker's replica found, by the check they failed: batch (CRC, framing), raft_index, leader_epoch (the two fields the CRC does not cover).", append(partLabels, "check"), nil)
	descEntriesCut        = prometheus.NewDesc("lightq_cluster_partition_entries_cut_total", "Raft entries this broker's replica cut from its log at damage (the damaged one and those after it), which the other replicas bring back.", partLabels, nil)

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
	descPeerSegCatchUp = prometheus.NewDesc("lightq_cluster_peer_segment_catchup", "1 when the peer announced, on this broker's connection to it, that it takes snapshots of data version 2 and their segment streams; 0 for a broker of the previous release, or without a connection.", peerLabels, nil)

	abandonReasons = [cpart.AbandonReasons]string{cpart.AbandonStall: "stall", cpart.AbandonTerm: "term", cpart.AbandonNoAnswer: "no_answer"}
	foundBy        = [cpart.FoundKinds]string{cpart.FoundAtOpen: "open", cpart.FoundByScrub: "scrub", cpart.FoundByRead: "read"}

	clusterDescs = []*prometheus.Desc{descRaftTerm, descLeading, descLeaderNode, descCommitIndex, descAppliedIndex,
		descHighWatermark, descLeaderChanges, descScrubbed, descDamaged, descRepairs, descPending, descReplicaMatch, descReplicaLag, descReplicaActive,
		descCatchUpsStarted, descCatchUpsCompleted, descCatchUpsAbandoned, descCatchUpsTimedOut, descSegBytesIn, descSegsIn, descSegBytesOut, descSegsOut,
		descSnapsSent, descSnapsReceived, descSnapsApplied, descDamageFound, descDamageRepaired, descCheckFailures, descEntriesCut,
		descMetaTerm, descMetaLeader, descMetaCommit, descMetaApplied,
		descPeerConnected, descPeerQueued, descPeerSent, descPeerSentBytes, descPeerDropped, descPeerDialFailed, descPeerSegCatchUp}
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
		gauge(descPeerSegCatchUp, bit(ps.Features&transport.FeatureSegmentCatchUp != 0), peer)
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
		collectCounts(ch, &st.Counts, t, id)
		for _, r := range st.Replicas {
			rid := strconv.FormatUint(r.ID, 10)
			gauge(descReplicaMatch, float64(r.Match), t, id, rid)
			gauge(descReplicaLag, float64(r.Lag), t, id, rid)
			gauge(descReplicaActive, bit(r.Active), t, id, rid)
		}
	}
}

// collectCounts emits a replica's catch-up, snapshot and damage counters (every label value,
// zeros included, so that each series exists from the replica's first scrape on).
func collectCounts(ch chan<- prometheus.Metric, cn *cpart.Counts, labels ...string) {
	counter := func(d *prometheus.Desc, v int64, more ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append(labels, more...)...)
	}
	counter(descCatchUpsStarted, cn.CatchUpsStarted)
	counter(descCatchUpsCompleted, cn.CatchUpsDone)
	for r, v := range cn.CatchUpsAbandoned {
		counter(descCatchUpsAbandoned, v, abandonReasons[r])
	}
	counter(descCatchUpsTimedOut, cn.CatchUpsTimedOut)
	counter(descSegBytesIn, cn.SegmentBytesReceived)
	counter(descSegsIn, cn.SegmentsReceived)
	counter(descSegBytesOut, cn.SegmentBytesSent)
	counter(descSegsOut, cn.SegmentsSent)
	counter(descSnapsSent, cn.SnapshotsSent[0], "1")
	counter(descSnapsSent, cn.SnapshotsSent[1], "2")
	counter(descSnapsReceived, cn.SnapshotsReceived)
	counter(descSnapsApplied, cn.SnapshotsApplied)
	for w := range cn.DamageFound {
		counter(descDamageFound, cn.DamageFound[w], foundBy[w])
		counter(descDamageRepaired, cn.DamageRepaired[w], foundBy[w])
	}
	for k, v := range cn.CheckFailures {
		counter(descCheckFailures, v, raftlog.Check(k).String())
	}
	counter(descEntriesCut, cn.EntriesCut)
}
