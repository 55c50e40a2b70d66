package client_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/broker/brokertest"
	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// TestClusterStatusIntegration: Conn.ClusterStatus against each broker of a real 3-broker
// cluster in this process. Each partition has exactly one broker whose answer is the
// leader's view, listing the three replicas caught up; the other two report a follower's
// view naming that leader; MergeClusterStatus keeps the leaders' views. ClusterBrokers
// lists the three. A user without the admin role is refused; a broker without cluster
// settings answers as no member.
func TestClusterStatusIntegration(t *testing.T) {
	c := brokertest.StartCluster(t, 3, func(cfg *broker.Config) { cfg.AdminUser, cfg.AdminPassword = itAdminUser, itAdminPass })
	var admins []*client.Conn
	for _, addr := range c.Addrs() {
		admins = append(admins, itDial(t, addr, itAdminUser, itAdminPass))
	}
	itEventually(t, "every broker to list the three", func() bool {
		for i, a := range admins {
			self, bs, err := a.ClusterBrokers(itCtx(t))
			if err != nil || int(self) != i+1 || len(bs) != 3 {
				return false
			}
		}
		return true
	})
	_, bs, _ := admins[0].ClusterBrokers(itCtx(t))
	for i, b := range bs {
		if int(b.NodeID) != i+1 || b.Addr != c.Addrs()[i] {
			t.Fatalf("brokers %+v, want nodes 1-3 at %v", bs, c.Addrs())
		}
	}
	err := admins[1].CreateTopic(itCtx(t), client.TopicConfig{Name: "events", Kind: wire.KindDurable, Partitions: 2,
		Options: []wire.Option{{Key: wire.OptionReplicationFactor, Value: "3"}}})
	if err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}

	var answers []*client.ClusterStatus
	itEventually(t, "one leader per partition, every replica caught up", func() bool {
		answers = answers[:0]
		for _, a := range admins {
			st, err := a.ClusterStatus(itCtx(t), "")
			if err != nil {
				t.Fatalf("ClusterStatus: %v", err)
			}
			answers = append(answers, st)
		}
		merged := client.MergeClusterStatus(answers...)
		if len(merged) != 2 {
			return false
		}
		for _, p := range merged {
			if p.View != wire.ViewLeader || p.NodeID != p.Leader || len(p.Replicas) != 3 {
				return false
			}
			for _, r := range p.Replicas {
				if r.Lag != 0 || !r.Active {
					return false
				}
			}
			for _, a := range answers { // every broker follows this leader
				q := a.Partitions[p.ID]
				if q.Topic != "events" || q.ID != p.ID || q.Leader != p.Leader || q.Term != p.Term || (q.View == wire.ViewLeader) != (a.NodeID == p.Leader) {
					return false
				}
			}
		}
		return true
	})
	for i, a := range answers {
		if !a.Member || int(a.NodeID) != i+1 || a.MetaLeader == 0 || a.MetaApplied == 0 || len(a.Partitions) != 2 {
			t.Errorf("broker %d answered %+v", i+1, a)
		}
	}

	if err := admins[0].CreateUser(itCtx(t), "viewer", "viewer-pw"); err != nil {
		t.Fatal(err)
	}
	viewer := itDial(t, c.Addrs()[0], "viewer", "viewer-pw")
	if _, err := viewer.ClusterStatus(itCtx(t), ""); !errors.Is(err, &wire.Error{Code: wire.CodeNotAuthorized}) {
		t.Errorf("a user without the admin role: %v", err)
	}
	if _, err := admins[0].ClusterStatus(itCtx(t), "missing"); !errors.Is(err, &wire.Error{Code: wire.CodeUnknownTopic}) {
		t.Errorf("an unknown topic: %v", err)
	}

	single := startBroker(t, func(cfg *broker.Config) { cfg.NodeID = 4 })
	sa := itDial(t, single.Addr(), itAdminUser, itAdminPass)
	var st *client.ClusterStatus
	st, err = sa.ClusterStatus(itCtx(t), "")
	if err != nil || st.Member || st.NodeID != 4 || len(st.Partitions) != 0 {
		t.Errorf("a broker without cluster settings: %+v, %v", st, err)
	}
	if self, bs, err := sa.ClusterBrokers(itCtx(t)); err != nil || self != 4 || len(bs) != 1 || bs[0].NodeID != 4 {
		t.Errorf("a broker without cluster settings lists %d, %+v, %v", self, bs, err)
	}
}

// TestMergeClusterStatus: per partition, a leader's view wins over a follower's and one
// from a broker without a replica; of two leaders' views the later term's (a deposed
// leader that has not heard yet); of followers' views the later term's; the result is in
// (topic, partition) order; a broker not asked (nil) adds nothing.
func TestMergeClusterStatus(t *testing.T) {
	ps := func(node uint32, topic string, id uint32, view wire.StatusView, leader uint32, term uint64) client.PartitionStatus {
		p := client.PartitionStatus{Topic: topic, NodeID: node, PartitionStatus: wire.PartitionStatus{ID: id, View: view}}
		if view != wire.ViewNone {
			p.Leader, p.Term = leader, term
		}
		return p
	}
	one := &client.ClusterStatus{NodeID: 1, Member: true, Partitions: []client.PartitionStatus{
		ps(1, "a", 0, wire.ViewLeader, 1, 3),   // deposed: node 2 leads in term 4
		ps(1, "a", 1, wire.ViewFollower, 3, 2), // node 3 did not answer: the better follower view
		ps(1, "b", 0, wire.ViewNone, 0, 0),
	}}
	two := &client.ClusterStatus{NodeID: 2, Member: true, Partitions: []client.PartitionStatus{
		ps(2, "a", 0, wire.ViewLeader, 2, 4),
		ps(2, "a", 1, wire.ViewFollower, 1, 1),
		ps(2, "b", 0, wire.ViewFollower, 1, 5),
		ps(2, "b", 1, wire.ViewNone, 0, 0),
	}}
	for _, tc := range []struct {
		name    string
		answers []*client.ClusterStatus
		want    []client.PartitionStatus
	}{
		{"both", []*client.ClusterStatus{one, two, nil}, []client.PartitionStatus{
			ps(2, "a", 0, wire.ViewLeader, 2, 4), ps(1, "a", 1, wire.ViewFollower, 3, 2),
			ps(2, "b", 0, wire.ViewFollower, 1, 5), ps(2, "b", 1, wire.ViewNone, 0, 0),
		}},
		{"the other order", []*client.ClusterStatus{two, one}, []client.PartitionStatus{
			ps(2, "a", 0, wire.ViewLeader, 2, 4), ps(1, "a", 1, wire.ViewFollower, 3, 2),
			ps(2, "b", 0, wire.ViewFollower, 1, 5), ps(2, "b", 1, wire.ViewNone, 0, 0),
		}},
		{"one broker", []*client.ClusterStatus{one}, one.Partitions},
		{"none", nil, []client.PartitionStatus{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := client.MergeClusterStatus(tc.answers...); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got\n%s\nwant\n%s", fmt.Sprint(got), fmt.Sprint(tc.want))
			}
		})
	}
}
