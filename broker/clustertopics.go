package broker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lightq/lightq/broker/auth"
	"github.com/lightq/lightq/broker/meta"
	"github.com/lightq/lightq/broker/ring"
	cmeta "github.com/lightq/lightq/cluster/meta"
	"github.com/lightq/lightq/wire"
)

// This file keeps a cluster member's topic table in step with the cluster's metadata. In a
// cluster, topics are the cluster's: CREATE_TOPIC and DELETE_TOPIC of one, on any broker,
// are proposed to the metadata group, and every broker's reconcile builds or removes the
// live topic when it applies the change, opening the replicas placed on it (durable) or
// preallocating the rings of the partitions homed on it (transient: clustertransient.go).
// Transient topics a broker created before it had cluster settings stay its own. The users
// a cluster topic names live in the metadata too, and are overlaid on the broker's own
// (accountState).

// metaTimeout bounds the wait for a metadata change to be applied here.
const metaTimeout = 10 * time.Second

// clusterTopic marks a live topic as the cluster's, and which creation of its name it is,
// with the shape its options give its partitions (shapeErr: options this broker does not
// take; its replicas cannot be served here). Immutable.
type clusterTopic struct {
	created  time.Time
	shape    durableShape
	shapeErr error
	// homeErr: a transient topic's partitions homed here that have no ring, and why
	// (clustertransient.go); nil when every one has its ring.
	homeErr error
	// ring0 is a transient topic's first ring here (any: they share one shape), for the
	// direct produce path's size check; nil when no partition is homed here.
	ring0 *ring.Ring
}

// reconcile makes the topic table, the users and the transport's peers match the metadata.
// It runs on the cluster node's goroutine (and once in startCluster) and holds adminMu while
// it changes the table, opening and closing partition replicas (disk I/O) meanwhile: a topic
// created or deleted, and a partition whose replicas moved (clusterreplicas.go).
func (n *clusterNode) reconcile() {
	st := n.meta.State()
	s := n.srv
	n.syncPeers(st)
	s.adminMu.Lock()
	topics := *s.topics.Load()
	var gone []*topic
	built := map[string]*topic{}
	for _, ct := range st.Topics() {
		if ct.Name == offsetsTopicName {
			n.reconcileOffsets(ct)
			continue
		}
		t := topics[ct.Name]
		switch {
		case t != nil && t.cluster == nil:
			n.log.Error().Str("topic", ct.Name).Msg("the cluster has a topic of the name of one of this broker's own (transient) topics: it is not served here until that one is deleted")
			continue
		case t != nil && t.cluster.created.Equal(ct.CreatedAt):
			if t.kind == wire.KindDurable {
				n.syncReplicas(t, ct) // a transient partition's home never changes (moveReplicas)
			}
			continue
		case t != nil:
			gone = append(gone, t)         // deleted and created again meanwhile
			s.ringMemory -= t.ringMemory() // a transient topic's rings homed here
		}
		if ct.Kind == wire.KindTransient {
			built[ct.Name] = n.buildTransient(ct)
		} else {
			built[ct.Name] = n.buildTopic(ct)
		}
	}
	for name, t := range topics {
		if ct, ok := st.Topic(name); t.cluster != nil && (!ok || !t.cluster.created.Equal(ct.CreatedAt)) && built[name] == nil {
			gone = append(gone, t)
			s.ringMemory -= t.ringMemory()
		}
	}
	if len(built) > 0 || len(gone) > 0 {
		s.publishTopics(func(m map[string]*topic) {
			for _, t := range gone {
				delete(m, t.name)
			}
			for name, t := range built {
				m[name] = t
			}
		})
	}
	s.publishAccounts(s.accountState())
	s.adminMu.Unlock()
	for _, t := range gone {
		n.removeTopic(t, st)
	}
	n.setApplied(st.Index())
}

// buildTopic makes the live topic of a cluster topic, opening the replicas placed here.
func (n *clusterNode) buildTopic(ct *cmeta.Topic) *topic {
	s := n.srv
	t := newTopic(ct.Name, ct.Kind, ct.User, ct.Options, len(ct.Partitions), 0, 0)
	t.cluster = &clusterTopic{created: ct.CreatedAt} // committed offsets: in the offsets topic (coordinator.go)
	t.cluster.shape, t.cluster.shapeErr = parseDurableOptions(ct.Options, s.cfg.Limits.MaxBatch)
	if t.cluster.shapeErr != nil {
		// The proposer checked them: a broker of another version may disagree.
		n.log.Error().Err(t.cluster.shapeErr).Str("topic", ct.Name).Msg("cluster topic with options this broker does not take; its partitions here cannot be served")
	}
	for i, p := range t.parts {
		a := ct.Partitions[i]
		p.repl = newReplPart(a.Group, a.Replicas)
		p.metrics = s.metrics
		logger := s.log.With().Str("topic", ct.Name).Uint32("partition", p.id).Uint64("group", a.Group).Logger()
		p.logf = func(format string, args ...any) { logger.Warn().Msgf(format, args...) }
		if holds(a.Holders(), n.id) {
			n.openReplica(t, p, a)
		}
	}
	return t
}

// removeTopic closes a topic the cluster deleted and removes its replicas' data.
func (n *clusterNode) removeTopic(t *topic, st *cmeta.State) {
	t.deleted.Store(true)
	for _, p := range t.parts {
		p.wakeAll()
		if p.repl != nil && p.repl.part.Load() != nil {
			n.router.Remove(p.repl.group)
		}
	}
	n.srv.groups.DropTopic(t.name)
	if err := t.closeLogs(); err != nil {
		n.log.Warn().Err(err).Str("topic", t.name).Msg("closing the replicas of a deleted topic")
	}
	if _, again := st.Topic(t.name); again {
		// Created again: the new topic's replicas use the same directories; they were
		// opened already, so the old data is not removed under them (raft brings them up).
		return
	}
	n.srv.offsets.drop(t.name)
	dir := filepath.Join(n.srv.cfg.DataDir, "topics", t.name)
	if err := os.RemoveAll(dir); err != nil {
		n.log.Error().Err(err).Str("dir", dir).Msg("could not remove the data of a deleted topic")
	}
}

// createClusterTopic proposes a topic to the cluster and waits until this broker serves it.
// Runs on a worker, without adminMu (reconcile takes it to apply the change).
func (s *Server) createClusterTopic(m *wire.CreateTopic, mt meta.Topic, shape topicShape) error {
	n := s.cluster
	if strings.HasPrefix(m.Name, reservedPrefix) {
		return answer(wire.CodeInvalidRequest, "topic %q: names starting with %q are reserved for the cluster's own topics", m.Name, reservedPrefix)
	}
	if t := (*s.topics.Load())[m.Name]; t != nil {
		return answer(wire.CodeTopicExists, "topic %q exists", m.Name)
	}
	cmd := &cmeta.CreateTopic{Name: m.Name, Kind: m.Kind, User: m.User, CreatedAt: mt.CreatedAt.UnixMilli(), Options: m.Options}
	if acct := s.lookupUser(m.User); acct != nil {
		if !s.verifier.Check(m.User, acct.hash, m.Password) {
			return answer(wire.CodeAuthFailed, "user %q exists with another password", m.User)
		}
		if _, inCluster := n.meta.State().User(m.User); !inCluster {
			// A user of this broker alone: the cluster gets it too, with the same hash.
			cmd.UserHash = []byte(acct.hash)
		}
	} else if m.User != "" {
		hash, err := auth.Hash(m.Password, s.cfg.HashParams)
		if err != nil {
			return err
		}
		cmd.UserHash = []byte(hash)
	}
	if m.Kind == wire.KindTransient {
		placement, err := s.placeTransient(n.meta.State(), mt, shape)
		if err != nil {
			return err
		}
		cmd.Placement = placement
		return n.change(cmd)
	}
	placement, err := cmeta.Place(n.meta.State(), int(m.Partitions), shape.durable.replicas)
	if err != nil {
		return answer(wire.CodeInvalidRequest, "%s=%d: %v", wire.OptionReplicationFactor, shape.durable.replicas, err)
	}
	cmd.Placement = placement
	return n.change(cmd)
}

// deleteClusterTopic proposes the deletion of a cluster topic and waits until it is gone
// here.
func (s *Server) deleteClusterTopic(name string) error {
	return s.cluster.change(&cmeta.DeleteTopic{Name: name})
}

// change proposes a metadata command and waits until the topic table reflects it.
func (n *clusterNode) change(cmd cmeta.Command) error {
	ctx, cancel := context.WithTimeout(context.Background(), metaTimeout)
	defer cancel()
	res, err := n.meta.Propose(ctx, cmd)
	if err != nil {
		return n.changeError(err)
	}
	if err := n.waitApplied(ctx, res.Index); err != nil {
		return answer(wire.CodeReplicationTimeout, "the change was made in the cluster, but this broker did not apply it within %v", metaTimeout)
	}
	return nil
}

// changeError is the client's answer to a metadata change the group refused or did not make
// in time.
func (n *clusterNode) changeError(err error) error {
	switch {
	case errors.Is(err, cmeta.ErrTopicExists):
		return answer(wire.CodeTopicExists, "%v", err)
	case errors.Is(err, cmeta.ErrUnknownTopic):
		return answer(wire.CodeUnknownTopic, "%v", err)
	case errors.Is(err, cmeta.ErrUserExists):
		return answer(wire.CodeAuthFailed, "%v (created meanwhile, with another password)", err)
	case errors.Is(err, cmeta.ErrUnknownUser):
		return answer(wire.CodeUnknownUser, "%v", err)
	case errors.Is(err, cmeta.ErrUnknownBroker):
		return answer(wire.CodeUnknownBroker, "%v", err)
	case errors.Is(err, cmeta.ErrBrokerInUse):
		return answer(wire.CodeBrokerInUse, "%v", err)
	case errors.Is(err, cmeta.ErrConflict):
		return answer(wire.CodeReplicasChanged, "%v: ask MEMBERSHIP and try again", err)
	case errors.Is(err, cmeta.ErrInvalid), errors.Is(err, cmeta.ErrNotEnoughBrokers):
		return answer(wire.CodeInvalidRequest, "%v", err)
	case errors.Is(err, cmeta.ErrOutcomeUnknown), errors.Is(err, context.DeadlineExceeded):
		return answer(wire.CodeReplicationTimeout, "the cluster's metadata group did not apply the change within %v (no quorum?): it may or may not be made; ask METADATA or MEMBERSHIP", metaTimeout)
	}
	return err
}

// accountState is the users the broker authenticates: its own (the metadata file), with the
// cluster's overlaid in a cluster (a cluster user of the same name wins).
func (s *Server) accountState() meta.State {
	st := s.meta.State()
	if s.cluster == nil {
		return st
	}
	cs := s.cluster.meta.State()
	if cs.UserCount() == 0 {
		return st
	}
	merged := st.Clone()
	for _, u := range cs.Users() {
		merged.Users[u.Name] = meta.User{Name: u.Name, Hash: string(u.Hash), Admin: u.Admin, Grants: u.Grants}
	}
	return merged
}

// describeClusterLayout fills METADATA's cluster layout of a cluster member: the brokers of
// the metadata, each replicated partition's leader and replicas, each cluster transient
// partition's home as its leader and only replica, and this broker as the leader of its
// own transient topics.
func (s *Server) describeClusterLayout(resp *wire.MetadataResponse) {
	self := s.nodeID()
	resp.NodeID = self
	for _, b := range brokerList(s.cluster.meta.State()) {
		resp.Brokers = append(resp.Brokers, wire.BrokerMetadata{NodeID: uint32(b.ID), Addr: b.ClientAddr, TLSAddr: b.TLSAddr})
	}
	if len(resp.Brokers) == 0 { // not announced yet
		resp.Brokers = []wire.BrokerMetadata{{NodeID: self, Addr: s.advertisedAddr(), TLSAddr: s.advertisedTLSAddr()}}
	}
	topics := *s.topics.Load()
	for i := range resp.Topics {
		t := topics[resp.Topics[i].Name]
		for j := range resp.Topics[i].Partitions {
			pm := &resp.Topics[i].Partitions[j]
			if t == nil || t.parts[pm.ID].repl == nil {
				pm.Leader, pm.Replicas = self, []uint32{self}
				continue
			}
			rp := t.parts[pm.ID].repl
			pm.Leader = uint32(rp.leader())
			for _, id := range *rp.replicas.Load() {
				pm.Replicas = append(pm.Replicas, uint32(id))
			}
		}
	}
}
