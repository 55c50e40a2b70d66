package broker

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lightq/lightq/wire"
)

// What a change of rights does to connections already logged in (PROTOCOL.md section 5): it
// counts from their next request, REVOKE ends what they may no longer hold, DELETE_USER makes
// them pre-auth again, SET_PASSWORD leaves them alone.

// expectErrorMsg reads an ERROR for corr with code whose message contains want.
func expectErrorMsg(c *rawClient, corr uint32, code wire.Code, want string) {
	c.t.Helper()
	if eb := c.expectError(corr, code); !strings.Contains(eb.Message, want) {
		c.t.Fatalf("ERROR %v for corr %d says %q, want %q in it", code, corr, eb.Message, want)
	}
}

// TestRoleChangesCountOnLiveConnections: GRANT and REVOKE apply to the next request of a
// connection logged in before them, without a new AUTH, both ways.
func TestRoleChangesCountOnLiveConnections(t *testing.T) {
	srv := startBroker(t, nil)
	a := login(t, srv.Addr(), testAdminUser, testAdminPass)
	a.createBare("d", wire.KindDurable, 1)
	a.createUser("late", "late-pw")
	a.grant("late", "d", wire.RolesProduce)
	c := login(t, srv.Addr(), "late", "late-pw")
	c.produce("d", 0, testBatch(t, "one"))
	fetch := wire.Fetch{Topic: "d", MaxBytes: 1 << 20}
	expectErrorMsg(c, c.send(wire.OpFetch, fetch.AppendTo(nil)), wire.CodeNotAuthorized, "needs the consume role")

	a.grant("late", "d", wire.RolesConsume)
	c.expectResponse(wire.OpFetch, c.send(wire.OpFetch, fetch.AppendTo(nil)))
	a.revoke("late", "d", wire.RolesProduce)
	c.expectError(c.send(wire.OpProduce, produceBody("d", 0, wire.AcksWritten, testBatch(t, "two"))), wire.CodeNotAuthorized)
	c.expectResponse(wire.OpFetch, c.send(wire.OpFetch, fetch.AppendTo(nil)))
	a.revoke("late", "d", wire.RolesConsume)
	if names := metadataNames(t, c, nil); len(names) != 0 {
		t.Fatalf("without roles the connection still sees %v", names)
	}
	c.expectError(c.send(wire.OpFetch, fetch.AppendTo(nil)), wire.CodeNotAuthorized)

	// The admin role too: granted, the same connection may create topics; revoked, not.
	ct := wire.CreateTopic{Name: "made-by-late", Kind: wire.KindTransient, Partitions: 1}
	c.expectError(c.send(wire.OpCreateTopic, ct.AppendTo(nil)), wire.CodeNotAuthorized)
	a.grant("late", "", wire.RolesAdmin)
	c.expectResponse(wire.OpCreateTopic, c.send(wire.OpCreateTopic, ct.AppendTo(nil)))
	c.expectResponse(wire.OpFetch, c.send(wire.OpFetch, fetch.AppendTo(nil)))
	a.revoke("late", "", wire.RolesAdmin)
	c.expectError(c.send(wire.OpDeleteTopic, (&wire.TopicName{Name: "made-by-late"}).AppendTo(nil)), wire.CodeNotAuthorized)
	// A new login reports the role it gets.
	a.grant("late", "", wire.RolesAdmin)
	n := dialRaw(t, srv.Addr())
	n.hello()
	var ar wire.AuthResponse
	if err := ar.Decode(n.expectResponse(wire.OpAuth, n.send(wire.OpAuth, (&wire.Auth{User: "late", Password: "late-pw"}).AppendTo(nil)))); err != nil || ar.Role != wire.RoleAdmin {
		t.Fatalf("AUTH of a granted admin: role %d, %v", ar.Role, err)
	}
}

// TestRevokeEndsWhatTheUserHeld: taking the consume role ends the user's subscriptions and
// waiting FETCHes on that topic with NOT_AUTHORIZED before REVOKE is answered: a batch
// produced after the answer is not delivered. The connection stays logged in, and what it
// holds on other topics goes on.
func TestRevokeEndsWhatTheUserHeld(t *testing.T) {
	srv := startBroker(t, nil)
	a := login(t, srv.Addr(), testAdminUser, testAdminPass)
	a.createBare("live", wire.KindTransient, 1)
	a.createBare("kept", wire.KindTransient, 1)
	a.createBare("d", wire.KindDurable, 1)
	a.createUser("reader", "r-pw")
	for _, topic := range []string{"live", "kept", "d"} {
		a.grant("reader", topic, wire.RolesConsume)
	}
	c := login(t, srv.Addr(), "reader", "r-pw")
	sub := c.subscribe("live", 0, "", 1<<20)
	kept := c.subscribe("kept", 0, "", 1<<20)
	fetch := wire.Fetch{Topic: "d", MaxBytes: 1 << 20, MaxWaitMs: 60_000} // waits: the log is empty
	fetchCorr := c.send(wire.OpFetch, fetch.AppendTo(nil))
	c.ping() // the FETCH was taken up and waits

	a.revoke("reader", "live", wire.RolesConsume)
	a.produce("live", 0, testBatch(t, "after the revoke"))
	a.produce("kept", 0, testBatch(t, "still mine"))
	expectErrorMsg(c, sub, wire.CodeNotAuthorized, "no longer holds the consume role")
	if d := c.readDeliver(); d.sub != kept || !slices.Equal(d.values, []string{"still mine"}) {
		t.Fatalf("after the revoke: DELIVER for subscription %d %q, want %d", d.sub, d.values, kept)
	}
	a.revoke("reader", "d", wire.RolesConsume)
	expectErrorMsg(c, fetchCorr, wire.CodeNotAuthorized, "FETCH on \"d\" ended")
	c.ping()
	unsub := wire.Unsubscribe{SubscriptionID: sub}
	c.expectError(c.send(wire.OpUnsubscribe, unsub.AppendTo(nil)), wire.CodeUnknownSubscription)
}

// TestDeleteUserDeauthorises: DELETE_USER makes the user's connections pre-auth again: what
// they held ends saying why, requests get NOT_AUTHENTICATED, the AUTH deadline runs again,
// and a new AUTH (here as another user) works. Another user's connection is not touched.
func TestDeleteUserDeauthorises(t *testing.T) {
	const authTimeout = 2 * time.Second
	srv := startBroker(t, func(c *Config) { c.Limits.AuthTimeout = authTimeout })
	a := login(t, srv.Addr(), testAdminUser, testAdminPass)
	a.createTopic("t", 1, "doomed", "d-pw")
	a.grant("doomed", "t", wire.RolesBoth)
	a.createUser("bystander", "b-pw")
	a.grant("bystander", "t", wire.RolesConsume)
	c := login(t, srv.Addr(), "doomed", "d-pw")
	other := login(t, srv.Addr(), "doomed", "d-pw")
	by := login(t, srv.Addr(), "bystander", "b-pw")
	sub := c.subscribe("t", 0, "", 1<<20)
	bySub := by.subscribe("t", 0, "", 1<<20)

	beforeDelete := time.Now() // the new AUTH deadline starts after it
	a.deleteUser("doomed")
	expectErrorMsg(c, sub, wire.CodeNotAuthorized, `user "doomed" was deleted`)
	md := wire.MetadataRequest{}
	for _, conn := range []*rawClient{c, other} {
		conn.expectError(conn.send(wire.OpMetadata, md.AppendTo(nil)), wire.CodeNotAuthenticated)
		conn.ping()
	}
	if md := metadataNames(t, a, []string{"t"}); len(md) != 1 {
		t.Fatal("the topic went with its user")
	}
	a.produce("t", 0, testBatch(t, "x"))
	if d := by.readDeliver(); d.sub != bySub {
		t.Fatalf("bystander got a DELIVER for %d", d.sub)
	}

	// other logs in again, as another user; c does not and is closed at the deadline.
	other.auth("bystander", "b-pw")
	other.ping()
	f, err := c.readFrame(authTimeout + 20*time.Second)
	if err != nil {
		t.Fatalf("waiting for AUTH_TIMEOUT: %v", err)
	}
	var eb wire.ErrorBody
	if f.h.Op != wire.OpError || eb.Decode(f.body) != nil || eb.Code != wire.CodeAuthTimeout || f.h.Corr != 0 {
		t.Fatalf("after the deadline: %s corr %d code %v", f.h.Op, f.h.Corr, eb.Code)
	}
	if waited := time.Since(beforeDelete); waited < authTimeout {
		t.Fatalf("AUTH_TIMEOUT %v after the delete, before the %v deadline", waited, authTimeout)
	}
	if _, err := c.readFrame(10 * time.Second); err == nil {
		t.Fatal("the connection stayed open after AUTH_TIMEOUT")
	}
}

// TestRecreatedUserIsAnotherPrincipal: a principal of a deleted user gets no rights from a
// user created again under its name, even before its connection has applied the delete.
func TestRecreatedUserIsAnotherPrincipal(t *testing.T) {
	srv := startBroker(t, nil)
	a := login(t, srv.Addr(), testAdminUser, testAdminPass)
	a.createTopic("t", 1, "same", "pw")
	old := srv.lookupUser("same")
	stale := &conn{srv: srv, principal: &principal{user: "same", incarnation: old.incarnation}}
	tp := (*srv.topics.Load())["t"]
	if !stale.authorize(tp, needProduce) {
		t.Fatal("the principal may not produce before the delete")
	}
	a.deleteUser("same")
	a.createUser("same", "pw")
	a.grant("same", "t", wire.RolesBoth)
	if cur := srv.lookupUser("same"); cur == nil || cur.incarnation == old.incarnation {
		t.Fatalf("the user created again has incarnation %v, the deleted one %d", cur, old.incarnation)
	}
	if stale.authorize(tp, needProduce) || stale.authorize(tp, needAnyRole) || stale.account() != nil {
		t.Fatal("the deleted user's principal has the new user's rights")
	}
	// A change of rights keeps the incarnation: a logged-in user is still itself after a GRANT.
	cur := srv.lookupUser("same").incarnation
	a.revoke("same", "t", wire.RolesConsume)
	if srv.lookupUser("same").incarnation != cur {
		t.Fatal("REVOKE changed the user's incarnation")
	}
}

// TestSetPasswordKeepsSessions: a connection logged in with the old password keeps working;
// new logins need the new one.
func TestSetPasswordKeepsSessions(t *testing.T) {
	srv := startBroker(t, nil)
	a := login(t, srv.Addr(), testAdminUser, testAdminPass)
	a.createTopic("t", 1, "app", "old-pw")
	c := login(t, srv.Addr(), "app", "old-pw")
	a.adminDo(wire.OpSetPassword, (&wire.UserPassword{User: "app", Password: "new-pw"}).AppendTo(nil))
	c.produce("t", 0, testBatch(t, "still logged in"))
	n := dialRaw(t, srv.Addr())
	n.hello()
	n.expectError(n.send(wire.OpAuth, (&wire.Auth{User: "app", Password: "old-pw"}).AppendTo(nil)), wire.CodeAuthFailed)
	n.auth("app", "new-pw")
	n.produce("t", 0, testBatch(t, "new login"))
}

// TestDeleteTopicRemovesGrants: the grants on a deleted topic go with it, so a topic created
// again under the name starts without users.
func TestDeleteTopicRemovesGrants(t *testing.T) {
	srv := startBroker(t, nil)
	a := login(t, srv.Addr(), testAdminUser, testAdminPass)
	a.createTopic("t", 1, "app", "app-pw")
	a.createTopic("other", 1, "app", "app-pw")
	a.adminDo(wire.OpDeleteTopic, (&wire.TopicName{Name: "t"}).AppendTo(nil))
	a.createBare("t", wire.KindTransient, 1)
	if r := rolesOf(t, a, "app", "t"); r != -1 {
		t.Fatalf("app holds %v on the new t", wire.Roles(r))
	}
	c := login(t, srv.Addr(), "app", "app-pw")
	c.expectError(c.send(wire.OpProduce, produceBody("t", 0, wire.AcksWritten, testBatch(t, "x"))), wire.CodeNotAuthorized)
	c.produce("other", 0, testBatch(t, "x"))
}

// BenchmarkAuthorize is what PRODUCE pays per batch for the check of the produce role: the
// principal's live account and its grant on the topic, two map look-ups.
func BenchmarkAuthorize(b *testing.B) {
	srv := startBroker(b, nil)
	a := login(b, srv.Addr(), testAdminUser, testAdminPass)
	a.createTopic("t", 1, "app", "pw")
	acct := srv.lookupUser("app")
	c := &conn{srv: srv, principal: &principal{user: "app", incarnation: acct.incarnation}}
	tp := (*srv.topics.Load())["t"]
	b.ReportAllocs()
	for b.Loop() {
		if !c.may(wire.OpProduce, tp) {
			b.Fatal("not authorized")
		}
	}
}
