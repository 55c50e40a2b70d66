package broker

import (
	"slices"
	"testing"

	"github.com/lightq/lightq/wire"
)

// Principals of the authorization matrix. Topic "owned" belongs to user "owner"; topic
// "theirs" belongs to user "other".
const (
	pAdmin = "admin"
	pOwner = "topic user"
	pOther = "other topic's user"
	pWrong = "wrong password"
	pNone  = "no AUTH"
)

const (
	ownerUser, ownerPass = "owner", "owner-pass-9f3e"
	otherUser, otherPass = "other", "other-pass-7c1d"
)

// authzEnv is the broker and an admin connection the cells use to set up and check.
type authzEnv struct {
	srv   *Server
	admin *rawClient
}

// connect opens a connection as the given principal.
func (e *authzEnv) connect(t *testing.T, who string) *rawClient {
	t.Helper()
	switch who {
	case pAdmin:
		return login(t, e.srv.Addr(), testAdminUser, testAdminPass)
	case pOwner:
		return login(t, e.srv.Addr(), ownerUser, ownerPass)
	case pOther:
		return login(t, e.srv.Addr(), otherUser, otherPass)
	case pWrong:
		c := dialRaw(t, e.srv.Addr())
		c.hello()
		m := wire.Auth{User: ownerUser, Password: ownerPass + "-not"}
		c.expectError(c.send(wire.OpAuth, m.AppendTo(nil)), wire.CodeAuthFailed)
		// A good login of the same user from the same address resets that pair's failed
		// logins, so the matrix's wrong-password cells never add up to a block. (Another
		// user's login would not: failures are counted per address and user.)
		login(t, e.srv.Addr(), ownerUser, ownerPass).conn.Close()
		return c
	case pNone:
		c := dialRaw(t, e.srv.Addr())
		c.hello()
		return c
	}
	t.Fatalf("unknown principal %q", who)
	return nil
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

// outcome reads the answer to corr: nil error code 0 for the expected success op, else the
// ERROR's code.
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

// authzOp is one operation of the matrix. run sends it as c, returns the outcome (0 for
// success) and checks the effects that depend on who asked.
type authzOp struct {
	name string
	run  func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code
}

// visible is what a principal's list-all METADATA/STATS must contain and must not contain.
func visible(who string) (want, hide []string) {
	switch who {
	case pAdmin:
		return []string{"owned", "theirs"}, nil
	case pOwner:
		return []string{"owned"}, []string{"theirs"}
	case pOther:
		return []string{"theirs"}, []string{"owned"}
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

var authzOps = []authzOp{
	{"CREATE_TOPIC", func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		name := "new-" + slug(who)
		m := wire.CreateTopic{Name: name, Kind: wire.KindTransient, Partitions: 1, User: "new-user-" + slug(who), Password: "np"}
		code, _ := outcome(t, c, wire.OpCreateTopic, c.send(wire.OpCreateTopic, m.AppendTo(nil)))
		if exists := slices.Contains(e.topicNames(t), name); exists != (code == 0) {
			t.Errorf("answer %v but topic exists=%v", code, exists)
		}
		return code
	}},
	{"DELETE_TOPIC", func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		// A topic of the owner's, made for this cell.
		name := "del-" + slug(who)
		e.withT(t).createTopic(name, 1, ownerUser, ownerPass)
		m := wire.TopicName{Name: name}
		code, _ := outcome(t, c, wire.OpDeleteTopic, c.send(wire.OpDeleteTopic, m.AppendTo(nil)))
		if exists := slices.Contains(e.topicNames(t), name); exists == (code == 0) {
			t.Errorf("answer %v but topic exists=%v", code, exists)
		}
		return code
	}},
	{"METADATA named", func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		m := wire.MetadataRequest{Topics: []string{"owned"}}
		code, body := outcome(t, c, wire.OpMetadata, c.send(wire.OpMetadata, m.AppendTo(nil)))
		if code == 0 {
			var resp wire.MetadataResponse
			if err := resp.Decode(body); err != nil || len(resp.Topics) != 1 || resp.Topics[0].Name != "owned" || resp.Topics[0].User != ownerUser {
				t.Errorf("metadata %+v, %v", resp.Topics, err)
			}
		}
		return code
	}},
	{"METADATA all", func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		m := wire.MetadataRequest{}
		code, body := outcome(t, c, wire.OpMetadata, c.send(wire.OpMetadata, m.AppendTo(nil)))
		if code == 0 {
			var resp wire.MetadataResponse
			if err := resp.Decode(body); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tm := range resp.Topics {
				names = append(names, tm.Name)
				if who == pOwner && tm.User != ownerUser || who == pOther && tm.User != otherUser {
					t.Errorf("%s sees topic %q of user %q", who, tm.Name, tm.User)
				}
			}
			checkVisible(t, who, names)
		}
		return code
	}},
	{"STATS named", func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		m := wire.TopicName{Name: "owned"}
		code, body := outcome(t, c, wire.OpStats, c.send(wire.OpStats, m.AppendTo(nil)))
		if code == 0 {
			var resp wire.StatsResponse
			if err := resp.Decode(body); err != nil || len(resp.Topics) != 1 || resp.Topics[0].Name != "owned" {
				t.Errorf("stats %+v, %v", resp.Topics, err)
			}
		}
		return code
	}},
	{"STATS all", func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		m := wire.TopicName{}
		code, body := outcome(t, c, wire.OpStats, c.send(wire.OpStats, m.AppendTo(nil)))
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
	{"PRODUCE", func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		st := statsOf(t, e.withT(t), "owned")
		before, _ := st.Get("batches_in")
		code, _ := outcome(t, c, wire.OpProduce, c.send(wire.OpProduce, produceBody("owned", 0, wire.AcksWritten, testBatch(t, "x"))))
		st = statsOf(t, e.withT(t), "owned")
		after, _ := st.Get("batches_in")
		if stored := after == before+1; stored != (code == 0) {
			t.Errorf("answer %v but batches_in went %d -> %d", code, before, after)
		}
		return code
	}},
	{"SUBSCRIBE", func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		m := wire.Subscribe{Topic: "owned", Partition: wire.PartitionAny, Credit: 1 << 20}
		code, _ := outcome(t, c, wire.OpSubscribe, c.send(wire.OpSubscribe, m.AppendTo(nil)))
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

// TestAuthorizationMatrix checks every operation against every kind of principal, as
// PROTOCOL.md section 5 specifies.
func TestAuthorizationMatrix(t *testing.T) {
	const ok = wire.Code(0)
	na, nauth := wire.CodeNotAuthorized, wire.CodeNotAuthenticated
	principals := []string{pAdmin, pOwner, pOther, pWrong, pNone}
	expect := map[string][5]wire.Code{ // in the order of principals
		"CREATE_TOPIC":   {ok, na, na, nauth, nauth},
		"DELETE_TOPIC":   {ok, na, na, nauth, nauth},
		"METADATA named": {ok, ok, na, nauth, nauth},
		"METADATA all":   {ok, ok, ok, nauth, nauth},
		"STATS named":    {ok, ok, na, nauth, nauth},
		"STATS all":      {ok, ok, ok, nauth, nauth},
		"PRODUCE":        {ok, ok, na, nauth, nauth},
		"SUBSCRIBE":      {ok, ok, na, nauth, nauth},
	}
	srv := startBroker(t, nil)
	env := &authzEnv{srv: srv, admin: login(t, srv.Addr(), testAdminUser, testAdminPass)}
	env.admin.createTopic("owned", 2, ownerUser, ownerPass)
	env.admin.createTopic("theirs", 1, otherUser, otherPass)

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
