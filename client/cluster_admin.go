package client

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/lightq/lightq/wire"
)

// Cluster membership (PROTOCOL.md section 16.2): admin requests any broker of a cluster
// answers. Each is one request; a move then goes on in the cluster, which WaitMoves follows.

// BrokerAddrs are where a broker is reached: by clients (Addr, and TLSAddr when it has a TLS
// listener) and by the other brokers (ClusterAddr), each host:port.
type BrokerAddrs struct {
	Addr, TLSAddr, ClusterAddr string
}

// AddBroker adds a broker started with cluster-join to the cluster: the metadata gets its
// addresses and the metadata group a new voter. It returns once the broker asked has applied
// both. Adding a broker already in the cluster is harmless.
func (c *Conn) AddBroker(ctx context.Context, node uint32, addrs BrokerAddrs) error {
	if node == 0 {
		return fmt.Errorf("lightq: node id 0: node ids start at 1")
	}
	for _, a := range []struct{ what, addr string }{{"client", addrs.Addr}, {"cluster", addrs.ClusterAddr}, {"TLS", addrs.TLSAddr}} {
		if a.addr == "" && a.what == "TLS" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil || len(a.addr) > wire.MaxAddr {
			return fmt.Errorf("lightq: broker %d: %s address %q is not host:port", node, a.what, a.addr)
		}
	}
	req := wire.AddBroker{NodeID: node, Addr: addrs.Addr, TLSAddr: addrs.TLSAddr, ClusterAddr: addrs.ClusterAddr}
	_, err := c.roundTrip(ctx, wire.OpAddBroker, req.AppendTo(nil))
	return err
}

// MoveReplicas gives a partition of a replicated topic new replicas (node ids, the preferred
// leader first). It returns once the cluster's metadata has them; the partition's leader then
// moves the partition, which WaitMoves waits for.
func (c *Conn) MoveReplicas(ctx context.Context, topic string, partition uint32, replicas []uint32) error {
	if err := wire.ValidTopicName(topic); err != nil {
		return fmt.Errorf("lightq: %w", err)
	}
	if len(replicas) == 0 || len(replicas) > wire.MaxReplicas {
		return fmt.Errorf("lightq: %d replicas, want 1-%d", len(replicas), wire.MaxReplicas)
	}
	req := wire.MoveReplicas{Topic: topic, Partition: partition, Replicas: replicas}
	_, err := c.roundTrip(ctx, wire.OpMoveReplicas, req.AppendTo(nil))
	return err
}

// DrainBroker marks a broker removing and moves every partition that lists it to other
// brokers, returning how many moves it started (0: none lists it any more). Wait for them
// with WaitMoves, then RemoveBroker.
func (c *Conn) DrainBroker(ctx context.Context, node uint32) (int, error) {
	req := wire.BrokerID{NodeID: node}
	body, err := c.roundTrip(ctx, wire.OpDrainBroker, req.AppendTo(nil))
	if err != nil {
		return 0, err
	}
	var resp wire.DrainBrokerResponse
	if err := resp.Decode(body); err != nil {
		return 0, fmt.Errorf("%w: DRAIN_BROKER response: %w", ErrProtocol, err)
	}
	return int(resp.Moves), nil
}

// RemoveBroker takes a drained broker that holds no replica out of the cluster (refused
// with wire.CodeBrokerInUse while it holds some). Send it through a connection to another
// broker than the one removed.
func (c *Conn) RemoveBroker(ctx context.Context, node uint32) error {
	req := wire.BrokerID{NodeID: node}
	_, err := c.roundTrip(ctx, wire.OpRemoveBroker, req.AppendTo(nil))
	return err
}

// Membership asks the broker for the cluster's brokers and the partitions of its
// replicated topics (topic: one topic's; movingOnly: only those whose move is under way),
// following the answer's pages.
func (c *Conn) Membership(ctx context.Context, topic string, movingOnly bool) (*wire.MembershipResponse, error) {
	if topic != "" {
		if err := wire.ValidTopicName(topic); err != nil {
			return nil, fmt.Errorf("lightq: %w", err)
		}
	}
	req := wire.Membership{Topic: topic, MovingOnly: movingOnly}
	var all *wire.MembershipResponse
	for {
		body, err := c.roundTrip(ctx, wire.OpMembership, req.AppendTo(nil))
		if err != nil {
			return nil, err
		}
		resp := new(wire.MembershipResponse)
		if err := resp.Decode(body); err != nil {
			return nil, fmt.Errorf("%w: MEMBERSHIP response: %w", ErrProtocol, err)
		}
		if all == nil {
			all = resp
		} else {
			all.Partitions = append(all.Partitions, resp.Partitions...)
		}
		if !resp.More {
			all.More = false
			return all, nil
		}
		if len(resp.Partitions) == 0 {
			return nil, fmt.Errorf("%w: MEMBERSHIP answered more without a partition", ErrProtocol)
		}
		last := resp.Partitions[len(resp.Partitions)-1]
		req.AfterTopic, req.AfterPartition = last.Topic, last.Partition
	}
}

// WaitMoves waits until no partition of topic (every topic when empty) is moving, asking
// MEMBERSHIP every poll (at least 10 ms; 0 means 200 ms), and calls progress (when not
// nil) with the partitions still moving after each answer. It ends with ctx's error when ctx
// ends first.
func (c *Conn) WaitMoves(ctx context.Context, topic string, poll time.Duration, progress func([]wire.MemberPartition)) error {
	if poll <= 0 {
		poll = 200 * time.Millisecond
	}
	poll = max(poll, 10*time.Millisecond)
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		st, err := c.Membership(ctx, topic, true)
		if err != nil {
			return err
		}
		if progress != nil {
			progress(st.Partitions)
		}
		if len(st.Partitions) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lightq: %d partitions still moving: %w", len(st.Partitions), ctx.Err())
		case <-tick.C:
		}
	}
}
