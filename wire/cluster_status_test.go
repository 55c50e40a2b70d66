package wire_test

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/lightq/lightq/wire"
)

// clusterStatusSample is a response with every kind of partition and replica.
func clusterStatusSample() *wire.ClusterStatusResponse {
	return &wire.ClusterStatusResponse{NodeID: 3, Member: true, MetaLeader: 1, MetaTerm: 9, MetaCommit: 1 << 40, MetaApplied: 1<<40 - 1, More: true,
		Topics: []wire.TopicStatus{
			{Name: "a", Partitions: []wire.PartitionStatus{
				{ID: 0, View: wire.ViewLeader, Leader: 3, Term: 7, Commit: 100, Applied: 99, HighWatermark: 400, LogStart: 10, LogEnd: 410,
					Replicas: []wire.ReplicaStatus{
						{NodeID: 1, Match: 2, Lag: -1, State: wire.ReplicaStateSnapshot},
						{NodeID: 3, Match: 100, State: wire.ReplicaStateReplicate, Active: true},
						{NodeID: 0xffffffff, Match: 90, Lag: 40, State: wire.ReplicaStateUnknown, Active: true},
					}},
				{ID: 5}, // no replica here
				{ID: wire.MaxPartitions - 1, View: wire.ViewFollower, Leader: 2, Term: 7, Commit: 1, Applied: 1, HighWatermark: 4, LogEnd: 5},
			}},
			{Name: strings.Repeat("t", wire.MaxTopicName)},
		}}
}

// TestClusterStatusRoundTrip: request and response bodies decode to what was encoded, every
// truncation fails, and a trailing byte fails.
func TestClusterStatusRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name    string
		msg     wireBody
		newBody func() wireBody
	}{
		{"request", &wire.ClusterStatus{Topic: "orders", FromTopic: "orders", FromPartition: 7}, func() wireBody { return new(wire.ClusterStatus) }},
		{"request empty", &wire.ClusterStatus{}, func() wireBody { return new(wire.ClusterStatus) }},
		{"response", clusterStatusSample(), func() wireBody { return new(wire.ClusterStatusResponse) }},
		{"response of a broker without cluster", &wire.ClusterStatusResponse{NodeID: 1}, func() wireBody { return new(wire.ClusterStatusResponse) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.msg.AppendTo(nil)
			got := tc.newBody()
			if err := got.Decode(b); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, tc.msg) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, tc.msg)
			}
			for i := range b {
				if err := tc.newBody().Decode(b[:i]); !errors.Is(err, wire.ErrMalformed) {
					t.Fatalf("the first %d of %d bytes: %v, want ErrMalformed", i, len(b), err)
				}
			}
			if err := tc.newBody().Decode(append(bytes.Clone(b), 0)); !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("a trailing byte: %v", err)
			}
		})
	}
	p := clusterStatusSample().Topics[0].Partitions[0]
	if n := len((&wire.ClusterStatusResponse{Topics: []wire.TopicStatus{{Partitions: []wire.PartitionStatus{p}}}}).AppendTo(nil)); n != wire.ClusterStatusHeaderSize+wire.ClusterTopicStatusSize+p.EncodedSize() {
		t.Fatalf("a one-partition response is %d bytes; the sizes say %d", n, wire.ClusterStatusHeaderSize+wire.ClusterTopicStatusSize+p.EncodedSize())
	}
}

// TestClusterStatusDecodeErrors: each way a response breaks the canonical form is refused.
func TestClusterStatusDecodeErrors(t *testing.T) {
	enc := func(edit func(m *wire.ClusterStatusResponse)) []byte {
		m := clusterStatusSample()
		edit(m)
		return m.AppendTo(nil)
	}
	part := func(m *wire.ClusterStatusResponse) *wire.PartitionStatus { return &m.Topics[0].Partitions[0] }
	header := body(u32(1), u8(1), u32(0), i64(0), i64(0), i64(0), u8(0))
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"flags 2", body(u32(1), u8(2), u32(0), i64(0), i64(0), i64(0), u8(0), u32(0))},
		{"more 2", body(u32(1), u8(1), u32(0), i64(0), i64(0), i64(0), u8(2), u32(0))},
		{"4G topics", body(header, u32(0xffffffff))},
		{"topics out of order", enc(func(m *wire.ClusterStatusResponse) {
			m.Topics[0].Name, m.Topics[1].Name = m.Topics[1].Name, m.Topics[0].Name
		})},
		{"a topic twice", enc(func(m *wire.ClusterStatusResponse) { m.Topics[1].Name = m.Topics[0].Name })},
		{"topic name 250", body(header, u32(1), str(strings.Repeat("t", 250)), u32(0))},
		{"1025 partitions", body(header, u32(1), str("t"), u32(1025), rep(1025*wire.ClusterPartitionStatusSize, "\x00"))},
		{"partitions over bytes", body(header, u32(1), str("t"), u32(2), rep(wire.ClusterPartitionStatusSize, "\x00"))},
		{"partition 1024", enc(func(m *wire.ClusterStatusResponse) { m.Topics[0].Partitions[2].ID = wire.MaxPartitions })},
		{"partitions out of order", enc(func(m *wire.ClusterStatusResponse) { m.Topics[0].Partitions[1].ID = 0 })},
		{"view 3", enc(func(m *wire.ClusterStatusResponse) { part(m).View = 3 })},
		{"no replica, but a leader", enc(func(m *wire.ClusterStatusResponse) { m.Topics[0].Partitions[1].Leader = 2 })},
		{"no replica, but a log end", enc(func(m *wire.ClusterStatusResponse) { m.Topics[0].Partitions[1].LogEnd = 2 })},
		{"a follower listing replicas", enc(func(m *wire.ClusterStatusResponse) { part(m).View = wire.ViewFollower })},
		{"17 replicas", enc(func(m *wire.ClusterStatusResponse) {
			part(m).Replicas = nil
			for i := range 17 {
				part(m).Replicas = append(part(m).Replicas, wire.ReplicaStatus{NodeID: uint32(i + 1)})
			}
		})},
		{"replica node 0", enc(func(m *wire.ClusterStatusResponse) { part(m).Replicas[0].NodeID = 0 })},
		{"replicas out of order", enc(func(m *wire.ClusterStatusResponse) { part(m).Replicas[1].NodeID = 1 })},
		{"lag -2", enc(func(m *wire.ClusterStatusResponse) { part(m).Replicas[0].Lag = -2 })},
		{"state 4", enc(func(m *wire.ClusterStatusResponse) { part(m).Replicas[0].State = 4 })},
		{"active 2", body(header, u32(1), str("a"), u32(1),
			u32(0), u8(2), u32(1), i64(1), i64(1), i64(1), i64(0), i64(0), i64(0), // partition 0, a leader's view
			u16(1), u32(1), i64(1), i64(0), u8(2), u8(2))}, // one replica, active 2
		{"request topic 250", body(str(strings.Repeat("t", 250)), str(""), u32(0))},
		{"request from topic 250", body(str(""), str(strings.Repeat("t", 250)), u32(0))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m wireBody = new(wire.ClusterStatusResponse)
			if strings.HasPrefix(tc.name, "request") {
				m = new(wire.ClusterStatus)
			}
			if err := m.Decode(tc.in); !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("Decode: %v, want ErrMalformed", err)
			}
		})
	}
	// A lying count costs no allocation sized by the claim.
	in := body(header, u32(0xffffffff), str("a"))
	m := new(wire.ClusterStatusResponse)
	if a := testing.AllocsPerRun(20, func() { _ = m.Decode(in) }); a > 10 {
		t.Errorf("%v allocations decoding a lying topic count", a)
	}
}

// FuzzClusterStatus: a CLUSTER_STATUS body that decodes re-encodes to exactly its bytes, and
// what it holds keeps the rules clients rely on: topics ascending, partitions ascending
// below MaxPartitions, only leaders list replicas, at most MaxReplicas of them ascending and
// not zero, lag at least -1, a partition without a replica here all zero.
func FuzzClusterStatus(f *testing.F) {
	f.Add(false, clusterStatusSample().AppendTo(nil))
	f.Add(false, (&wire.ClusterStatusResponse{NodeID: 1}).AppendTo(nil))
	f.Add(true, (&wire.ClusterStatus{Topic: "orders", FromTopic: "a", FromPartition: 3}).AppendTo(nil))
	for _, ex := range protocolExamples() {
		if h, b, _ := wire.ParseFrame(ex.frame); h.Op == wire.OpClusterStatus {
			f.Add(h.Flags&wire.FlagResponse == 0, b)
		}
	}
	f.Fuzz(func(t *testing.T, request bool, data []byte) {
		if request {
			var m wire.ClusterStatus
			if m.Decode(data) == nil && !bytes.Equal(m.AppendTo(nil), data) {
				t.Fatalf("request: Decode then AppendTo is not the identity")
			}
			return
		}
		var m wire.ClusterStatusResponse
		if err := m.Decode(data); err != nil {
			return
		}
		if re := m.AppendTo(nil); !bytes.Equal(re, data) {
			t.Fatalf("Decode then AppendTo is not the identity:\n in  % x\n out % x", data, re)
		}
		for i, ts := range m.Topics {
			if i > 0 && ts.Name <= m.Topics[i-1].Name {
				t.Fatalf("topic %q after %q", ts.Name, m.Topics[i-1].Name)
			}
			if len(ts.Partitions) > wire.MaxPartitions {
				t.Fatalf("%d partitions", len(ts.Partitions))
			}
			for j, p := range ts.Partitions {
				if p.ID >= wire.MaxPartitions || j > 0 && p.ID <= ts.Partitions[j-1].ID {
					t.Fatalf("partition %d at %d", p.ID, j)
				}
				if p.View > wire.ViewLeader || p.View != wire.ViewLeader && len(p.Replicas) > 0 || len(p.Replicas) > wire.MaxReplicas {
					t.Fatalf("partition %d: view %v with %d replicas", p.ID, p.View, len(p.Replicas))
				}
				if p.View == wire.ViewNone && !reflect.DeepEqual(p, wire.PartitionStatus{ID: p.ID}) {
					t.Fatalf("partition %d without a replica here: %+v", p.ID, p)
				}
				for k, r := range p.Replicas {
					if r.NodeID == 0 || k > 0 && r.NodeID <= p.Replicas[k-1].NodeID || r.Lag < -1 || r.State > wire.ReplicaStateSnapshot {
						t.Fatalf("partition %d: replica %+v at %d", p.ID, r, k)
					}
				}
			}
		}
	})
}
