package wire_test

import "github.com/lightq/lightq/wire"

// clusterExamples are PROTOCOL.md's examples of METADATA's cluster layout, of NOT_LEADER
// and of CLUSTER_STATUS (section 16).
func clusterExamples() []protocolExample {
	var ex []protocolExample
	add := func(name string, doc *annotated, frame []byte) {
		ex = append(ex, protocolExample{name: name, doc: doc, frame: frame})
	}
	body := func(fill func(a *annotated)) *annotated {
		var a annotated
		fill(&a)
		return &a
	}
	const resp = wire.FlagResponse
	add("metadata-request-cluster",
		frame(wire.OpMetadata, 0, 40, body(func(a *annotated) {
			a.u32(1, "topic count 1")
			a.str("orders", "  topic name")
			a.u8(1, "flags: bit 0 cluster")
		})),
		wireFrame(wire.OpMetadata, 0, 40, &wire.MetadataRequest{Topics: []string{"orders"}, Cluster: true}))
	rf := []wire.Option{{Key: wire.OptionReplicationFactor, Value: "3"}}
	add("metadata-response-cluster",
		frame(wire.OpMetadata, resp, 40, body(func(a *annotated) {
			a.u32(1, "topic count 1")
			a.str("orders", "  topic name")
			a.u8(2, "  kind 2 (durable)")
			a.str("", "  topic user (none)")
			a.u16(1, "  option count 1")
			a.str("replication.factor", "    option key")
			a.str("3", "    option value")
			a.u32(1, "  partition count 1")
			a.u32(0, "    partition 0")
			a.i64(0, "    start offset 0")
			a.i64(120, "    end offset 120 (the high watermark)")
			a.u32(2, "    leader: node 2")
			a.u16(3, "    replica count 3")
			a.u32(2, "      node 2")
			a.u32(3, "      node 3")
			a.u32(1, "      node 1")
			a.u32(1, "node id of the answering broker: 1")
			a.u32(3, "broker count 3")
			for _, n := range []uint32{1, 2, 3} {
				a.u32(n, "  node %d", n)
				a.str(clusterAddr(n), "  address")
				a.str("", "  TLS address (no TLS listener)")
			}
		})),
		wireFrame(wire.OpMetadata, resp, 40, &wire.MetadataResponse{Cluster: true, NodeID: 1, Topics: []wire.TopicMetadata{{
			Name: "orders", Kind: wire.KindDurable, Options: rf,
			Partitions: []wire.PartitionMetadata{{ID: 0, EndOffset: 120, Leader: 2, Replicas: []uint32{2, 3, 1}}},
		}}, Brokers: []wire.BrokerMetadata{{NodeID: 1, Addr: clusterAddr(1)}, {NodeID: 2, Addr: clusterAddr(2)}, {NodeID: 3, Addr: clusterAddr(3)}}}))
	const notLeader = "partition 0 of orders: this broker (node 1) is not its leader; node 2 is, at 127.0.0.2:7400"
	add("error-not-leader",
		frame(wire.OpError, 0, 41, body(func(a *annotated) {
			a.u16(41, "code 41 NOT_LEADER")
			a.str(notLeader, "message")
		})),
		wireFrame(wire.OpError, 0, 41, &wire.ErrorBody{Code: wire.CodeNotLeader, Message: notLeader}))
	const notHome = "partition 0 of ticks is transient and lives on node 2 (its home), not on this broker (node 1); node 2 is at 127.0.0.2:7400"
	add("error-not-leader-transient",
		frame(wire.OpError, 0, 43, body(func(a *annotated) {
			a.u16(41, "code 41 NOT_LEADER")
			a.str(notHome, "message")
		})),
		wireFrame(wire.OpError, 0, 43, &wire.ErrorBody{Code: wire.CodeNotLeader, Message: notHome}))

	add("cluster-status-request",
		frame(wire.OpClusterStatus, 0, 42, body(func(a *annotated) {
			a.str("orders", "topic name")
			a.str("", "from topic (from the start)")
			a.u32(0, "from partition 0")
		})),
		wireFrame(wire.OpClusterStatus, 0, 42, &wire.ClusterStatus{Topic: "orders"}))
	replica := func(a *annotated, node uint32, match uint64, lag int64, state uint8, stateName string, active uint8) {
		a.u32(node, "      node %d", node)
		a.u64(match, "      match index %d", match)
		a.i64(lag, "      lag %d offsets", lag)
		a.u8(state, "      state %d (%s)", state, stateName)
		a.u8(active, "      active %d", active)
	}
	add("cluster-status-response",
		frame(wire.OpClusterStatus, resp, 42, body(func(a *annotated) {
			a.u32(2, "node id of the answering broker: 2")
			a.u8(1, "flags: bit 0 cluster member")
			a.u32(1, "metadata group: leader node 1")
			a.u64(3, "  term 3")
			a.u64(57, "  commit index 57")
			a.u64(57, "  applied index 57")
			a.u8(0, "more 0 (nothing left out)")
			a.u32(1, "topic count 1")
			a.str("orders", "  topic name")
			a.u32(2, "  partition count 2")
			a.u32(0, "    partition 0")
			a.u8(2, "    view 2 (leader: this broker leads it)")
			a.u32(2, "    leader: node 2")
			a.u64(4, "    term 4")
			a.u64(31, "    commit index 31")
			a.u64(31, "    applied index 31")
			a.i64(120, "    high watermark 120")
			a.i64(0, "    log start offset 0")
			a.i64(120, "    log end offset 120")
			a.u16(3, "    replica count 3")
			replica(a, 1, 31, 0, 2, "replicate", 1)
			replica(a, 2, 31, 0, 2, "replicate", 1)
			replica(a, 3, 21, 40, 1, "probe", 0)
			a.u32(1, "    partition 1")
			a.u8(1, "    view 1 (follower: what this broker's replica knows)")
			a.u32(3, "    leader: node 3")
			a.u64(2, "    term 2")
			a.u64(25, "    commit index 25")
			a.u64(25, "    applied index 25")
			a.i64(96, "    high watermark 96")
			a.i64(0, "    log start offset 0")
			a.i64(96, "    log end offset 96")
			a.u16(0, "    replica count 0 (only a leader lists them)")
		})),
		wireFrame(wire.OpClusterStatus, resp, 42, &wire.ClusterStatusResponse{NodeID: 2, Member: true,
			MetaLeader: 1, MetaTerm: 3, MetaCommit: 57, MetaApplied: 57,
			Topics: []wire.TopicStatus{{Name: "orders", Partitions: []wire.PartitionStatus{
				{ID: 0, View: wire.ViewLeader, Leader: 2, Term: 4, Commit: 31, Applied: 31, HighWatermark: 120, LogEnd: 120,
					Replicas: []wire.ReplicaStatus{
						{NodeID: 1, Match: 31, State: wire.ReplicaStateReplicate, Active: true},
						{NodeID: 2, Match: 31, State: wire.ReplicaStateReplicate, Active: true},
						{NodeID: 3, Match: 21, Lag: 40, State: wire.ReplicaStateProbe},
					}},
				{ID: 1, View: wire.ViewFollower, Leader: 3, Term: 2, Commit: 25, Applied: 25, HighWatermark: 96, LogEnd: 96},
			}}}}))
	add("move-replicas-request",
		frame(wire.OpMoveReplicas, 0, 50, body(func(a *annotated) {
			a.str("orders", "topic")
			a.u32(3, "partition 3")
			a.u16(3, "replica count 3")
			for _, n := range []uint32{2, 3, 4} {
				a.u32(n, "  node %d", n)
			}
		})),
		wireFrame(wire.OpMoveReplicas, 0, 50, &wire.MoveReplicas{Topic: "orders", Partition: 3, Replicas: []uint32{2, 3, 4}}))
	status := wire.MembershipResponse{NodeID: 2, MetaLeader: 1}
	held := map[uint32][2]uint32{1: {1, 1}, 2: {2, 0}, 3: {2, 0}, 4: {1, 0}}
	for n := uint32(1); n <= 4; n++ {
		status.Brokers = append(status.Brokers, wire.MemberBroker{NodeID: n, State: wire.BrokerActive, Meta: wire.MetaVoter,
			Addr: clusterAddr(n), ClusterAddr: peerAddr(n), Replicas: held[n][0], Leaving: held[n][1]})
	}
	status.Partitions = []wire.MemberPartition{{Topic: "orders", Partition: 3, Group: 5, Replicas: []uint32{2, 3, 4}, Previous: []uint32{1, 2, 3},
		Held: true, Leads: true, Leader: 2, Voters: []uint32{1, 2, 3}, Learners: []uint32{4}}}
	add("membership-response",
		frame(wire.OpMembership, resp, 51, body(func(a *annotated) {
			a.u32(2, "node id of the answering broker: 2")
			a.u32(1, "metadata group leader: node 1")
			a.u16(4, "broker count 4")
			for n := uint32(1); n <= 4; n++ {
				a.u32(n, "  node %d", n)
				a.u8(1, "  state 1 (active)")
				a.u8(1, "  metadata member 1 (voter)")
				a.str(clusterAddr(n), "  client address")
				a.str("", "  TLS address (no TLS listener)")
				a.str(peerAddr(n), "  cluster address")
				a.u32(held[n][0], "  replica of %d partitions", held[n][0])
				a.u32(held[n][1], "  leaving %d", held[n][1])
			}
			a.u32(1, "partition count 1")
			a.str("orders", "  topic")
			a.u32(3, "  partition 3")
			a.u64(5, "  raft group 5")
			nodes := func(what string, ids ...uint32) {
				a.u16(uint16(len(ids)), "  %s count %d", what, len(ids))
				for _, id := range ids {
					a.u32(id, "    node %d", id)
				}
			}
			nodes("replica", 2, 3, 4)
			nodes("previous replica", 1, 2, 3)
			a.u8(3, "  flags: bit 0 held here, bit 1 leads")
			a.u32(2, "  leader: node 2")
			nodes("voter", 1, 2, 3)
			nodes("learner", 4)
			a.u8(0, "more 0")
		})),
		wireFrame(wire.OpMembership, resp, 51, &status))
	return ex
}

// peerAddr is node n's cluster address in the examples.
func peerAddr(n uint32) string { return "127.0.0." + string(rune('0'+n)) + ":7460" }

func clusterAddr(n uint32) string { return "127.0.0." + string(rune('0'+n)) + ":7400" }
