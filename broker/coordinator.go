package broker

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lightq/lightq/broker/group"
	cmeta "github.com/lightq/lightq/cluster/meta"
	coffsets "github.com/lightq/lightq/cluster/offsets"
	"github.com/lightq/lightq/cluster/replica"
	"github.com/lightq/lightq/wire"
)

// Consumer groups in a cluster (PROTOCOL.md section 16, docs/CLUSTER.md "Consumer groups in a
// cluster"). A group name hashes to one partition of the cluster's offsets topic, whose Raft
// group (cluster/offsets) keeps the committed offsets of the groups that hash to it; the
// partition's leader is their coordinator: its group.Coordinator (Server.groups, the same as
// a broker without a cluster) holds their members, and every group request it takes is
// checked first by coordinates. Another broker answers NOT_COORDINATOR. When this broker
// stops leading a partition, or leads it in a new term before it is ready, its groups are
// dropped from Server.groups (held heartbeats answered NOT_COORDINATOR), so a member learns
// of the move within a round trip and joins the new coordinator, which knows every committed
// offset and no member.
//
// The offsets topic is a topic of the cluster's metadata under a reserved name, created by
// the metadata leader once enough brokers are active (ensureOffsetsTopic); reconcile opens
// the replicas placed here (offsetsTable) instead of building a live topic: METADATA does not
// list it and no client request reaches it but through the group requests.

const (
	// offsetsTopicName is the cluster's topic of committed offsets; names starting with
	// reservedPrefix are refused to clients in a cluster.
	offsetsTopicName = "__consumer_offsets"
	reservedPrefix   = "__"
	// defaultOffsetsPartitions is ClusterConfig.OffsetsPartitions' default.
	defaultOffsetsPartitions = 8
	// maxOffsetsReplicas is the replication factor of the offsets topic (fewer in a smaller
	// cluster).
	maxOffsetsReplicas = 3
)

// offsetsTable is the offsets topic as this broker serves it: one entry per partition, with
// its replica here when one is placed here. Immutable once published (clusterNode.offsets).
type offsetsTable struct {
	created time.Time
	parts   []*offsetsPart
}

// offsetsPart is one partition of the offsets topic. store is nil when this broker holds no
// replica of it (then the preferred leader, replicas[0], is the coordinator it names).
type offsetsPart struct {
	index    int
	group    uint64
	replicas []uint64
	store    *coffsets.Store
	failed   bool      // a replica is placed here but could not be opened (left for repair)
	take     *takeover // with store: shared by the offsetsParts of one replica (syncOffsets)
}

// takeover is how far this broker took over the groups of an offsets partition it leads:
// the term whose withholds are installed (takeOver). mu serializes the installs; term is
// read without it.
type takeover struct {
	mu   sync.Mutex
	term atomic.Uint64
}

// offsetsPartition is the partition of an offsets topic of n partitions that group hashes to:
// FNV-1a 32 of the name, modulo n. NEVER CHANGE: every broker and release must agree on it.
func offsetsPartition(groupName string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(groupName))
	return int(h.Sum32() % uint32(n))
}

// offsetsDir is where this broker keeps its replica of offsets partition i.
func offsetsDir(dataDir string, i int) string {
	return filepath.Join(dataDir, "cluster", "offsets", strconv.Itoa(i))
}

// reconcileOffsets opens the replicas of the offsets topic placed here for a new creation of
// the topic, and follows the moves of its partitions afterwards (syncOffsets,
// clusterreplicas.go) (reconcile, on the cluster node's goroutine).
func (n *clusterNode) reconcileOffsets(ct *cmeta.Topic) {
	if cur := n.offsets.Load(); cur != nil && cur.created.Equal(ct.CreatedAt) {
		n.syncOffsets(cur, ct)
		return
	}
	n.closeOffsets()
	tbl := &offsetsTable{created: ct.CreatedAt}
	for i, a := range ct.Partitions {
		op := &offsetsPart{index: i, group: a.Group, replicas: a.Replicas}
		tbl.parts = append(tbl.parts, op)
		if holds(a.Holders(), n.id) {
			n.openOffsetsReplica(op, a, len(ct.Partitions))
		}
	}
	n.offsets.Store(tbl)
	n.kickPurge()
}

// openOffsetsReplica opens this broker's replica of offsets partition op (of count) into op,
// before op is published: bootstrapping the group if the partition was never moved, else
// joining it (as openReplica does for a topic's partition). A replica that cannot be opened
// is left for repair (op.failed); its groups get NOT_COORDINATOR here.
func (n *clusterNode) openOffsetsReplica(op *offsetsPart, a cmeta.Partition, count int) {
	s, i := n.srv, op.index
	logger := n.log.With().Int("offsets_partition", i).Uint64("group", a.Group).Logger()
	cfg := coffsets.Config{
		Dir: offsetsDir(s.cfg.DataDir, i), NodeID: n.id, Group: a.Group, Sender: n.tr,
		MaxEntries: (s.cfg.MaxCommittedOffsets + count - 1) / count, Logf: func(f string, args ...any) { logger.Warn().Msgf(f, args...) },
		OnLeadership: func() { n.offsetsLeadership(i, count) },
	}
	if a.Moves == 0 {
		cfg.Peers = a.Replicas
	} else {
		cfg.Join = true
	}
	st, err := coffsets.Open(cfg)
	if err != nil {
		logger.Error().Err(err).Msg("offsets replica cannot be opened; its data is left untouched for repair")
		op.failed = true
		return
	}
	op.store, op.take = st, &takeover{}
	n.router.Add(a.Group, st.Replica())
}

// closeOffsets closes this broker's offsets replicas (at shutdown, or before the replicas of
// a new creation of the topic open).
func (n *clusterNode) closeOffsets() {
	tbl := n.offsets.Load()
	if tbl == nil {
		return
	}
	n.offsets.Store(nil)
	for _, op := range tbl.parts {
		if op.store == nil {
			continue
		}
		n.router.Remove(op.group)
		if err := op.store.Close(); err != nil {
			n.log.Warn().Err(err).Int("offsets_partition", op.index).Msg("closing an offsets replica")
		}
	}
}

// offsetsLeadership follows a change of this broker's leadership of offsets partition i (of
// count), on the replica's goroutine: while it does not lead the partition ready, it
// coordinates none of its groups, so whatever Server.groups holds of them goes (their held
// heartbeats are answered NOT_COORDINATOR). No join of those groups is taken meanwhile
// (coordinates refuses them), so nothing a ready leader took is dropped. Once ready, the
// offsets of deleted topics are purged.
func (n *clusterNode) offsetsLeadership(i, count int) {
	if tbl := n.offsets.Load(); tbl != nil && i < len(tbl.parts) && tbl.parts[i].store != nil {
		if term, ready := tbl.parts[i].store.Leading(); ready {
			n.takeOver(tbl.parts[i], term)
			n.kickPurge()
			return
		}
	}
	moved := &group.Error{Kind: group.KindNotCoordinator,
		Msg: fmt.Sprintf("this broker (node %d) no longer coordinates the group: FIND_COORDINATOR and join there", n.id)}
	n.srv.groups.DropGroups(func(_, g string) bool { return offsetsPartition(g, count) == i }, moved)
}

// takeOver makes this broker, which leads offsets partition op ready in term, the
// coordinator of the partition's groups in that term, once: every group with a stored
// session (coffsets.Store.Sessions: the longest session timeout its members were granted,
// stored before any was answered) is withheld (group.Coordinator.Withhold) for that session
// and twice the partition's election timeout, since the previous coordinator's members,
// unknown here, may still be processing partitions: a member stops within nine tenths of
// its session after its coordinator's last answer (client/consumer_group.go), and that last
// answer came before this broker was ready, give or take one election timeout (a leader cut
// off from a majority steps down within two, check-quorum, while a new one is elected no
// sooner than one after the cut). It reports whether the takeover is done for term (false:
// the leadership moved meanwhile); coordinates serves no group request of the partition
// before it is. Called from the replica's goroutine (offsetsLeadership) and from connection
// loops (coordinates, for a replica whose leadership was reported before it was published).
func (n *clusterNode) takeOver(op *offsetsPart, term uint64) bool {
	tk := op.take
	if tk.term.Load() == term {
		return true
	}
	tk.mu.Lock()
	defer tk.mu.Unlock()
	if tk.term.Load() == term {
		return true
	}
	type hold struct {
		ref coffsets.GroupRef
		d   time.Duration
	}
	var holds []hold
	op.store.Sessions(func(ref coffsets.GroupRef, d time.Duration) { holds = append(holds, hold{ref, d}) })
	topics := *n.srv.topics.Load()
	margin := 2 * op.store.ElectionTimeout()
	withheld := 0
	for _, h := range holds {
		if t := topics[h.ref.Topic]; t != nil && t.cluster != nil && t.cluster.created.UnixMilli() != h.ref.Created {
			continue // a session of a deleted creation of the topic (purged soon)
		}
		n.srv.groups.Withhold(h.ref.Topic, h.ref.Group, h.d+margin)
		withheld++
	}
	if cur, ready := op.store.Leading(); !ready || cur != term {
		return false // what was withheld is harmless: a later takeover withholds again
	}
	tk.term.Store(term)
	if withheld > 0 {
		n.log.Info().Int("offsets_partition", op.index).Uint64("term", term).Int("groups", withheld).
			Msg("coordinating the offsets partition's groups: their partitions are withheld for each group's longest session timeout")
	}
	return true
}

// guard is the group.JoinRequest and HeartbeatRequest Guard of a request coordinates took
// for term of op: it refuses once this broker no longer leads op ready in term.
func (n *clusterNode) guard(op *offsetsPart, term uint64) func() error {
	return func() error {
		if cur, ready := op.store.Leading(); ready && cur == term {
			return nil
		}
		return &group.Error{Kind: group.KindNotCoordinator,
			Msg: fmt.Sprintf("this broker (node %d) stopped coordinating the group while the request waited: FIND_COORDINATOR and join there", n.id)}
	}
}

// kickPurge asks the node's goroutine to purge the offsets of deleted topics.
func (n *clusterNode) kickPurge() {
	select {
	case n.purge <- struct{}{}:
	default:
	}
}

// purgeOffsets proposes, on every offsets partition this broker leads ready, the removal of
// the committed offsets of topic creations the metadata no longer has (deleted topics, or
// topics deleted and created again). On the node's goroutine; the proposals are answered
// later, and a creation being purged is not proposed again meanwhile.
func (n *clusterNode) purgeOffsets() {
	tbl := n.offsets.Load()
	if tbl == nil {
		return
	}
	st := n.meta.State()
	for _, op := range tbl.parts {
		if op.store == nil {
			continue
		}
		term, ready := op.store.Leading()
		if !ready {
			continue
		}
		for _, ref := range op.store.Topics() {
			if ct, ok := st.Topic(ref.Topic); ok && ct.CreatedAt.UnixMilli() == ref.Created {
				continue
			}
			if !n.purging.start(op.index, ref) {
				continue
			}
			index, ref := op.index, ref
			err := op.store.DropTopic(term, ref, func(err error) {
				n.purging.end(index, ref)
				if err != nil {
					n.log.Debug().Err(err).Str("topic", ref.Topic).Msg("purging a deleted topic's committed offsets; will retry")
				}
			})
			if err != nil {
				n.purging.end(index, ref)
			}
		}
	}
}

// purgeSet is the topic creations whose offsets are being purged, per offsets partition.
type purgeSet struct {
	mu sync.Mutex
	m  map[purgeKey]bool
}

type purgeKey struct {
	part int
	ref  coffsets.TopicRef
}

func (p *purgeSet) start(part int, ref coffsets.TopicRef) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[purgeKey]bool{}
	}
	k := purgeKey{part, ref}
	if p.m[k] {
		return false
	}
	p.m[k] = true
	return true
}

func (p *purgeSet) end(part int, ref coffsets.TopicRef) {
	p.mu.Lock()
	delete(p.m, purgeKey{part, ref})
	p.mu.Unlock()
}

// ensureOffsetsTopic creates the offsets topic when the metadata has none, from the metadata
// leader only (the others would lose the race anyway), once enough brokers are active for
// its replication factor. It reports whether the topic exists; until it does, the node's
// goroutine calls it again every half second (the leader may change meanwhile).
func (n *clusterNode) ensureOffsetsTopic() bool {
	st := n.meta.State()
	if _, ok := st.Topic(offsetsTopicName); ok {
		return true
	}
	if !n.meta.Status().IsLeader {
		return false
	}
	rf := min(maxOffsetsReplicas, len(n.srv.cfg.Cluster.Peers))
	count := n.srv.cfg.Cluster.OffsetsPartitions
	if count <= 0 {
		count = defaultOffsetsPartitions
	}
	placement, err := cmeta.Place(st, count, rf)
	if err != nil {
		return false // not enough active brokers yet
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = n.meta.Propose(ctx, &cmeta.CreateTopic{Name: offsetsTopicName, Kind: wire.KindDurable, CreatedAt: time.Now().UnixMilli(),
		Options: []wire.Option{{Key: wire.OptionReplicationFactor, Value: strconv.Itoa(rf)}}, Placement: placement})
	switch {
	case err == nil:
		n.log.Info().Int("partitions", count).Int("replicas", rf).Msg("created the cluster's offsets topic")
		return true
	case errors.Is(err, cmeta.ErrTopicExists):
		return true
	}
	n.log.Debug().Err(err).Msg("creating the cluster's offsets topic; will retry")
	return false
}

// coordinatorOf is the offsets partition of group and the node this broker takes for its
// coordinator (0: none known): its replica's view of the leader, or the preferred leader
// when it holds no replica.
func (n *clusterNode) coordinatorOf(groupName string) (*offsetsPart, uint64) {
	tbl := n.offsets.Load()
	if tbl == nil || len(tbl.parts) == 0 {
		return nil, 0
	}
	op := tbl.parts[offsetsPartition(groupName, len(tbl.parts))]
	if op.store != nil {
		return op, op.store.Leader()
	}
	return op, op.replicas[0]
}

// coordinates checks, for a group request of a cluster member, that this broker coordinates
// groupName now (it leads the group's offsets partition, ready), and answers NOT_COORDINATOR
// otherwise. It returns the partition and the term to propose its commits for.
func (c *conn) coordinates(corr uint32, groupName string) (*offsetsPart, uint64, bool) {
	n := c.srv.cluster
	op, leader := n.coordinatorOf(groupName)
	msg := fmt.Sprintf("group %q: ", groupName)
	switch {
	case op == nil:
		msg += "no coordinator yet: the cluster's offsets topic is being created (it needs enough brokers up); retry in a moment"
	case op.store != nil && leader == n.id:
		term, ready := op.store.Leading()
		if ready && n.takeOver(op, term) {
			return op, term, true
		}
		msg += fmt.Sprintf("this broker (node %d) is its new coordinator and is still applying what the previous one committed; retry in a moment", n.id)
		if err := op.store.Err(); err != nil {
			msg = fmt.Sprintf("group %q: this broker's replica of its committed offsets stopped (%v); another broker takes over", groupName, err)
		}
	case leader == 0:
		msg += "no coordinator is known (an election is under way): retry in a moment"
	default:
		msg += fmt.Sprintf("this broker (node %d) is not its coordinator; node %d is", n.id, leader)
		if b, ok := c.srv.clusterBroker(leader); ok && b.ClientAddr != "" {
			msg += ", at " + b.ClientAddr
		}
	}
	c.sendError(corr, wire.CodeNotCoordinator, msg)
	return nil, 0, false
}

// handleFindCoordinator answers FIND_COORDINATOR: the coordinator this broker knows for the
// group, with its addresses; itself without a cluster.
func (c *conn) handleFindCoordinator(corr uint32, body []byte) {
	var m wire.FindCoordinator
	if !c.decodeOr(corr, wire.OpFindCoordinator, m.Decode(body)) {
		return
	}
	self := c.srv.nodeID()
	resp := wire.FindCoordinatorResponse{Node: self, Coordinator: self}
	if n := c.srv.cluster; n != nil {
		_, leader := n.coordinatorOf(m.Group)
		resp.Coordinator = uint32(leader)
		if b, ok := c.srv.clusterBroker(leader); ok {
			resp.Addr, resp.TLSAddr = b.ClientAddr, b.TLSAddr
		}
	}
	c.respond(wire.OpFindCoordinator, corr, resp.AppendTo)
}

// offsetsKey is the key of a group's committed offset of a partition of a cluster topic.
func offsetsKey(t *topic, groupName string, partition uint32) coffsets.Key {
	return coffsets.Key{Topic: t.name, Created: t.cluster.created.UnixMilli(), Group: groupName, Partition: partition}
}

// clusterPartition resolves the durable cluster topic and the partition of a commit or a
// FETCH_COMMITTED, answering the error otherwise. Unlike durablePartition it needs no replica
// of the partition here: the coordinator is seldom its leader.
func (c *conn) clusterPartition(corr uint32, op wire.Op, topicName string, partition uint32) *topic {
	t := c.groupTopic(corr, op, topicName)
	if t == nil {
		return nil
	}
	if int(partition) >= len(t.parts) {
		c.sendError(corr, wire.CodeUnknownPartition, fmt.Sprintf("topic %q has partitions 0-%d, not %d", t.name, len(t.parts)-1, partition))
		return nil
	}
	return t
}

// commitReplicated stores a checked COMMIT_OFFSET or GROUP_COMMIT (op) of a cluster topic in
// the group's offsets partition, for the leadership of term; the answer comes once a majority
// of its replicas fsynced it (through commitAnswered, as a local commit's). The offset's
// upper bound is not checked: the coordinator need not hold a replica of the partition.
func (c *conn) commitReplicated(corr uint32, op wire.Op, t *topic, partition uint32, groupName string, offset int64, part *offsetsPart, term uint64) {
	if offset < 0 {
		c.sendError(corr, wire.CodeOffsetOutOfRange, fmt.Sprintf("offset %d is negative", offset))
		return
	}
	topicName := t.name
	c.commitWaits++
	err := part.store.Commit(term, offsetsKey(t, groupName, partition), offset, func(err error) {
		c.commitAnswered(commitResult{corr: corr, op: op, topic: topicName, err: err})
	})
	if err != nil {
		c.commitWaits--
		c.reply(corr, commitAnswer(topicName, err), nil)
	}
}

// replicatedCommitAnswer turns a refusal of an offsets partition into the client's answer;
// ok is false for an error that is not one.
func replicatedCommitAnswer(topic string, err error) (error, bool) {
	var le *coffsets.LimitError
	switch {
	case errors.Is(err, coffsets.ErrNotReady), errors.Is(err, coffsets.ErrNotStored), errors.As(err, new(*replica.NotLeaderError)), errors.Is(err, coffsets.ErrClosed):
		return answer(wire.CodeNotCoordinator, "topic %q: this broker stopped coordinating the group while the commit waited: nothing stored; FIND_COORDINATOR and commit there", topic), true
	case errors.Is(err, coffsets.ErrMaybeStored):
		return answer(wire.CodeReplicationTimeout, "topic %q: the group's coordinator did not hear from a majority of its offsets replicas in time, or lost its leadership: the commit may or may not be stored", topic), true
	case errors.As(err, &le):
		return answer(wire.CodeResourceLimit, "the group's offsets partition holds %d committed (group, partition) pairs, its limit: commit only to pairs already stored", le.Max), true
	case errors.Is(err, coffsets.ErrBusy):
		return answer(wire.CodeResourceLimit, "commits to the group's coordinator arrive faster than its replicas take them; retry"), true
	case errors.Is(err, coffsets.ErrInvalid):
		return answer(wire.CodeInvalidRequest, "%s", strings.TrimPrefix(err.Error(), "offsets: ")), true
	case errors.Is(err, coffsets.ErrStalled):
		return answer(wire.CodeStorageError, "this broker's replica of the group's committed offsets stopped applying; another broker takes over"), true
	}
	return nil, false
}
