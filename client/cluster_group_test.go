package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/broker/brokertest"
	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// A group member against a real 3-broker cluster, in this process: its group requests go to
// the group's coordinator, and it follows the coordinator when that broker stops.

// clusterLeader returns the index of the broker that leads partition 0 of topic: the one
// whose FETCH is not answered NOT_LEADER.
func clusterLeader(t *testing.T, conns []*client.Conn, topic string) int {
	t.Helper()
	leader := -1
	itEventually(t, "a leader of "+topic+"/0", func() bool {
		for i, c := range conns {
			if c == nil {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := c.Fetch(ctx, wire.Fetch{Topic: topic, Partition: 0, Offset: 0, MaxBytes: 1})
			cancel()
			if err == nil {
				leader = i
				return true
			}
		}
		return false
	})
	return leader
}

// TestClusterGroupMemberFollowsCoordinator: a consumer connected to the leader of its topic's
// partition, in a group that another broker coordinates, joins that coordinator (its first
// JOIN_GROUP is answered NOT_COORDINATOR), commits there, and when the coordinator's broker
// stops, joins the new coordinator, which holds the committed offset, and goes on: every
// record is delivered, none committed is delivered again, and its last commit is stored.
func TestClusterGroupMemberFollowsCoordinator(t *testing.T) {
	cl := brokertest.StartCluster(t, 3, func(cfg *broker.Config) { cfg.AdminUser, cfg.AdminPassword = itAdminUser, itAdminPass })
	admin := itDial(t, cl.Brokers[0].Addr(), itAdminUser, itAdminPass)
	itEventually(t, "the replicated topic created (every broker announced)", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := admin.CreateTopic(ctx, client.TopicConfig{Name: "events", Kind: wire.KindDurable, Partitions: 1, User: itUser, Password: itPass,
			Options: []wire.Option{{Key: wire.OptionReplicationFactor, Value: "3"}}})
		return err == nil || errors.Is(err, &wire.Error{Code: wire.CodeTopicExists})
	})
	conns := make([]*client.Conn, 3)
	for i, s := range cl.Brokers {
		itEventually(t, fmt.Sprintf("broker %d serves the topic", i+1), func() bool {
			c, err := client.Dial(itCtx(t), s.Addr(), client.Options{User: itUser, Password: itPass})
			if err != nil {
				return false
			}
			if _, err := c.Metadata(itCtx(t), "events"); err != nil {
				c.Close()
				return false
			}
			conns[i] = c
			t.Cleanup(func() { c.Close() })
			return true
		})
	}
	li := clusterLeader(t, conns, "events")
	conn := conns[li]
	// A group that another broker coordinates.
	var group string
	var coord uint32
	itEventually(t, "a group coordinated elsewhere than the topic's leader", func() bool {
		for n := range 64 {
			g := fmt.Sprint("billing-", n)
			fc, err := conn.FindCoordinator(itCtx(t), g)
			if err != nil || fc.Coordinator == 0 {
				return false
			}
			if fc.Coordinator != fc.Node {
				group, coord = g, fc.Coordinator
				return true
			}
		}
		return false
	})

	const n = 200
	var acks []client.Ack
	ckProduce(t, conn, client.ProducerOptions{Topic: "events"}, 0, n, &acks, nil)
	errs := make(chan error, 64)
	k := ckConsumer(t, conn, client.ConsumerOptions{Topic: "events", Group: group, AutoCommit: -1, SessionTimeout: 5 * time.Second,
		OnError: func(err error) {
			select {
			case errs <- err:
			default:
			}
		}})
	delivered := map[int64]int{}
	first := ckCollect(t, k, n/2)
	for _, r := range first {
		delivered[r.Offset]++
	}
	if err := k.Commit(itCtx(t)); err != nil {
		t.Fatalf("commit at the coordinator: %v", err)
	}
	committed := first[len(first)-1].Offset + 1
	if off, err := conn.FetchCommitted(itCtx(t), wire.FetchCommitted{Group: group, Topic: "events", Partition: 0}); err != nil || off != committed {
		t.Fatalf("FETCH_COMMITTED through the leader's Conn: %d, %v; want %d", off, err, committed)
	}
	for _, r := range ckCollect(t, k, n/4) { // delivered, not committed
		delivered[r.Offset]++
	}

	cl.Stop(int(coord - 1))
	itEventually(t, "the member to join the new coordinator", func() bool {
		fc, err := conn.FindCoordinator(itCtx(t), group)
		if err != nil || fc.Coordinator == coord || fc.Coordinator == 0 {
			return false
		}
		d, err := conn.DescribeGroup(itCtx(t), group, "events")
		return err == nil && len(d.Members) == 1 && d.Members[0].Member == k.MemberID() && len(d.Members[0].Assigned) == 1
	})
	if off, err := conn.FetchCommitted(itCtx(t), wire.FetchCommitted{Group: group, Topic: "events", Partition: 0}); err != nil || off != committed {
		t.Fatalf("the new coordinator has committed %d, %v; want %d", off, err, committed)
	}
	ckProduce(t, conn, client.ProducerOptions{Topic: "events"}, n, 2*n, &acks, nil)
	for _, r := range ckCollect(t, k, 2*n-3*n/4) {
		delivered[r.Offset]++
		if delivered[r.Offset] > 1 && r.Offset < committed {
			t.Fatalf("offset %d, committed before the move, delivered again", r.Offset)
		}
	}
	for i, a := range acks {
		if delivered[a.Offset] == 0 {
			t.Fatalf("record %d (offset %d) never delivered", i, a.Offset)
		}
	}
	if err := k.Commit(itCtx(t)); err != nil {
		t.Fatalf("commit at the new coordinator: %v", err)
	}
	last := acks[2*n-1].Offset + 1
	if off, err := conn.FetchCommitted(itCtx(t), wire.FetchCommitted{Group: group, Topic: "events", Partition: 0}); err != nil || off != last {
		t.Fatalf("committed %d, %v after the move; want %d", off, err, last)
	}
	dups := 0
	for _, c := range delivered {
		dups += c - 1
	}
	var reported []error
	for len(errs) > 0 {
		reported = append(reported, <-errs)
	}
	t.Logf("node %d coordinated, then another; %d records delivered twice (none below the commit); reported: %v", coord, dups, reported)
}
