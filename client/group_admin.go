package client

import (
	"context"
	"fmt"

	"github.com/lightq/lightq/wire"
)

// ListGroups lists the consumer groups of topic (every durable topic the caller may see when
// topic is empty) that have live members or committed offsets, ordered by group then topic.
// It asks again as long as the broker says more did not fit in its answer. A cluster member
// lists the groups it coordinates: ask a Conn to each broker for all of them.
func (c *Conn) ListGroups(ctx context.Context, topic string) ([]wire.GroupListing, error) {
	if topic != "" {
		if err := wire.ValidTopicName(topic); err != nil {
			return nil, fmt.Errorf("lightq: %w", err)
		}
	}
	var out []wire.GroupListing
	req := wire.ListGroups{Topic: topic}
	for {
		body, err := c.roundTrip(ctx, wire.OpListGroups, req.AppendTo(nil))
		if err != nil {
			return nil, err
		}
		var resp wire.ListGroupsResponse
		if err := resp.Decode(body); err != nil {
			return nil, fmt.Errorf("%w: LIST_GROUPS response: %w", ErrProtocol, err)
		}
		out = append(out, resp.Groups...)
		if !resp.More {
			return out, nil
		}
		if len(resp.Groups) == 0 {
			return nil, fmt.Errorf("%w: LIST_GROUPS answered more without a group", ErrProtocol)
		}
		last := resp.Groups[len(resp.Groups)-1]
		req.AfterGroup, req.AfterTopic = last.Group, last.Topic
	}
}

// DescribeGroup describes a consumer group of a durable topic: its generation, live members
// with their partitions, and every partition's committed offset, end offset and lag. In a
// cluster it asks the group's coordinator.
func (c *Conn) DescribeGroup(ctx context.Context, group, topic string) (*wire.DescribeGroupResponse, error) {
	if err := wire.ValidGroupName(group); err != nil {
		return nil, fmt.Errorf("lightq: %w", err)
	}
	if err := wire.ValidTopicName(topic); err != nil {
		return nil, fmt.Errorf("lightq: %w", err)
	}
	req := wire.DescribeGroup{Group: group, Topic: topic}
	body, err := c.groupRoundTrip(ctx, group, wire.OpDescribeGroup, req.AppendTo(nil))
	if err != nil {
		return nil, err
	}
	resp := new(wire.DescribeGroupResponse)
	if err := resp.Decode(body); err != nil {
		return nil, fmt.Errorf("%w: DESCRIBE_GROUP response: %w", ErrProtocol, err)
	}
	return resp, nil
}
