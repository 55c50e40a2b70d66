package wire_test

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lightq/lightq/wire"
)

// sampleBatch is a small valid batch for bodies that carry one.
func sampleBatch() []byte {
	return wireBatch(0, []exampleRecord{{ts: exampleTS, key: "k", value: "v"}})
}

// bodyCases are filled-in values of every body type. rest is the offset at which a body that
// ends with "the rest of the frame" starts its open-ended part (0 for the others).
func bodyCases() []struct {
	name    string
	msg     wireBody
	newBody func() wireBody
	rest    int
} {
	long := strings.Repeat("x", 255)
	return []struct {
		name    string
		msg     wireBody
		newBody func() wireBody
		rest    int
	}{
		{"Hello", &wire.Hello{ClientName: "lightq-go", ClientVersion: "1.2.3"}, func() wireBody { return new(wire.Hello) }, 0},
		{"Hello max", &wire.Hello{ClientName: long, ClientVersion: long}, func() wireBody { return new(wire.Hello) }, 0},
		{"Hello empty", &wire.Hello{}, func() wireBody { return new(wire.Hello) }, 0},
		{"HelloResponse", &wire.HelloResponse{ProtocolVersion: 1, BrokerVersion: "0.1.0", Limits: wire.DefaultLimits()}, func() wireBody { return new(wire.HelloResponse) }, 0},
		{"Auth", &wire.Auth{User: "u", Password: strings.Repeat("p", wire.MaxPassword)}, func() wireBody { return new(wire.Auth) }, 0},
		{"AuthResponse", &wire.AuthResponse{Role: wire.RoleUser}, func() wireBody { return new(wire.AuthResponse) }, 0},
		{"ErrorBody", &wire.ErrorBody{Code: wire.CodeUnknownTopic, Message: "no topic \"x\""}, func() wireBody { return new(wire.ErrorBody) }, 0},
		{"ErrorBody empty message", &wire.ErrorBody{Code: wire.CodeInternal}, func() wireBody { return new(wire.ErrorBody) }, 0},
		{"CreateTopic", &wire.CreateTopic{Name: "t.1_a-B", Kind: wire.KindTransient, Partitions: 8, User: "u", Password: "p",
			Options: []wire.Option{{Key: "a", Value: "1"}, {Key: strings.Repeat("k", 64), Value: long}}}, func() wireBody { return new(wire.CreateTopic) }, 0},
		{"CreateTopic no options", &wire.CreateTopic{Name: "t", Kind: wire.KindDurable, Partitions: 1}, func() wireBody { return new(wire.CreateTopic) }, 0},
		{"TopicName", &wire.TopicName{Name: strings.Repeat("t", wire.MaxTopicName)}, func() wireBody { return new(wire.TopicName) }, 0},
		{"TopicName empty", &wire.TopicName{}, func() wireBody { return new(wire.TopicName) }, 0},
		// METADATA's flags byte is optional: the names are the part every truncation of
		// must fail (a trailing flags byte 0 is refused: TestMetadataFlags).
		{"MetadataRequest", &wire.MetadataRequest{Topics: []string{"a", "b", ""}}, func() wireBody { return new(wire.MetadataRequest) }, 4 + 3 + 3 + 2},
		{"MetadataRequest all", &wire.MetadataRequest{}, func() wireBody { return new(wire.MetadataRequest) }, 4},
		{"MetadataResponse", &wire.MetadataResponse{Topics: []wire.TopicMetadata{
			{Name: "a", Kind: wire.KindDurable, User: "u", Options: []wire.Option{{Key: "retention.bytes", Value: "1"}},
				Partitions: []wire.PartitionMetadata{{ID: 0, StartOffset: -1, EndOffset: 1 << 40}, {ID: 1}}},
			{Name: "b", Kind: wire.KindTransient},
		}}, func() wireBody { return new(wire.MetadataResponse) }, 0},
		{"MetadataResponse empty", &wire.MetadataResponse{}, func() wireBody { return new(wire.MetadataResponse) }, 0},
		{"MetadataRequest cluster", &wire.MetadataRequest{Topics: []string{"a"}, Cluster: true}, func() wireBody { return new(wire.MetadataRequest) }, 4 + 3},
		{"MetadataRequest all cluster", &wire.MetadataRequest{Cluster: true}, func() wireBody { return new(wire.MetadataRequest) }, 4},
		{"MetadataResponse cluster", &wire.MetadataResponse{Cluster: true, NodeID: 2, Topics: []wire.TopicMetadata{
			{Name: "a", Kind: wire.KindDurable, Options: []wire.Option{{Key: "replication.factor", Value: "3"}},
				Partitions: []wire.PartitionMetadata{{ID: 0, EndOffset: 7, Leader: 2, Replicas: []uint32{1, 2, 3}}, {ID: 1, Replicas: []uint32{3}}}},
		}, Brokers: []wire.BrokerMetadata{{NodeID: 1, Addr: "127.0.0.1:7401", TLSAddr: "127.0.0.1:7441"}, {NodeID: 2, Addr: "127.0.0.2:7401"}}},
			func() wireBody { return &wire.MetadataResponse{Cluster: true} }, 0},
		{"MetadataResponse cluster single", &wire.MetadataResponse{Cluster: true, NodeID: 1, Brokers: []wire.BrokerMetadata{{NodeID: 1}}},
			func() wireBody { return &wire.MetadataResponse{Cluster: true} }, 0},
		{"StatsResponse", &wire.StatsResponse{Topics: []wire.TopicStats{
			{Name: "a", Counters: []wire.Counter{{Name: "messages.in", Value: 1 << 63}, {Name: "x", Value: 0}}},
			{Name: "b"},
		}}, func() wireBody { return new(wire.StatsResponse) }, 0},
		{"Produce", &wire.Produce{Topic: []byte("orders"), Partition: wire.PartitionAny, Acks: wire.AcksDurable, Batch: sampleBatch()}, func() wireBody { return new(wire.Produce) }, 2 + 6 + 4 + 1},
		{"ProduceResponse", &wire.ProduceResponse{Partition: 3, BaseOffset: 1<<62 + 5}, func() wireBody { return new(wire.ProduceResponse) }, 0},
		{"Subscribe", &wire.Subscribe{Topic: "orders", Partition: 2, QueueGroup: "workers", Credit: 1 << 31}, func() wireBody { return new(wire.Subscribe) }, 0},
		{"SubscribeResponse", &wire.SubscribeResponse{SubscriptionID: 9, Partitions: 4}, func() wireBody { return new(wire.SubscribeResponse) }, 0},
		{"Credit", &wire.Credit{SubscriptionID: 9, Bytes: 0xffffffff}, func() wireBody { return new(wire.Credit) }, 0},
		{"Unsubscribe", &wire.Unsubscribe{SubscriptionID: 9}, func() wireBody { return new(wire.Unsubscribe) }, 0},
		{"Deliver", &wire.Deliver{Partition: 1, Dropped: 12345, Batch: sampleBatch()}, func() wireBody { return new(wire.Deliver) }, wire.DeliverHeaderSize},
		{"Fetch", &wire.Fetch{Topic: "audit", Partition: 2, Offset: 99, MaxBytes: 1 << 20, MaxWaitMs: 500, Isolation: wire.IsolationWritten}, func() wireBody { return new(wire.Fetch) }, 0},
		{"FetchResponse", &wire.FetchResponse{Partition: 2, HighWatermark: 100, LogStartOffset: 7, Batches: append(sampleBatch(), sampleBatch()...)}, func() wireBody { return new(wire.FetchResponse) }, wire.FetchResponseHeaderSize},
		{"ListOffsets", &wire.ListOffsets{Topic: "audit", Partition: 1, Mode: wire.OffsetTimestamp, Timestamp: exampleTS}, func() wireBody { return new(wire.ListOffsets) }, 0},
		{"OffsetResponse", &wire.OffsetResponse{Offset: -1}, func() wireBody { return new(wire.OffsetResponse) }, 0},
		{"CommitOffset", &wire.CommitOffset{Group: "g", Topic: "audit", Partition: 1, Offset: 42}, func() wireBody { return new(wire.CommitOffset) }, 0},
		{"FetchCommitted", &wire.FetchCommitted{Group: "g", Topic: "audit", Partition: 1}, func() wireBody { return new(wire.FetchCommitted) }, 0},
		{"UserPassword", &wire.UserPassword{User: long, Password: strings.Repeat("p", wire.MaxPassword)}, func() wireBody { return new(wire.UserPassword) }, 0},
		{"UserPassword empty", &wire.UserPassword{}, func() wireBody { return new(wire.UserPassword) }, 0},
		{"UserName", &wire.UserName{User: "billing"}, func() wireBody { return new(wire.UserName) }, 0},
		{"Grant", &wire.Grant{User: "billing", Topic: strings.Repeat("t", wire.MaxTopicName), Roles: wire.RolesBoth}, func() wireBody { return new(wire.Grant) }, 0},
		{"Grant admin", &wire.Grant{User: "ops", Roles: wire.RolesAdmin}, func() wireBody { return new(wire.Grant) }, 0},
		{"Grant no roles", &wire.Grant{User: "ops", Topic: "t"}, func() wireBody { return new(wire.Grant) }, 0},
		{"ListUsers", &wire.ListUsers{User: "u", Topic: "t", AfterUser: long, AfterTopic: "x"}, func() wireBody { return new(wire.ListUsers) }, 0},
		{"ListUsers all", &wire.ListUsers{}, func() wireBody { return new(wire.ListUsers) }, 0},
		{"ListUsersResponse", &wire.ListUsersResponse{More: true, Entries: []wire.UserRoles{
			{User: "admin", Roles: wire.RolesAdmin}, {User: "b", Topic: "t", Roles: wire.RolesProduce}, {User: long, Topic: "u", Roles: wire.RolesAll},
		}}, func() wireBody { return new(wire.ListUsersResponse) }, 0},
		{"ListUsersResponse empty", &wire.ListUsersResponse{}, func() wireBody { return new(wire.ListUsersResponse) }, 0},
		{"InitProducer new", &wire.InitProducer{PreviousID: wire.NoProducer, PreviousEpoch: wire.NoProducer}, func() wireBody { return new(wire.InitProducer) }, 0},
		{"InitProducer bump", &wire.InitProducer{PreviousID: 1 << 62, PreviousEpoch: 32767}, func() wireBody { return new(wire.InitProducer) }, 0},
		{"InitProducerResponse", &wire.InitProducerResponse{ProducerID: 4097, ProducerEpoch: 3, Window: 5, ExpiryMs: 86400000}, func() wireBody { return new(wire.InitProducerResponse) }, 0},
		{"JoinGroup", &wire.JoinGroup{Group: "g", Topic: "audit", Member: testMember, SessionTimeoutMs: 10000, ClientID: "c-1"}, func() wireBody { return new(wire.JoinGroup) }, 0},
		{"JoinGroup max", &wire.JoinGroup{Group: long, Topic: strings.Repeat("t", wire.MaxTopicName), Member: testMember, SessionTimeoutMs: 1<<32 - 1, ClientID: long}, func() wireBody { return new(wire.JoinGroup) }, 0},
		{"JoinGroupResponse", &wire.JoinGroupResponse{Generation: 7, SessionTimeoutMs: 10000, HeartbeatIntervalMs: 3333, Partitions: []uint32{0, 5, 1023}}, func() wireBody { return new(wire.JoinGroupResponse) }, 0},
		{"JoinGroupResponse no partitions", &wire.JoinGroupResponse{Generation: 1}, func() wireBody { return new(wire.JoinGroupResponse) }, 0},
		{"Heartbeat", &wire.Heartbeat{Group: "g", Topic: "audit", Member: testMember, Generation: 9, MaxWaitMs: 3000, Owned: []uint32{1, 2}}, func() wireBody { return new(wire.Heartbeat) }, 0},
		{"Heartbeat all partitions", &wire.Heartbeat{Group: "g", Topic: "audit", Member: testMember, Owned: allPartitions()}, func() wireBody { return new(wire.Heartbeat) }, 0},
		{"HeartbeatResponse", &wire.HeartbeatResponse{Generation: 9, HeartbeatIntervalMs: 100, Partitions: []uint32{3}}, func() wireBody { return new(wire.HeartbeatResponse) }, 0},
		{"LeaveGroup", &wire.LeaveGroup{Group: "g", Topic: "audit", Member: testMember}, func() wireBody { return new(wire.LeaveGroup) }, 0},
		{"GroupCommit", &wire.GroupCommit{Group: "g", Topic: "audit", Member: testMember, Generation: 4, Partition: 2, Offset: 1 << 40}, func() wireBody { return new(wire.GroupCommit) }, 0},
		{"ListGroups", &wire.ListGroups{Topic: "audit", AfterGroup: "a", AfterTopic: "b"}, func() wireBody { return new(wire.ListGroups) }, 0},
		{"ListGroups all", &wire.ListGroups{}, func() wireBody { return new(wire.ListGroups) }, 0},
		{"ListGroupsResponse", &wire.ListGroupsResponse{More: true, Groups: []wire.GroupListing{
			{Group: "g", Topic: "audit", Members: 3, Generation: 12, Committed: 8, Lag: 1 << 50}, {Group: "h", Topic: "x"},
		}}, func() wireBody { return new(wire.ListGroupsResponse) }, 0},
		{"ListGroupsResponse empty", &wire.ListGroupsResponse{}, func() wireBody { return new(wire.ListGroupsResponse) }, 0},
		{"DescribeGroup", &wire.DescribeGroup{Group: "g", Topic: "audit"}, func() wireBody { return new(wire.DescribeGroup) }, 0},
		{"FindCoordinator", &wire.FindCoordinator{Group: long}, func() wireBody { return new(wire.FindCoordinator) }, 0},
		{"FindCoordinatorResponse", &wire.FindCoordinatorResponse{Node: 1, Coordinator: 3, Addr: "10.0.0.3:7450", TLSAddr: "10.0.0.3:7451"}, func() wireBody { return new(wire.FindCoordinatorResponse) }, 0},
		{"FindCoordinatorResponse none known", &wire.FindCoordinatorResponse{Node: 2}, func() wireBody { return new(wire.FindCoordinatorResponse) }, 0},
		{"FindCoordinatorResponse max", &wire.FindCoordinatorResponse{Node: 1<<32 - 1, Coordinator: 1<<32 - 1, Addr: long, TLSAddr: long}, func() wireBody { return new(wire.FindCoordinatorResponse) }, 0},
		{"DescribeGroupResponse", &wire.DescribeGroupResponse{Generation: 5,
			Members: []wire.GroupMember{
				{Member: testMember, ClientID: "c-1", Address: "127.0.0.1:5000", SessionTimeoutMs: 10000, Assigned: []uint32{0, 1}, Revoking: []uint32{2}},
				{Member: wire.MemberID{1}, SessionTimeoutMs: 1},
			},
			Partitions: []wire.GroupPartition{{Partition: 0, Committed: 10, EndOffset: 15, Lag: 5}, {Partition: 1, Committed: -1, EndOffset: 0, Lag: -1}},
		}, func() wireBody { return new(wire.DescribeGroupResponse) }, 0},
		{"DescribeGroupResponse empty", &wire.DescribeGroupResponse{}, func() wireBody { return new(wire.DescribeGroupResponse) }, 0},
		{"AddBroker", &wire.AddBroker{NodeID: 4, Addr: "10.0.0.4:7450", TLSAddr: "10.0.0.4:7451", ClusterAddr: "10.0.0.4:7460"}, func() wireBody { return new(wire.AddBroker) }, 0},
		{"MoveReplicas", &wire.MoveReplicas{Topic: "orders", Partition: 3, Replicas: []uint32{2, 3, 4}}, func() wireBody { return new(wire.MoveReplicas) }, 0},
		{"MoveReplicas none", &wire.MoveReplicas{Topic: "orders"}, func() wireBody { return new(wire.MoveReplicas) }, 0},
		{"BrokerID", &wire.BrokerID{NodeID: 1<<32 - 1}, func() wireBody { return new(wire.BrokerID) }, 0},
		{"DrainBrokerResponse", &wire.DrainBrokerResponse{Moves: 12}, func() wireBody { return new(wire.DrainBrokerResponse) }, 0},
		{"Membership", &wire.Membership{Topic: "orders", AfterTopic: "orders", AfterPartition: 7, MovingOnly: true}, func() wireBody { return new(wire.Membership) }, 0},
		{"Membership all", &wire.Membership{}, func() wireBody { return new(wire.Membership) }, 0},
		{"MembershipResponse", &wire.MembershipResponse{NodeID: 2, MetaLeader: 1, More: true,
			Brokers: []wire.MemberBroker{
				{NodeID: 1, State: wire.BrokerActive, Meta: wire.MetaVoter, Addr: "a:1", ClusterAddr: "a:2", Replicas: 3},
				{NodeID: 4, State: wire.BrokerRemoving, Meta: wire.MetaNone, Addr: "d:1", TLSAddr: "d:3", ClusterAddr: "d:2", Leaving: 1},
			},
			Partitions: []wire.MemberPartition{
				{Topic: "orders", Partition: 0, Group: 2, Replicas: []uint32{2, 3, 4}, Previous: []uint32{1, 2, 3}, Held: true, Leads: true, Leader: 2,
					Voters: []uint32{1, 2, 3}, Learners: []uint32{4}},
				{Topic: "orders", Partition: 1, Group: 3, Replicas: []uint32{1}},
			}}, func() wireBody { return new(wire.MembershipResponse) }, 0},
		{"MembershipResponse empty", &wire.MembershipResponse{}, func() wireBody { return new(wire.MembershipResponse) }, 0},
	}
}

// testMember is a member id for the group bodies.
var testMember = wire.MemberID{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}

// allPartitions is the longest partition list, 0 to MaxPartitions-1.
func allPartitions() []uint32 {
	ps := make([]uint32, wire.MaxPartitions)
	for i := range ps {
		ps[i] = uint32(i)
	}
	return ps
}

func TestBodyRoundTrip(t *testing.T) {
	for _, tc := range bodyCases() {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.msg.AppendTo(nil)
			// AppendTo appends: a prefix in dst is kept.
			if pre := tc.msg.AppendTo([]byte("pre")); !bytes.Equal(pre, append([]byte("pre"), b...)) {
				t.Fatal("AppendTo does not append to dst")
			}
			got := tc.newBody()
			if err := got.Decode(b); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, tc.msg) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, tc.msg)
			}
			if re := got.AppendTo(nil); !bytes.Equal(re, b) {
				t.Fatalf("re-encoding differs")
			}
			// Every truncation before the open-ended part fails; a body without one also
			// fails at every truncation and with a trailing byte.
			limit := len(b)
			if tc.rest > 0 {
				limit = tc.rest
			}
			for i := 0; i < limit; i++ {
				if err := tc.newBody().Decode(b[:i]); !errors.Is(err, wire.ErrMalformed) {
					t.Fatalf("Decode of the first %d of %d bytes: %v, want ErrMalformed", i, len(b), err)
				}
			}
			if tc.rest == 0 {
				if err := tc.newBody().Decode(append(bytes.Clone(b), 0)); !errors.Is(err, wire.ErrMalformed) {
					t.Fatalf("Decode with a trailing byte: %v, want ErrMalformed", err)
				}
			}
		})
	}
}

// body builds a raw body from encoder calls.
func body(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func str(s string) []byte        { return wire.AppendString(nil, s) }
func u8(v uint8) []byte          { return []byte{v} }
func u16(v uint16) []byte        { return wire.AppendU16(nil, v) }
func u32(v uint32) []byte        { return wire.AppendU32(nil, v) }
func i64(v int64) []byte         { return wire.AppendI64(nil, v) }
func rep(n int, s string) []byte { return []byte(strings.Repeat(s, n)) }

func TestBodyDecodeErrors(t *testing.T) {
	tests := []struct {
		name    string
		newBody func() wireBody
		in      []byte
	}{
		{"Hello name 256", func() wireBody { return new(wire.Hello) }, body(str(strings.Repeat("n", 256)), str(""))},
		{"Hello version 256", func() wireBody { return new(wire.Hello) }, body(str(""), str(strings.Repeat("v", 256)))},
		{"HelloResponse broker version 256", func() wireBody { return new(wire.HelloResponse) }, body(u8(1), str(strings.Repeat("v", 256)), rep(20, "\x00"))},
		{"Auth user 256", func() wireBody { return new(wire.Auth) }, body(str(strings.Repeat("u", 256)), str("p"))},
		{"Auth password 1025", func() wireBody { return new(wire.Auth) }, body(str("u"), str(strings.Repeat("p", 1025)))},
		{"ErrorBody message 1025", func() wireBody { return new(wire.ErrorBody) }, body(u16(7), str(strings.Repeat("m", 1025)))},
		{"CreateTopic name 250", func() wireBody { return new(wire.CreateTopic) }, body(str(strings.Repeat("t", 250)), u8(1), u32(1), str("u"), str("p"), u16(0))},
		{"CreateTopic 65 options", func() wireBody { return new(wire.CreateTopic) }, body(str("t"), u8(1), u32(1), str("u"), str("p"), u16(65), rep(65, "\x00\x00\x00\x00"))},
		{"CreateTopic 65535 options", func() wireBody { return new(wire.CreateTopic) }, body(str("t"), u8(1), u32(1), str("u"), str("p"), u16(65535))},
		{"CreateTopic option key 65", func() wireBody { return new(wire.CreateTopic) }, body(str("t"), u8(1), u32(1), str("u"), str("p"), u16(1), str(strings.Repeat("k", 65)), str("v"))},
		{"CreateTopic option value 256", func() wireBody { return new(wire.CreateTopic) }, body(str("t"), u8(1), u32(1), str("u"), str("p"), u16(1), str("k"), str(strings.Repeat("v", 256)))},
		{"TopicName 250", func() wireBody { return new(wire.TopicName) }, str(strings.Repeat("t", 250))},
		{"MetadataRequest 10001 names", func() wireBody { return new(wire.MetadataRequest) }, body(u32(10001), rep(10001, "\x00\x00"))},
		{"MetadataRequest count over bytes", func() wireBody { return new(wire.MetadataRequest) }, body(u32(3), str("a"), str("b"))},
		{"MetadataRequest unknown flag", func() wireBody { return new(wire.MetadataRequest) }, body(u32(0), []byte{2})},
		{"MetadataRequest two flag bytes", func() wireBody { return new(wire.MetadataRequest) }, body(u32(0), []byte{1, 1})},
		{"MetadataResponse cluster replicas over limit", func() wireBody { return &wire.MetadataResponse{Cluster: true} },
			body(u32(1), str("a"), []byte{2}, str(""), []byte{0, 0}, u32(1), u32(0), make([]byte, 16), u32(1), []byte{0, 17}, make([]byte, 68), u32(1), u32(0))},
		{"MetadataResponse cluster brokers over bytes", func() wireBody { return &wire.MetadataResponse{Cluster: true} }, body(u32(0), u32(1), u32(3))},
		{"MetadataResponse cluster missing trailer", func() wireBody { return &wire.MetadataResponse{Cluster: true} }, body(u32(0))},
		{"MetadataRequest 4G names", func() wireBody { return new(wire.MetadataRequest) }, u32(0xffffffff)},
		{"MetadataResponse 4G topics", func() wireBody { return new(wire.MetadataResponse) }, u32(0xffffffff)},
		{"MetadataResponse 1025 partitions", func() wireBody { return new(wire.MetadataResponse) }, body(u32(1), str("t"), u8(1), str("u"), u16(0), u32(1025), rep(1025*20, "\x00"))},
		{"MetadataResponse partitions over bytes", func() wireBody { return new(wire.MetadataResponse) }, body(u32(1), str("t"), u8(1), str("u"), u16(0), u32(2), rep(39, "\x00"))},
		{"StatsResponse 4G topics", func() wireBody { return new(wire.StatsResponse) }, u32(0xffffffff)},
		{"StatsResponse counters over bytes", func() wireBody { return new(wire.StatsResponse) }, body(u32(1), str("t"), u16(2), str("c"), i64(1))},
		{"StatsResponse counter name 65", func() wireBody { return new(wire.StatsResponse) }, body(u32(1), str("t"), u16(1), str(strings.Repeat("c", 65)), i64(1))},
		{"Produce acks 3", func() wireBody { return new(wire.Produce) }, body(str("t"), u32(0), u8(3), sampleBatch())},
		{"Produce topic 250", func() wireBody { return new(wire.Produce) }, body(str(strings.Repeat("t", 250)), u32(0), u8(1), sampleBatch())},
		{"Subscribe group 256", func() wireBody { return new(wire.Subscribe) }, body(str("t"), u32(0), str(strings.Repeat("g", 256)), u32(0))},
		{"CommitOffset group 256", func() wireBody { return new(wire.CommitOffset) }, body(str(strings.Repeat("g", 256)), str("t"), u32(0), i64(0))},
		{"FetchCommitted topic 250", func() wireBody { return new(wire.FetchCommitted) }, body(str("g"), str(strings.Repeat("t", 250)), u32(0))},
		{"Credit of UNSUBSCRIBE size", func() wireBody { return new(wire.Credit) }, u32(1)},
		// Group names follow ValidGroupName; in SUBSCRIBE the empty group (fan-out) is fine.
		{"Subscribe group with NUL", func() wireBody { return new(wire.Subscribe) }, body(str("t"), u32(0), str("g\x00"), u32(0))},
		{"Subscribe group not UTF-8", func() wireBody { return new(wire.Subscribe) }, body(str("t"), u32(0), str("\xff"), u32(0))},
		{"CommitOffset empty group", func() wireBody { return new(wire.CommitOffset) }, body(str(""), str("t"), u32(0), i64(0))},
		{"CommitOffset group with ESC", func() wireBody { return new(wire.CommitOffset) }, body(str("\x1b[0m"), str("t"), u32(0), i64(0))},
		{"FetchCommitted empty group", func() wireBody { return new(wire.FetchCommitted) }, body(str(""), str("t"), u32(0))},
		{"FetchCommitted group with C1 control", func() wireBody { return new(wire.FetchCommitted) }, body(str("g\u0085"), str("t"), u32(0))},
		{"InitProducer id without epoch", func() wireBody { return new(wire.InitProducer) }, body(i64(5), u16(0xffff))},
		{"InitProducer epoch without id", func() wireBody { return new(wire.InitProducer) }, body(i64(-1), u16(0))},
		{"InitProducer id -2", func() wireBody { return new(wire.InitProducer) }, body(i64(-2), u16(0xffff))},
		{"InitProducer short", func() wireBody { return new(wire.InitProducer) }, i64(-1)},
		{"InitProducer long", func() wireBody { return new(wire.InitProducer) }, body(i64(-1), u16(0xffff), u8(0))},
		{"InitProducerResponse negative id", func() wireBody { return new(wire.InitProducerResponse) }, body(i64(-1), u16(0), u16(5), u32(1000))},
		{"InitProducerResponse negative epoch", func() wireBody { return new(wire.InitProducerResponse) }, body(i64(1), u16(0x8000), u16(5), u32(1000))},
		{"InitProducerResponse window 0", func() wireBody { return new(wire.InitProducerResponse) }, body(i64(1), u16(0), u16(0), u32(1000))},
		// Consumer group bodies: names, member ids and partition lists.
		{"JoinGroup empty group", func() wireBody { return new(wire.JoinGroup) }, body(str(""), str("t"), testMember[:], u32(0), str(""))},
		{"JoinGroup zero member", func() wireBody { return new(wire.JoinGroup) }, body(str("g"), str("t"), make([]byte, 16), u32(0), str(""))},
		{"JoinGroup short member", func() wireBody { return new(wire.JoinGroup) }, body(str("g"), str("t"), testMember[:15])},
		{"JoinGroup client id 256", func() wireBody { return new(wire.JoinGroup) }, body(str("g"), str("t"), testMember[:], u32(0), str(strings.Repeat("c", 256)))},
		{"Heartbeat owned descending", func() wireBody { return new(wire.Heartbeat) }, body(str("g"), str("t"), testMember[:], u32(1), u32(0), u32(2), u32(3), u32(1))},
		{"Heartbeat owned duplicate", func() wireBody { return new(wire.Heartbeat) }, body(str("g"), str("t"), testMember[:], u32(1), u32(0), u32(2), u32(3), u32(3))},
		{"Heartbeat owned 1025", func() wireBody { return new(wire.Heartbeat) }, body(str("g"), str("t"), testMember[:], u32(1), u32(0), u32(1025), rep(1025*4, "\x00"))},
		{"Heartbeat owned count over bytes", func() wireBody { return new(wire.Heartbeat) }, body(str("g"), str("t"), testMember[:], u32(1), u32(0), u32(3), u32(0), u32(1))},
		{"Heartbeat group with NUL", func() wireBody { return new(wire.Heartbeat) }, body(str("g\x00"), str("t"), testMember[:], u32(1), u32(0), u32(0))},
		{"HeartbeatResponse 4G partitions", func() wireBody { return new(wire.HeartbeatResponse) }, body(u32(1), u32(1), u32(0xffffffff))},
		{"LeaveGroup zero member", func() wireBody { return new(wire.LeaveGroup) }, body(str("g"), str("t"), make([]byte, 16))},
		{"GroupCommit topic 250", func() wireBody { return new(wire.GroupCommit) }, body(str("g"), str(strings.Repeat("t", 250)), testMember[:], u32(1), u32(0), i64(0))},
		{"ListGroups after group 256", func() wireBody { return new(wire.ListGroups) }, body(str(""), str(strings.Repeat("g", 256)), str(""))},
		{"ListGroupsResponse more 2", func() wireBody { return new(wire.ListGroupsResponse) }, body(u8(2), u32(0))},
		{"ListGroupsResponse 4G groups", func() wireBody { return new(wire.ListGroupsResponse) }, body(u8(0), u32(0xffffffff))},
		{"DescribeGroupResponse 4G members", func() wireBody { return new(wire.DescribeGroupResponse) }, body(u32(1), u32(0xffffffff))},
		{"DescribeGroupResponse 1025 partitions", func() wireBody { return new(wire.DescribeGroupResponse) }, body(u32(1), u32(0), u32(1025), rep(1025*28, "\x00"))},
		{"FindCoordinator empty group", func() wireBody { return new(wire.FindCoordinator) }, str("")},
		{"FindCoordinator group 256", func() wireBody { return new(wire.FindCoordinator) }, str(strings.Repeat("g", 256))},
		{"FindCoordinator group with NUL", func() wireBody { return new(wire.FindCoordinator) }, str("g\x00")},
		{"FindCoordinator trailing byte", func() wireBody { return new(wire.FindCoordinator) }, body(str("g"), u8(0))},
		{"FindCoordinatorResponse address 256", func() wireBody { return new(wire.FindCoordinatorResponse) }, body(u32(1), u32(2), str(strings.Repeat("a", 256)), str(""))},
		{"FindCoordinatorResponse no TLS address", func() wireBody { return new(wire.FindCoordinatorResponse) }, body(u32(1), u32(2), str("a:1"))},
		{"DescribeGroupResponse zero member", func() wireBody { return new(wire.DescribeGroupResponse) }, body(u32(1), u32(1), make([]byte, 16), str(""), str(""), u32(0), u32(0), u32(0), u32(0))},
		// Cluster membership bodies: node lists, flags, broker states.
		{"MoveReplicas 17 replicas", func() wireBody { return new(wire.MoveReplicas) }, body(str("t"), u32(0), u16(17), rep(17*4, "\x00"))},
		{"MoveReplicas replicas over bytes", func() wireBody { return new(wire.MoveReplicas) }, body(str("t"), u32(0), u16(3), u32(1), u32(2))},
		{"AddBroker address 256", func() wireBody { return new(wire.AddBroker) }, body(u32(4), str(strings.Repeat("a", 256)), str(""), str("c:1"))},
		{"BrokerID long", func() wireBody { return new(wire.BrokerID) }, body(u32(1), u8(0))},
		{"Membership flags 2", func() wireBody { return new(wire.Membership) }, body(str(""), str(""), u32(0), u8(2))},
		{"MembershipResponse broker state 3", func() wireBody { return new(wire.MembershipResponse) },
			body(u32(1), u32(1), u16(1), u32(1), u8(3), u8(1), str("a:1"), str(""), str("a:2"), u32(0), u32(0), u32(0), u8(0))},
		{"MembershipResponse metadata member 3", func() wireBody { return new(wire.MembershipResponse) },
			body(u32(1), u32(1), u16(1), u32(1), u8(1), u8(3), str("a:1"), str(""), str("a:2"), u32(0), u32(0), u32(0), u8(0))},
		{"MembershipResponse 64K brokers", func() wireBody { return new(wire.MembershipResponse) }, body(u32(1), u32(1), u16(0xffff))},
		{"MembershipResponse 4G partitions", func() wireBody { return new(wire.MembershipResponse) }, body(u32(1), u32(1), u16(0), u32(0xffffffff))},
		{"MembershipResponse partition flags 4", func() wireBody { return new(wire.MembershipResponse) },
			body(u32(1), u32(1), u16(0), u32(1), str("t"), u32(0), i64(2), u16(0), u16(0), u8(4), u32(0), u16(0), u16(0), u8(0))},
		{"MembershipResponse 17 voters", func() wireBody { return new(wire.MembershipResponse) },
			body(u32(1), u32(1), u16(0), u32(1), str("t"), u32(0), i64(2), u16(0), u16(0), u8(3), u32(0), u16(17), rep(17*4, "\x00"), u16(0), u8(0))},
		{"MembershipResponse more 2", func() wireBody { return new(wire.MembershipResponse) }, body(u32(1), u32(1), u16(0), u32(0), u8(2))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.newBody().Decode(tt.in); !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("Decode: %v, want ErrMalformed", err)
			}
		})
	}
}

// TestBodyDecodeBoundedAllocation: counts in a short body are checked against the bytes that
// remain before anything is allocated.
func TestBodyDecodeBoundedAllocation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		newBody func() wireBody
		in      []byte
	}{
		{"MetadataRequest", func() wireBody { return new(wire.MetadataRequest) }, body(u32(10000), str("a"))},
		{"MetadataResponse", func() wireBody { return new(wire.MetadataResponse) }, body(u32(0xffffffff), str("a"))},
		{"StatsResponse", func() wireBody { return new(wire.StatsResponse) }, body(u32(0xffffffff), str("a"))},
		{"ListUsersResponse", func() wireBody { return new(wire.ListUsersResponse) }, body(u8(0), u32(0xffffffff), str("a"))},
		{"HeartbeatResponse", func() wireBody { return new(wire.HeartbeatResponse) }, body(u32(1), u32(1), u32(1024), u32(1))},
		{"ListGroupsResponse", func() wireBody { return new(wire.ListGroupsResponse) }, body(u8(0), u32(0xffffffff), str("a"))},
		{"DescribeGroupResponse", func() wireBody { return new(wire.DescribeGroupResponse) }, body(u32(1), u32(0xffffffff), str("a"))},
	} {
		// A lying count must cost what formatting the error costs (a handful of allocations,
		// a few more under the race detector), never an allocation sized by the claim.
		m := tc.newBody()
		if a := testing.AllocsPerRun(20, func() { _ = m.Decode(tc.in) }); a > 10 {
			t.Errorf("%s: %v allocations decoding a lying count", tc.name, a)
		}
	}
}

func TestErrorBodyTruncatesLongMessages(t *testing.T) {
	m := wire.ErrorBody{Code: wire.CodeInternal, Message: strings.Repeat("é", 1000)} // 2000 bytes
	var got wire.ErrorBody
	if err := got.Decode(m.AppendTo(nil)); err != nil {
		t.Fatal(err)
	}
	if len(got.Message) != wire.MaxErrorText || got.Message != m.Message[:wire.MaxErrorText] {
		t.Fatalf("message of %d bytes after the round trip, want the first %d", len(got.Message), wire.MaxErrorText)
	}
}

func TestBodyHelpersAgree(t *testing.T) {
	p := wire.Produce{Topic: []byte("orders"), Partition: 3, Acks: wire.AcksWritten, Batch: sampleBatch()}
	if a, b := p.AppendTo(nil), append(wire.AppendProduceHeader(nil, "orders", 3, wire.AcksWritten), p.Batch...); !bytes.Equal(a, b) {
		t.Errorf("AppendProduceHeader disagrees with Produce.AppendTo:\n% x\n% x", a, b)
	}
	d := wire.Deliver{Partition: 0x01020304, Dropped: 0x0a0b0c0d0e0f1011, Batch: sampleBatch()}
	h := make([]byte, wire.DeliverHeaderSize)
	wire.PutDeliverHeader(h, d.Partition, d.Dropped)
	if a, b := d.AppendTo(nil), append(h, d.Batch...); !bytes.Equal(a, b) {
		t.Errorf("PutDeliverHeader disagrees with Deliver.AppendTo:\n% x\n% x", a, b)
	}
	if n := len((&wire.ProduceResponse{}).AppendTo(nil)); n != wire.ProduceResponseSize {
		t.Errorf("ProduceResponse is %d bytes, ProduceResponseSize %d", n, wire.ProduceResponseSize)
	}
	if n := len((&wire.FetchResponse{}).AppendTo(nil)); n != wire.FetchResponseHeaderSize {
		t.Errorf("FetchResponse header is %d bytes, FetchResponseHeaderSize %d", n, wire.FetchResponseHeaderSize)
	}
}

func TestValidTopicName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"orders", true},
		{"A.b_c-9", true},
		{strings.Repeat("x", 249), true},
		{"...", true},
		{"", false},
		{strings.Repeat("x", 250), false},
		{".", false},
		{"..", false},
		{"a/b", false},
		{"a b", false},
		{"ünï", false},
		{"a\x00", false},
	}
	for _, tt := range tests {
		if err := wire.ValidTopicName(tt.name); (err == nil) != tt.ok {
			t.Errorf("ValidTopicName(%q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

// TestValidTextNames: user and group names are 1-255 bytes of UTF-8 without control
// characters.
func TestValidTextNames(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"orders-app", true},
		{"ünïcode user@example.com", true},
		{"a b", true},
		{strings.Repeat("x", 255), true},
		{strings.Repeat("é", 127), true}, // 254 bytes
		{"", false},
		{strings.Repeat("x", 256), false},
		{"a\x00b", false},
		{"tab\t", false},
		{"line\n", false},
		{"del\x7f", false},
		{"c1\u0085", false},
		{"\xff", false},
		{"half \xc3", false},
	}
	for _, tt := range tests {
		if err := wire.ValidUserName(tt.name); (err == nil) != tt.ok {
			t.Errorf("ValidUserName(%q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err := wire.ValidGroupName(tt.name); (err == nil) != tt.ok {
			t.Errorf("ValidGroupName(%q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
	// The empty queue group of a fan-out SUBSCRIBE is not a name and decodes.
	m := wire.Subscribe{Topic: "t", Partition: -1}
	if err := new(wire.Subscribe).Decode(m.AppendTo(nil)); err != nil {
		t.Errorf("fan-out SUBSCRIBE: %v", err)
	}
}

func TestNoBody(t *testing.T) {
	if err := wire.NoBody(nil); err != nil {
		t.Errorf("NoBody(nil) = %v", err)
	}
	if err := wire.NoBody([]byte{0}); !errors.Is(err, wire.ErrMalformed) {
		t.Errorf("NoBody of one byte = %v, want ErrMalformed", err)
	}
}

func TestLimitsValidate(t *testing.T) {
	def := wire.DefaultLimits()
	if def.MaxFrame != 1<<20+1024 || def.MaxBatch != 1<<20 || def.MaxMessage != 1<<20-1024 || def.PreAuthMaxFrame != 4096 || def.AuthTimeout != 10*time.Second {
		t.Fatalf("DefaultLimits changed: %+v (update PROTOCOL.md section 12)", def)
	}
	tests := []struct {
		name   string
		modify func(l *wire.Limits)
		ok     bool
	}{
		{"defaults", func(l *wire.Limits) {}, true},
		{"batch 4095", func(l *wire.Limits) { l.MaxBatch = 4095 }, false},
		{"batch 256 MiB + 1", func(l *wire.Limits) { l.MaxBatch = 256<<20 + 1; l.MaxFrame = 512 << 20 }, false},
		{"frame below batch + 1024", func(l *wire.Limits) { l.MaxFrame = l.MaxBatch + 1023 }, false},
		{"message 0", func(l *wire.Limits) { l.MaxMessage = 0 }, false},
		{"message max", func(l *wire.Limits) { l.MaxMessage = l.MaxBatch - wire.MaxBatchHeaderSize - 32 }, true},
		{"message over max", func(l *wire.Limits) { l.MaxMessage = l.MaxBatch - 95 }, false},
		{"pre-auth 511", func(l *wire.Limits) { l.PreAuthMaxFrame = 511 }, false},
		{"pre-auth over frame", func(l *wire.Limits) { l.PreAuthMaxFrame = l.MaxFrame + 1 }, false},
		{"auth timeout 0", func(l *wire.Limits) { l.AuthTimeout = 0 }, false},
	}
	for _, tt := range tests {
		l := wire.DefaultLimits()
		tt.modify(&l)
		if err := l.Validate(); (err == nil) != tt.ok {
			t.Errorf("%s: Validate = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestParseEnums(t *testing.T) {
	for s, want := range map[string]wire.Kind{"transient": wire.KindTransient, "durable": wire.KindDurable} {
		if k, err := wire.ParseKind(s); err != nil || k != want || k.String() != s {
			t.Errorf("ParseKind(%q) = %v, %v", s, k, err)
		}
	}
	if _, err := wire.ParseKind("memory"); err == nil {
		t.Error("ParseKind accepted memory")
	}
	for s, want := range map[string]wire.Codec{"none": wire.CodecNone, "s2": wire.CodecS2, "zstd": wire.CodecZstd} {
		if c, err := wire.ParseCodec(s); err != nil || c != want || c.String() != s {
			t.Errorf("ParseCodec(%q) = %v, %v", s, c, err)
		}
	}
	if _, err := wire.ParseCodec("gzip"); err == nil {
		t.Error("ParseCodec accepted gzip")
	}
}

// TestMetadataFlags: the flags byte is canonical: present only with a bit set, and only bit 0.
func TestMetadataFlags(t *testing.T) {
	base := (&wire.MetadataRequest{Topics: []string{"a"}}).AppendTo(nil)
	for _, tc := range []struct {
		tail    []byte
		cluster bool
		ok      bool
	}{{nil, false, true}, {[]byte{1}, true, true}, {[]byte{0}, false, false}, {[]byte{2}, false, false}, {[]byte{1, 0}, false, false}} {
		var m wire.MetadataRequest
		err := m.Decode(append(bytes.Clone(base), tc.tail...))
		if (err == nil) != tc.ok || err == nil && m.Cluster != tc.cluster || err != nil && !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("flags % x: cluster %v, %v", tc.tail, m.Cluster, err)
		}
	}
}
