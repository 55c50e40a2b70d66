package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lightq/lightq/wire"
)

// Leaders and replication as the brokers report them: METADATA with the cluster flag from
// each broker that is up, and each follower's segment files compared with its leader's high
// watermark.

// layout is one broker's answer: each partition's leader and replicas.
type layout struct {
	leader   map[int32]uint32
	replicas map[int32][]uint32
}

// ask is node n's layout of the topic (a node that does not answer is left out).
func (c *cluster) ask(ctx context.Context, n *node) (layout, error) {
	r, err := c.rawConn(ctx, n)
	if err != nil {
		return layout{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	md, err := r.ClusterMetadata(rctx, c.topic)
	if err != nil {
		if _, refused := err.(*wire.Error); !refused {
			c.dropRaw(n)
		}
		return layout{}, err
	}
	l := layout{leader: map[int32]uint32{}, replicas: map[int32][]uint32{}}
	for _, t := range md.Topics {
		if t.Name != c.topic {
			continue
		}
		for _, p := range t.Partitions {
			l.leader[int32(p.ID)], l.replicas[int32(p.ID)] = p.Leader, p.Replicas
		}
	}
	return l, nil
}

// waitMembers waits until every broker's METADATA lists every broker of the cluster: the
// members have announced themselves in the metadata group, so a topic can be placed on all.
func (c *cluster) waitMembers(ctx context.Context) error {
	if !c.clustered {
		return nil
	}
	seen := map[uint32]int{}
	err := pollUntil(ctx, startTimeout, 20*time.Millisecond, func() bool {
		all := true
		for _, n := range c.nodes {
			r, err := c.rawConn(ctx, n)
			if err != nil {
				all = false
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			md, err := r.ClusterMetadata(rctx)
			cancel()
			if err != nil {
				c.dropRaw(n)
				all = false
				continue
			}
			seen[n.id] = len(md.Brokers)
			all = all && len(md.Brokers) == len(c.nodes)
		}
		return all
	})
	if err != nil {
		return fmt.Errorf("brokers listed by each node's METADATA after %v: %v, want %d", startTimeout, seen, len(c.nodes))
	}
	return nil
}

// layouts asks every node that is up; errs holds why the others did not answer.
func (c *cluster) layouts(ctx context.Context) (out map[uint32]layout, errs map[uint32]error) {
	out, errs = map[uint32]layout{}, map[uint32]error{}
	for _, n := range c.nodes {
		if !n.up() {
			continue
		}
		if l, err := c.ask(ctx, n); err == nil {
			out[n.id] = l
		} else {
			errs[n.id] = err
		}
	}
	return out, errs
}

// leadersNow returns, for each partition, a leader that is up, not in avoid, and names
// itself leader; with agree, every node that is up must answer and name it too (a broker that
// does not know the topic, say after a restart, answers UNKNOWN_TOPIC: no agreement). ok
// reports whether every partition has one.
func (c *cluster) leadersNow(ctx context.Context, agree bool, avoid ...uint32) (map[int32]uint32, bool) {
	ls, errs := c.layouts(ctx)
	out := map[int32]uint32{}
	if agree && len(errs) > 0 {
		return out, false
	}
	for p := int32(0); p < int32(c.parts); p++ {
		for id, l := range ls {
			if l.leader[p] != id || slices.Contains(avoid, id) {
				continue
			}
			if agree {
				for _, other := range ls {
					if other.leader[p] != id {
						id = 0
						break
					}
				}
			}
			if id != 0 {
				out[p] = id
			}
		}
	}
	return out, len(out) == c.parts
}

// waitLeaders waits until every partition has a leader as leadersNow finds one.
func (c *cluster) waitLeaders(ctx context.Context, timeout time.Duration, agree bool, avoid ...uint32) (map[int32]uint32, error) {
	var leaders map[int32]uint32
	err := pollUntil(ctx, timeout, 20*time.Millisecond, func() bool {
		var ok bool
		leaders, ok = c.leadersNow(ctx, agree, avoid...)
		return ok
	})
	if err != nil {
		ls, errs := c.layouts(ctx)
		return leaders, fmt.Errorf("partitions without a leader (avoiding %v) after %v: have %v; layouts %v, errors %v", avoid, timeout, leaders, ls, errs)
	}
	return leaders, nil
}

// replicationTimeout bounds the wait for the followers to catch up with the leaders.
const replicationTimeout = 90 * time.Second

func (c *cluster) replicationWait() time.Duration {
	if c.replWait > 0 {
		return c.replWait
	}
	return replicationTimeout
}

// waitHealthy waits until every node is up and ready, all agree on every partition's leader,
// and every replica's files reach the high watermark its leader reported at the start of
// the wait (a repaired follower has fetched again what it lost). Every fault cycle ends
// with it, so the next fault starts from a fully replicated cluster: the faults come one
// at a time, as the promises of PROTOCOL.md section 16 assume.
func (c *cluster) waitHealthy(ctx context.Context) error {
	for _, n := range c.nodes {
		if !n.up() {
			return fmt.Errorf("node %d is down or paused", n.id)
		}
		if !ready(n.proc.httpAddr) {
			if err := pollUntil(ctx, startTimeout, 20*time.Millisecond, func() bool { return ready(n.proc.httpAddr) }); err != nil {
				return fmt.Errorf("node %d: /readyz not 200 for %v", n.id, startTimeout)
			}
		}
	}
	leaders, err := c.waitLeaders(ctx, c.replicationWait(), true)
	if err != nil {
		return err
	}
	return c.waitReplicated(ctx, leaders)
}

// waitReplicated waits until each replica of each partition holds, in its files, at least
// what the partition's leader reports as its high watermark now.
func (c *cluster) waitReplicated(ctx context.Context, leaders map[int32]uint32) error {
	type target struct {
		part  int32
		node  *node
		hw    int64
		dir   string
		reach int64
	}
	var targets []*target
	for p, lead := range leaders {
		n := c.node(lead)
		r, err := c.rawConn(ctx, n)
		if err != nil {
			return err
		}
		l, err := c.ask(ctx, n)
		if err != nil {
			return fmt.Errorf("node %d: %w", lead, err)
		}
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		hw, err := r.HighWatermark(hctx, c.topic, p)
		cancel()
		if err != nil {
			c.dropRaw(n)
			return fmt.Errorf("node %d: high watermark of partition %d: %w", lead, p, err)
		}
		reps := l.replicas[p]
		if len(reps) == 0 {
			reps = []uint32{lead}
		}
		for _, id := range reps {
			targets = append(targets, &target{part: p, node: c.node(id), hw: hw, dir: PartitionDir(c.node(id).dir, c.topic, p)})
		}
	}
	err := pollUntil(ctx, c.replicationWait(), 50*time.Millisecond, func() bool {
		done := true
		for _, tg := range targets {
			if tg.reach >= tg.hw {
				continue
			}
			if off, err := LastOffset(tg.dir); err == nil {
				tg.reach = off
			}
			done = done && tg.reach >= tg.hw
		}
		return done
	})
	if err != nil {
		var behind []string
		for _, tg := range targets {
			if tg.reach < tg.hw {
				behind = append(behind, fmt.Sprintf("node %d partition %d at %d of %d", tg.node.id, tg.part, tg.reach, tg.hw))
			}
		}
		return fmt.Errorf("replicas not caught up after %v: %s", c.replicationWait(), strings.Join(behind, "; "))
	}
	return nil
}
