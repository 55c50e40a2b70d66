package client

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/lightq/lightq/wire"
)

// Replica status of a cluster (PROTOCOL.md section 16.1). A broker reports what its own
// replicas know and asks nobody: a partition's replica lag is known only to its leader. So
// ask every broker of the cluster (ClusterBrokers lists them) and merge the answers with
// MergeClusterStatus, which keeps each partition's leader view.

// ClusterStatus is one broker's CLUSTER_STATUS answer, every page joined.
type ClusterStatus struct {
	NodeID uint32 // the answering broker
	// Member is false from a broker without cluster settings (it has no replicated
	// partitions).
	Member bool
	// The metadata group as the answering broker sees it.
	MetaLeader                        uint32
	MetaTerm, MetaCommit, MetaApplied uint64
	Partitions                        []PartitionStatus // in (topic, partition) order
}

// PartitionStatus is one replicated partition as the broker NodeID sees it: View says
// whether that broker leads it (and lists the replicas' progress), follows it, or holds no
// replica of it.
type PartitionStatus struct {
	Topic  string
	NodeID uint32 // the broker whose view this is
	wire.PartitionStatus
}

// ClusterStatus asks the broker for the status of its replicated partitions: topic's, or
// every replicated topic's when topic is empty. It needs the admin role, and asks as many
// times as the broker's pages need. Safe for concurrent use.
func (c *Conn) ClusterStatus(ctx context.Context, topic string) (*ClusterStatus, error) {
	if topic != "" {
		if err := wire.ValidTopicName(topic); err != nil {
			return nil, fmt.Errorf("lightq: %w", err)
		}
	}
	req := wire.ClusterStatus{Topic: topic}
	var out *ClusterStatus
	for {
		body, err := c.roundTrip(ctx, wire.OpClusterStatus, req.AppendTo(nil))
		if err != nil {
			return nil, err
		}
		var resp wire.ClusterStatusResponse
		if err := resp.Decode(body); err != nil {
			return nil, fmt.Errorf("%w: CLUSTER_STATUS response: %w", ErrProtocol, err)
		}
		if out == nil {
			out = &ClusterStatus{NodeID: resp.NodeID, Member: resp.Member, MetaLeader: resp.MetaLeader,
				MetaTerm: resp.MetaTerm, MetaCommit: resp.MetaCommit, MetaApplied: resp.MetaApplied}
		}
		for _, ts := range resp.Topics {
			for _, p := range ts.Partitions {
				out.Partitions = append(out.Partitions, PartitionStatus{Topic: ts.Name, NodeID: resp.NodeID, PartitionStatus: p})
			}
		}
		if !resp.More {
			return out, nil
		}
		if len(resp.Topics) == 0 {
			return nil, fmt.Errorf("%w: CLUSTER_STATUS answered more without a partition", ErrProtocol)
		}
		last := resp.Topics[len(resp.Topics)-1]
		next := wire.ClusterStatus{Topic: topic, FromTopic: last.Name, FromPartition: last.Partitions[len(last.Partitions)-1].ID + 1}
		if next.FromTopic < req.FromTopic || next.FromTopic == req.FromTopic && next.FromPartition <= req.FromPartition {
			return nil, fmt.Errorf("%w: CLUSTER_STATUS went back to %s/%d", ErrProtocol, next.FromTopic, next.FromPartition)
		}
		req = next
	}
}

// ClusterBrokers asks the broker for the cluster's brokers (METADATA with the cluster flag,
// no topics): its own node id and every broker with the addresses clients reach it at. A
// broker without cluster settings names itself alone, with an empty address ("the address
// you used"). Safe for concurrent use.
func (c *Conn) ClusterBrokers(ctx context.Context) (self uint32, brokers []wire.BrokerMetadata, err error) {
	// METADATA names no broker without describing topics too: this asks for every topic the
	// caller may see (as -L does) and keeps the broker list.
	req := wire.MetadataRequest{Cluster: true}
	body, err := c.roundTrip(ctx, wire.OpMetadata, req.AppendTo(nil))
	if err != nil {
		return 0, nil, err
	}
	resp := wire.MetadataResponse{Cluster: true}
	if err := resp.Decode(body); err != nil {
		return 0, nil, fmt.Errorf("%w: METADATA response: %w", ErrProtocol, err)
	}
	return resp.NodeID, resp.Brokers, nil
}

// MergeClusterStatus merges the answers of several brokers into one status per partition,
// in (topic, partition) order: a leader's view when one answered (of two, the one of the
// higher term: the other is a deposed leader that has not heard yet), else the follower
// view of the highest term, else a view from a broker that holds no replica. Nil answers
// (brokers that could not be asked) are skipped.
func MergeClusterStatus(answers ...*ClusterStatus) []PartitionStatus {
	type key struct {
		topic string
		id    uint32
	}
	best := map[key]PartitionStatus{}
	better := func(a, b PartitionStatus) bool { // a over b
		if a.View != b.View {
			return a.View > b.View
		}
		if a.Term != b.Term {
			return a.Term > b.Term
		}
		return a.NodeID < b.NodeID // ties: the same answer from whichever broker, stably
	}
	for _, ans := range answers {
		if ans == nil {
			continue
		}
		for _, p := range ans.Partitions {
			k := key{p.Topic, p.ID}
			if cur, ok := best[k]; !ok || better(p, cur) {
				best[k] = p
			}
		}
	}
	out := make([]PartitionStatus, 0, len(best))
	for _, p := range best {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b PartitionStatus) int {
		if c := cmp.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out
}
