package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lightq/lightq/wire"
)

// The Conn's cluster view (PROTOCOL.md section 16): which broker leads each partition of
// the topics the Conn has asked about, and where each broker is. It is filled by METADATA
// with the cluster flag, sent to any reachable broker: at NewProducer and NewConsumer, and
// again when a partition's requests meet NOT_LEADER or lose their leader's connection. A
// broker without cluster settings answers as a cluster of one (it leads everything, at the
// address the client used), so with one broker every partition routes to the boot node and
// the Conn keeps one socket. A broker from before replication refuses the cluster flag
// (INVALID_REQUEST); the Conn then asks without it and routes everything to the boot node.

// clusterView is what the Conn knows of the cluster (guarded by Conn.mu).
type clusterView struct {
	topics map[string]*topicRoute
	// addrs is where each broker is reached: its address, or its TLS address with
	// Options.TLS ("" when it has none the client can use).
	addrs map[uint32]string
	// flagless: the broker refused the cluster flag; it is one broker from before
	// replication, which leads every partition.
	flagless bool
}

// topicRoute is one topic's partitions in the view.
type topicRoute struct {
	leaders  []uint32 // per partition; 0: no leader now (an election)
	replicas []int    // per partition: how many brokers hold it
}

// leads reports whether node id leads a partition in the view. Conn.mu is held.
func (v *clusterView) leads(id uint32) bool {
	if id == 0 {
		return false
	}
	for _, t := range v.topics {
		for _, l := range t.leaders {
			if l == id {
				return true
			}
		}
	}
	return false
}

// ClusterMetadata is METADATA with the cluster layout (PROTOCOL.md, METADATA): each
// partition's leader and replicas, the node id of the broker that answered and every broker
// of the cluster.
type ClusterMetadata struct {
	// Topics carry each partition's Leader (0: an election is under way) and Replicas.
	Topics []wire.TopicMetadata
	// NodeID is the node id of the broker that answered.
	NodeID uint32
	// Brokers lists the brokers with the addresses clients reach them at. An empty Addr
	// that the answering broker sent for itself (no cluster settings) is replaced by the
	// address the client used.
	Brokers []wire.BrokerMetadata
	// Legacy: the broker predates replication and refused the cluster flag: Topics have no
	// leaders, and NodeID and Brokers are empty.
	Legacy bool
}

// ClusterMetadata describes the named topics (every topic the caller may see when none is
// named) with their partitions' leaders and replicas, and the cluster's brokers, asking any
// broker the Conn reaches. It also refreshes the Conn's view of the leaders of the topics it
// names.
func (c *Conn) ClusterMetadata(ctx context.Context, topics ...string) (*ClusterMetadata, error) {
	for _, t := range topics {
		if err := wire.ValidTopicName(t); err != nil {
			return nil, fmt.Errorf("lightq: %w", err)
		}
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	return c.clusterMetadata(ctx, topics)
}

// clusterMetadata sends METADATA with the cluster flag to the first reachable broker and
// learns the answer (learn).
func (c *Conn) clusterMetadata(ctx context.Context, topics []string) (*ClusterMetadata, error) {
	l, err := c.anyLink(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	flagless := c.view.flagless
	c.mu.Unlock()
	req := wire.MetadataRequest{Topics: topics, Cluster: !flagless}
	body, err := c.exchange(ctx, l, wire.OpMetadata, req.AppendTo(nil), false)
	if req.Cluster && errors.Is(err, &wire.Error{Code: wire.CodeInvalidRequest}) {
		// A broker from before replication: the flags byte is a trailing byte to it.
		req.Cluster = false
		if body, err = c.exchange(ctx, l, wire.OpMetadata, req.AppendTo(nil), false); err == nil {
			c.mu.Lock()
			c.view.flagless = true
			c.mu.Unlock()
		}
	}
	if err != nil {
		return nil, err
	}
	resp := wire.MetadataResponse{Cluster: req.Cluster}
	if err := resp.Decode(body); err != nil {
		return nil, fmt.Errorf("%w: METADATA response: %w", ErrProtocol, err)
	}
	md := &ClusterMetadata{Topics: resp.Topics, NodeID: resp.NodeID, Brokers: resp.Brokers, Legacy: !req.Cluster}
	if req.Cluster {
		c.learn(l, md)
		if leaderless(md) {
			until := c.clock() + suspectFor
			c.mu.Lock()
			l.n.suspectUntil = max(l.n.suspectUntil, until)
			c.mu.Unlock()
		}
	}
	return md, nil
}

// suspectFor is how long a broker whose METADATA named no leader for a partition is asked
// nothing while another broker is connected (anyLink): about an election's time and more,
// after which a broker cut off from its peers has usually come back or been found out again.
const suspectFor = 5 * time.Second

// leaderless reports whether a cluster METADATA answer names no leader for a partition.
func leaderless(md *ClusterMetadata) bool {
	for _, t := range md.Topics {
		for _, p := range t.Partitions {
			if p.Leader == 0 {
				return true
			}
		}
	}
	return false
}

// learn takes a cluster METADATA answered on l into the view: l's node is the answering
// broker, the brokers' addresses (an empty one of the answering broker is the address l
// dialled; md is changed to say so), and the leaders of md's topics.
func (c *Conn) learn(l *link, md *ClusterMetadata) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := l.n
	if n.cur == l || n.cur == nil {
		n.id = md.NodeID
	}
	if c.view.addrs == nil {
		c.view.addrs = make(map[uint32]string)
		c.view.topics = make(map[string]*topicRoute)
	}
	for i := range md.Brokers {
		b := &md.Brokers[i]
		if b.NodeID == md.NodeID && b.Addr == "" {
			b.Addr = n.addr
			if c.opts.TLS != nil && b.TLSAddr == "" {
				b.TLSAddr = n.addr
			}
		}
		addr := b.Addr
		if c.opts.TLS != nil {
			addr = b.TLSAddr
		}
		c.view.addrs[b.NodeID] = addr
	}
	for _, t := range md.Topics {
		tr := &topicRoute{leaders: make([]uint32, len(t.Partitions)), replicas: make([]int, len(t.Partitions))}
		for i, p := range t.Partitions {
			tr.leaders[i], tr.replicas[i] = p.Leader, len(p.Replicas)
		}
		c.view.topics[t.Name] = tr
	}
	// Other nodes move with their broker's address; the boot node keeps its seeds.
	for _, x := range c.nodes {
		if x == c.boot || x.id == 0 {
			continue
		}
		if addr, ok := c.view.addrs[x.id]; ok && addr != "" && addr != x.addrs[0] {
			x.addrs = []string{addr}
		}
	}
}

// leader is where a partition's requests go, from the view: its leader's node, and whether
// the partition has replicas elsewhere (so that its leader can change). ok is false when no
// leader is known: the topic is not in the view, an election is under way (leader 0), or
// the leader has no address the client can use.
func (c *Conn) leader(topic string, part int32) (n *node, replicated, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.view.flagless {
		return c.boot, false, true
	}
	tr := c.view.topics[topic]
	if tr == nil || part < 0 || int(part) >= len(tr.leaders) {
		return nil, false, false
	}
	replicated = tr.replicas[part] > 1
	id := tr.leaders[part]
	if id == 0 {
		return nil, replicated, false
	}
	n = c.nodeLocked(id)
	return n, replicated, n != nil
}

// nodeLocked returns the node of broker id: the node the view's address or an answer named
// id, or a new node for its address (not dialled yet: whoever needs it waits for it, which
// dials). nil when the broker has no address the client can use. Conn.mu is held.
func (c *Conn) nodeLocked(id uint32) *node {
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	addr := c.view.addrs[id]
	if addr == "" {
		return nil
	}
	for _, n := range c.nodes {
		if n.id == 0 && (n.addr == addr || n != c.boot && n.addrs[0] == addr) {
			n.id = id
			return n
		}
	}
	n := c.newNode([]string{addr}, c.dialAddr)
	n.id = id
	c.nodes = append(c.nodes, n)
	return n
}

// refreshCall is one METADATA refresh of a topic, which concurrent callers share.
type refreshCall struct {
	done chan struct{}
	err  error
}

// refresh asks for topic's cluster layout again (for a partition that met NOT_LEADER or lost
// its leader's connection). Callers that ask while a refresh of the topic is in flight wait
// for that one instead of sending another.
func (c *Conn) refresh(ctx context.Context, topic string) error {
	c.mu.Lock()
	if r := c.refreshing[topic]; r != nil {
		c.mu.Unlock()
		select {
		case <-r.done:
			return r.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r := &refreshCall{done: make(chan struct{})}
	if c.refreshing == nil {
		c.refreshing = make(map[string]*refreshCall)
	}
	c.refreshing[topic] = r
	c.mu.Unlock()
	_, r.err = c.clusterMetadata(ctx, []string{topic})
	c.mu.Lock()
	delete(c.refreshing, topic)
	c.mu.Unlock()
	close(r.done)
	return r.err
}

// anyLink returns the first working connection of the Conn's nodes (the boot node's first)
// that is not suspect, waiting for one until ctx ends: admin requests and METADATA go to any
// broker. While none is connected, every broker the view knows is dialled too, not only the
// boot node's seeds: the brokers Dial was given may all be gone while others of the cluster
// serve. While only suspect ones are connected (stall.go), the others are dialled too and
// waited for up to lookupMax; then a suspect one is used after all.
func (c *Conn) anyLink(ctx context.Context) (*link, error) {
	patience := time.Time{} // when a suspect link will do
	for {
		c.mu.Lock()
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return nil, err
		}
		now := c.clock()
		var fallback *link
		for _, n := range c.nodes {
			switch {
			case n.cur == nil:
			case !n.suspectLocked(now):
				l := n.cur
				c.mu.Unlock()
				return l, nil
			case fallback == nil:
				fallback = n.cur
			}
		}
		if fallback != nil {
			if patience.IsZero() {
				patience = time.Now().Add(lookupMax)
			}
			if !time.Now().Before(patience) {
				c.mu.Unlock()
				return fallback, nil
			}
		}
		ch := c.changed // closed when a node connects
		var waiting []*node
		for id := range c.view.addrs {
			if n := c.nodeLocked(id); n != nil && n != c.boot && (fallback == nil || !n.suspectLocked(now)) {
				n.waiters++
				n.startDialLocked()
				waiting = append(waiting, n)
			}
		}
		if fallback != nil && len(waiting) == 0 {
			c.mu.Unlock()
			return fallback, nil // no other broker to ask
		}
		c.mu.Unlock()
		var timer *time.Timer
		var timeout <-chan time.Time
		if fallback != nil {
			timer = time.NewTimer(time.Until(patience))
			timeout = timer.C
		}
		select {
		case <-ch:
		case <-timeout:
		case <-ctx.Done():
		}
		if timer != nil {
			timer.Stop()
		}
		c.mu.Lock()
		for _, n := range waiting {
			n.waiters--
		}
		last := c.boot.lastErr
		c.mu.Unlock()
		if ctx.Err() != nil {
			if last == nil {
				return nil, fmt.Errorf("lightq: reconnecting: %w", ctx.Err())
			}
			return nil, fmt.Errorf("lightq: reconnecting (%v): %w", last, ctx.Err())
		}
	}
}

// anyConnected reports whether some node has a working connection now.
func (c *Conn) anyConnected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.cur != nil {
			return true
		}
	}
	return false
}

// partitionRoundTrip sends a request of one partition (FETCH, LIST_OFFSETS) to its leader,
// as the view has it (the boot node when the view does not know the topic: with one broker
// that is the leader, and in a cluster the answer says otherwise), and follows NOT_LEADER:
// it refreshes the view and sends the request again to the new leader, with backoff while
// no leader is known, until ctx ends. A replicated partition whose leader cannot be reached
// is looked up again at each backoff step: the cluster elects another. hold is how long the
// broker may hold the request (a FETCH's MaxWait), for the stall watchdog.
func (c *Conn) partitionRoundTrip(ctx context.Context, topic string, part int32, op wire.Op, body []byte, hold time.Duration) ([]byte, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	bo := backoff{min: lookupMin, max: lookupMax}
	var lastErr error
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if attempt > 1 && !sleep(ctx, nil, bo.next()) {
				return nil, lastErr
			}
			if err := c.refresh(ctx, topic); err != nil {
				return nil, fmt.Errorf("%w (looking up the leader: %w)", lastErr, err)
			}
		}
		n, replicated, ok := c.leader(topic, part)
		if !ok {
			c.mu.Lock()
			known := c.view.topics[topic] != nil
			c.mu.Unlock()
			if attempt > 0 && known {
				continue // no leader yet: an election is under way
			}
			n = c.boot
		}
		wait, stop := ctx, func() {}
		if replicated {
			wait, stop = context.WithTimeout(ctx, bo.next())
		}
		l, err := n.awaitLink(wait)
		stop()
		if err != nil {
			if ctx.Err() != nil || !replicated || errors.Is(err, ErrClosed) || errors.Is(err, ErrConnectionLost) {
				return nil, err
			}
			lastErr = err // its leader is unreachable: maybe there is another by now
			continue
		}
		resp, err := c.exchangeHeld(ctx, l, op, body, hold, false)
		if !errors.Is(err, &wire.Error{Code: wire.CodeNotLeader}) {
			return resp, err
		}
		lastErr = err
	}
}
