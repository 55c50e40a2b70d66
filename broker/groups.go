package broker

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/lightq/lightq/broker/group"
	"github.com/lightq/lightq/wire"
)

// The consumer group requests (PROTOCOL.md section 10.1): JOIN_GROUP, HEARTBEAT,
// LEAVE_GROUP, GROUP_COMMIT, LIST_GROUPS, DESCRIBE_GROUP. The state machine is package
// group's Coordinator (one per broker, Server.groups); this file decodes, authorizes and
// answers, on the connection's loop. A held HEARTBEAT is answered later by the
// coordinator's waiter through conn.complete; the connection keeps the handles of its held
// heartbeats in conn.parks so that a close starts the members' session clocks.

// groupCode maps a coordinator refusal to its wire code.
func groupCode(err error) wire.Code {
	var ge *group.Error
	if errors.As(err, &ge) {
		switch ge.Kind {
		case group.KindUnknownMember:
			return wire.CodeUnknownMember
		case group.KindFenced:
			return wire.CodeFencedMember
		case group.KindLimit:
			return wire.CodeResourceLimit
		case group.KindInvalid:
			return wire.CodeInvalidRequest
		case group.KindUnknownPartition:
			return wire.CodeUnknownPartition
		case group.KindTopicDeleted:
			return wire.CodeUnknownTopic
		case group.KindNotCoordinator:
			return wire.CodeNotCoordinator
		}
	}
	return wire.CodeInternal
}

func (c *conn) sendGroupError(corr uint32, err error) {
	c.sendError(corr, groupCode(err), err.Error())
}

// groupTopic resolves the durable topic of a group request, answering the error otherwise.
func (c *conn) groupTopic(corr uint32, op wire.Op, name string) *topic {
	t := c.lookupTopic(corr, op, []byte(name))
	if t == nil {
		return nil
	}
	if t.kind != wire.KindDurable {
		c.sendError(corr, wire.CodeNotSupported, fmt.Sprintf("topic %q is transient: consumer groups are for durable topics (a transient topic's queue group is a SUBSCRIBE)", t.name))
		return nil
	}
	return t
}

func ms(d time.Duration) uint32 { return uint32(d / time.Millisecond) }

func (c *conn) handleJoinGroup(corr uint32, body []byte) {
	var m wire.JoinGroup
	if !c.decodeOr(corr, wire.OpJoinGroup, m.Decode(body)) {
		return
	}
	t := c.groupTopic(corr, wire.OpJoinGroup, m.Topic)
	switch {
	case t == nil:
	case c.srv.cluster != nil:
		c.joinReplicated(corr, t, &m)
	default:
		c.joinSingle(corr, t, &m)
	}
}

// joinSingle is JOIN_GROUP of a broker without a cluster: a session longer than the one
// recorded for the start withhold (groupSessions) is recorded first, on the meta pool, and
// the join answered after the fsync; any other join is answered at once. A session outside
// the broker's bounds is not recorded: joinGroup refuses it.
func (c *conn) joinSingle(corr uint32, t *topic, m *wire.JoinGroup) {
	gc := &c.srv.cfg.Groups
	session := time.Duration(m.SessionTimeoutMs) * time.Millisecond
	if session == 0 {
		session = gc.SessionTimeout
	}
	gs := c.srv.sessions
	if session < gc.MinSessionTimeout || session > gc.MaxSessionTimeout || gs.admit(session) {
		c.joinGroup(corr, t, m, nil)
		return
	}
	c.commitWaits++ // an owed answer the drain waits for
	ok := c.srv.metaPool.Submit(func() {
		err := gs.raise(session)
		if err != nil {
			c.srv.log.Error().Err(err).Msg("cannot record a group session timeout; JOIN_GROUP asking for a longer one than recorded fails until this is fixed and the broker restarted")
		}
		c.complete(func(c *conn) {
			c.commitWaits--
			switch {
			case c.closed():
			case err != nil:
				c.sendError(corr, wire.CodeStorageError, fmt.Sprintf("JOIN_GROUP: the broker cannot record the session timeout %v on its disk (its log says why)", session))
			default:
				c.joinGroup(corr, t, m, nil)
			}
		})
	})
	if !ok {
		c.commitWaits--
		c.sendError(corr, wire.CodeResourceLimit, "JOIN_GROUP: the broker is busy; retry")
	}
}

// joinGroup makes the member of m a member of its group at this broker's coordinator and
// answers; guard is the request's group.JoinRequest.Guard (nil without a cluster).
func (c *conn) joinGroup(corr uint32, t *topic, m *wire.JoinGroup, guard func() error) {
	a := c.srv.groups.Join(group.JoinRequest{Topic: t.name, Group: m.Group, Member: m.Member, Partitions: len(t.parts),
		Session: time.Duration(m.SessionTimeoutMs) * time.Millisecond, ClientID: m.ClientID, Addr: c.addr, Guard: guard})
	if a.Err == nil && t.deleted.Load() {
		// Deleted while we joined, maybe after deleteTopic dropped the topic's groups.
		c.srv.groups.DropTopic(t.name)
		c.sendError(corr, wire.CodeUnknownTopic, fmt.Sprintf("topic %q was deleted", t.name))
		return
	}
	if a.Err != nil {
		c.sendGroupError(corr, a.Err)
		return
	}
	resp := wire.JoinGroupResponse{Generation: a.Generation, SessionTimeoutMs: ms(a.Session), HeartbeatIntervalMs: ms(a.Interval), Partitions: a.Partitions}
	c.respond(wire.OpJoinGroup, corr, resp.AppendTo)
}

// heldBeat is a HEARTBEAT the coordinator holds; park is set once Heartbeat returns, before
// the completion that answers it can run on the loop.
type heldBeat struct{ park *group.Parked }

func (c *conn) handleHeartbeat(corr uint32, body []byte) {
	var m wire.Heartbeat
	if !c.decodeOr(corr, wire.OpHeartbeat, m.Decode(body)) {
		return
	}
	t := c.groupTopic(corr, wire.OpHeartbeat, m.Topic)
	if t == nil {
		return
	}
	var guard func() error
	if n := c.srv.cluster; n != nil {
		op, term, ok := c.coordinates(corr, m.Group)
		if !ok {
			return
		}
		guard = n.guard(op, term)
	}
	hb := &heldBeat{}
	a, park := c.srv.groups.Heartbeat(group.HeartbeatRequest{Topic: t.name, Group: m.Group, Member: m.Member, Generation: m.Generation,
		MaxWait: time.Duration(m.MaxWaitMs) * time.Millisecond, Owned: m.Owned, Addr: c.addr, Guard: guard},
		func(a group.Answer) {
			c.complete(func(c *conn) {
				c.dropPark(hb.park)
				if !c.closed() {
					c.answerHeartbeat(corr, a)
				}
			})
		})
	if park == nil {
		c.answerHeartbeat(corr, a)
		return
	}
	hb.park = park
	c.parks = append(c.parks, park)
}

func (c *conn) answerHeartbeat(corr uint32, a group.Answer) {
	if a.Err != nil {
		c.sendGroupError(corr, a.Err)
		return
	}
	resp := wire.HeartbeatResponse{Generation: a.Generation, HeartbeatIntervalMs: ms(a.Interval), Partitions: a.Partitions}
	c.respond(wire.OpHeartbeat, corr, resp.AppendTo)
}

// dropPark forgets a held heartbeat that was answered. Runs on the loop.
func (c *conn) dropPark(p *group.Parked) {
	for i, q := range c.parks {
		if q == p {
			c.parks = append(c.parks[:i], c.parks[i+1:]...)
			return
		}
	}
}

// unparkAll tells the coordinator that the held heartbeats of a closed connection will not
// be answered: their members' session clocks start now. Runs on the loop.
func (c *conn) unparkAll() {
	for _, p := range c.parks {
		c.srv.groups.Unpark(p)
	}
	c.parks = nil
}

func (c *conn) handleLeaveGroup(corr uint32, body []byte) {
	var m wire.LeaveGroup
	if !c.decodeOr(corr, wire.OpLeaveGroup, m.Decode(body)) {
		return
	}
	t := c.groupTopic(corr, wire.OpLeaveGroup, m.Topic)
	if t == nil || c.srv.cluster != nil && !c.coordinatesGroup(corr, m.Group) {
		return
	}
	if err := c.srv.groups.Leave(t.name, m.Group, m.Member); err != nil {
		c.sendGroupError(corr, err)
		return
	}
	c.respondEmpty(wire.OpLeaveGroup, corr)
}

func (c *conn) handleGroupCommit(corr uint32, body []byte) {
	var m wire.GroupCommit
	if !c.decodeOr(corr, wire.OpGroupCommit, m.Decode(body)) {
		return
	}
	if c.srv.cluster != nil {
		c.groupCommitReplicated(corr, &m)
		return
	}
	t, p := c.durablePartition(corr, wire.OpGroupCommit, m.Topic, m.Partition)
	if p == nil {
		return
	}
	if err := c.srv.groups.CheckCommit(t.name, m.Group, m.Member, m.Generation, m.Partition); err != nil {
		c.sendGroupError(corr, err)
		return
	}
	c.commit(corr, wire.OpGroupCommit, t, p, m.Group, m.Offset)
}

// groupKey orders LIST_GROUPS: by group, then topic.
type groupKey struct{ group, topic string }

func (a groupKey) less(b groupKey) bool {
	if a.group != b.group {
		return a.group < b.group
	}
	return a.topic < b.topic
}

func (c *conn) handleListGroups(corr uint32, body []byte) {
	var m wire.ListGroups
	if !c.decodeOr(corr, wire.OpListGroups, m.Decode(body)) {
		return
	}
	topics := map[string]*topic{}
	if m.Topic != "" {
		t := c.groupTopic(corr, wire.OpListGroups, m.Topic)
		if t == nil {
			return
		}
		topics[t.name] = t
	} else {
		for name, t := range *c.srv.topics.Load() {
			if t.kind == wire.KindDurable && !t.deleted.Load() && c.authorize(t, needConsume) {
				topics[name] = t
			}
		}
	}
	entries := map[groupKey]*wire.GroupListing{}
	entry := func(g, topic string) *wire.GroupListing {
		k := groupKey{g, topic}
		if e := entries[k]; e != nil {
			return e
		}
		e := &wire.GroupListing{Group: g, Topic: topic}
		entries[k] = e
		return e
	}
	for _, s := range c.srv.groups.List() {
		if topics[s.Topic] != nil {
			e := entry(s.Group, s.Topic)
			e.Members, e.Generation = uint32(s.Members), s.Generation
		}
	}
	if c.srv.cluster != nil {
		c.srv.cluster.listCommitted(topics, entry)
	}
	for name, t := range topics {
		if t.cluster != nil {
			continue // listed above
		}
		to := c.srv.offsets.lookup(name)
		if to == nil || to.err != nil {
			continue
		}
		to.st.Range(func(g string, part uint32, off int64) {
			e := entry(g, name)
			e.Committed++
			if end, ok := endOffset(t, part); ok && end > off {
				e.Lag += uint64(end - off)
			}
		})
	}
	keys := make([]groupKey, 0, len(entries))
	after := groupKey{m.AfterGroup, m.AfterTopic}
	for k := range entries {
		if after == (groupKey{}) || after.less(k) {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].less(keys[j]) })
	var resp wire.ListGroupsResponse
	room := c.srv.cfg.Limits.MaxFrame - wire.HeaderSize - 5
	for _, k := range keys {
		e := entries[k]
		if room -= e.Size(); room < 0 {
			resp.More = true
			break
		}
		resp.Groups = append(resp.Groups, *e)
	}
	c.respond(wire.OpListGroups, corr, resp.AppendTo)
}

// endOffset is a durable partition's end offset as METADATA reports it, unless the
// partition could not be recovered.
func endOffset(t *topic, part uint32) (int64, bool) {
	if int(part) >= len(t.parts) {
		return 0, false
	}
	d := t.parts[part].dlog()
	if d == nil || d.err != nil || d.log == nil {
		return 0, false
	}
	return d.visibleLimit(wire.IsolationDurable), true
}

func (c *conn) handleDescribeGroup(corr uint32, body []byte) {
	var m wire.DescribeGroup
	if !c.decodeOr(corr, wire.OpDescribeGroup, m.Decode(body)) {
		return
	}
	t := c.groupTopic(corr, wire.OpDescribeGroup, m.Topic)
	if t == nil {
		return
	}
	var committed func(p uint32) (int64, bool)
	if c.srv.cluster != nil {
		part, _, ok := c.coordinates(corr, m.Group)
		if !ok {
			return
		}
		committed = func(p uint32) (int64, bool) { return part.store.Get(offsetsKey(t, m.Group, p)) }
	} else {
		to := c.srv.offsets.lookup(t.name)
		if to == nil || to.err != nil {
			c.offsetsUnavailable(corr, t.name, to)
			return
		}
		committed = func(p uint32) (int64, bool) { return to.st.Get(m.Group, p) }
	}
	d := c.srv.groups.Describe(t.name, m.Group)
	resp := wire.DescribeGroupResponse{Generation: d.Generation}
	for _, mi := range d.Members {
		resp.Members = append(resp.Members, wire.GroupMember{Member: mi.ID, ClientID: mi.ClientID, Address: mi.Addr,
			SessionTimeoutMs: ms(mi.Session), Assigned: mi.Assigned, Revoking: mi.Revoking})
	}
	for _, p := range t.parts {
		gp := wire.GroupPartition{Partition: p.id, Committed: -1, EndOffset: -1, Lag: -1}
		if end, ok := endOffset(t, p.id); ok {
			gp.EndOffset = end
		}
		if off, ok := committed(p.id); ok {
			gp.Committed = off
			if gp.EndOffset >= 0 {
				gp.Lag = max(gp.EndOffset-off, 0)
			}
		}
		resp.Partitions = append(resp.Partitions, gp)
	}
	b := resp.AppendTo(nil)
	if len(b)+wire.HeaderSize > c.srv.cfg.Limits.MaxFrame {
		c.sendError(corr, wire.CodeResourceLimit, fmt.Sprintf("the description of group %q (%d members) is %d bytes, over this broker's frame limit", m.Group, len(d.Members), len(b)))
		return
	}
	c.respond(wire.OpDescribeGroup, corr, func(dst []byte) []byte { return append(dst, b...) })
}
