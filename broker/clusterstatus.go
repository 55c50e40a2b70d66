package broker

import (
	"fmt"
	"sync"
	"sync/atomic"

	cpart "github.com/lightq/lightq/cluster/partition"
	"github.com/lightq/lightq/wire"
)

// This file reads how the replicated partitions stand, for CLUSTER_STATUS (PROTOCOL.md
// section 16.1) and for /metrics (metrics_cluster.go). Each broker reports what its own
// replicas know and asks no other broker: only a partition's leader knows the other
// replicas' progress, so a client that wants every partition's replica lag asks every
// broker and keeps the leaders' answers (lqcat cluster status does).
//
// A leader's cpart.Partition.Status waits one turn of the partition's Raft loop (to read
// raft's progress), which an fsync can hold up for milliseconds: statuses are read on
// workers (the metadata pool for CLUSTER_STATUS, the scrape's goroutine for /metrics),
// statusWorkers at a time, never on an event loop.

// statusWorkers bounds the partitions whose status is read at once.
const statusWorkers = 4

// clusterStatusPage bounds a CLUSTER_STATUS answer (also bounded by MaxFrame).
const clusterStatusPage = 64 << 10

// replicaView is a replicated partition and its replica's status here, when it has one.
type replicaView struct {
	t    *topic
	p    *partition
	part *cpart.Partition // nil: no replica here, or one that cannot be served
	st   cpart.Status     // read by readStatuses when part is set
}

// replicatedViews lists the partitions of the cluster topics in (name, partition) order,
// from topic from and partition fromPart on; only those of topic only when it is not empty.
func replicatedViews(topics map[string]*topic, only, from string, fromPart uint32) []replicaView {
	var out []replicaView
	for _, t := range sortedTopics(topics) {
		if t.cluster == nil || t.kind != wire.KindDurable || t.deleted.Load() || only != "" && t.name != only || t.name < from {
			continue
		}
		for _, p := range t.parts {
			if t.name == from && p.id < fromPart || p.repl == nil {
				continue
			}
			out = append(out, replicaView{t: t, p: p, part: p.repl.part.Load()})
		}
	}
	return out
}

// readStatuses reads the status of every view with a replica, statusWorkers at a time. It
// returns when all are read.
func readStatuses(vs []replicaView) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(statusWorkers, len(vs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(vs)); i = next.Add(1) - 1 {
				if v := &vs[i]; v.part != nil {
					v.st = v.part.Status()
				}
			}
		}()
	}
	wg.Wait()
}

// wireStatus is v as CLUSTER_STATUS describes it.
func (v *replicaView) wireStatus() wire.PartitionStatus {
	ps := wire.PartitionStatus{ID: v.p.id}
	if v.part == nil {
		return ps
	}
	st := &v.st
	ps.View = wire.ViewFollower
	ps.Leader, ps.Term, ps.Commit, ps.Applied = uint32(st.Leader), st.Term, st.Commit, st.Applied
	ps.HighWatermark, ps.LogStart, ps.LogEnd = st.HighWatermark, st.LogStart, st.LogEnd
	if !st.IsLeader {
		return ps
	}
	ps.View = wire.ViewLeader
	for _, r := range st.Replicas[:min(len(st.Replicas), wire.MaxReplicas)] {
		ps.Replicas = append(ps.Replicas, wire.ReplicaStatus{NodeID: uint32(r.ID), Match: r.Match, Lag: r.Lag, State: replicaState(r.State), Active: r.Active})
	}
	return ps
}

// replicaState maps raft's progress state names to CLUSTER_STATUS's.
func replicaState(s string) wire.ReplicaState {
	switch s {
	case "StateProbe":
		return wire.ReplicaStateProbe
	case "StateReplicate":
		return wire.ReplicaStateReplicate
	case "StateSnapshot":
		return wire.ReplicaStateSnapshot
	}
	return wire.ReplicaStateUnknown
}

// handleClusterStatus answers CLUSTER_STATUS: one page of the replicated partitions from
// the request's position, read on the metadata pool.
func (c *conn) handleClusterStatus(corr uint32, body []byte) {
	var m wire.ClusterStatus
	if !c.decodeOr(corr, wire.OpClusterStatus, m.Decode(body)) {
		return
	}
	s := c.srv
	if m.Topic != "" {
		if err := wire.ValidTopicName(m.Topic); err != nil {
			c.sendError(corr, wire.CodeInvalidRequest, "CLUSTER_STATUS: "+err.Error())
			return
		}
		if t := (*s.topics.Load())[m.Topic]; t == nil || t.deleted.Load() {
			c.sendError(corr, wire.CodeUnknownTopic, fmt.Sprintf("no topic %q", m.Topic))
			return
		}
	}
	if s.cluster == nil {
		resp := wire.ClusterStatusResponse{NodeID: s.nodeID()}
		c.respond(wire.OpClusterStatus, corr, resp.AppendTo)
		return
	}
	page := min(clusterStatusPage, s.cfg.Limits.MaxFrame-wire.HeaderSize) - wire.ClusterStatusHeaderSize
	ok := s.metaPool.Submit(func() {
		resp := s.clusterStatus(&m, page)
		c.complete(func(c *conn) { c.respond(wire.OpClusterStatus, corr, resp.AppendTo) })
	})
	if !ok {
		c.sendError(corr, wire.CodeResourceLimit, "CLUSTER_STATUS: the broker is busy; retry")
	}
}

// clusterStatus builds one page of CLUSTER_STATUS of at most page bytes after its header:
// the partitions from m's position on, their statuses read a chunk at a time. One partition
// (with its topic's entry, at most a few hundred bytes) always fits. Runs on a worker.
func (s *Server) clusterStatus(m *wire.ClusterStatus, page int) *wire.ClusterStatusResponse {
	ms := s.cluster.meta.Status()
	resp := &wire.ClusterStatusResponse{NodeID: s.nodeID(), Member: true,
		MetaLeader: uint32(ms.Leader), MetaTerm: ms.Term, MetaCommit: ms.Commit, MetaApplied: ms.Applied}
	vs := replicatedViews(*s.topics.Load(), m.Topic, m.FromTopic, m.FromPartition)
	size := 0
	for len(vs) > 0 {
		chunk := vs[:min(len(vs), 4*statusWorkers)]
		vs = vs[len(chunk):]
		readStatuses(chunk)
		for i := range chunk {
			v := &chunk[i]
			ps := v.wireStatus()
			n := ps.EncodedSize()
			last := len(resp.Topics) - 1
			newTopic := last < 0 || resp.Topics[last].Name != v.t.name
			if newTopic {
				n += wire.ClusterTopicStatusSize + len(v.t.name)
			}
			if size+n > page && size > 0 {
				resp.More = true
				return resp
			}
			size += n
			if newTopic {
				resp.Topics = append(resp.Topics, wire.TopicStatus{Name: v.t.name})
				last++
			}
			resp.Topics[last].Partitions = append(resp.Topics[last].Partitions, ps)
		}
	}
	return resp
}
