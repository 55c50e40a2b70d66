package lqcat

import (
	"bytes"
	"testing"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// sampleClusterView has every case cluster status prints: a leader's view with a replica
// caught up, one behind and inactive, one a snapshot brings up; a partition whose leader did
// not answer (a follower's view); one no replica holder answered; a broker not asked.
func sampleClusterView() *clusterView {
	leader := func(topic string, id uint32, node uint32, reps ...wire.ReplicaStatus) client.PartitionStatus {
		return client.PartitionStatus{Topic: topic, NodeID: node, PartitionStatus: wire.PartitionStatus{ID: id, View: wire.ViewLeader,
			Leader: node, Term: 4, Commit: 31, Applied: 31, HighWatermark: 120, LogStart: 8, LogEnd: 120, Replicas: reps}}
	}
	return &clusterView{
		seed: "127.0.0.1:7450", node: 1,
		meta: client.ClusterStatus{NodeID: 1, Member: true, MetaLeader: 1, MetaTerm: 2, MetaCommit: 14, MetaApplied: 14},
		brokers: []brokerAnswer{
			{node: 1, addr: "127.0.0.1:7450"},
			{node: 2, addr: "127.0.0.2:7450"},
			{node: 3, addr: "127.0.0.3:7450", err: "cannot connect to 127.0.0.3:7450: connect: connection refused"},
		},
		partitions: []client.PartitionStatus{
			leader("orders", 0, 2,
				wire.ReplicaStatus{NodeID: 1, Match: 31, State: wire.ReplicaStateReplicate, Active: true},
				wire.ReplicaStatus{NodeID: 2, Match: 31, State: wire.ReplicaStateReplicate, Active: true},
				wire.ReplicaStatus{NodeID: 3, Match: 21, Lag: 40, State: wire.ReplicaStateProbe}),
			{Topic: "orders", NodeID: 1, PartitionStatus: wire.PartitionStatus{ID: 1, View: wire.ViewFollower, Leader: 3, Term: 2, Commit: 25, Applied: 25, HighWatermark: 96, LogEnd: 97}},
			{Topic: "orders", NodeID: 1, PartitionStatus: wire.PartitionStatus{ID: 2, View: wire.ViewFollower, Term: 3, Commit: 5, Applied: 5, HighWatermark: 10, LogEnd: 10}},
			leader("payments", 0, 1,
				wire.ReplicaStatus{NodeID: 1, Match: 31, State: wire.ReplicaStateReplicate, Active: true},
				wire.ReplicaStatus{NodeID: 2, Match: 3, Lag: -1, State: wire.ReplicaStateSnapshot, Active: true}),
			{Topic: "payments", NodeID: 2, PartitionStatus: wire.PartitionStatus{ID: 1}},
		},
	}
}

// TestClusterStatusRender: the text and JSON forms of cluster status, against golden files.
func TestClusterStatusRender(t *testing.T) {
	v := sampleClusterView()
	var text bytes.Buffer
	if err := v.render(&text); err != nil {
		t.Fatal(err)
	}
	golden(t, "cluster-status.golden", text.String())
	var js bytes.Buffer
	if err := writeJSONLine(&js, v.json()); err != nil {
		t.Fatal(err)
	}
	golden(t, "cluster-status-json.golden", js.String())
}
