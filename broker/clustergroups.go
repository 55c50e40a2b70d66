package broker

import (
	"errors"
	"fmt"
	"time"

	coffsets "github.com/lightq/lightq/cluster/offsets"
	"github.com/lightq/lightq/wire"
)

// The group requests of a cluster member that differ from a single broker's: they are
// served by the group's coordinator only (coordinates, coordinator.go), and committed offsets
// live in the group's offsets partition instead of the topic's offsets log. The rest of each
// request (membership, fencing) is groups.go's.

// coordinatesGroup is coordinates for the requests that need only the check.
func (c *conn) coordinatesGroup(corr uint32, groupName string) bool {
	_, _, ok := c.coordinates(corr, groupName)
	return ok
}

// joinReplicated is JOIN_GROUP of a cluster member. A member may hold partitions only once
// the group's offsets partition stores a session at least as long as its own (the longest
// its group granted, coffsets.Store.SetSession), since that is how long a coordinator that
// takes the group over withholds its partitions (takeOver): so a join asking for longer than
// what is stored is answered after that session is, as a commit is (a majority fsynced it).
// A session outside the broker's bounds is not stored: the join is refused as without a
// cluster.
func (c *conn) joinReplicated(corr uint32, t *topic, m *wire.JoinGroup) {
	op, term, ok := c.coordinates(corr, m.Group)
	if !ok {
		return
	}
	guard := c.srv.cluster.guard(op, term)
	gc := &c.srv.cfg.Groups
	session := time.Duration(m.SessionTimeoutMs) * time.Millisecond
	if session == 0 {
		session = gc.SessionTimeout
	}
	ref := coffsets.GroupRef{Topic: t.name, Created: t.cluster.created.UnixMilli(), Group: m.Group}
	if cur, ok := op.store.Session(ref); ok && cur >= session || session < gc.MinSessionTimeout || session > gc.MaxSessionTimeout {
		c.joinGroup(corr, t, m, guard)
		return
	}
	c.commitWaits++ // an owed answer the drain waits for
	err := op.store.SetSession(term, ref, session, func(err error) {
		c.complete(func(c *conn) {
			c.commitWaits--
			switch {
			case c.closed():
			case err != nil:
				c.reply(corr, sessionAnswer(t.name, err), nil)
			default:
				c.joinGroup(corr, t, m, guard)
			}
		})
	})
	if err != nil {
		c.commitWaits--
		c.reply(corr, sessionAnswer(t.name, err), nil)
	}
}

// sessionAnswer is the answer of a JOIN_GROUP whose group session could not be stored.
func sessionAnswer(topic string, err error) error {
	var le *coffsets.LimitError
	switch {
	case errors.Is(err, coffsets.ErrMaybeStored):
		return answer(wire.CodeReplicationTimeout, "topic %q: the group's coordinator did not store the group's session timeout on a majority of its offsets replicas in time, or lost its leadership: join again", topic)
	case errors.As(err, &le):
		return answer(wire.CodeResourceLimit, "the group's offsets partition holds %d keys (committed offsets and group sessions), its limit: no new group can join there", le.Max)
	}
	return commitAnswer(topic, err)
}

// groupCommitReplicated is GROUP_COMMIT of a cluster member.
func (c *conn) groupCommitReplicated(corr uint32, m *wire.GroupCommit) {
	t := c.clusterPartition(corr, wire.OpGroupCommit, m.Topic, m.Partition)
	if t == nil {
		return
	}
	part, term, ok := c.coordinates(corr, m.Group)
	if !ok {
		return
	}
	if err := c.srv.groups.CheckCommit(t.name, m.Group, m.Member, m.Generation, m.Partition); err != nil {
		c.sendGroupError(corr, err)
		return
	}
	c.commitReplicated(corr, wire.OpGroupCommit, t, m.Partition, m.Group, m.Offset, part, term)
}

// commitOffsetReplicated is COMMIT_OFFSET of a cluster member.
func (c *conn) commitOffsetReplicated(corr uint32, m *wire.CommitOffset) {
	t := c.clusterPartition(corr, wire.OpCommitOffset, m.Topic, m.Partition)
	if t == nil {
		return
	}
	part, term, ok := c.coordinates(corr, m.Group)
	if !ok {
		return
	}
	if c.srv.groups.HasMembers(t.name, m.Group) {
		c.sendError(corr, wire.CodeGroupNotEmpty, fmt.Sprintf("group %q of topic %q has live members: only they commit for it (GROUP_COMMIT); stop them first", m.Group, t.name))
		return
	}
	c.commitReplicated(corr, wire.OpCommitOffset, t, m.Partition, m.Group, m.Offset, part, term)
}

// fetchCommittedReplicated is FETCH_COMMITTED of a cluster member: the coordinator's state
// holds every commit answered, its own and its predecessors'.
func (c *conn) fetchCommittedReplicated(corr uint32, m *wire.FetchCommitted) {
	t := c.clusterPartition(corr, wire.OpFetchCommitted, m.Topic, m.Partition)
	if t == nil {
		return
	}
	part, _, ok := c.coordinates(corr, m.Group)
	if !ok {
		return
	}
	resp := wire.OffsetResponse{Offset: -1}
	if off, ok := part.store.Get(offsetsKey(t, m.Group, m.Partition)); ok {
		resp.Offset = off
	}
	c.respond(wire.OpFetchCommitted, corr, resp.AppendTo)
}

// listCommitted adds to LIST_GROUPS the committed offsets of the groups this broker
// coordinates now (of the offsets partitions it leads, ready) on the topics listed: a cluster
// member lists the groups it coordinates.
func (n *clusterNode) listCommitted(topics map[string]*topic, entry func(g, topic string) *wire.GroupListing) {
	tbl := n.offsets.Load()
	if tbl == nil {
		return
	}
	for _, op := range tbl.parts {
		if op.store == nil {
			continue
		}
		if _, ready := op.store.Leading(); !ready {
			continue
		}
		op.store.Range(func(k coffsets.Key, off int64) {
			t := topics[k.Topic]
			if t == nil || t.cluster == nil || t.cluster.created.UnixMilli() != k.Created {
				return
			}
			e := entry(k.Group, k.Topic)
			e.Committed++
			if end, ok := endOffset(t, k.Partition); ok && end > off {
				e.Lag += uint64(end - off)
			}
		})
	}
}
