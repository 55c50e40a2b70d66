package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/lightq/lightq/wire"
)

// Where a SUBSCRIBE goes. In a cluster each partition of a transient topic lives on one
// broker, its home, which METADATA names as the partition's leader (PROTOCOL.md section
// 16.3); another broker answers NOT_LEADER. The Conn sends the SUBSCRIBE to the home the
// view knows (the boot node when the view does not know the topic: with one broker that is
// the home, and in a cluster the answer says otherwise), and after NOT_LEADER looks the
// topic up again and goes there. A subscription to every partition whose partitions live on
// several brokers is one SUBSCRIBE per partition, each at its home (the Subscription's
// legs); with one broker, or all of a topic's partitions on one, it is one SUBSCRIBE of
// partition -1 as before.

// subTarget is one SUBSCRIBE to send: the node and the partition (or wire.PartitionAny).
type subTarget struct {
	n    *node
	part int32
}

// subscribeTargets is where s's SUBSCRIBE of part goes from the view: ok false when the view
// knows the topic but not one of its partitions' homes (no address, or none named).
func (c *Conn) subscribeTargets(topic string, part int32) ([]subTarget, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tr := c.view.topics[topic]
	if c.view.flagless || tr == nil {
		return []subTarget{{n: c.boot, part: part}}, true
	}
	if part != wire.PartitionAny {
		if int(part) >= len(tr.leaders) {
			return []subTarget{{n: c.boot, part: part}}, true // the broker answers UNKNOWN_PARTITION
		}
		n := c.homeLocked(tr.leaders[part])
		return []subTarget{{n: n, part: part}}, n != nil
	}
	spread := false
	for _, id := range tr.leaders {
		if id != tr.leaders[0] {
			spread = true
		}
	}
	if !spread && len(tr.leaders) > 0 {
		n := c.homeLocked(tr.leaders[0])
		return []subTarget{{n: n, part: part}}, n != nil
	}
	out := make([]subTarget, len(tr.leaders))
	for i, id := range tr.leaders {
		out[i] = subTarget{n: c.homeLocked(id), part: int32(i)}
		if out[i].n == nil {
			return nil, false
		}
	}
	return out, true
}

// homeLocked is the node of broker id for a subscription (nil when none is named, or it has
// no address the client can use). Conn.mu is held.
func (c *Conn) homeLocked(id uint32) *node {
	if id == 0 {
		return nil
	}
	return c.nodeLocked(id)
}

// subscribeRouted subscribes s to part (wire.PartitionAny: every partition) at the
// partitions' homes, following NOT_LEADER with a fresh METADATA until ctx ends. A leg
// accepted before another was refused is unsubscribed before the next attempt.
func (c *Conn) subscribeRouted(ctx context.Context, s *Subscription, part int32, group string, window int) error {
	bo := backoff{min: lookupMin, max: lookupMax}
	var lastErr error
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if attempt > 1 && !sleep(ctx, nil, bo.next()) {
				return lastErr
			}
			if err := c.refresh(ctx, s.topic); err != nil {
				return fmt.Errorf("%w (looking up the partitions' homes: %w)", lastErr, err)
			}
		}
		targets, ok := c.subscribeTargets(s.topic, part)
		if !ok {
			lastErr = fmt.Errorf("lightq: SUBSCRIBE %s: a partition's home broker is not known", s.topic)
			if attempt > 0 && ctx.Err() != nil {
				return lastErr
			}
			continue
		}
		legs, err := c.subscribeAll(ctx, s, targets, group, window)
		if err == nil {
			s.legs = legs
			if len(targets) > 1 {
				s.byPart = legs
				s.window = max(window/len(legs), minLegWindow)
			}
			return nil
		}
		if !errors.Is(err, &wire.Error{Code: wire.CodeNotLeader}) || ctx.Err() != nil {
			return err
		}
		lastErr = err
	}
}

// minLegWindow is the least credit a leg of a subscription spread over brokers gets (the
// window is shared among the legs).
const minLegWindow = 64 << 10

// subscribeAll sends the SUBSCRIBE of every target and returns their legs, in targets'
// order; on the first refusal it unsubscribes the legs accepted and returns the refusal.
func (c *Conn) subscribeAll(ctx context.Context, s *Subscription, targets []subTarget, group string, window int) ([]*subLeg, error) {
	credit := window
	if len(targets) > 1 {
		credit = max(window/len(targets), minLegWindow)
	}
	legs := make([]*subLeg, 0, len(targets))
	partitions := 0
	for _, tg := range targets {
		l, err := tg.n.awaitLink(ctx)
		var n int
		if err == nil {
			leg := &subLeg{}
			req := wire.Subscribe{Topic: s.topic, Partition: tg.part, QueueGroup: group, Credit: uint32(credit)}
			if n, err = c.subscribeLeg(ctx, s, l, leg, &req); err == nil {
				legs = append(legs, leg)
				partitions += n
				continue
			}
		}
		for _, leg := range legs {
			_ = c.unsubscribe(leg)
		}
		return nil, err
	}
	s.partitions = partitions
	return legs, nil
}
