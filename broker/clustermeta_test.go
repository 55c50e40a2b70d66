package broker

import (
	"reflect"
	"testing"

	"github.com/lightq/lightq/wire"
)

// TestMetadataClusterLayout: METADATA with the cluster flag describes a broker without
// cluster settings as a cluster of one that leads every partition (PROTOCOL.md section 16),
// and the same request without the flag gets the older layout.
func TestMetadataClusterLayout(t *testing.T) {
	s := startBroker(t, func(c *Config) { c.NodeID = 7 })
	admin := login(t, s.Addr(), testAdminUser, testAdminPass)
	admin.createTopic("tq", 2, "", "")
	ct := wire.CreateTopic{Name: "dq", Kind: wire.KindDurable, Partitions: 1,
		Options: []wire.Option{{Key: wire.OptionReplicationFactor, Value: "1"}}}
	admin.expectResponse(wire.OpCreateTopic, admin.send(wire.OpCreateTopic, ct.AppendTo(nil)))

	resp := wire.MetadataResponse{Cluster: true}
	req := wire.MetadataRequest{Cluster: true}
	if err := resp.Decode(admin.expectResponse(wire.OpMetadata, admin.send(wire.OpMetadata, req.AppendTo(nil)))); err != nil {
		t.Fatal(err)
	}
	if resp.NodeID != 7 || !reflect.DeepEqual(resp.Brokers, []wire.BrokerMetadata{{NodeID: 7}}) {
		t.Fatalf("node %d, brokers %+v: want node 7 alone, address empty", resp.NodeID, resp.Brokers)
	}
	parts := 0
	for _, tm := range resp.Topics {
		for _, p := range tm.Partitions {
			parts++
			if p.Leader != 7 || !reflect.DeepEqual(p.Replicas, []uint32{7}) {
				t.Errorf("%s/%d: leader %d replicas %v, want 7 and [7]", tm.Name, p.ID, p.Leader, p.Replicas)
			}
		}
	}
	if parts != 3 {
		t.Fatalf("%d partitions described, want 3", parts)
	}

	var old wire.MetadataResponse
	if err := old.Decode(admin.expectResponse(wire.OpMetadata, admin.send(wire.OpMetadata, (&wire.MetadataRequest{}).AppendTo(nil)))); err != nil {
		t.Fatalf("the request without flags must get the older layout: %v", err)
	}
	bad := append((&wire.MetadataRequest{}).AppendTo(nil), 2)
	admin.expectError(admin.send(wire.OpMetadata, bad), wire.CodeInvalidRequest)
}

// TestReplicationFactorWithoutCluster: replication.factor 1 is accepted (the default), more
// is refused with a text that says why, and a value out of range is refused.
func TestReplicationFactorWithoutCluster(t *testing.T) {
	s := startBroker(t, nil)
	admin := login(t, s.Addr(), testAdminUser, testAdminPass)
	for _, tc := range []struct{ value, want string }{
		{"3", "replication.factor=3 needs a cluster of at least 3 brokers; this broker has no cluster settings (a cluster of one)"},
		{"0", `replication.factor: "0" is out of range: want an integer from 1 to the number of brokers in the cluster`},
		{"x", `replication.factor: "x" is out of range: want an integer from 1 to the number of brokers in the cluster`},
	} {
		ct := wire.CreateTopic{Name: "rf", Kind: wire.KindDurable, Partitions: 1,
			Options: []wire.Option{{Key: wire.OptionReplicationFactor, Value: tc.value}}}
		if e := admin.expectError(admin.send(wire.OpCreateTopic, ct.AppendTo(nil)), wire.CodeInvalidRequest); e.Message != tc.want {
			t.Errorf("replication.factor=%s: %q, want %q", tc.value, e.Message, tc.want)
		}
	}
	ct := wire.CreateTopic{Name: "rt", Kind: wire.KindTransient, Partitions: 1,
		Options: []wire.Option{{Key: wire.OptionReplicationFactor, Value: "1"}}}
	admin.expectError(admin.send(wire.OpCreateTopic, ct.AppendTo(nil)), wire.CodeInvalidRequest)
}
