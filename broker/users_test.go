package broker

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/lightq/lightq/wire"
)

// TestUserRequestErrors: each refusal of the user requests has its code, changes nothing and
// leaves the connection open.
func TestUserRequestErrors(t *testing.T) {
	srv := startBroker(t, func(c *Config) { c.MaxUsers, c.MaxGrants = 4, 3 })
	a := login(t, srv.Addr(), testAdminUser, testAdminPass)
	a.createBare("t", wire.KindTransient, 1)
	a.createUser("bob", "bob-pw")
	up := func(user, pass string) []byte { return (&wire.UserPassword{User: user, Password: pass}).AppendTo(nil) }
	grant := func(user, topic string, r wire.Roles) []byte {
		return (&wire.Grant{User: user, Topic: topic, Roles: r}).AppendTo(nil)
	}
	for _, tc := range []struct {
		name string
		op   wire.Op
		body []byte
		want wire.Code
	}{
		{"create existing", wire.OpCreateUser, up("bob", "x"), wire.CodeUserExists},
		{"create configured admin", wire.OpCreateUser, up(testAdminUser, "x"), wire.CodeUserExists},
		{"create empty name", wire.OpCreateUser, up("", "x"), wire.CodeInvalidRequest},
		{"create control character", wire.OpCreateUser, up("a\tb", "x"), wire.CodeInvalidRequest},
		{"create without password", wire.OpCreateUser, up("carol", ""), wire.CodeInvalidRequest},
		{"create body with a trailing byte", wire.OpCreateUser, append(up("carol", "x"), 0), wire.CodeInvalidRequest},
		{"delete unknown", wire.OpDeleteUser, (&wire.UserName{User: "nobody"}).AppendTo(nil), wire.CodeUnknownUser},
		{"delete configured admin", wire.OpDeleteUser, (&wire.UserName{User: testAdminUser}).AppendTo(nil), wire.CodeInvalidRequest},
		{"password of unknown", wire.OpSetPassword, up("nobody", "x"), wire.CodeUnknownUser},
		{"password empty", wire.OpSetPassword, up("bob", ""), wire.CodeInvalidRequest},
		{"password of configured admin", wire.OpSetPassword, up(testAdminUser, "x"), wire.CodeInvalidRequest},
		{"grant to unknown user", wire.OpGrant, grant("nobody", "t", wire.RolesProduce), wire.CodeUnknownUser},
		{"grant on unknown topic", wire.OpGrant, grant("bob", "nope", wire.RolesProduce), wire.CodeUnknownTopic},
		{"grant no roles", wire.OpGrant, grant("bob", "t", 0), wire.CodeInvalidRequest},
		{"grant produce on the broker", wire.OpGrant, grant("bob", "", wire.RolesProduce), wire.CodeInvalidRequest},
		{"grant admin on a topic", wire.OpGrant, grant("bob", "t", wire.RolesAdmin|wire.RolesProduce), wire.CodeInvalidRequest},
		{"grant undefined bit", wire.OpGrant, grant("bob", "t", 0x40), wire.CodeInvalidRequest},
		{"revoke from unknown user", wire.OpRevoke, grant("nobody", "t", wire.RolesProduce), wire.CodeUnknownUser},
		{"revoke on unknown topic", wire.OpRevoke, grant("bob", "nope", wire.RolesProduce), wire.CodeUnknownTopic},
		{"revoke configured admin's admin", wire.OpRevoke, grant(testAdminUser, "", wire.RolesAdmin), wire.CodeInvalidRequest},
		{"list unknown user", wire.OpListUsers, (&wire.ListUsers{User: "nobody"}).AppendTo(nil), wire.CodeUnknownUser},
		{"list unknown topic", wire.OpListUsers, (&wire.ListUsers{Topic: "nope"}).AppendTo(nil), wire.CodeUnknownTopic},
		{"topic with user but no password", wire.OpCreateTopic, (&wire.CreateTopic{Name: "x", Kind: wire.KindTransient, Partitions: 1, User: "bob"}).AppendTo(nil), wire.CodeInvalidRequest},
		{"topic of an existing user, wrong password", wire.OpCreateTopic, (&wire.CreateTopic{Name: "x", Kind: wire.KindTransient, Partitions: 1, User: "bob", Password: "nope"}).AppendTo(nil), wire.CodeAuthFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a.t = t
			before := listUsers(t, a, wire.ListUsers{})
			code, _ := request(t, a, tc.op, tc.body)
			if code != tc.want {
				t.Fatalf("%s: %v, want %v", tc.op, code, tc.want)
			}
			if after := listUsers(t, a, wire.ListUsers{}); !reflect.DeepEqual(after, before) {
				t.Fatalf("a refused %s changed the users:\n%+v\n%+v", tc.op, before, after)
			}
		})
	}
	a.t = t

	// The limits: 4 users (admin, bob and two more) and 3 grants.
	a.createUser("u3", "pw")
	a.createUser("u4", "pw")
	a.expectError(a.send(wire.OpCreateUser, up("u5", "pw")), wire.CodeResourceLimit)
	ct := wire.CreateTopic{Name: "x", Kind: wire.KindTransient, Partitions: 1, User: "u5", Password: "pw"}
	a.expectError(a.send(wire.OpCreateTopic, ct.AppendTo(nil)), wire.CodeResourceLimit)
	a.grant("bob", "t", wire.RolesProduce)
	a.grant("u3", "t", wire.RolesProduce)
	a.grant("u4", "t", wire.RolesConsume)
	a.grant("u4", "t", wire.RolesProduce) // more roles in a grant that exists
	a.grant("u4", "", wire.RolesAdmin)    // the admin role is not a grant on a topic
	a.createBare("t2", wire.KindTransient, 1)
	a.expectError(a.send(wire.OpGrant, grant("bob", "t2", wire.RolesProduce)), wire.CodeResourceLimit)
	ct = wire.CreateTopic{Name: "t3", Kind: wire.KindTransient, Partitions: 1, User: "bob", Password: "bob-pw"}
	a.expectError(a.send(wire.OpCreateTopic, ct.AppendTo(nil)), wire.CodeResourceLimit)
	a.revoke("bob", "t", wire.RolesProduce)
	a.grant("bob", "t2", wire.RolesProduce) // room again
	a.ping()
}

// TestUsersSurviveRestart: users, passwords, grants and admins are persisted; a restarted
// broker serves the same table and logins.
func TestUsersSurviveRestart(t *testing.T) {
	cfg := testConfig(t)
	srv := startWith(t, cfg)
	a := login(t, srv.Addr(), testAdminUser, testAdminPass)
	a.createBare("t", wire.KindDurable, 2)
	a.createUser("writer", "w-old")
	a.grant("writer", "t", wire.RolesProduce)
	a.createUser("ops", "ops-pw")
	a.grant("ops", "", wire.RolesAdmin)
	a.adminDo(wire.OpSetPassword, (&wire.UserPassword{User: "writer", Password: "w-new"}).AppendTo(nil))
	want := listUsers(t, a, wire.ListUsers{})
	a.conn.Close()
	if err := srv.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}

	srv = startWith(t, cfg)
	ops := login(t, srv.Addr(), "ops", "ops-pw")
	if got := listUsers(t, ops, wire.ListUsers{}); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a restart:\n got %+v\nwant %+v", got, want)
	}
	w := login(t, srv.Addr(), "writer", "w-new")
	w.produce("t", 1, testBatch(t, "x"))
	m := wire.Fetch{Topic: "t", Partition: 1, MaxBytes: 1 << 20}
	w.expectError(w.send(wire.OpFetch, m.AppendTo(nil)), wire.CodeNotAuthorized)
	c := dialRaw(t, srv.Addr())
	c.hello()
	c.expectError(c.send(wire.OpAuth, (&wire.Auth{User: "writer", Password: "w-old"}).AppendTo(nil)), wire.CodeAuthFailed)
}

// TestListUsersPages: a table larger than one answer comes in pages that, followed, give every
// entry once, in (user, topic) order; the filters select by user and by topic.
func TestListUsersPages(t *testing.T) {
	srv := startBroker(t, nil)
	a := login(t, srv.Addr(), testAdminUser, testAdminPass)
	const users, topics = 120, 3
	for i := range topics {
		a.createBare(fmt.Sprintf("topic-%d", i), wire.KindTransient, 1)
	}
	long := strings.Repeat("n", 240) // 120 users x 4 entries x ~255 bytes: about two pages
	for i := range users {
		name := fmt.Sprintf("%s-%03d", long, i)
		a.createUser(name, "pw")
		for j := range topics {
			a.grant(name, fmt.Sprintf("topic-%d", j), wire.Roles(1+(i+j)%3))
		}
	}
	var resp wire.ListUsersResponse
	if err := resp.Decode(a.expectResponse(wire.OpListUsers, a.send(wire.OpListUsers, (&wire.ListUsers{}).AppendTo(nil)))); err != nil {
		t.Fatal(err)
	}
	if !resp.More || len(resp.Entries) == 0 || len(resp.Entries) >= users*(topics+1) {
		t.Fatalf("first page: more %v, %d entries: want a part", resp.More, len(resp.Entries))
	}
	all := listUsers(t, a, wire.ListUsers{})
	if len(all) != 1+users*(topics+1) {
		t.Fatalf("%d entries, want %d", len(all), 1+users*(topics+1))
	}
	less := func(x, y wire.UserRoles) bool { return x.User < y.User || x.User == y.User && x.Topic < y.Topic }
	for i := 1; i < len(all); i++ {
		if !less(all[i-1], all[i]) {
			t.Fatalf("entries %d and %d out of order: %+v, %+v", i-1, i, all[i-1], all[i])
		}
	}
	if all[0] != (wire.UserRoles{User: testAdminUser, Roles: wire.RolesAdmin}) {
		t.Fatalf("first entry %+v", all[0])
	}
	name := fmt.Sprintf("%s-%03d", long, 7)
	want := []wire.UserRoles{{User: name}}
	for j := range topics {
		want = append(want, wire.UserRoles{User: name, Topic: fmt.Sprintf("topic-%d", j), Roles: wire.Roles(1 + (7+j)%3)})
	}
	if got := listUsers(t, a, wire.ListUsers{User: name}); !reflect.DeepEqual(got, want) {
		t.Fatalf("user filter:\n got %+v\nwant %+v", got, want)
	}
	byTopic := listUsers(t, a, wire.ListUsers{Topic: "topic-1"})
	if len(byTopic) != 1+users || byTopic[0] != all[0] {
		t.Fatalf("topic filter: %d entries, first %+v", len(byTopic), byTopic[0])
	}
	for _, e := range byTopic[1:] {
		if e.Topic != "topic-1" || !slices.Contains(all, e) {
			t.Fatalf("topic filter gave %+v", e)
		}
	}
}

// TestCreateTopicUsers: CREATE_TOPIC gives its user both roles, creating it when new and
// checking the password of an existing one; without a user, the topic starts without grants.
func TestCreateTopicUsers(t *testing.T) {
	srv := startBroker(t, nil)
	a := login(t, srv.Addr(), testAdminUser, testAdminPass)
	a.createTopic("one", 1, "app", "app-pw")
	a.createTopic("two", 1, "app", "app-pw")
	a.createBare("bare", wire.KindTransient, 1)
	want := []wire.UserRoles{{User: "app"}, {User: "app", Topic: "one", Roles: wire.RolesBoth}, {User: "app", Topic: "two", Roles: wire.RolesBoth}}
	if got := listUsers(t, a, wire.ListUsers{User: "app"}); !reflect.DeepEqual(got, want) {
		t.Fatalf("app: %+v", got)
	}
	if got := listUsers(t, a, wire.ListUsers{Topic: "bare"}); len(got) != 1 || got[0].User != testAdminUser {
		t.Fatalf("bare topic: %+v", got)
	}
	app := login(t, srv.Addr(), "app", "app-pw")
	if names := metadataNames(t, app, nil); !slices.Equal(names, []string{"one", "two"}) {
		t.Fatalf("app sees %v", names)
	}
	md := wire.MetadataRequest{Topics: []string{"bare"}}
	var resp wire.MetadataResponse
	if err := resp.Decode(a.expectResponse(wire.OpMetadata, a.send(wire.OpMetadata, md.AppendTo(nil)))); err != nil || resp.Topics[0].User != "" {
		t.Fatalf("bare topic's user %+v, %v", resp.Topics, err)
	}
}

// TestListUsersFitsTheFrameLimit: with the smallest MaxFrame a broker may have, LIST_USERS
// answers in pages that each fit it.
func TestListUsersFitsTheFrameLimit(t *testing.T) {
	srv := startBroker(t, func(c *Config) {
		c.Limits.MaxBatch, c.Limits.MaxFrame, c.Limits.MaxMessage = 4096, 5120, 1024
		c.RingBytes = 1 << 20
	})
	a := login(t, srv.Addr(), testAdminUser, testAdminPass)
	for i := range 40 {
		a.createUser(fmt.Sprintf("%s-%02d", strings.Repeat("u", 250), i), "pw")
	}
	m := wire.ListUsers{}
	var got int
	for pages := 1; ; pages++ {
		corr := a.send(wire.OpListUsers, m.AppendTo(nil))
		f := a.mustRead()
		if size := wire.HeaderSize + len(f.body); size > 5120 {
			t.Fatalf("page %d is a %d-byte frame, over MaxFrame 5120", pages, size)
		}
		var resp wire.ListUsersResponse
		if f.h.Op != wire.OpListUsers || f.h.Corr != corr || resp.Decode(f.body) != nil {
			t.Fatalf("page %d: %s corr %d", pages, f.h.Op, f.h.Corr)
		}
		got += len(resp.Entries)
		if !resp.More {
			if pages < 2 {
				t.Fatalf("%d entries in one page", got)
			}
			break
		}
		last := resp.Entries[len(resp.Entries)-1]
		m.AfterUser, m.AfterTopic = last.User, last.Topic
	}
	if got != 41 {
		t.Fatalf("%d entries, want 41", got)
	}
}
