package broker

import (
	"fmt"

	"github.com/lightq/lightq/wire"
)

// maxCredit caps a subscription's credit; past it, CREDIT adds nothing.
const maxCredit = 1 << 31

// subscription is one SUBSCRIBE of a connection. It belongs to the connection's loop.
type subscription struct {
	id         uint32
	conn       *conn
	topic      *topic
	queueGroup string // empty: fan-out
	cursors    []*cursor
	next       int   // cursor to serve first next time, for fairness between partitions
	credit     int64 // bytes the subscriber will still accept; may go below 0 by one batch
	ended      bool
}

// cursor is a subscription's position in one partition. For a queue group the position is
// the queue group's, shared by its members.
type cursor struct {
	part       *partition
	seq        uint64      // next batch (fan-out only)
	nextMsg    uint64      // next message expected (fan-out only)
	queueGroup *queueGroup // nil: fan-out
}

func (c *conn) handleSubscribe(corr uint32, body []byte) {
	var m wire.Subscribe
	if !c.decodeOr(corr, wire.OpSubscribe, m.Decode(body)) {
		return
	}
	t := c.lookupTopic(corr, wire.OpSubscribe, []byte(m.Topic))
	if t == nil {
		return
	}
	if t.kind != wire.KindTransient {
		c.sendError(corr, wire.CodeNotSupported, fmt.Sprintf("topic %q is durable: SUBSCRIBE serves transient topics; read a durable one with FETCH (the Go client's Conn.NewConsumer)", t.name))
		return
	}
	if len(c.subs) >= c.srv.cfg.MaxSubscriptionsPerConn {
		c.sendError(corr, wire.CodeResourceLimit, fmt.Sprintf("a connection may hold %d subscriptions", c.srv.cfg.MaxSubscriptionsPerConn))
		return
	}
	var parts []*partition
	switch {
	case m.Partition == wire.PartitionAny:
		parts = t.parts
	case m.Partition < 0 || int(m.Partition) >= len(t.parts):
		c.sendError(corr, wire.CodeUnknownPartition, fmt.Sprintf("topic %q has partitions 0-%d, not %d", t.name, len(t.parts)-1, m.Partition))
		return
	default:
		parts = t.parts[m.Partition : m.Partition+1]
	}
	if t.cluster != nil && !c.subscribableHere(corr, t, parts) {
		return // a cluster transient partition homed on another broker
	}
	c.nextSubID++
	s := &subscription{id: c.nextSubID, conn: c, topic: t, queueGroup: m.QueueGroup, credit: int64(m.Credit)}
	t.mu.Lock()
	for _, p := range parts {
		cur := &cursor{part: p}
		if m.QueueGroup == "" {
			cur.seq, cur.nextMsg = p.ring.End()
		} else {
			g := p.queueGroups[m.QueueGroup]
			if g == nil {
				g = &queueGroup{}
				g.seq, g.nextMsg = p.ring.End()
				p.queueGroups[m.QueueGroup] = g
			}
			g.members++
			cur.queueGroup = g
		}
		p.addWaiter(c)
		s.cursors = append(s.cursors, cur)
	}
	t.mu.Unlock()
	t.stats.subscribers.Add(1)
	c.subs = append(c.subs, s)
	if t.deleted.Load() {
		c.wakeNow() // deleted while we registered: deliver ends the subscription
	}
	resp := wire.SubscribeResponse{SubscriptionID: s.id, Partitions: uint32(len(parts))}
	c.respond(wire.OpSubscribe, corr, resp.AppendTo)
}

// close unregisters the subscription from its partitions and queue groups.
func (s *subscription) close() {
	if s.ended {
		return
	}
	s.ended = true
	t := s.topic
	t.mu.Lock()
	for _, cur := range s.cursors {
		cur.part.removeWaiter(s.conn)
		if g := cur.queueGroup; g != nil {
			if g.members--; g.members == 0 {
				delete(cur.part.queueGroups, s.queueGroup)
			}
		}
	}
	t.mu.Unlock()
	t.stats.subscribers.Add(-1)
}

func (c *conn) findSub(id uint32) (int, *subscription) {
	for i, s := range c.subs {
		if s.id == id {
			return i, s
		}
	}
	return -1, nil
}

func (c *conn) handleCredit(corr uint32, body []byte) {
	var m wire.Credit
	if !c.decodeOr(corr, wire.OpCredit, m.Decode(body)) {
		return
	}
	_, s := c.findSub(m.SubscriptionID)
	if s == nil {
		c.sendError(corr, wire.CodeUnknownSubscription, fmt.Sprintf("no subscription %d on this connection", m.SubscriptionID))
		return
	}
	s.credit = min(s.credit+int64(m.Bytes), maxCredit)
}

func (c *conn) handleUnsubscribe(corr uint32, body []byte) {
	var m wire.Unsubscribe
	if !c.decodeOr(corr, wire.OpUnsubscribe, m.Decode(body)) {
		return
	}
	i, s := c.findSub(m.SubscriptionID)
	if s == nil {
		c.sendError(corr, wire.CodeUnknownSubscription, fmt.Sprintf("no subscription %d on this connection", m.SubscriptionID))
		return
	}
	s.close()
	c.subs = append(c.subs[:i], c.subs[i+1:]...)
	c.respondEmpty(wire.OpUnsubscribe, corr)
}

// deliver writes batches to the connection's subscriptions while they have credit and the
// connection is under its high-water mark. Batches go from the ring to the socket with one
// writev each; what the socket does not take, gnet copies into its outbound buffer, which the
// high-water mark bounds.
func (c *conn) deliver() {
	hwm := c.srv.cfg.HighWaterMark
	for i := 0; i < len(c.subs); i++ {
		s := c.subs[i]
		if s.topic.deleted.Load() {
			c.sendError(s.id, wire.CodeUnknownTopic, fmt.Sprintf("topic %q was deleted; subscription %d ended", s.topic.name, s.id))
			s.close()
			c.subs = append(c.subs[:i], c.subs[i+1:]...)
			i--
			if !c.flush() {
				return
			}
			continue
		}
		for s.credit > 0 {
			if c.gc.OutboundBuffered() >= hwm {
				if !c.deliverBlocked {
					c.srv.metrics.subscriberStalled()
				}
				c.deliverBlocked = true
				return
			}
			if !c.deliverOne(s) {
				break
			}
			if c.closed() {
				return
			}
		}
	}
	c.deliverBlocked = false
}

// deliverOne sends the next batch of any of s's partitions, starting after the one served
// last. It returns false when no partition has a batch ready.
func (c *conn) deliverOne(s *subscription) bool {
	n := len(s.cursors)
	for k := 0; k < n; k++ {
		cur := s.cursors[(s.next+k)%n]
		if c.deliverFrom(s, cur) {
			s.next = (s.next + k + 1) % n
			return true
		}
	}
	return false
}

// deliverFrom sends the next batch of one partition to s, if there is one.
func (c *conn) deliverFrom(s *subscription, cur *cursor) bool {
	r := cur.part.ring
	var dropped uint64
	if cur.queueGroup == nil {
		v, ok := r.Acquire(cur.seq)
		if !ok {
			return false
		}
		dropped = v.FirstMsg - cur.nextMsg
		cur.seq, cur.nextMsg = v.Seq+1, v.FirstMsg+uint64(v.Count)
		c.writeDeliver(s, cur, v.Data, v.Count, dropped)
		r.Release(v)
		c.afterWrite()
		return true
	}
	g := cur.queueGroup
	g.mu.Lock()
	v, ok := r.Acquire(g.seq)
	if !ok {
		g.mu.Unlock()
		return false
	}
	dropped = v.FirstMsg - g.nextMsg
	g.seq, g.nextMsg = v.Seq+1, v.FirstMsg+uint64(v.Count)
	g.mu.Unlock()
	c.writeDeliver(s, cur, v.Data, v.Count, dropped)
	r.Release(v)
	c.afterWrite()
	return true
}

// afterWrite finishes a close that happened inside writeDeliver, now that the ring slot is
// released.
func (c *conn) afterWrite() {
	c.inWrite = false
	if c.life == connCloseDeferred {
		c.advance(connClosed)
		c.finishClose()
	}
}

// writeDeliver writes one DELIVER frame: header and body prefix from the connection's scratch,
// the batch straight from the ring.
func (c *conn) writeDeliver(s *subscription, cur *cursor, batch []byte, count uint32, dropped uint64) {
	hdr := c.dhdr[:]
	wire.PutHeader(hdr, wire.OpDeliver, 0, s.id, wire.DeliverHeaderSize+len(batch))
	wire.PutDeliverHeader(hdr[wire.HeaderSize:], cur.part.id, dropped)
	c.iov = append(c.iov[:0], hdr, batch)
	c.inWrite = true // see onClose
	// A write error closes the connection, OnClose running inside Writev: deliver checks
	// closed() after, and afterWrite finishes the close.
	_, _ = c.gc.Writev(c.iov)
	c.iov[1] = nil // do not keep the ring memory reachable from here
	c.countDelivered(s, cur, count, len(batch), dropped)
}

// hasDeliverable reports whether a subscription could still be sent something now.
func (c *conn) hasDeliverable() bool {
	for _, s := range c.subs {
		if s.credit <= 0 {
			continue
		}
		for _, cur := range s.cursors {
			seq := cur.seq
			if g := cur.queueGroup; g != nil {
				g.mu.Lock()
				seq = g.seq
				g.mu.Unlock()
			}
			if seq < cur.part.ring.Head() {
				return true
			}
		}
	}
	return false
}
