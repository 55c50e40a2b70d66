package broker

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lightq/lightq/wire"
)

const (
	cgTopic = "events"
	cgGroup = "billing"
	cgUser  = "app"
	cgPass  = "app-secret"
)

// groupCluster starts three brokers and a replicated topic of 4 partitions, and waits until
// every broker serves the topic and the cluster's offsets topic.
func groupCluster(t testing.TB) *testCluster {
	t.Helper()
	return groupClusterWith(t, 0)
}

// groupClusterWith is groupCluster whose brokers grant session (when not 0) to members that
// ask for none.
func groupClusterWith(t testing.TB, session time.Duration) *testCluster {
	t.Helper()
	tc := startClusterWith(t, 3, func(cfg *Config) {
		if session > 0 {
			cfg.Groups.SessionTimeout = session
		}
	})
	admin := login(t, tc.brokers[0].Addr(), testAdminUser, testAdminPass)
	ct := wire.CreateTopic{Name: cgTopic, Kind: wire.KindDurable, Partitions: 4, User: cgUser, Password: cgPass,
		Options: []wire.Option{{Key: wire.OptionReplicationFactor, Value: "3"}}}
	admin.expectResponse(wire.OpCreateTopic, admin.send(wire.OpCreateTopic, ct.AppendTo(nil)))
	admin.conn.Close()
	for i, s := range tc.brokers {
		waitUntil(t, fmt.Sprintf("broker %d serves the topic and the offsets topic", i+1), func() bool {
			return (*s.topics.Load())[cgTopic] != nil && s.cluster.offsets.Load() != nil
		})
	}
	return tc
}

func (c *rawClient) findCoordinator(group string) wire.FindCoordinatorResponse {
	c.t.Helper()
	m := wire.FindCoordinator{Group: group}
	var r wire.FindCoordinatorResponse
	if err := r.Decode(c.expectResponse(wire.OpFindCoordinator, c.send(wire.OpFindCoordinator, m.AppendTo(nil)))); err != nil {
		c.t.Fatal(err)
	}
	return r
}

func (c *rawClient) fetchCommitted(group, topic string, partition uint32) int64 {
	c.t.Helper()
	m := wire.FetchCommitted{Group: group, Topic: topic, Partition: partition}
	var r wire.OffsetResponse
	if err := r.Decode(c.expectResponse(wire.OpFetchCommitted, c.send(wire.OpFetchCommitted, m.AppendTo(nil)))); err != nil {
		c.t.Fatal(err)
	}
	return r.Offset
}

// coordinator waits until one running broker coordinates group (it leads the group's
// offsets partition and is ready) and every running broker's FIND_COORDINATOR names it, and
// returns its index.
func (tc *testCluster) coordinator(group string) int {
	tc.t.Helper()
	coord := -1
	waitUntil(tc.t, fmt.Sprintf("a coordinator of %q that every broker names", group), func() bool {
		coord = -1
		for i, s := range tc.brokers {
			if s == nil {
				continue
			}
			op, leader := s.cluster.coordinatorOf(group)
			if op == nil || leader != uint64(i+1) {
				continue
			}
			if _, ready := op.store.Leading(); ready {
				coord = i
			}
		}
		if coord < 0 {
			return false
		}
		for _, s := range tc.brokers {
			if s == nil {
				continue
			}
			c := login(tc.t, s.Addr(), cgUser, cgPass)
			fc := c.findCoordinator(group)
			c.conn.Close()
			if fc.Coordinator != uint32(coord+1) || fc.Addr != tc.brokers[coord].Addr() || fc.Node != s.nodeID() {
				return false
			}
		}
		return true
	})
	return coord
}

// others are the running brokers but i.
func (tc *testCluster) others(i int) []int {
	var out []int
	for j, s := range tc.brokers {
		if s != nil && j != i {
			out = append(out, j)
		}
	}
	return out
}

// groupMember is a well-behaved member over raw frames: it heartbeats with what it was
// told (releasing what the last answer took away at once, as a consumer that commits and
// lets go would), on a connection to the coordinator.
type groupMember struct {
	t     testing.TB
	id    wire.MemberID
	c     *rawClient
	gen   uint32
	owned []uint32
}

// joinVia joins group as member id the way a client does: JOIN_GROUP to broker i, which
// answers NOT_COORDINATOR unless it is the coordinator, then FIND_COORDINATOR there and
// JOIN_GROUP at the broker it names.
func (tc *testCluster) joinVia(i int, id wire.MemberID, coord int) *groupMember {
	tc.t.Helper()
	c := login(tc.t, tc.brokers[i].Addr(), cgUser, cgPass)
	if i != coord {
		e := c.expectError(c.join(cgGroup, cgTopic, id, 0), wire.CodeNotCoordinator)
		if !strings.Contains(e.Message, tc.brokers[coord].Addr()) {
			tc.t.Errorf("NOT_COORDINATOR %q does not name the coordinator's address %s", e.Message, tc.brokers[coord].Addr())
		}
		fc := c.findCoordinator(cgGroup)
		if fc.Coordinator != uint32(coord+1) {
			tc.t.Fatalf("broker %d names coordinator %d, want %d", i+1, fc.Coordinator, coord+1)
		}
		c.conn.Close()
		c = login(tc.t, fc.Addr, cgUser, cgPass)
	}
	r := c.joined(c.join(cgGroup, cgTopic, id, 0))
	return &groupMember{t: tc.t, id: id, c: c, gen: r.Generation, owned: r.Partitions}
}

func (m *groupMember) beat() {
	m.t.Helper()
	r := m.c.beaten(m.c.heartbeat(cgGroup, cgTopic, m.id, m.gen, 0, m.owned))
	if r.Generation >= m.gen {
		m.gen, m.owned = r.Generation, r.Partitions
	}
}

func (m *groupMember) commit(partition uint32, offset int64) {
	m.t.Helper()
	m.c.expectResponse(wire.OpGroupCommit, m.c.groupCommit(cgGroup, cgTopic, m.id, m.gen, partition, offset))
}

// split heartbeats the members until they hold every partition between them, two each, none
// held by both, and returns who holds which.
func split(t *testing.T, ms ...*groupMember) map[uint32]*groupMember {
	t.Helper()
	var holder map[uint32]*groupMember
	waitUntil(t, "the members to split the 4 partitions", func() bool {
		holder = map[uint32]*groupMember{}
		for _, m := range ms {
			m.beat()
		}
		for _, m := range ms {
			if len(m.owned) != 4/len(ms) {
				return false
			}
			for _, p := range m.owned {
				if holder[p] != nil {
					t.Fatalf("partition %d told to two members", p)
				}
				holder[p] = m
			}
		}
		return len(holder) == 4
	})
	return holder
}

// TestClusterGroupOneCoordinator: two members of one group that contact different brokers
// are sent to the one coordinator and share the topic's partitions, none held by both; every
// group request to another broker is answered NOT_COORDINATOR naming the coordinator; the
// commits are on a majority of the offsets partition's replicas when answered.
func TestClusterGroupOneCoordinator(t *testing.T) {
	tc := groupCluster(t)
	coord := tc.coordinator(cgGroup)
	other := tc.others(coord)
	a := tc.joinVia(other[0], memberA, coord)
	b := tc.joinVia(other[1], memberB, coord)
	holder := split(t, a, b)
	for p, m := range holder {
		m.commit(p, int64(100+p))
	}

	c := login(t, tc.brokers[other[0]].Addr(), cgUser, cgPass)
	for _, corr := range []uint32{
		c.heartbeat(cgGroup, cgTopic, memberA, a.gen, 0, a.owned),
		c.groupCommit(cgGroup, cgTopic, memberA, a.gen, a.owned[0], 1),
		c.send(wire.OpLeaveGroup, (&wire.LeaveGroup{Group: cgGroup, Topic: cgTopic, Member: memberA}).AppendTo(nil)),
		c.send(wire.OpCommitOffset, (&wire.CommitOffset{Group: cgGroup, Topic: cgTopic, Partition: 0, Offset: 1}).AppendTo(nil)),
		c.send(wire.OpFetchCommitted, (&wire.FetchCommitted{Group: cgGroup, Topic: cgTopic, Partition: 0}).AppendTo(nil)),
		c.send(wire.OpDescribeGroup, (&wire.DescribeGroup{Group: cgGroup, Topic: cgTopic}).AppendTo(nil)),
	} {
		e := c.expectError(corr, wire.CodeNotCoordinator)
		if !strings.Contains(e.Message, tc.brokers[coord].Addr()) {
			t.Errorf("NOT_COORDINATOR %q does not name %s", e.Message, tc.brokers[coord].Addr())
		}
	}
	// COMMIT_OFFSET at the coordinator is refused while the group has members.
	a.c.expectError(a.c.send(wire.OpCommitOffset, (&wire.CommitOffset{Group: cgGroup, Topic: cgTopic, Partition: 0, Offset: 1}).AppendTo(nil)), wire.CodeGroupNotEmpty)

	d := a.c.describeGroup(cgGroup, cgTopic)
	if len(d.Members) != 2 {
		t.Fatalf("the coordinator describes %d members", len(d.Members))
	}
	for _, gp := range d.Partitions {
		if gp.Committed != int64(100+gp.Partition) {
			t.Fatalf("partition %d: committed %d", gp.Partition, gp.Committed)
		}
	}
	lg := a.c.listGroups(cgTopic, "", "")
	if len(lg.Groups) != 1 || lg.Groups[0].Members != 2 || lg.Groups[0].Committed != 4 {
		t.Fatalf("LIST_GROUPS at the coordinator: %+v", lg.Groups)
	}
	// Every replica of the group's offsets partition holds the answered commits.
	for i, s := range tc.brokers {
		op, _ := s.cluster.coordinatorOf(cgGroup)
		waitUntil(t, fmt.Sprintf("broker %d's offsets replica has the commits", i+1), func() bool {
			for p := range uint32(4) {
				if off, ok := op.store.Get(offsetsKey((*s.topics.Load())[cgTopic], cgGroup, p)); !ok || off != int64(100+p) {
					return false
				}
			}
			return true
		})
	}
}

// TestClusterGroupCoordinatorFails: the coordinator's broker stops; another broker becomes
// the coordinator, knows every committed offset and none of the members, who join it again
// and are given nothing for the group's session timeout (and the margin of two election
// timeouts), then go on from the committed offsets; the stopped broker, restarted, catches
// up and answers NOT_COORDINATOR.
func TestClusterGroupCoordinatorFails(t *testing.T) {
	const session = 3 * time.Second
	tc := groupClusterWith(t, session)
	coord := tc.coordinator(cgGroup)
	other := tc.others(coord)
	a := tc.joinVia(other[0], memberA, coord)
	b := tc.joinVia(other[1], memberB, coord)
	for p, m := range split(t, a, b) {
		m.commit(p, int64(10*(p+1)))
	}

	stopped := tc.brokers[coord]
	tc.brokers[coord] = nil
	if err := stopped.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	next := tc.coordinator(cgGroup)
	ready := time.Now()
	t.Logf("node %d coordinates the group %v after node %d stopped", next+1, time.Since(start).Round(time.Millisecond), coord+1)
	if !tc.brokers[next].groups.Withheld(cgTopic, cgGroup) {
		t.Fatal("the new coordinator does not withhold the group's partitions")
	}
	c := login(t, tc.brokers[next].Addr(), cgUser, cgPass)
	for p := range uint32(4) {
		if off := c.fetchCommitted(cgGroup, cgTopic, p); off != int64(10*(p+1)) {
			t.Fatalf("partition %d: the new coordinator has committed %d, want %d", p, off, 10*(p+1))
		}
	}
	// The members are unknown there: they join again, through the brokers they knew.
	c.expectError(c.heartbeat(cgGroup, cgTopic, memberA, a.gen, 0, a.owned), wire.CodeUnknownMember)
	if d := c.describeGroup(cgGroup, cgTopic); len(d.Members) != 0 {
		t.Fatalf("the new coordinator has %d members before any joined", len(d.Members))
	}
	c.conn.Close()
	a, b = tc.joinVia(other[0], memberA, next), tc.joinVia(other[1], memberB, next)
	if len(a.owned)+len(b.owned) != 0 {
		t.Fatalf("partitions given at once by the new coordinator: %v, %v", a.owned, b.owned)
	}
	holder := split(t, a, b)
	if got := time.Since(ready); got < session {
		t.Fatalf("the partitions were given %v after the new coordinator was ready, before the session timeout %v", got, session)
	}
	for p, m := range holder {
		if off := m.c.fetchCommitted(cgGroup, cgTopic, p); off != int64(10*(p+1)) {
			t.Fatalf("partition %d: %d committed", p, off)
		}
		m.commit(p, int64(10*(p+1)+5))
	}

	tc.brokers[coord] = startWith(t, tc.cfgs[coord])
	tc.wire()
	back := tc.brokers[coord]
	waitUntil(t, "the restarted broker's offsets replica caught up", func() bool {
		tbl := back.cluster.offsets.Load()
		tp := (*back.topics.Load())[cgTopic]
		if tbl == nil || tp == nil {
			return false
		}
		op, _ := back.cluster.coordinatorOf(cgGroup)
		for p := range uint32(4) {
			if off, ok := op.store.Get(offsetsKey(tp, cgGroup, p)); !ok || off != int64(10*(p+1)+5) {
				return false
			}
		}
		return true
	})
	if now := tc.coordinator(cgGroup); now != coord {
		r := login(t, back.Addr(), cgUser, cgPass)
		r.expectError(r.join(cgGroup, cgTopic, memberA, 0), wire.CodeNotCoordinator)
	}
}

// TestClusterGroupLeadershipMoves: when the coordinator's broker stops leading the group's
// offsets partition (a leadership transfer), its held heartbeats are answered
// NOT_COORDINATOR at once, and the new leader coordinates.
func TestClusterGroupLeadershipMoves(t *testing.T) {
	tc := groupCluster(t)
	coord := tc.coordinator(cgGroup)
	m := tc.joinVia(coord, memberA, coord)
	held := m.c.heartbeat(cgGroup, cgTopic, m.id, m.gen, time.Minute, m.owned)
	m.c.ping() // the heartbeat is held: the PING after it is answered first
	op, _ := tc.brokers[coord].cluster.coordinatorOf(cgGroup)
	to := uint64(tc.others(coord)[0] + 1)
	waitUntil(t, "the leadership to move", func() bool {
		if op.store.Leader() == to {
			return true
		}
		op.store.Replica().TransferLeadership(to)
		return false
	})
	e := m.c.expectError(held, wire.CodeNotCoordinator)
	if !strings.Contains(e.Message, "no longer coordinates") {
		t.Errorf("the held heartbeat's answer: %q", e.Message)
	}
	if now := tc.coordinator(cgGroup); now != int(to-1) {
		t.Fatalf("coordinator %d, want %d", now+1, to)
	}
}

// TestClusterGroupTopicRecreated: a topic deleted and created again starts without the old
// one's committed offsets, which the coordinator purges from its offsets partition; names
// starting with "__" are refused, and METADATA does not list the offsets topic.
func TestClusterGroupTopicRecreated(t *testing.T) {
	tc := groupCluster(t)
	coord := tc.coordinator(cgGroup)
	c := login(t, tc.brokers[coord].Addr(), cgUser, cgPass)
	c.expectResponse(wire.OpCommitOffset, c.send(wire.OpCommitOffset, (&wire.CommitOffset{Group: cgGroup, Topic: cgTopic, Partition: 1, Offset: 77}).AppendTo(nil)))
	if off := c.fetchCommitted(cgGroup, cgTopic, 1); off != 77 {
		t.Fatalf("committed %d", off)
	}
	c.conn.Close()
	admin := login(t, tc.brokers[coord].Addr(), testAdminUser, testAdminPass)
	admin.expectResponse(wire.OpDeleteTopic, admin.send(wire.OpDeleteTopic, (&wire.TopicName{Name: cgTopic}).AppendTo(nil)))
	ct := wire.CreateTopic{Name: cgTopic, Kind: wire.KindDurable, Partitions: 4, User: cgUser, Password: cgPass,
		Options: []wire.Option{{Key: wire.OptionReplicationFactor, Value: "3"}}}
	admin.expectResponse(wire.OpCreateTopic, admin.send(wire.OpCreateTopic, ct.AppendTo(nil)))
	op, _ := tc.brokers[coord].cluster.coordinatorOf(cgGroup)
	waitUntil(t, "the old topic's offsets purged", func() bool {
		refs := op.store.Topics()
		return len(refs) == 0
	})
	coord = tc.coordinator(cgGroup)
	c = login(t, tc.brokers[coord].Addr(), cgUser, cgPass)
	if off := c.fetchCommitted(cgGroup, cgTopic, 1); off != -1 {
		t.Fatalf("the new topic has committed %d", off)
	}

	bad := wire.CreateTopic{Name: "__mine", Kind: wire.KindDurable, Partitions: 1}
	admin.expectError(admin.send(wire.OpCreateTopic, bad.AppendTo(nil)), wire.CodeInvalidRequest)
	admin.expectError(admin.send(wire.OpMetadata, (&wire.MetadataRequest{Topics: []string{offsetsTopicName}}).AppendTo(nil)), wire.CodeUnknownTopic)
	var md wire.MetadataResponse
	if err := md.Decode(admin.expectResponse(wire.OpMetadata, admin.send(wire.OpMetadata, (&wire.MetadataRequest{}).AppendTo(nil)))); err != nil {
		t.Fatal(err)
	}
	if names := topicNames(md); !slices.Equal(names, []string{cgTopic}) {
		t.Fatalf("METADATA lists %v", names)
	}
}

func topicNames(md wire.MetadataResponse) []string {
	var out []string
	for _, tm := range md.Topics {
		out = append(out, tm.Name)
	}
	return out
}

// BenchmarkClusterCommit: COMMIT_OFFSETs through a coordinator of the in-process 3-broker
// cluster, 64 in flight on one connection, each answered once a majority of the offsets
// partition's replicas fsynced it (BenchmarkCommitThroughput is the single broker's).
func BenchmarkClusterCommit(b *testing.B) {
	tc := groupCluster(b)
	coord := tc.coordinator(cgGroup)
	c := login(b, tc.brokers[coord].Addr(), cgUser, cgPass)
	const window = 64
	corrs := make([]uint32, 0, window)
	drain := func() {
		for _, corr := range corrs {
			c.expectResponse(wire.OpCommitOffset, corr)
		}
		corrs = corrs[:0]
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		m := wire.CommitOffset{Group: cgGroup, Topic: cgTopic, Partition: uint32(i % 4), Offset: int64(i)}
		corrs = append(corrs, c.send(wire.OpCommitOffset, m.AppendTo(nil)))
		if len(corrs) == window {
			drain()
		}
	}
	drain()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}
