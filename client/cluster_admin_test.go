package client_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/broker/brokertest"
	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// TestClusterAdmin: the cluster membership calls against real brokers: a cluster founded by
// one broker grows to three with AddBroker, a replicated partition moves to the broker it
// was not on (MoveReplicas, WaitMoves), a broker is drained and removed (DrainBroker,
// RemoveBroker), and refusals come back as the broker's codes.
func TestClusterAdmin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	creds := func(c *broker.Config) { c.AdminUser, c.AdminPassword = itAdminUser, itAdminPass }
	b1 := brokertest.StartMember(t, 1, nil, false, creds)
	admin, err := client.Dial(ctx, b1.Addr(), client.Options{User: itAdminUser, Password: itAdminPass})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	brokers := []*broker.Server{b1}
	for id := uint32(2); id <= 3; id++ {
		b := brokertest.StartMember(t, id, map[uint64]string{1: b1.ClusterAddr()}, true, creds)
		if err := admin.AddBroker(ctx, id, client.BrokerAddrs{Addr: b.Addr(), ClusterAddr: b.ClusterAddr()}); err != nil {
			t.Fatalf("AddBroker %d: %v", id, err)
		}
		brokers = append(brokers, b)
	}
	st := waitStatus(ctx, t, admin, "3 brokers, all voters", func(st *wire.MembershipResponse) bool {
		n := 0
		for _, b := range st.Brokers {
			if b.Meta == wire.MetaVoter {
				n++
			}
		}
		return n == 3
	})
	if st.NodeID != 1 || st.MetaLeader == 0 || st.Brokers[2].Addr != brokers[2].Addr() {
		t.Fatalf("status: %+v", st)
	}

	err = admin.CreateTopic(ctx, client.TopicConfig{Name: "orders", Kind: wire.KindDurable, Partitions: 1,
		Options: []wire.Option{{Key: wire.OptionReplicationFactor, Value: "2"}}})
	if err != nil {
		t.Fatal(err)
	}
	st, err = admin.Membership(ctx, "orders", false)
	if err != nil || len(st.Partitions) != 1 || len(st.Partitions[0].Replicas) != 2 {
		t.Fatalf("status of orders: %+v, %v", st, err)
	}
	from := st.Partitions[0].Replicas
	var spare uint32
	for id := uint32(1); id <= 3; id++ {
		if !slices.Contains(from, id) {
			spare = id
		}
	}
	to := []uint32{from[1], spare}
	if err := admin.MoveReplicas(ctx, "orders", 0, to); err != nil {
		t.Fatal(err)
	}
	if err := admin.WaitMoves(ctx, "orders", 20*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	st, err = admin.Membership(ctx, "orders", false)
	if err != nil || !slices.Equal(st.Partitions[0].Replicas, to) || len(st.Partitions[0].Previous) != 0 {
		t.Fatalf("after the move: %+v, %v", st, err)
	}

	// Refusals carry the broker's codes; through broker 1, or 2 when the spare is broker 1 (a
	// broker cannot remove itself).
	via := admin
	if spare == 1 {
		c2, err := client.Dial(ctx, brokers[1].Addr(), client.Options{User: itAdminUser, Password: itAdminPass})
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		via = c2
	}
	for _, tc := range []struct {
		name string
		err  error
		code wire.Code
	}{
		{"move to an unknown broker", admin.MoveReplicas(ctx, "orders", 0, []uint32{1, 9}), wire.CodeUnknownBroker},
		{"remove a broker holding replicas", via.RemoveBroker(ctx, spare), wire.CodeBrokerInUse},
		{"move an unknown topic", admin.MoveReplicas(ctx, "nope", 0, []uint32{1}), wire.CodeUnknownTopic},
	} {
		if !errors.Is(tc.err, &wire.Error{Code: tc.code}) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.code)
		}
	}

	// Drain the spare (now a replica) and remove it.
	// The spare holds orders/0 now, and maybe partitions of the cluster's offsets topic.
	before, err := via.Membership(ctx, "", false)
	if err != nil {
		t.Fatal(err)
	}
	var held int
	for _, b := range before.Brokers {
		if b.NodeID == spare {
			held = int(b.Replicas)
		}
	}
	if n, err := via.DrainBroker(ctx, spare); err != nil || n != held || n < 1 {
		t.Fatalf("DrainBroker %d: %d moves, %v; it held %d partitions", spare, n, err, held)
	}
	if err := via.WaitMoves(ctx, "", 20*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	if err := via.RemoveBroker(ctx, spare); err != nil {
		t.Fatal(err)
	}
	st = waitStatus(ctx, t, via, "2 brokers", func(st *wire.MembershipResponse) bool { return len(st.Brokers) == 2 })
	for _, b := range st.Brokers {
		if b.NodeID == spare {
			t.Fatalf("broker %d still listed: %+v", spare, st.Brokers)
		}
	}
}

// waitStatus asks MEMBERSHIP until ok holds.
func waitStatus(ctx context.Context, t *testing.T, c *client.Conn, what string, ok func(*wire.MembershipResponse) bool) *wire.MembershipResponse {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := c.Membership(ctx, "", false)
		if err != nil {
			t.Fatal(err)
		}
		if ok(st) {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("still not %s: %+v", what, st)
		case <-tick.C:
		}
	}
}
