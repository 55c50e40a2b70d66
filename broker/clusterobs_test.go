package broker

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/lightq/lightq/wire"
)

// eventually polls check every 20 ms until it returns "", and fails the test with the last
// thing it said after a deadline that only a broken cluster misses on a loaded machine.
func eventually(t *testing.T, what string, check func() string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		why := check()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s, still not %s: %s", what, why)
		}
		<-poll.C
	}
}

// clusterStatus asks the broker at addr for CLUSTER_STATUS of topic (every replicated one
// when empty), following the pages, and returns the first page's header with every page's
// partitions (a topic split across pages joined again).
func clusterStatus(t *testing.T, addr, topic string) wire.ClusterStatusResponse {
	t.Helper()
	c := login(t, addr, testAdminUser, testAdminPass)
	defer c.conn.Close()
	req := wire.ClusterStatus{Topic: topic}
	var out wire.ClusterStatusResponse
	for page := 0; ; page++ {
		var resp wire.ClusterStatusResponse
		if err := resp.Decode(c.expectResponse(wire.OpClusterStatus, c.send(wire.OpClusterStatus, req.AppendTo(nil)))); err != nil {
			t.Fatal(err)
		}
		if page == 0 {
			out = resp
			out.Topics = nil
		}
		for _, ts := range resp.Topics {
			if n := len(out.Topics); n > 0 && out.Topics[n-1].Name == ts.Name {
				out.Topics[n-1].Partitions = append(out.Topics[n-1].Partitions, ts.Partitions...)
			} else {
				out.Topics = append(out.Topics, ts)
			}
		}
		if !resp.More {
			out.More = false
			return out
		}
		last := resp.Topics[len(resp.Topics)-1]
		req.FromTopic, req.FromPartition = last.Name, last.Partitions[len(last.Partitions)-1].ID+1
	}
}

// partitionStatus finds a partition in a CLUSTER_STATUS answer.
func partitionStatus(resp wire.ClusterStatusResponse, topic string, partition uint32) (wire.PartitionStatus, bool) {
	for _, ts := range resp.Topics {
		if ts.Name != topic {
			continue
		}
		for _, p := range ts.Partitions {
			if p.ID == partition {
				return p, true
			}
		}
	}
	return wire.PartitionStatus{}, false
}

// replicaOf finds a node's entry in a leader's view.
func replicaOf(p wire.PartitionStatus, node int) (wire.ReplicaStatus, bool) {
	for _, r := range p.Replicas {
		if int(r.NodeID) == node {
			return r, true
		}
	}
	return wire.ReplicaStatus{}, false
}

// createReplicated creates a durable topic with replication.factor 3 through broker 0 and
// waits until every running broker has it.
func (tc *testCluster) createReplicated(name string, partitions uint32) {
	tc.t.Helper()
	admin := login(tc.t, tc.brokers[0].Addr(), testAdminUser, testAdminPass)
	defer admin.conn.Close()
	ct := wire.CreateTopic{Name: name, Kind: wire.KindDurable, Partitions: partitions, User: "app", Password: "app-secret",
		Options: []wire.Option{{Key: wire.OptionReplicationFactor, Value: "3"}}}
	admin.expectResponse(wire.OpCreateTopic, admin.send(wire.OpCreateTopic, ct.AppendTo(nil)))
	for i, s := range tc.brokers {
		if s != nil {
			waitUntil(tc.t, fmt.Sprintf("broker %d has topic %s", i+1, name), func() bool { return (*s.topics.Load())[name] != nil })
		}
	}
}

// TestClusterStatusLag: CLUSTER_STATUS of the in-process 3-broker cluster. The leader lists
// every replica, caught up and active; a follower reports its own view and names the
// leader. While a follower is stopped, its lag on the leader grows by exactly the offsets
// produced and it turns inactive; once it is back, the leader brings it up and its lag
// returns to 0. Named topics: an unknown one is UNKNOWN_TOPIC, a transient one has no
// replicated partitions.
func TestClusterStatusLag(t *testing.T) {
	tc := startCluster(t, 3)
	tc.createReplicated("orders", 1)
	li := tc.leader(0, "orders", 0)
	fi := (li + 1) % 3
	leaderAddr := tc.brokers[li].Addr()
	app := login(t, leaderAddr, "app", "app-secret")
	for i := range 3 {
		app.produce("orders", 0, testBatch(t, fmt.Sprintf("before-%d", i)))
	}

	var before wire.PartitionStatus
	eventually(t, "every replica caught up on the leader", func() string {
		p, ok := partitionStatus(clusterStatus(t, leaderAddr, "orders"), "orders", 0)
		switch {
		case !ok || p.View != wire.ViewLeader || int(p.Leader) != li+1 || len(p.Replicas) != 3:
			return fmt.Sprintf("leader's view %+v", p)
		case p.HighWatermark < 3 || p.LogEnd != p.HighWatermark || p.Applied != p.Commit:
			return fmt.Sprintf("leader's indexes %+v", p)
		}
		for _, r := range p.Replicas {
			if r.Lag != 0 || !r.Active || r.Match != p.Commit || r.State != wire.ReplicaStateReplicate {
				return fmt.Sprintf("replica %+v (commit %d)", r, p.Commit)
			}
		}
		before = p
		return ""
	})
	eventually(t, "the follower's view to match the leader's", func() string {
		resp := clusterStatus(t, tc.brokers[fi].Addr(), "")
		p, _ := partitionStatus(resp, "orders", 0)
		if !resp.Member || int(resp.NodeID) != fi+1 || p.View != wire.ViewFollower || int(p.Leader) != li+1 ||
			p.Term != before.Term || p.HighWatermark != before.HighWatermark || len(p.Replicas) != 0 {
			return fmt.Sprintf("follower node %d: %+v, leader's %+v", resp.NodeID, p, before)
		}
		if resp.MetaLeader == 0 || resp.MetaTerm == 0 || resp.MetaApplied == 0 {
			return fmt.Sprintf("metadata group: leader %d term %d applied %d", resp.MetaLeader, resp.MetaTerm, resp.MetaApplied)
		}
		return ""
	})

	// Node fi+1 stops; 10 batches of 3 records go in without it.
	stopped := tc.brokers[fi]
	tc.brokers[fi] = nil
	if err := stopped.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		app.produce("orders", 0, testBatch(t, fmt.Sprintf("away-%d-a", i), fmt.Sprintf("away-%d-b", i), fmt.Sprintf("away-%d-c", i)))
	}
	eventually(t, "the stopped follower to lag and turn inactive", func() string {
		p, _ := partitionStatus(clusterStatus(t, leaderAddr, "orders"), "orders", 0)
		r, ok := replicaOf(p, fi+1)
		switch {
		case !ok || r.Active || r.Lag < 30:
			return fmt.Sprintf("stopped node %d: %+v", fi+1, r)
		case p.Term == before.Term && (r.Lag != 30 || r.Match != before.Commit):
			// The same leader in the same term wrote the 10 batches alone (no control batch).
			return fmt.Sprintf("stopped node %d: %+v, want lag 30 and match %d", fi+1, r, before.Commit)
		}
		for _, o := range p.Replicas {
			if int(o.NodeID) != fi+1 && (o.Lag != 0 || !o.Active) {
				return fmt.Sprintf("running replica %+v", o)
			}
		}
		return ""
	})

	tc.brokers[fi] = startWith(t, tc.cfgs[fi])
	tc.wire()
	var after wire.PartitionStatus
	eventually(t, "the restarted follower to catch up", func() string {
		p, _ := partitionStatus(clusterStatus(t, leaderAddr, "orders"), "orders", 0)
		r, ok := replicaOf(p, fi+1)
		if !ok || !r.Active || r.Lag != 0 || r.Match != p.Commit || p.HighWatermark < before.HighWatermark+30 {
			return fmt.Sprintf("restarted node %d: %+v in %+v", fi+1, r, p)
		}
		after = p
		return ""
	})
	eventually(t, "the restarted follower's own view", func() string {
		p, _ := partitionStatus(clusterStatus(t, tc.brokers[fi].Addr(), "orders"), "orders", 0)
		if p.View != wire.ViewFollower || p.HighWatermark != after.HighWatermark || p.LogEnd != after.LogEnd {
			return fmt.Sprintf("restarted follower %+v, leader %+v", p, after)
		}
		return ""
	})

	admin := login(t, leaderAddr, testAdminUser, testAdminPass)
	admin.createTopic("local", 1, "", "")
	if resp := clusterStatus(t, leaderAddr, "local"); len(resp.Topics) != 0 || !resp.Member {
		t.Errorf("a transient topic: %+v", resp)
	}
	admin.expectError(admin.send(wire.OpClusterStatus, (&wire.ClusterStatus{Topic: "nope"}).AppendTo(nil)), wire.CodeUnknownTopic)
	admin.expectError(admin.send(wire.OpClusterStatus, (&wire.ClusterStatus{Topic: "no/slash"}).AppendTo(nil)), wire.CodeInvalidRequest)
	admin.expectError(admin.send(wire.OpClusterStatus, []byte{0}), wire.CodeInvalidRequest)
	admin.ping()
}

// TestClusterStatusPages: pages of a few hundred bytes list every replicated partition
// once, in (topic, partition) order, each page within its size, and a request from a
// position starts there.
func TestClusterStatusPages(t *testing.T) {
	tc := startCluster(t, 3)
	tc.createReplicated("a", 3)
	tc.createReplicated("b", 2)
	s := tc.brokers[0]
	type key struct {
		topic string
		id    uint32
	}
	want := []key{{"a", 0}, {"a", 1}, {"a", 2}, {"b", 0}, {"b", 1}}
	const page = 200 // a partition with its topic's entry (at most 61 + 3*22 + 7 bytes) fits
	var got []key
	req := wire.ClusterStatus{}
	for n := 0; ; n++ {
		if n > len(want) {
			t.Fatalf("more pages than partitions: %v", got)
		}
		resp := s.clusterStatus(&req, page)
		size := len(resp.AppendTo(nil)) - wire.ClusterStatusHeaderSize
		if size > page || len(resp.Topics) == 0 {
			t.Fatalf("page %d: %d bytes, limit %d: %+v", n, size, page, resp)
		}
		for _, ts := range resp.Topics {
			for _, p := range ts.Partitions {
				got = append(got, key{ts.Name, p.ID})
			}
		}
		if !resp.More {
			break
		}
		last := got[len(got)-1]
		req.FromTopic, req.FromPartition = last.topic, last.id+1
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pages listed %v, want %v", got, want)
	}
	resp := s.clusterStatus(&wire.ClusterStatus{FromTopic: "a", FromPartition: 2}, clusterStatusPage)
	if len(resp.Topics) != 2 || len(resp.Topics[0].Partitions) != 1 || resp.Topics[0].Partitions[0].ID != 2 || len(resp.Topics[1].Partitions) != 2 || resp.More {
		t.Fatalf("from a/2: %+v", resp)
	}
	if resp := s.clusterStatus(&wire.ClusterStatus{Topic: "b", FromTopic: "b", FromPartition: 1}, clusterStatusPage); len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 || resp.Topics[0].Partitions[0].ID != 1 {
		t.Fatalf("topic b from b/1: %+v", resp)
	}
}

// TestClusterMetrics: /metrics of each broker of the in-process 3-broker cluster, after
// produce to both partitions of a replicated topic and once the cluster is quiet: exactly
// one broker leads each partition (leading 1) and every broker names it; terms, commit,
// applied indexes and high watermarks agree; the leader shows every replica caught up
// (lag 0, active 1, match at its commit index) and the others show no replica series; the
// metadata group has one leader everyone names; every broker has each peer's series, and its
// connection to every leader is up and has carried messages.
func TestClusterMetrics(t *testing.T) {
	tc := startClusterWith(t, 3, func(c *Config) { c.HTTPAddr = "127.0.0.1:0" })
	tc.createReplicated("events", 2)
	produced := [2]int{}
	for p := range uint32(2) {
		app := login(t, tc.brokers[tc.leader(0, "events", p)].Addr(), "app", "app-secret")
		for i := range 5 {
			vals := []string{fmt.Sprintf("p%d-%d", p, i)}
			if p == 1 {
				vals = append(vals, "second")
			}
			app.produce("events", int32(p), testBatch(t, vals...))
			produced[p] += len(vals)
		}
		app.conn.Close()
	}

	var mfs [3]map[string]*dto.MetricFamily
	eventually(t, "the cluster's metrics to settle", func() string {
		for i, s := range tc.brokers {
			mfs[i] = scrape(t, s.HTTPAddr())
		}
		get := func(i int, name string, ls lbl) float64 {
			v, ok := sample(mfs[i], name, ls)
			if !ok {
				return -2 // shows as a mismatch below
			}
			return v
		}
		for p := range 2 {
			pl := lbl("topic=events,partition=" + strconv.Itoa(p))
			leader := -1
			for i := range tc.brokers {
				if get(i, "lightq_cluster_partition_leading", pl) == 1 {
					if leader >= 0 {
						return fmt.Sprintf("partition %d: brokers %d and %d both lead", p, leader+1, i+1)
					}
					leader = i
				}
			}
			if leader < 0 {
				return fmt.Sprintf("partition %d: no broker leads", p)
			}
			commit := get(leader, "lightq_cluster_partition_commit_index", pl)
			hw := get(leader, "lightq_cluster_partition_high_watermark", pl)
			if hw < float64(produced[p]) || hw != get(leader, "lightq_partition_end_offset", pl) {
				return fmt.Sprintf("partition %d: high watermark %v, end offset %v, %d records produced", p, hw, get(leader, "lightq_partition_end_offset", pl), produced[p])
			}
			for i := range tc.brokers {
				for _, name := range []string{"lightq_cluster_partition_term", "lightq_cluster_partition_commit_index", "lightq_cluster_partition_applied_index", "lightq_cluster_partition_high_watermark"} {
					if v, l := get(i, name, pl), get(leader, name, pl); v != l {
						return fmt.Sprintf("partition %d: %s %v on broker %d, %v on the leader %d", p, name, v, i+1, l, leader+1)
					}
				}
				if v := get(i, "lightq_cluster_partition_leader_node", pl); v != float64(leader+1) {
					return fmt.Sprintf("partition %d: broker %d names leader %v, broker %d leads", p, i+1, v, leader+1)
				}
				if v := get(i, "lightq_cluster_partition_leading", pl); i != leader && v != 0 {
					return fmt.Sprintf("partition %d: leading %v on follower %d", p, v, i+1)
				}
				if v := get(i, "lightq_cluster_partition_proposals_pending", pl); v != 0 {
					return fmt.Sprintf("partition %d: %v proposals pending on broker %d", p, v, i+1)
				}
				if v := get(i, "lightq_cluster_partition_leader_changes_total", pl); v < 1 || v > get(i, "lightq_cluster_partition_term", pl) {
					return fmt.Sprintf("partition %d: %v leader changes on broker %d", p, v, i+1)
				}
				rl := lbl(string(pl) + ",replica=" + strconv.Itoa(i+1))
				for j := range tc.brokers {
					_, shown := sample(mfs[j], "lightq_cluster_replica_lag_offsets", rl)
					if shown != (j == leader) {
						return fmt.Sprintf("partition %d: replica %d's series on broker %d: %v (leader %d)", p, i+1, j+1, shown, leader+1)
					}
				}
				if lag, act, match := get(leader, "lightq_cluster_replica_lag_offsets", rl), get(leader, "lightq_cluster_replica_active", rl), get(leader, "lightq_cluster_replica_match_index", rl); lag != 0 || act != 1 || match != commit {
					return fmt.Sprintf("partition %d: replica %d on the leader: lag %v active %v match %v (commit %v)", p, i+1, lag, act, match, commit)
				}
			}
		}
		leaders := map[int]bool{} // node ids that lead something: every other broker answers them
		for p := range 2 {
			leaders[int(get(0, "lightq_cluster_partition_leader_node", lbl("topic=events,partition="+strconv.Itoa(p))))] = true
		}
		metaLeader := get(0, "lightq_cluster_meta_leader_node", "")
		leaders[int(metaLeader)] = true
		for i := range tc.brokers {
			if v := get(i, "lightq_cluster_meta_leader_node", ""); v != metaLeader || v < 1 || v > 3 {
				return fmt.Sprintf("metadata leader %v on broker %d, %v on broker 1", v, i+1, metaLeader)
			}
			if c, a := get(i, "lightq_cluster_meta_commit_index", ""), get(i, "lightq_cluster_meta_applied_index", ""); c != a || a < 1 || get(i, "lightq_cluster_meta_term", "") < 1 {
				return fmt.Sprintf("metadata group on broker %d: commit %v applied %v", i+1, c, a)
			}
			for j := range tc.brokers {
				if j == i {
					continue
				}
				// A broker connects to a peer when it has something to send: to a leader (of
				// a partition or the metadata) it answers, at least.
				pe := lbl("peer=" + strconv.Itoa(j+1))
				conn, sent := get(i, "lightq_cluster_peer_connected", pe), get(i, "lightq_cluster_peer_sent_messages_total", pe)
				if conn < 0 || sent < 0 || get(i, "lightq_cluster_peer_dropped_messages_total", pe) < 0 || get(i, "lightq_cluster_peer_queued_messages", pe) < 0 {
					return fmt.Sprintf("broker %d has no series of peer %d", i+1, j+1)
				}
				if leaders[j+1] && (conn != 1 || sent < 1 || get(i, "lightq_cluster_peer_sent_bytes_total", pe) < 1) {
					return fmt.Sprintf("broker %d's peer %d, a leader: connected %v, sent %v", i+1, j+1, conn, sent)
				}
				// Its features arrived with the connection (through the test's forwarders).
				if f := get(i, "lightq_cluster_peer_segment_catchup", pe); leaders[j+1] && f != 1 {
					return fmt.Sprintf("broker %d's peer %d, connected: segment catch-up %v", i+1, j+1, f)
				}
			}
		}
		return ""
	})
	union := map[string]*dto.MetricFamily{}
	for _, m := range mfs {
		for name, mf := range m {
			union[name] = mf
		}
	}
	checkClusterNames(t, union)
}
