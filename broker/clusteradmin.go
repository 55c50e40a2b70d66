package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	cmeta "github.com/lightq/lightq/cluster/meta"
	"github.com/lightq/lightq/wire"
)

// The cluster membership requests (PROTOCOL.md section 16.2): ADD_BROKER, MOVE_REPLICAS,
// DRAIN_BROKER, REMOVE_BROKER and MEMBERSHIP, all admin only (authz.go). Each runs on the
// auth pool like the topic changes, proposes to the metadata group and answers once this
// broker has applied the change. A move itself then happens in the background, driven by the
// partition's leader (clustermove.go); MEMBERSHIP shows it under way until it finishes.

func (c *conn) handleAddBroker(corr uint32, body []byte) {
	var m wire.AddBroker
	if !c.decodeOr(corr, wire.OpAddBroker, m.Decode(body)) {
		return
	}
	c.runAdmin(corr, wire.OpAddBroker, func() error { return c.srv.addBroker(&m) }, func() {
		c.log.Info().Uint32("node", m.NodeID).Str("cluster_addr", m.ClusterAddr).Msg("broker added to the cluster")
	}, nil)
}

func (c *conn) handleMoveReplicas(corr uint32, body []byte) {
	var m wire.MoveReplicas
	if !c.decodeOr(corr, wire.OpMoveReplicas, m.Decode(body)) {
		return
	}
	c.runAdmin(corr, wire.OpMoveReplicas, func() error { return c.srv.moveReplicas(&m) }, func() {
		c.log.Info().Str("topic", m.Topic).Uint32("partition", m.Partition).Uints32("replicas", m.Replicas).Msg("partition moving")
	}, nil)
}

func (c *conn) handleDrainBroker(corr uint32, body []byte) {
	var m wire.BrokerID
	if !c.decodeOr(corr, wire.OpDrainBroker, m.Decode(body)) {
		return
	}
	var resp wire.DrainBrokerResponse
	c.runAdmin(corr, wire.OpDrainBroker, func() (err error) { resp.Moves, err = c.srv.drainBroker(m.NodeID); return err }, func() {
		c.log.Info().Uint32("node", m.NodeID).Uint32("moves", resp.Moves).Msg("broker draining")
	}, resp.AppendTo)
}

func (c *conn) handleRemoveBroker(corr uint32, body []byte) {
	var m wire.BrokerID
	if !c.decodeOr(corr, wire.OpRemoveBroker, m.Decode(body)) {
		return
	}
	c.runAdmin(corr, wire.OpRemoveBroker, func() error { return c.srv.removeBroker(m.NodeID) }, func() {
		c.log.Info().Uint32("node", m.NodeID).Msg("broker removed from the cluster")
	}, nil)
}

func (c *conn) handleMembership(corr uint32, body []byte) {
	var m wire.Membership
	if !c.decodeOr(corr, wire.OpMembership, m.Decode(body)) {
		return
	}
	var resp wire.MembershipResponse
	c.runAdmin(corr, wire.OpMembership, func() (err error) { resp, err = c.srv.membership(&m); return err }, nil,
		func(dst []byte) []byte { return resp.AppendTo(dst) })
}

// runAdmin runs job on the auth pool and answers op: its error, or the body (nil: empty).
// done, if set, runs (on the pool) after a success, to log it: a change is made even if the
// connection closes meanwhile.
func (c *conn) runAdmin(corr uint32, op wire.Op, job func() error, done func(), body func([]byte) []byte) {
	c.runBackground(corr, op, func() (func(*conn), time.Duration) {
		err := job()
		if err == nil && done != nil {
			done()
		}
		return func(c *conn) {
			c.reply(corr, err, func() {
				if body == nil {
					c.respondEmpty(op, corr)
				} else {
					c.respond(op, corr, body)
				}
			})
		}, 0
	})
}

// errNotClustered answers a membership request to a broker without cluster settings.
func errNotClustered(op wire.Op) error {
	return answer(wire.CodeNotSupported, "%s: this broker is not a member of a cluster (no cluster settings)", op)
}

// addBroker adds a broker started with cluster-join to the metadata (its addresses) and to
// the metadata group, and waits until this broker applied both. Adding one already there is
// harmless (its addresses are updated).
func (s *Server) addBroker(m *wire.AddBroker) error {
	n := s.cluster
	if n == nil {
		return errNotClustered(wire.OpAddBroker)
	}
	if m.NodeID == 0 {
		return answer(wire.CodeInvalidRequest, "node id 0: node ids start at 1")
	}
	for _, a := range []struct{ what, addr string }{{"client address", m.Addr}, {"cluster address", m.ClusterAddr}, {"TLS address", m.TLSAddr}} {
		if a.addr == "" && a.what == "TLS address" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			return answer(wire.CodeInvalidRequest, "broker %d: %s %q is not host:port", m.NodeID, a.what, a.addr)
		}
	}
	if err := n.change(&cmeta.AddBroker{ID: uint64(m.NodeID), ClientAddr: m.Addr, TLSAddr: m.TLSAddr, ClusterAddr: m.ClusterAddr}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), metaTimeout)
	defer cancel()
	if err := n.meta.AddMember(ctx, uint64(m.NodeID)); err != nil {
		return n.changeError(err)
	}
	return nil
}

// moveReplicas gives a partition of a replicated topic new replicas (SetReplicas); its
// leader then moves it.
func (s *Server) moveReplicas(m *wire.MoveReplicas) error {
	n := s.cluster
	if n == nil {
		return errNotClustered(wire.OpMoveReplicas)
	}
	st := n.meta.State()
	ct, ok := st.Topic(m.Topic)
	if !ok {
		if t := (*s.topics.Load())[m.Topic]; t != nil && t.cluster == nil {
			return answer(wire.CodeInvalidRequest, "topic %q is a transient topic of this broker alone: it has no replicas to move", m.Topic)
		}
		return answer(wire.CodeUnknownTopic, "no topic %q in the cluster", m.Topic)
	}
	if int(m.Partition) >= len(ct.Partitions) {
		return answer(wire.CodeUnknownPartition, "topic %q has partitions 0-%d, not %d", m.Topic, len(ct.Partitions)-1, m.Partition)
	}
	if ct.Kind == wire.KindTransient {
		return answer(wire.CodeInvalidRequest, "topic %q is transient: each partition lives in its home broker's memory (node %d for partition %d), which cannot be moved; delete the topic and create it again to place it anew",
			m.Topic, ct.Partitions[m.Partition].Replicas[0], m.Partition)
	}
	if len(m.Replicas) == 0 || len(m.Replicas) > cmeta.MaxReplicas {
		return answer(wire.CodeInvalidRequest, "%d replicas: want 1-%d", len(m.Replicas), cmeta.MaxReplicas)
	}
	cur := ct.Partitions[m.Partition]
	to := make([]uint64, len(m.Replicas))
	for i, id := range m.Replicas {
		to[i] = uint64(id)
		b, ok := st.Broker(to[i])
		switch {
		case id == 0:
			return answer(wire.CodeInvalidRequest, "node id 0: node ids start at 1")
		case slices.Contains(to[:i], to[i]):
			return answer(wire.CodeInvalidRequest, "node %d is listed twice", id)
		case !ok:
			return answer(wire.CodeUnknownBroker, "no broker %d in the cluster (add it first: ADD_BROKER)", id)
		case b.State != cmeta.BrokerActive && !slices.Contains(cur.Replicas, to[i]):
			return answer(wire.CodeBrokerInUse, "broker %d is being removed: it takes no new replicas", id)
		}
	}
	return n.change(&cmeta.SetReplicas{Topic: m.Topic, Partition: int(m.Partition), From: cur.Replicas, To: to})
}

// drainBroker marks a broker removing and moves every partition that lists it to another
// broker (cmeta.PlanDrain), returning how many moves it started. A drain that cannot be
// planned (a partition with no broker to go to) changes nothing.
func (s *Server) drainBroker(id uint32) (uint32, error) {
	n := s.cluster
	if n == nil {
		return 0, errNotClustered(wire.OpDrainBroker)
	}
	node := uint64(id)
	if _, ok := n.meta.State().Broker(node); !ok {
		return 0, answer(wire.CodeUnknownBroker, "no broker %d in the cluster", id)
	}
	if _, err := cmeta.PlanDrain(n.meta.State(), node); err != nil {
		return 0, n.changeError(err)
	}
	if err := n.change(&cmeta.DrainBroker{ID: node}); err != nil {
		return 0, err
	}
	var moves uint32
	// A move refused as changed meanwhile (another move of the partition came first) is
	// planned again from the new state; each round moves at least one partition or ends.
	for range 8 {
		plan, err := cmeta.PlanDrain(n.meta.State(), node)
		if err != nil {
			return moves, n.changeError(err)
		}
		if len(plan) == 0 {
			return moves, nil
		}
		conflicts := 0
		for i := range plan {
			switch err := n.change(&plan[i]); {
			case err == nil:
				moves++
			case answerCode(err) == wire.CodeReplicasChanged:
				conflicts++
			default:
				return moves, err
			}
		}
		if conflicts == 0 {
			return moves, nil
		}
	}
	return moves, answer(wire.CodeReplicasChanged, "broker %d: partitions kept moving under the drain; %d moves started, drain it again", id, moves)
}

// removeBroker takes a drained broker out of the cluster: marked removing (if it is not), out
// of the metadata group, then out of the metadata (the other brokers stop sending to it).
// Refused while the metadata lists it among the replicas of any partition, moves under way
// included.
func (s *Server) removeBroker(id uint32) error {
	n := s.cluster
	if n == nil {
		return errNotClustered(wire.OpRemoveBroker)
	}
	node := uint64(id)
	st := n.meta.State()
	if node == n.id {
		return answer(wire.CodeInvalidRequest, "broker %d cannot remove itself (it would not see its own removal through): send REMOVE_BROKER to another broker", id)
	}
	_, isBroker := st.Broker(node)
	cs := n.meta.Members()
	isMember := slices.Contains(cs.Voters, node) || slices.Contains(cs.Learners, node)
	if !isBroker && !isMember {
		return answer(wire.CodeUnknownBroker, "no broker %d in the cluster", id)
	}
	if h := st.HeldBy(node); h.Replicas+h.Leaving > 0 {
		if first, ok := homesTransient(st, node); ok {
			return answer(wire.CodeBrokerInUse, "broker %d is the home of transient partitions (the first: %s), which cannot move: delete those topics first", id, first)
		}
		return answer(wire.CodeBrokerInUse, "broker %d is a replica of %d partitions (the first: %s) and is leaving %d more whose moves have not finished: drain it first (DRAIN_BROKER) and wait until MEMBERSHIP shows no move",
			id, h.Replicas, h.First, h.Leaving)
	}
	if b, _ := st.Broker(node); isBroker && b.State == cmeta.BrokerActive {
		// Marked removing before it leaves the metadata group: the metadata group's heal
		// (clusterheal.go) adds back an active broker it lacks, and must not undo a removal
		// interrupted between the two steps below.
		if err := n.change(&cmeta.DrainBroker{ID: node}); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), metaTimeout)
	defer cancel()
	if err := n.meta.RemoveMember(ctx, node); err != nil {
		return n.changeError(err)
	}
	if !isBroker {
		return nil
	}
	if err := n.change(&cmeta.RemoveBroker{ID: node}); err != nil {
		var ea *errAnswer
		if errors.As(err, &ea) {
			ea.msg = fmt.Sprintf("broker %d left the metadata group, but stays in the metadata: %s; REMOVE_BROKER again once that is fixed", id, ea.msg)
		}
		return err
	}
	return nil
}

// answerCode is the code of an errAnswer, 0 for any other error.
func answerCode(err error) wire.Code {
	var ea *errAnswer
	if errors.As(err, &ea) {
		return ea.code
	}
	return 0
}

// membership answers MEMBERSHIP: the metadata's brokers and the partitions asked for,
// with what this broker's replicas see. A broker without cluster settings answers as a
// cluster of one with no replicated partitions.
func (s *Server) membership(m *wire.Membership) (wire.MembershipResponse, error) {
	resp := wire.MembershipResponse{NodeID: s.nodeID()}
	n := s.cluster
	if n == nil {
		resp.MetaLeader = s.nodeID()
		resp.Brokers = []wire.MemberBroker{{NodeID: s.nodeID(), State: wire.BrokerActive, Meta: wire.MetaVoter, Addr: s.Addr(), TLSAddr: s.TLSAddr()}}
		return resp, nil
	}
	st := n.meta.State()
	resp.MetaLeader = uint32(n.meta.Status().Leader)
	cs := n.meta.Members()
	held := map[uint64][2]uint32{}
	for _, t := range st.Topics() {
		for _, p := range t.Partitions {
			for _, id := range p.Holders() {
				c := held[id]
				if slices.Contains(p.Replicas, id) {
					c[0]++
				} else {
					c[1]++
				}
				held[id] = c
			}
		}
	}
	for _, b := range st.Brokers() {
		cb := wire.MemberBroker{NodeID: uint32(b.ID), State: wire.BrokerState(b.State), Addr: b.ClientAddr, TLSAddr: b.TLSAddr, ClusterAddr: b.ClusterAddr,
			Replicas: held[b.ID][0], Leaving: held[b.ID][1]}
		switch {
		case slices.Contains(cs.Voters, b.ID):
			cb.Meta = wire.MetaVoter
		case slices.Contains(cs.Learners, b.ID):
			cb.Meta = wire.MetaLearner
		}
		resp.Brokers = append(resp.Brokers, cb)
		if len(resp.Brokers) == wire.MaxBrokers {
			break
		}
	}
	if m.Topic != "" {
		if _, ok := st.Topic(m.Topic); !ok {
			return resp, answer(wire.CodeUnknownTopic, "no topic %q in the cluster", m.Topic)
		}
	}
	// The answer must fit the frame limit: the partitions stop (More) before it would not.
	budget := s.cfg.Limits.MaxFrame - wire.HeaderSize - len(resp.AppendTo(nil))
	topics := *s.topics.Load()
	var scratch []byte
	for _, ct := range st.Topics() {
		if m.Topic != "" && ct.Name != m.Topic || ct.Name < m.AfterTopic {
			continue
		}
		t := topics[ct.Name]
		for i, p := range ct.Partitions {
			if m.AfterTopic != "" && ct.Name == m.AfterTopic && uint32(i) <= m.AfterPartition || m.MovingOnly && !p.Moving() {
				continue
			}
			cp := wire.MemberPartition{Topic: ct.Name, Partition: uint32(i), Group: p.Group, Replicas: nodeIDs(p.Replicas), Previous: nodeIDs(p.Previous)}
			if t != nil && t.cluster != nil && i < len(t.parts) && t.parts[i].repl != nil {
				fillLocalView(&cp, t.parts[i].repl)
			}
			one := wire.MembershipResponse{Partitions: []wire.MemberPartition{cp}}
			scratch = one.AppendTo(scratch[:0])
			size := len(scratch) - 4 - 4 - 2 - 4 - 1 // the partition alone
			if len(resp.Partitions) == wire.MaxMembershipPartitions || size > budget && len(resp.Partitions) > 0 {
				resp.More = true
				return resp, nil
			}
			budget -= size
			resp.Partitions = append(resp.Partitions, cp)
		}
	}
	return resp, nil
}

// fillLocalView adds what this broker's replica of the partition sees, when it holds one
// (not the replicas' lag: only each partition's leader knows it).
func fillLocalView(cp *wire.MemberPartition, rp *replPart) {
	part := rp.part.Load()
	if part == nil {
		return
	}
	ps := part.Status()
	cp.Held, cp.Leads, cp.Leader = true, ps.IsLeader, uint32(ps.Leader)
	cp.Voters, cp.Learners = nodeIDs(ps.Voters), nodeIDs(ps.Learners)
	if len(cp.Voters) > wire.MaxReplicas {
		cp.Voters = cp.Voters[:wire.MaxReplicas]
	}
	if len(cp.Learners) > wire.MaxReplicas {
		cp.Learners = cp.Learners[:wire.MaxReplicas]
	}
}

// nodeIDs is a replica list as the wire carries it (nil for none).
func nodeIDs(ids []uint64) []uint32 {
	if len(ids) == 0 {
		return nil
	}
	out := make([]uint32, len(ids))
	for i, id := range ids {
		out[i] = uint32(id)
	}
	return out
}

// homesTransient reports whether node is the home of a transient partition of the cluster,
// and the first (topic/partition, by name): a drain does not move those (nothing can hold
// them but their home), so they keep the broker in use.
func homesTransient(st *cmeta.State, node uint64) (string, bool) {
	for _, t := range st.Topics() {
		if t.Kind != wire.KindTransient {
			continue
		}
		for i, p := range t.Partitions {
			if slices.Contains(p.Replicas, node) {
				return fmt.Sprintf("%s/%d", t.Name, i), true
			}
		}
	}
	return "", false
}
