package broker

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lightq/lightq/wire"
)

// Consumer group requests against a real broker, byte by byte: join, revocation and
// release, fencing of commits, offset-only commits refused while members live, held
// heartbeats answered on change, at the interval, on close, on delete and at shutdown.

func groupBroker(t *testing.T) *Server {
	return startBroker(t, func(c *Config) {
		c.Groups.MinSessionTimeout = 100 * time.Millisecond
	})
}

var (
	memberA = wire.MemberID{0xa}
	memberB = wire.MemberID{0xb}
)

func (c *rawClient) join(group, topic string, id wire.MemberID, session time.Duration) uint32 {
	m := wire.JoinGroup{Group: group, Topic: topic, Member: id, SessionTimeoutMs: uint32(session / time.Millisecond), ClientID: "raw-" + id.String()[:2]}
	return c.send(wire.OpJoinGroup, m.AppendTo(nil))
}

func (c *rawClient) joined(corr uint32) wire.JoinGroupResponse {
	c.t.Helper()
	var r wire.JoinGroupResponse
	if err := r.Decode(c.expectResponse(wire.OpJoinGroup, corr)); err != nil {
		c.t.Fatal(err)
	}
	return r
}

func (c *rawClient) heartbeat(group, topic string, id wire.MemberID, gen uint32, wait time.Duration, owned []uint32) uint32 {
	m := wire.Heartbeat{Group: group, Topic: topic, Member: id, Generation: gen, MaxWaitMs: uint32(wait / time.Millisecond), Owned: owned}
	return c.send(wire.OpHeartbeat, m.AppendTo(nil))
}

func (c *rawClient) beaten(corr uint32) wire.HeartbeatResponse {
	c.t.Helper()
	var r wire.HeartbeatResponse
	if err := r.Decode(c.expectResponse(wire.OpHeartbeat, corr)); err != nil {
		c.t.Fatal(err)
	}
	return r
}

func (c *rawClient) groupCommit(group, topic string, id wire.MemberID, gen, partition uint32, offset int64) uint32 {
	m := wire.GroupCommit{Group: group, Topic: topic, Member: id, Generation: gen, Partition: partition, Offset: offset}
	return c.send(wire.OpGroupCommit, m.AppendTo(nil))
}

func (c *rawClient) describeGroup(group, topic string) wire.DescribeGroupResponse {
	c.t.Helper()
	m := wire.DescribeGroup{Group: group, Topic: topic}
	var r wire.DescribeGroupResponse
	if err := r.Decode(c.expectResponse(wire.OpDescribeGroup, c.send(wire.OpDescribeGroup, m.AppendTo(nil)))); err != nil {
		c.t.Fatal(err)
	}
	return r
}

func (c *rawClient) listGroups(topic, afterGroup, afterTopic string) wire.ListGroupsResponse {
	c.t.Helper()
	m := wire.ListGroups{Topic: topic, AfterGroup: afterGroup, AfterTopic: afterTopic}
	var r wire.ListGroupsResponse
	if err := r.Decode(c.expectResponse(wire.OpListGroups, c.send(wire.OpListGroups, m.AppendTo(nil)))); err != nil {
		c.t.Fatal(err)
	}
	return r
}

func TestGroupRevocationReleaseAndFencing(t *testing.T) {
	srv := groupBroker(t)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createDurable("audit", 4)
	for i := 0; i < 5; i++ {
		admin.produce("audit", int32(i%4), testBatch(t, "v"))
	}
	a := login(t, srv.Addr(), testAdminUser, testAdminPass)
	b := login(t, srv.Addr(), testAdminUser, testAdminPass)

	ja := a.joined(a.join("billing", "audit", memberA, 0))
	if !slices.Equal(ja.Partitions, []uint32{0, 1, 2, 3}) || ja.SessionTimeoutMs != 10000 || ja.HeartbeatIntervalMs != 3333 {
		t.Fatalf("first join: %+v", ja)
	}
	// Offset-only commits are refused while the group has members; FETCH_COMMITTED works.
	eb := admin.expectError(admin.commit("billing", "audit", 0, 1), wire.CodeGroupNotEmpty)
	if !strings.Contains(eb.Message, "live members") {
		t.Fatalf("GROUP_NOT_EMPTY message: %q", eb.Message)
	}
	if got := admin.committed("billing", "audit", 0); got != -1 {
		t.Fatalf("committed %d", got)
	}
	a.expectResponse(wire.OpGroupCommit, a.groupCommit("billing", "audit", memberA, ja.Generation, 0, 1))

	jb := b.joined(b.join("billing", "audit", memberB, 0))
	if len(jb.Partitions) != 0 {
		t.Fatalf("b got %v while a holds everything", jb.Partitions)
	}
	ha := a.beaten(a.heartbeat("billing", "audit", memberA, ja.Generation, 0, ja.Partitions))
	if len(ha.Partitions) != 2 || ha.Generation <= ja.Generation {
		t.Fatalf("a after b joined: %+v", ha)
	}
	var revoked []uint32
	for _, p := range ja.Partitions {
		if !slices.Contains(ha.Partitions, p) {
			revoked = append(revoked, p)
		}
	}
	// a still holds what it was revoked: its last commit is accepted.
	a.expectResponse(wire.OpGroupCommit, a.groupCommit("billing", "audit", memberA, ha.Generation, revoked[0], 1))
	if hb := b.beaten(b.heartbeat("billing", "audit", memberB, jb.Generation, 0, nil)); len(hb.Partitions) != 0 {
		t.Fatalf("b got %v before a released", hb.Partitions)
	}
	d := admin.describeGroup("billing", "audit")
	if len(d.Members) != 2 || !slices.Equal(d.Members[0].Revoking, revoked) || d.Members[0].Member != memberA || d.Members[0].ClientID != "raw-0a" {
		t.Fatalf("describe: %+v", d)
	}
	if d.Partitions[revoked[0]].Committed != 1 || d.Partitions[revoked[0]].Lag != d.Partitions[revoked[0]].EndOffset-1 {
		t.Fatalf("describe partition: %+v", d.Partitions[revoked[0]])
	}
	// a releases; b gets the partitions in a newer generation.
	ha2 := a.beaten(a.heartbeat("billing", "audit", memberA, ha.Generation, 0, ha.Partitions))
	hb := b.beaten(b.heartbeat("billing", "audit", memberB, jb.Generation, 0, nil))
	if !slices.Equal(hb.Partitions, revoked) || hb.Generation <= ha.Generation {
		t.Fatalf("b after a released: %+v (a %+v)", hb, ha2)
	}
	eb = a.expectError(a.groupCommit("billing", "audit", memberA, ha2.Generation, revoked[0], 1), wire.CodeFencedMember)
	if !strings.Contains(eb.Message, "does not hold partition") {
		t.Fatalf("fenced message: %q", eb.Message)
	}
	b.expectError(b.groupCommit("billing", "audit", memberB, ha.Generation, revoked[0], 1), wire.CodeFencedMember) // stale generation
	b.expectResponse(wire.OpGroupCommit, b.groupCommit("billing", "audit", memberB, hb.Generation, revoked[0], 0))
	b.expectError(b.groupCommit("billing", "audit", wire.MemberID{0xc}, hb.Generation, revoked[0], 2), wire.CodeUnknownMember)

	l := admin.listGroups("", "", "")
	if len(l.Groups) != 1 || l.Groups[0].Group != "billing" || l.Groups[0].Members != 2 || l.Groups[0].Committed != 2 {
		t.Fatalf("list: %+v", l)
	}
	// Both leave: offset-only commits work again.
	a.expectResponse(wire.OpLeaveGroup, a.send(wire.OpLeaveGroup, (&wire.LeaveGroup{Group: "billing", Topic: "audit", Member: memberA}).AppendTo(nil)))
	admin.expectError(admin.commit("billing", "audit", 0, 1), wire.CodeGroupNotEmpty)
	b.expectResponse(wire.OpLeaveGroup, b.send(wire.OpLeaveGroup, (&wire.LeaveGroup{Group: "billing", Topic: "audit", Member: memberB}).AppendTo(nil)))
	b.expectError(b.send(wire.OpLeaveGroup, (&wire.LeaveGroup{Group: "billing", Topic: "audit", Member: memberB}).AppendTo(nil)), wire.CodeUnknownMember)
	admin.expectResponse(wire.OpCommitOffset, admin.commit("billing", "audit", 0, 1))
	if l := admin.listGroups("audit", "", ""); len(l.Groups) != 1 || l.Groups[0].Members != 0 || l.Groups[0].Generation != 0 {
		t.Fatalf("list after leaving: %+v", l)
	}
}

// A held heartbeat is answered as soon as the member's assignment changes, not at its
// max wait; without change, at the heartbeat interval.
func TestHeldHeartbeatAnsweredOnLeave(t *testing.T) {
	srv := groupBroker(t)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createDurable("audit", 2)
	a := login(t, srv.Addr(), testAdminUser, testAdminPass)
	b := login(t, srv.Addr(), testAdminUser, testAdminPass)
	ja := a.joined(a.join("g", "audit", memberA, 0))
	jb := b.joined(b.join("g", "audit", memberB, 0))
	ha := a.beaten(a.heartbeat("g", "audit", memberA, ja.Generation, 0, ja.Partitions))
	a.beaten(a.heartbeat("g", "audit", memberA, ha.Generation, 0, ha.Partitions)) // releases
	hb := b.beaten(b.heartbeat("g", "audit", memberB, jb.Generation, 0, nil))
	if len(hb.Partitions) != 1 {
		t.Fatalf("b: %+v", hb)
	}
	corr := b.heartbeat("g", "audit", memberB, hb.Generation, time.Minute, hb.Partitions)
	a.ping() // ordering: a's next request comes after b's heartbeat was held
	a.expectResponse(wire.OpLeaveGroup, a.send(wire.OpLeaveGroup, (&wire.LeaveGroup{Group: "g", Topic: "audit", Member: memberA}).AppendTo(nil)))
	f, err := b.readFrame(5 * time.Second) // far below the minute it may be held
	if err != nil {
		t.Fatalf("held heartbeat not answered after a left: %v", err)
	}
	var r wire.HeartbeatResponse
	if f.h.Corr != corr || r.Decode(f.body) != nil || len(r.Partitions) != 2 {
		t.Fatalf("answer %+v corr %d: %+v", f.h, corr, r)
	}
}

// A member whose connection closes while its heartbeat is held expires one session timeout
// after the close, and its partitions go to the other member's held heartbeat.
func TestHeldHeartbeatOfClosedConnectionExpires(t *testing.T) {
	srv := groupBroker(t)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createDurable("audit", 2)
	a := login(t, srv.Addr(), testAdminUser, testAdminPass)
	b := login(t, srv.Addr(), testAdminUser, testAdminPass)
	const session = 600 * time.Millisecond
	ja := a.joined(a.join("g", "audit", memberA, session))
	jb := b.joined(b.join("g", "audit", memberB, 10*time.Second))
	ha := a.beaten(a.heartbeat("g", "audit", memberA, ja.Generation, 0, ja.Partitions))
	a.beaten(a.heartbeat("g", "audit", memberA, ha.Generation, 0, ha.Partitions))
	hb := b.beaten(b.heartbeat("g", "audit", memberB, jb.Generation, 0, nil))
	a.heartbeat("g", "audit", memberA, ha.Generation, time.Minute, ha.Partitions) // held
	a.ping()
	closed := time.Now() // before the close: the broker cannot see it earlier than this
	a.conn.Close()
	corr := b.heartbeat("g", "audit", memberB, hb.Generation, time.Minute, hb.Partitions)
	for {
		r := b.beaten(corr)
		if len(r.Partitions) == 2 {
			break
		}
		corr = b.heartbeat("g", "audit", memberB, r.Generation, time.Minute, r.Partitions)
	}
	if got := time.Since(closed); got < session {
		t.Fatalf("a's partitions moved %v after its close, before its session timeout %v", got, session)
	}
}

// Deleting the topic ends held heartbeats with UNKNOWN_TOPIC; shutting down answers them
// before the goodbye.
func TestHeldHeartbeatOnDeleteAndShutdown(t *testing.T) {
	srv := groupBroker(t)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createDurable("gone", 1)
	admin.createDurable("stay", 1)
	a := login(t, srv.Addr(), testAdminUser, testAdminPass)
	j := a.joined(a.join("g", "gone", memberA, 0))
	corr := a.heartbeat("g", "gone", memberA, j.Generation, time.Minute, j.Partitions)
	a.ping()
	m := wire.TopicName{Name: "gone"}
	admin.expectResponse(wire.OpDeleteTopic, admin.send(wire.OpDeleteTopic, m.AppendTo(nil)))
	a.expectError(corr, wire.CodeUnknownTopic)

	j = a.joined(a.join("g", "stay", memberA, 0))
	corr = a.heartbeat("g", "stay", memberA, j.Generation, time.Minute, j.Partitions)
	a.ping()
	go func() { _ = srv.Shutdown(context.Background()) }()
	if r := a.beaten(corr); !slices.Equal(r.Partitions, j.Partitions) {
		t.Fatalf("at shutdown: %+v", r)
	}
	a.expectError(0, wire.CodeShuttingDown)
}

func TestGroupRequestRefusals(t *testing.T) {
	srv := groupBroker(t)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createDurableFor("mine", 2, "u1", "pw-1")
	admin.createDurableFor("theirs", 2, "u2", "pw-2")
	admin.createTopic("live", 1, "u1", "pw-1")
	u := login(t, srv.Addr(), "u1", "pw-1")
	u.expectError(u.join("g", "theirs", memberA, 0), wire.CodeNotAuthorized)
	u.expectError(u.join("g", "live", memberA, 0), wire.CodeNotSupported)
	eb := u.expectError(u.join("g", "mine", memberA, time.Hour), wire.CodeInvalidRequest)
	if !strings.Contains(eb.Message, "outside the broker's bounds") {
		t.Fatalf("session bounds message: %q", eb.Message)
	}
	u.expectError(u.heartbeat("g", "mine", memberA, 1, 0, nil), wire.CodeUnknownMember)
	j := u.joined(u.join("g", "mine", memberA, 0))
	u.expectError(u.heartbeat("g", "mine", memberA, j.Generation, 0, []uint32{0, 7}), wire.CodeUnknownPartition)
	u.expectError(u.heartbeat("g", "mine", memberA, j.Generation+100, 0, nil), wire.CodeFencedMember)
	u.expectError(u.heartbeat("g", "mine", memberA, j.Generation, 0, nil), wire.CodeUnknownMember) // fenced: removed
	// The user sees only the groups of its topics.
	u.joined(u.join("g", "mine", memberA, 0))
	o := login(t, srv.Addr(), "u2", "pw-2")
	o.joined(o.join("g", "theirs", memberB, 0))
	if l := u.listGroups("", "", ""); len(l.Groups) != 1 || l.Groups[0].Topic != "mine" {
		t.Fatalf("u1 lists %+v", l)
	}
	if l := admin.listGroups("", "", ""); len(l.Groups) != 2 {
		t.Fatalf("admin lists %+v", l)
	}
	if l := admin.listGroups("", "g", "mine"); len(l.Groups) != 1 || l.Groups[0].Topic != "theirs" {
		t.Fatalf("after (g, mine): %+v", l)
	}
}

// LIST_GROUPS pages when the answer would not fit a frame.
func TestListGroupsPages(t *testing.T) {
	srv := startBroker(t, func(c *Config) {
		c.Limits.MaxBatch = 4096
		c.Limits.MaxFrame = 4096 + 1024
		c.Limits.MaxMessage = 1024
	})
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createDurable("audit", 1)
	const n = 100 // 100 groups of 40-byte names: more than a 5 KiB frame
	for i := 0; i < n; i++ {
		admin.expectResponse(wire.OpCommitOffset, admin.commit(strings.Repeat("g", 30)+string(rune('A'+i/26))+string(rune('a'+i%26)), "audit", 0, 0))
	}
	var all []string
	after := ""
	for pages := 0; ; pages++ {
		l := admin.listGroups("audit", after, "audit")
		if after == "" {
			l = admin.listGroups("audit", "", "")
		}
		for _, g := range l.Groups {
			all = append(all, g.Group)
		}
		if !l.More {
			if pages == 0 {
				t.Fatal("everything fitted one page")
			}
			break
		}
		after = all[len(all)-1]
	}
	if len(all) != n || !slices.IsSorted(all) || len(slices.Compact(slices.Clone(all))) != n {
		t.Fatalf("listed %d groups: %v", len(all), all)
	}
}
