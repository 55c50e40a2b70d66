package broker

import (
	"crypto/rand"
	"slices"
	"testing"

	"github.com/lightq/lightq/wire"
)

// The authorization matrix: every request against every kind of principal, on a real broker,
// checking the answer and that a refused request changed nothing. PROTOCOL.md section 5 has
// the table this checks; opNeeds (authz.go) is the broker's.

// Principals of the matrix. Topics "tq" (transient) and "dq" (durable) are the matrix's;
// "theirs" (durable) belongs to another user.
const (
	pNone    = "no AUTH"
	pWrong   = "wrong password"
	pNoRole  = "no role"
	pProduce = "produce"
	pConsume = "consume"
	pBoth    = "both"
	pOther   = "other topic's user"
	pAdmin   = "admin"
	pAdmin2  = "granted admin"
)

var principals = []string{pNone, pWrong, pNoRole, pProduce, pConsume, pBoth, pOther, pAdmin, pAdmin2}

// The users of the principals that log in.
var principalUsers = map[string][2]string{
	pNoRole:  {"norole", "norole-pass-41aa"},
	pProduce: {"producer", "producer-pass-5b2c"},
	pConsume: {"consumer", "consumer-pass-0d9e"},
	pBoth:    {"both", "both-pass-8f31"},
	pOther:   {"other", "other-pass-7c1d"},
	pAdmin:   {testAdminUser, testAdminPass},
	pAdmin2:  {"ops", "ops-pass-2e6b"},
}

const (
	ownerUser, ownerPass = "owner", "owner-pass-9f3e"
	otherUser, otherPass = "other", "other-pass-7c1d"
)

// authzEnv is the broker and an admin connection the cells use to set up and check.
type authzEnv struct {
	srv   *Server
	admin *rawClient
}

// newAuthzEnv starts a broker with the matrix's topics and users: tq (transient, 2
// partitions) and dq (durable) with both (made by CREATE_TOPIC), producer and consumer
// (made by CREATE_USER and GRANT) on them; theirs (durable) with other; norole without roles;
// ops an admin by GRANT. dq holds one message.
func newAuthzEnv(t *testing.T) *authzEnv {
	srv := startBroker(t, nil)
	e := &authzEnv{srv: srv, admin: login(t, srv.Addr(), testAdminUser, testAdminPass)}
	a := e.admin
	both := principalUsers[pBoth]
	a.createTopic("tq", 2, both[0], both[1])
	ct := wire.CreateTopic{Name: "dq", Kind: wire.KindDurable, Partitions: 1, User: both[0], Password: both[1]}
	a.adminDo(wire.OpCreateTopic, ct.AppendTo(nil))
	ct = wire.CreateTopic{Name: "theirs", Kind: wire.KindDurable, Partitions: 1, User: otherUser, Password: otherPass}
	a.adminDo(wire.OpCreateTopic, ct.AppendTo(nil))
	for _, who := range []string{pNoRole, pProduce, pConsume, pAdmin2} {
		u := principalUsers[who]
		a.createUser(u[0], u[1])
	}
	for _, topic := range []string{"tq", "dq"} {
		a.grant("producer", topic, wire.RolesProduce)
		a.grant("consumer", topic, wire.RolesConsume)
	}
	a.grant("ops", "", wire.RolesAdmin)
	a.produce("dq", 0, testBatch(t, "stored"))
	return e
}

// connect opens a connection as the given principal.
func (e *authzEnv) connect(t *testing.T, who string) *rawClient {
	t.Helper()
	switch who {
	case pWrong:
		u := principalUsers[pBoth]
		c := dialRaw(t, e.srv.Addr())
		c.hello()
		m := wire.Auth{User: u[0], Password: u[1] + "-not"}
		c.expectError(c.send(wire.OpAuth, m.AppendTo(nil)), wire.CodeAuthFailed)
		// A good login of the same user from the same address resets that pair's failed
		// logins, so the matrix's wrong-password cells never add up to a block. (Another
		// user's login would not: failures are counted per address and user.)
		login(t, e.srv.Addr(), u[0], u[1]).conn.Close()
		return c
	case pNone:
		c := dialRaw(t, e.srv.Addr())
		c.hello()
		return c
	}
	u, ok := principalUsers[who]
	if !ok {
		t.Fatalf("unknown principal %q", who)
	}
	return login(t, e.srv.Addr(), u[0], u[1])
}

// withT points the admin connection at the running (sub)test.
func (e *authzEnv) withT(t *testing.T) *rawClient {
	e.admin.t = t
	return e.admin
}

// topicNames lists the topics the admin sees.
func (e *authzEnv) topicNames(t *testing.T) []string {
	t.Helper()
	return metadataNames(t, e.withT(t), nil)
}

// metadataNames sends METADATA for names (nil: every topic the caller may see) and returns
// the names in the answer, failing on an ERROR.
func metadataNames(t *testing.T, c *rawClient, names []string) []string {
	t.Helper()
	m := wire.MetadataRequest{Topics: names}
	var resp wire.MetadataResponse
	if err := resp.Decode(c.expectResponse(wire.OpMetadata, c.send(wire.OpMetadata, m.AppendTo(nil)))); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tm := range resp.Topics {
		out = append(out, tm.Name)
	}
	return out
}

// outcome reads the answer to corr: code 0 for the expected success op, else the ERROR's
// code.
func outcome(t *testing.T, c *rawClient, op wire.Op, corr uint32) (wire.Code, []byte) {
	t.Helper()
	f := c.mustRead()
	if f.h.Corr != corr {
		t.Fatalf("answer for corr %d, want %d (%s)", f.h.Corr, corr, f.h.Op)
	}
	switch f.h.Op {
	case op:
		if f.h.Flags&wire.FlagResponse == 0 {
			t.Fatalf("%s answer without FlagResponse", op)
		}
		return 0, f.body
	case wire.OpError:
		var eb wire.ErrorBody
		if err := eb.Decode(f.body); err != nil {
			t.Fatal(err)
		}
		return eb.Code, nil
	}
	t.Fatalf("want %s or ERROR for corr %d, got %s", op, corr, f.h.Op)
	return 0, nil
}

// request sends op with body and returns its outcome.
func request(t *testing.T, c *rawClient, op wire.Op, body []byte) (wire.Code, []byte) {
	t.Helper()
	return outcome(t, c, op, c.send(op, body))
}

// authzOp is one operation of the matrix: run sends op as c, returns the outcome (0 for
// success) and checks the effects that depend on who asked.
type authzOp struct {
	name string
	op   wire.Op
	run  func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code
}

// visible is what a principal's list-all METADATA/STATS must contain and must not contain.
func visible(who string) (want, hide []string) {
	switch who {
	case pAdmin, pAdmin2:
		return []string{"tq", "dq", "theirs"}, nil
	case pProduce, pConsume, pBoth:
		return []string{"tq", "dq"}, []string{"theirs"}
	case pOther:
		return []string{"theirs"}, []string{"tq", "dq"}
	case pNoRole:
		return nil, []string{"tq", "dq", "theirs"}
	}
	return nil, nil
}

func checkVisible(t *testing.T, who string, names []string) {
	t.Helper()
	want, hide := visible(who)
	for _, n := range want {
		if !slices.Contains(names, n) {
			t.Errorf("%s: list-all lacks %q: %v", who, n, names)
		}
	}
	for _, n := range hide {
		if slices.Contains(names, n) {
			t.Errorf("%s: list-all shows %q, which it may not see: %v", who, n, names)
		}
	}
}

// subscribeOrNot subscribes c to tq if it may, returning the subscription id, or an id the
// connection does not have.
func subscribeOrNot(t *testing.T, c *rawClient) uint32 {
	t.Helper()
	m := wire.Subscribe{Topic: "tq", Partition: wire.PartitionAny, Credit: 1 << 20}
	code, body := request(t, c, wire.OpSubscribe, m.AppendTo(nil))
	if code != 0 {
		return 999
	}
	var resp wire.SubscribeResponse
	if err := resp.Decode(body); err != nil {
		t.Fatal(err)
	}
	return resp.SubscriptionID
}

// joinOrNot joins c to group on dq with a fresh member id, if it may.
func joinOrNot(t *testing.T, c *rawClient, group string) (wire.Code, wire.JoinGroupResponse, wire.MemberID) {
	t.Helper()
	var member wire.MemberID
	if _, err := rand.Read(member[:]); err != nil {
		t.Fatal(err)
	}
	m := wire.JoinGroup{Group: group, Topic: "dq", Member: member, SessionTimeoutMs: 10_000}
	code, body := request(t, c, wire.OpJoinGroup, m.AppendTo(nil))
	var resp wire.JoinGroupResponse
	if code == 0 {
		if err := resp.Decode(body); err != nil {
			t.Fatal(err)
		}
	}
	return code, resp, member
}

// leave takes member out of group, so the matrix leaves no member behind.
func leave(t *testing.T, c *rawClient, group string, member wire.MemberID) {
	t.Helper()
	m := wire.LeaveGroup{Group: group, Topic: "dq", Member: member}
	if code, _ := request(t, c, wire.OpLeaveGroup, m.AppendTo(nil)); code != 0 {
		t.Fatalf("LEAVE_GROUP of %s: %v", group, code)
	}
}

// committed is the admin's FETCH_COMMITTED of group on dq.
func committed(t *testing.T, e *authzEnv, group string) int64 {
	t.Helper()
	m := wire.FetchCommitted{Group: group, Topic: "dq"}
	var resp wire.OffsetResponse
	if err := resp.Decode(e.withT(t).expectResponse(wire.OpFetchCommitted, e.admin.send(wire.OpFetchCommitted, m.AppendTo(nil)))); err != nil {
		t.Fatal(err)
	}
	return resp.Offset
}

// batchesIn is the admin's batches_in of topic.
func batchesIn(t *testing.T, e *authzEnv, topic string) uint64 {
	t.Helper()
	st := statsOf(t, e.withT(t), topic)
	n, _ := st.Get("batches_in")
	return n
}

var authzOps = []authzOp{
	{"PING", wire.OpPing, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		code, _ := request(t, c, wire.OpPing, nil)
		return code
	}},
	{"CREATE_TOPIC", wire.OpCreateTopic, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		name := "new-" + slug(who)
		m := wire.CreateTopic{Name: name, Kind: wire.KindTransient, Partitions: 1, User: "new-user-" + slug(who), Password: "np"}
		code, _ := request(t, c, wire.OpCreateTopic, m.AppendTo(nil))
		if exists := slices.Contains(e.topicNames(t), name); exists != (code == 0) {
			t.Errorf("answer %v but topic exists=%v", code, exists)
		}
		return code
	}},
	{"DELETE_TOPIC", wire.OpDeleteTopic, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		name := "del-" + slug(who)
		e.withT(t).createTopic(name, 1, ownerUser, ownerPass)
		m := wire.TopicName{Name: name}
		code, _ := request(t, c, wire.OpDeleteTopic, m.AppendTo(nil))
		if exists := slices.Contains(e.topicNames(t), name); exists == (code == 0) {
			t.Errorf("answer %v but topic exists=%v", code, exists)
		}
		return code
	}},
	{"METADATA named", wire.OpMetadata, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		m := wire.MetadataRequest{Topics: []string{"tq"}}
		code, body := request(t, c, wire.OpMetadata, m.AppendTo(nil))
		if code == 0 {
			var resp wire.MetadataResponse
			if err := resp.Decode(body); err != nil || len(resp.Topics) != 1 || resp.Topics[0].Name != "tq" || resp.Topics[0].User != "both" {
				t.Errorf("metadata %+v, %v", resp.Topics, err)
			}
		}
		return code
	}},
	{"METADATA all", wire.OpMetadata, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		m := wire.MetadataRequest{}
		code, body := request(t, c, wire.OpMetadata, m.AppendTo(nil))
		if code == 0 {
			var resp wire.MetadataResponse
			if err := resp.Decode(body); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tm := range resp.Topics {
				names = append(names, tm.Name)
			}
			checkVisible(t, who, names)
		}
		return code
	}},
	{"STATS named", wire.OpStats, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		m := wire.TopicName{Name: "tq"}
		code, body := request(t, c, wire.OpStats, m.AppendTo(nil))
		if code == 0 {
			var resp wire.StatsResponse
			if err := resp.Decode(body); err != nil || len(resp.Topics) != 1 || resp.Topics[0].Name != "tq" {
				t.Errorf("stats %+v, %v", resp.Topics, err)
			}
		}
		return code
	}},
	{"STATS all", wire.OpStats, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		m := wire.TopicName{}
		code, body := request(t, c, wire.OpStats, m.AppendTo(nil))
		if code == 0 {
			var resp wire.StatsResponse
			if err := resp.Decode(body); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, ts := range resp.Topics {
				names = append(names, ts.Name)
			}
			checkVisible(t, who, names)
		}
		return code
	}},
	// Transient batches take the broker's direct path (produceDirect), durable ones the
	// general one (handleProduce): both are checked.
	{"PRODUCE transient", wire.OpProduce, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		before := batchesIn(t, e, "tq")
		code, _ := request(t, c, wire.OpProduce, produceBody("tq", 0, wire.AcksWritten, testBatch(t, "x")))
		if stored := batchesIn(t, e, "tq") == before+1; stored != (code == 0) {
			t.Errorf("answer %v but stored=%v", code, stored)
		}
		return code
	}},
	{"PRODUCE durable", wire.OpProduce, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		before := batchesIn(t, e, "dq")
		code, _ := request(t, c, wire.OpProduce, produceBody("dq", 0, wire.AcksWritten, testBatch(t, "x")))
		if stored := batchesIn(t, e, "dq") == before+1; stored != (code == 0) {
			t.Errorf("answer %v but stored=%v", code, stored)
		}
		return code
	}},
	{"INIT_PRODUCER", wire.OpInitProducer, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		m := wire.InitProducer{PreviousID: wire.NoProducer, PreviousEpoch: wire.NoProducer}
		code, body := request(t, c, wire.OpInitProducer, m.AppendTo(nil))
		if code == 0 {
			var resp wire.InitProducerResponse
			if err := resp.Decode(body); err != nil || resp.ProducerID < 0 {
				t.Errorf("INIT_PRODUCER answer %+v, %v", resp, err)
			}
		}
		return code
	}},
	{"SUBSCRIBE", wire.OpSubscribe, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		m := wire.Subscribe{Topic: "tq", Partition: wire.PartitionAny, Credit: 1 << 20}
		code, _ := request(t, c, wire.OpSubscribe, m.AppendTo(nil))
		return code
	}},
	{"UNSUBSCRIBE", wire.OpUnsubscribe, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		m := wire.Unsubscribe{SubscriptionID: subscribeOrNot(t, c)}
		code, _ := request(t, c, wire.OpUnsubscribe, m.AppendTo(nil))
		return code
	}},
	{"CREDIT", wire.OpCredit, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		// CREDIT has no success answer: success is the PING behind it answered first.
		m := wire.Credit{SubscriptionID: subscribeOrNot(t, c), Bytes: 1024}
		corr := c.send(wire.OpCredit, m.AppendTo(nil))
		ping := c.send(wire.OpPing, nil)
		f := c.mustRead()
		if f.h.Op == wire.OpPing && f.h.Corr == ping {
			return 0
		}
		var eb wire.ErrorBody
		if f.h.Op != wire.OpError || f.h.Corr != corr || eb.Decode(f.body) != nil {
			t.Fatalf("after CREDIT %d and PING %d: %s corr %d", corr, ping, f.h.Op, f.h.Corr)
		}
		c.expectResponse(wire.OpPing, ping)
		return eb.Code
	}},
	{"FETCH", wire.OpFetch, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		m := wire.Fetch{Topic: "dq", Offset: 0, MaxBytes: 1 << 20}
		code, body := request(t, c, wire.OpFetch, m.AppendTo(nil))
		if code == 0 {
			var resp wire.FetchResponse
			if err := resp.Decode(body); err != nil || len(resp.Batches) == 0 {
				t.Errorf("FETCH answered %d bytes of batches, %v", len(resp.Batches), err)
			}
		}
		return code
	}},
	{"LIST_OFFSETS", wire.OpListOffsets, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		m := wire.ListOffsets{Topic: "dq", Mode: wire.OffsetEarliest}
		code, _ := request(t, c, wire.OpListOffsets, m.AppendTo(nil))
		return code
	}},
	{"COMMIT_OFFSET", wire.OpCommitOffset, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		group := "g-" + slug(who)
		m := wire.CommitOffset{Group: group, Topic: "dq", Offset: 1}
		code, _ := request(t, c, wire.OpCommitOffset, m.AppendTo(nil))
		if stored := committed(t, e, group) == 1; stored != (code == 0) {
			t.Errorf("answer %v but committed=%v", code, stored)
		}
		return code
	}},
	{"FETCH_COMMITTED", wire.OpFetchCommitted, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		m := wire.FetchCommitted{Group: "g", Topic: "dq"}
		code, _ := request(t, c, wire.OpFetchCommitted, m.AppendTo(nil))
		return code
	}},
	{"JOIN_GROUP", wire.OpJoinGroup, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		code, _, member := joinOrNot(t, c, "gj-"+slug(who))
		if code == 0 {
			leave(t, c, "gj-"+slug(who), member)
		}
		return code
	}},
	{"HEARTBEAT", wire.OpHeartbeat, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		group := "gh-" + slug(who)
		_, resp, member := joinOrNot(t, c, group)
		m := wire.Heartbeat{Group: group, Topic: "dq", Member: member, Generation: resp.Generation, Owned: resp.Partitions}
		code, _ := request(t, c, wire.OpHeartbeat, m.AppendTo(nil))
		if code == 0 {
			leave(t, c, group, member)
		}
		return code
	}},
	{"LEAVE_GROUP", wire.OpLeaveGroup, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		group := "gl-" + slug(who)
		_, _, member := joinOrNot(t, c, group)
		m := wire.LeaveGroup{Group: group, Topic: "dq", Member: member}
		code, _ := request(t, c, wire.OpLeaveGroup, m.AppendTo(nil))
		return code
	}},
	{"GROUP_COMMIT", wire.OpGroupCommit, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		group := "gc-" + slug(who)
		_, resp, member := joinOrNot(t, c, group)
		var part uint32
		if len(resp.Partitions) > 0 {
			part = resp.Partitions[0]
		}
		m := wire.GroupCommit{Group: group, Topic: "dq", Member: member, Generation: resp.Generation, Partition: part, Offset: 1}
		code, _ := request(t, c, wire.OpGroupCommit, m.AppendTo(nil))
		if code == 0 {
			leave(t, c, group, member)
		}
		if stored := committed(t, e, group) == 1; stored != (code == 0) {
			t.Errorf("answer %v but committed=%v", code, stored)
		}
		return code
	}},
	{"LIST_GROUPS named", wire.OpListGroups, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		m := wire.ListGroups{Topic: "dq"}
		code, _ := request(t, c, wire.OpListGroups, m.AppendTo(nil))
		return code
	}},
	{"LIST_GROUPS all", wire.OpListGroups, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		code, body := request(t, c, wire.OpListGroups, (&wire.ListGroups{}).AppendTo(nil))
		if code == 0 {
			var resp wire.ListGroupsResponse
			if err := resp.Decode(body); err != nil {
				t.Fatal(err)
			}
			_, hide := visible(who)
			for _, g := range resp.Groups {
				for _, h := range hide {
					if g.Topic == h {
						t.Errorf("%s's LIST_GROUPS shows group %q of topic %q", who, g.Group, h)
					}
				}
			}
		}
		return code
	}},
	{"DESCRIBE_GROUP", wire.OpDescribeGroup, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		m := wire.DescribeGroup{Group: "g", Topic: "dq"}
		code, _ := request(t, c, wire.OpDescribeGroup, m.AppendTo(nil))
		return code
	}},
	{"FIND_COORDINATOR", wire.OpFindCoordinator, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		m := wire.FindCoordinator{Group: "g"}
		code, body := request(t, c, wire.OpFindCoordinator, m.AppendTo(nil))
		if code == 0 {
			var resp wire.FindCoordinatorResponse
			if err := resp.Decode(body); err != nil || resp.Coordinator != e.srv.nodeID() || resp.Node != resp.Coordinator || resp.Addr != "" {
				t.Errorf("FIND_COORDINATOR without a cluster: %+v, %v", resp, err)
			}
		}
		return code
	}},
	{"CREATE_USER", wire.OpCreateUser, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		name := "u-" + slug(who)
		m := wire.UserPassword{User: name, Password: "pw"}
		code, _ := request(t, c, wire.OpCreateUser, m.AppendTo(nil))
		if exists := userExists(t, e.withT(t), name); exists != (code == 0) {
			t.Errorf("answer %v but user exists=%v", code, exists)
		}
		return code
	}},
	{"DELETE_USER", wire.OpDeleteUser, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		name := "d-" + slug(who)
		e.withT(t).createUser(name, "pw")
		m := wire.UserName{User: name}
		code, _ := request(t, c, wire.OpDeleteUser, m.AppendTo(nil))
		if exists := userExists(t, e.withT(t), name); exists == (code == 0) {
			t.Errorf("answer %v but user exists=%v", code, exists)
		}
		return code
	}},
	{"SET_PASSWORD", wire.OpSetPassword, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		name := "p-" + slug(who)
		e.withT(t).createUser(name, "old")
		before := e.srv.lookupUser(name).hash
		m := wire.UserPassword{User: name, Password: "new"}
		code, _ := request(t, c, wire.OpSetPassword, m.AppendTo(nil))
		if changed := e.srv.lookupUser(name).hash != before; changed != (code == 0) {
			t.Errorf("answer %v but password changed=%v", code, changed)
		}
		return code
	}},
	{"GRANT", wire.OpGrant, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		name := "g-" + slug(who)
		e.withT(t).createUser(name, "pw")
		m := wire.Grant{User: name, Topic: "tq", Roles: wire.RolesConsume}
		code, _ := request(t, c, wire.OpGrant, m.AppendTo(nil))
		if granted := rolesOf(t, e.withT(t), name, "tq") == int(wire.RolesConsume); granted != (code == 0) {
			t.Errorf("answer %v but granted=%v", code, granted)
		}
		return code
	}},
	{"REVOKE", wire.OpRevoke, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		name := "r-" + slug(who)
		e.withT(t).createUser(name, "pw")
		e.admin.grant(name, "tq", wire.RolesBoth)
		m := wire.Grant{User: name, Topic: "tq", Roles: wire.RolesConsume}
		code, _ := request(t, c, wire.OpRevoke, m.AppendTo(nil))
		if revoked := rolesOf(t, e.withT(t), name, "tq") == int(wire.RolesProduce); revoked != (code == 0) {
			t.Errorf("answer %v but revoked=%v", code, revoked)
		}
		return code
	}},
	{"CLUSTER_STATUS", wire.OpClusterStatus, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		code, body := request(t, c, wire.OpClusterStatus, (&wire.ClusterStatus{}).AppendTo(nil))
		if code == 0 {
			// A broker without cluster settings: not a member, no replicated topics.
			var resp wire.ClusterStatusResponse
			if err := resp.Decode(body); err != nil || resp.Member || resp.NodeID == 0 || len(resp.Topics) != 0 {
				t.Errorf("CLUSTER_STATUS %+v, %v", resp, err)
			}
		}
		return code
	}},
	{"LIST_USERS", wire.OpListUsers, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		m := wire.ListUsers{Topic: "tq"}
		code, body := request(t, c, wire.OpListUsers, m.AppendTo(nil))
		if code == 0 {
			var resp wire.ListUsersResponse
			if err := resp.Decode(body); err != nil || !slices.Contains(resp.Entries, wire.UserRoles{User: "both", Topic: "tq", Roles: wire.RolesBoth}) {
				t.Errorf("LIST_USERS %+v, %v", resp.Entries, err)
			}
		}
		return code
	}},
}

func slug(who string) string {
	out := make([]byte, 0, len(who))
	for i := 0; i < len(who); i++ {
		if ch := who[i]; ch >= 'a' && ch <= 'z' {
			out = append(out, ch)
		}
	}
	return string(out)
}

// TestAuthorizationMatrix checks every request against every kind of principal, as
// PROTOCOL.md section 5 specifies, and that the matrix covers every request with a rule.
func TestAuthorizationMatrix(t *testing.T) {
	const ok = wire.Code(0)
	na, nauth, nosub := wire.CodeNotAuthorized, wire.CodeNotAuthenticated, wire.CodeUnknownSubscription
	type row [9]wire.Code // in the order of principals
	//                 none   wrong  norole produce consume both  other  admin admin2
	adminOnly := row{nauth, nauth, na, na, na, na, na, ok, ok}
	describe := row{nauth, nauth, na, ok, ok, ok, na, ok, ok}
	listAll := row{nauth, nauth, ok, ok, ok, ok, ok, ok, ok}
	produce := row{nauth, nauth, na, ok, na, ok, na, ok, ok}
	consume := row{nauth, nauth, na, na, ok, ok, na, ok, ok}
	ownSubs := row{nauth, nauth, nosub, nosub, ok, ok, nosub, ok, ok}
	notsup := wire.CodeNotSupported
	clusterOnly := row{nauth, nauth, na, na, na, na, na, notsup, notsup}
	expect := map[string]row{
		"PING":              {ok, ok, ok, ok, ok, ok, ok, ok, ok},
		"CREATE_TOPIC":      adminOnly,
		"DELETE_TOPIC":      adminOnly,
		"METADATA named":    describe,
		"METADATA all":      listAll,
		"STATS named":       describe,
		"STATS all":         listAll,
		"PRODUCE transient": produce,
		"PRODUCE durable":   produce,
		"INIT_PRODUCER":     listAll, // a login is enough
		"SUBSCRIBE":         consume,
		"UNSUBSCRIBE":       ownSubs,
		"CREDIT":            ownSubs,
		"FETCH":             consume,
		"LIST_OFFSETS":      consume,
		"COMMIT_OFFSET":     consume,
		"FETCH_COMMITTED":   consume,
		"JOIN_GROUP":        consume,
		"HEARTBEAT":         consume,
		"LEAVE_GROUP":       consume,
		"GROUP_COMMIT":      consume,
		"LIST_GROUPS named": consume,
		"LIST_GROUPS all":   listAll,
		"DESCRIBE_GROUP":    consume,
		"FIND_COORDINATOR":  listAll, // a login is enough: it names a broker, nothing of a topic
		"CREATE_USER":       adminOnly,
		"DELETE_USER":       adminOnly,
		"SET_PASSWORD":      adminOnly,
		"GRANT":             adminOnly,
		"REVOKE":            adminOnly,
		"LIST_USERS":        adminOnly,
		"ADD_BROKER":        clusterOnly,
		"MOVE_REPLICAS":     clusterOnly,
		"DRAIN_BROKER":      clusterOnly,
		"REMOVE_BROKER":     clusterOnly,
		"MEMBERSHIP":        adminOnly,
		"CLUSTER_STATUS":    adminOnly,
	}
	covered := map[wire.Op]bool{wire.OpHello: true, wire.OpAuth: true} // every cell uses them
	for _, op := range authzOps {
		covered[op.op] = true
		if _, ok := expect[op.name]; !ok {
			t.Fatalf("no expected row for %s", op.name)
		}
	}
	for i := range 256 {
		if op := wire.Op(i); opNeeds[op] != needUnset && !covered[op] {
			t.Errorf("%v has a rule in opNeeds but no row in the matrix", op)
		}
	}

	env := newAuthzEnv(t)
	for _, op := range authzOps {
		for i, who := range principals {
			want := expect[op.name][i]
			t.Run(op.name+"/"+who, func(t *testing.T) {
				c := env.connect(t, who)
				got := op.run(t, env, c, who)
				if got != want {
					name := func(c wire.Code) string {
						if c == 0 {
							return "success"
						}
						return c.String()
					}
					t.Fatalf("%s as %s: got %s, want %s", op.name, who, name(got), name(want))
				}
				c.ping() // none of these answers closes the connection
				c.conn.Close()
			})
		}
	}
	env.admin.t = t
	env.admin.ping()
}

// TestEveryOpHasARule: every request of the protocol has a row in opNeeds, and nothing else
// does (ERROR and DELIVER are not requests).
func TestEveryOpHasARule(t *testing.T) {
	for i := range 256 {
		op := wire.Op(i)
		isRequest := op.Known() && op != wire.OpError && op != wire.OpDeliver
		if has := opNeeds[op] != needUnset; has != isRequest {
			t.Errorf("%v: rule %v, but it is a request: %v", op, opNeeds[op], isRequest)
		}
	}
}

// TestReauthReplacesPrincipal: a second successful AUTH replaces the connection's principal
// (PROTOCOL.md 4.2), both ways.
func TestReauthReplacesPrincipal(t *testing.T) {
	srv := startBroker(t, nil)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createTopic("owned", 1, ownerUser, ownerPass)
	admin.createTopic("theirs", 1, otherUser, otherPass)

	c := login(t, srv.Addr(), testAdminUser, testAdminPass)
	if names := metadataNames(t, c, nil); len(names) != 2 {
		t.Fatalf("admin sees %v", names)
	}
	m := wire.Auth{User: ownerUser, Password: ownerPass}
	var ar wire.AuthResponse
	if err := ar.Decode(c.expectResponse(wire.OpAuth, c.send(wire.OpAuth, m.AppendTo(nil)))); err != nil || ar.Role != wire.RoleUser {
		t.Fatalf("re-AUTH as topic user: role %d, %v", ar.Role, err)
	}
	if names := metadataNames(t, c, nil); !slices.Equal(names, []string{"owned"}) {
		t.Fatalf("after re-AUTH as %s, list-all shows %v", ownerUser, names)
	}
	ct := wire.CreateTopic{Name: "x", Kind: wire.KindTransient, Partitions: 1, User: "xu", Password: "xp"}
	c.expectError(c.send(wire.OpCreateTopic, ct.AppendTo(nil)), wire.CodeNotAuthorized)
	c.expectError(c.send(wire.OpProduce, produceBody("theirs", 0, wire.AcksWritten, testBatch(t, "x"))), wire.CodeNotAuthorized)
	c.auth(testAdminUser, testAdminPass)
	c.expectResponse(wire.OpCreateTopic, c.send(wire.OpCreateTopic, ct.AppendTo(nil)))
}

// TestFailedReauthDropsPrincipal: PROTOCOL.md 4.2 says "A failed AUTH leaves the connection
// unauthenticated", also on a connection that had authenticated before.
func TestFailedReauthDropsPrincipal(t *testing.T) {
	srv := startBroker(t, nil)
	c := login(t, srv.Addr(), testAdminUser, testAdminPass)
	m := wire.Auth{User: testAdminUser, Password: "wrong"}
	c.expectError(c.send(wire.OpAuth, m.AppendTo(nil)), wire.CodeAuthFailed)
	md := wire.MetadataRequest{}
	c.expectError(c.send(wire.OpMetadata, md.AppendTo(nil)), wire.CodeNotAuthenticated)
}

// TestTopicUserCannotProbeTopicNames: PROTOCOL.md section 5: "a topic user gets
// NOT_AUTHORIZED for another user's topic whether or not that topic exists, so it cannot
// probe topic names". The admin still gets UNKNOWN_TOPIC.
func TestTopicUserCannotProbeTopicNames(t *testing.T) {
	srv := startBroker(t, nil)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createTopic("owned", 1, ownerUser, ownerPass)
	admin.createTopic("theirs", 1, otherUser, otherPass)
	c := login(t, srv.Addr(), ownerUser, ownerPass)
	for _, name := range []string{"theirs", "no-such-topic"} {
		md := wire.MetadataRequest{Topics: []string{name}}
		c.expectError(c.send(wire.OpMetadata, md.AppendTo(nil)), wire.CodeNotAuthorized)
		st := wire.TopicName{Name: name}
		c.expectError(c.send(wire.OpStats, st.AppendTo(nil)), wire.CodeNotAuthorized)
		c.expectError(c.send(wire.OpProduce, produceBody(name, 0, wire.AcksWritten, testBatch(t, "x"))), wire.CodeNotAuthorized)
		sub := wire.Subscribe{Topic: name, Partition: wire.PartitionAny, Credit: 1}
		c.expectError(c.send(wire.OpSubscribe, sub.AppendTo(nil)), wire.CodeNotAuthorized)
	}
	md := wire.MetadataRequest{Topics: []string{"no-such-topic"}}
	admin.expectError(admin.send(wire.OpMetadata, md.AppendTo(nil)), wire.CodeUnknownTopic)
}

// TestErrorFramesFlags: PROTOCOL.md section 2: "The broker sets FlagResponse on every
// successful answer (the request's op echoed back). ERROR frames and DELIVER frames have
// flags 0."
func TestErrorFramesFlags(t *testing.T) {
	srv := startBroker(t, nil)
	c := login(t, srv.Addr(), testAdminUser, testAdminPass)
	m := wire.TopicName{Name: "nope"}
	corr := c.send(wire.OpStats, m.AppendTo(nil))
	f := c.mustRead()
	if f.h.Op != wire.OpError || f.h.Corr != corr || f.h.Flags != 0 {
		t.Fatalf("answer to a bad STATS: %s corr %d flags %#x, want ERROR corr %d flags 0", f.h.Op, f.h.Corr, f.h.Flags, corr)
	}
	// A connection-level ERROR has flags 0.
	c.write(rawHeader(12, wire.Magic, 9, wire.OpPing, 0, 0, 1))
	f = c.mustRead()
	if f.h.Op != wire.OpError || f.h.Corr != 0 || f.h.Flags != 0 {
		t.Fatalf("stream-level error: %s corr %d flags %#x", f.h.Op, f.h.Corr, f.h.Flags)
	}
}
