package broker

import (
	"fmt"

	"github.com/lightq/lightq/broker/meta"
	"github.com/lightq/lightq/broker/ring"
	cmeta "github.com/lightq/lightq/cluster/meta"
	"github.com/lightq/lightq/wire"
)

// Transient topics in a cluster (PROTOCOL.md section 16.3). A transient topic created on a
// cluster member is the cluster's, as a durable one is: CREATE_TOPIC proposes it to the
// metadata group (createClusterTopic), with its user, password hash and options, and every
// broker builds it when it applies the change, so its name, credentials and partitions mean
// the same on every broker. Each partition is placed on one broker, its home (cmeta.Place
// with a replication factor of 1: the metadata's replica list is the home alone), which
// preallocates its ring. Nothing of a ring is replicated: the home's death or restart loses
// what the ring held, and while the home is down the partition is unavailable (nothing else
// can take it: moving a home is refused, see moveReplicas).
//
// On its home a partition is exactly a single broker's transient partition (ring set, repl
// nil), served by the same paths, the direct produce and delivery paths included. On every
// other broker it has no ring and a replPart naming the home (replicas [home], no replica),
// so PRODUCE, SUBSCRIBE and METADATA find the home the way they find a replicated
// partition's leader: NOT_LEADER with the home's address, and the home as the leader. A
// home that could not build the ring (options it does not take, or no ring memory left) has
// the same replPart with itself as home and answers the partition's requests with the
// reason (homeFailure).
//
// Concurrency: built on the cluster node's goroutine under Server.adminMu (reconcile), then
// immutable; s.ringMemory is changed under adminMu only.

// buildTransient makes the live topic of a cluster transient topic: the rings of the
// partitions homed here (counted in s.ringMemory), and a replPart naming the home for the
// others. Caller holds adminMu.
func (n *clusterNode) buildTransient(ct *cmeta.Topic) *topic {
	s := n.srv
	// A topic without rings: the kind is set after, so that newTopic preallocates none.
	t := newTopic(ct.Name, wire.KindDurable, ct.User, ct.Options, len(ct.Partitions), 0, 0)
	t.kind = ct.Kind
	t.cluster = &clusterTopic{created: ct.CreatedAt}
	mt := meta.Topic{Name: ct.Name, Kind: ct.Kind, Partitions: len(ct.Partitions), Options: ct.Options}
	shape, shapeErr := s.parseTopicOptions(mt)
	if shapeErr != nil {
		n.log.Error().Err(shapeErr).Str("topic", ct.Name).Msg("cluster transient topic with options this broker does not take; its partitions homed here cannot be served")
	}
	for i, p := range t.parts {
		a := ct.Partitions[i]
		home := a.Replicas[0]
		if home != n.id {
			p.repl = newReplPart(a.Group, []uint64{home})
			continue
		}
		need := ring.Memory(shape.ringBytes, shape.ringSlots)
		switch {
		case shapeErr != nil:
			t.cluster.homeErr = fmt.Errorf("the partitions of %s homed on node %d cannot be served: %w", ct.Name, n.id, shapeErr)
		case s.ringMemory+need > s.cfg.MaxRingMemory:
			t.cluster.homeErr = fmt.Errorf("the partitions of %s homed on node %d cannot be served: partition %d's ring needs %d bytes, and %d of the broker's %d are in use (max-ring-memory)",
				ct.Name, n.id, p.id, need, s.ringMemory, s.cfg.MaxRingMemory)
		default:
			p.ring = ring.New(shape.ringBytes, shape.ringSlots)
			s.ringMemory += p.ring.Memory()
			if t.cluster.ring0 == nil {
				t.cluster.ring0 = p.ring
			}
			continue
		}
		n.log.Error().Err(t.cluster.homeErr).Msg("transient partition not served")
		p.repl = newReplPart(a.Group, []uint64{home})
	}
	return t
}

// placeTransient places a new transient topic's partitions, one broker each (its home), and
// checks that the rings fit each home's ring memory as far as this broker can tell: the
// cluster's transient partitions already homed there, sized by this broker's defaults for
// options they leave out. The home checks again against what it really holds when it builds
// the ring (buildTransient).
func (s *Server) placeTransient(st *cmeta.State, mt meta.Topic, shape topicShape) ([][]uint64, error) {
	placement, err := cmeta.Place(st, mt.Partitions, 1)
	if err != nil {
		return nil, answer(wire.CodeInvalidRequest, "%v", err)
	}
	used := map[uint64]int64{}
	for _, ct := range st.Topics() {
		if ct.Kind != wire.KindTransient {
			continue
		}
		sh, err := s.parseTopicOptions(meta.Topic{Name: ct.Name, Kind: ct.Kind, Partitions: len(ct.Partitions), Options: ct.Options})
		if err != nil {
			continue
		}
		for _, p := range ct.Partitions {
			used[p.Replicas[0]] += ring.Memory(sh.ringBytes, sh.ringSlots)
		}
	}
	need := ring.Memory(shape.ringBytes, shape.ringSlots)
	for _, homes := range placement {
		used[homes[0]] += need
	}
	for _, homes := range placement {
		if u := used[homes[0]]; u > s.cfg.MaxRingMemory {
			return nil, answer(wire.CodeResourceLimit, "topic needs %d bytes of ring memory per partition (%d-byte ring + %d slots x %d bytes); its partitions homed on node %d would bring that broker's transient topics to %d bytes, over max-ring-memory %d",
				need, shape.ringBytes, ring.Slots(shape.ringSlots), ring.SlotBytes, homes[0], u, s.cfg.MaxRingMemory)
		}
	}
	return placement, nil
}

// home is the broker a cluster transient partition lives on, by the metadata (p.repl is set:
// the partition has no ring here).
func (p *partition) home() uint64 { return (*p.repl.replicas.Load())[0] }

// notHome answers a request for a cluster transient partition that has no ring here:
// NOT_LEADER naming its home, or, on a home that could not build the ring, why.
func (c *conn) notHome(corr uint32, t *topic, p *partition) {
	if p.home() == uint64(c.srv.nodeID()) {
		t.stats.rejected.Add(1)
		c.sendError(corr, wire.CodeResourceLimit, t.cluster.homeErr.Error())
		return
	}
	home := p.home()
	msg := fmt.Sprintf("partition %d of %s is transient and lives on node %d (its home), not on this broker (node %d)", p.id, t.name, home, c.srv.nodeID())
	if b, ok := c.srv.clusterBroker(home); ok && b.ClientAddr != "" {
		msg += fmt.Sprintf("; node %d is at %s", home, b.ClientAddr)
	}
	c.sendError(corr, wire.CodeNotLeader, msg)
}

// subscribableHere reports whether every partition of parts has its ring on this broker,
// answering the SUBSCRIBE otherwise: NOT_LEADER naming the home of a partition held
// elsewhere (for several partitions homed on several brokers, the message names them all:
// subscribe to each at its home).
func (c *conn) subscribableHere(corr uint32, t *topic, parts []*partition) bool {
	var away []*partition
	for _, p := range parts {
		if p.ring == nil {
			away = append(away, p)
		}
	}
	switch {
	case len(away) == 0:
		return true
	case len(parts) == 1:
		c.notHome(corr, t, away[0])
		return false
	}
	homes := map[uint64]bool{}
	for _, p := range away {
		homes[p.home()] = true
	}
	if len(homes) == 1 && len(away) == len(parts) {
		c.notHome(corr, t, away[0]) // every partition on one other broker: go there
		return false
	}
	msg := fmt.Sprintf("topic %q: its partitions live on different brokers (", t.name)
	for i, p := range t.parts {
		if i > 0 {
			msg += ", "
		}
		if p.ring != nil {
			msg += fmt.Sprintf("%d on node %d", p.id, c.srv.nodeID())
		} else {
			msg += fmt.Sprintf("%d on node %d", p.id, p.home())
		}
	}
	c.sendError(corr, wire.CodeNotLeader, msg+"): subscribe to each partition at its home (METADATA names it as the leader)")
	return false
}
