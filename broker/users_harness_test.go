package broker

import (
	"testing"

	"github.com/lightq/lightq/wire"
)

// Helpers of the tests of users and roles: the admin requests, as a rawClient sends them.

// adminDo sends an admin request and fails the test unless it succeeds.
func (c *rawClient) adminDo(op wire.Op, body []byte) {
	c.t.Helper()
	c.expectResponse(op, c.send(op, body))
}

func (c *rawClient) createUser(name, pass string) {
	c.t.Helper()
	m := wire.UserPassword{User: name, Password: pass}
	c.adminDo(wire.OpCreateUser, m.AppendTo(nil))
}

func (c *rawClient) deleteUser(name string) {
	c.t.Helper()
	m := wire.UserName{User: name}
	c.adminDo(wire.OpDeleteUser, m.AppendTo(nil))
}

func (c *rawClient) grant(user, topic string, r wire.Roles) {
	c.t.Helper()
	m := wire.Grant{User: user, Topic: topic, Roles: r}
	c.adminDo(wire.OpGrant, m.AppendTo(nil))
}

func (c *rawClient) revoke(user, topic string, r wire.Roles) {
	c.t.Helper()
	m := wire.Grant{User: user, Topic: topic, Roles: r}
	c.adminDo(wire.OpRevoke, m.AppendTo(nil))
}

// createBare creates a topic without a user (CREATE_TOPIC with no user and password).
func (c *rawClient) createBare(name string, kind wire.Kind, partitions uint32) {
	c.t.Helper()
	m := wire.CreateTopic{Name: name, Kind: kind, Partitions: partitions}
	c.adminDo(wire.OpCreateTopic, m.AppendTo(nil))
}

// listUsers sends LIST_USERS with the filter of m, following the pages, and returns every
// entry.
func listUsers(t testing.TB, c *rawClient, m wire.ListUsers) []wire.UserRoles {
	t.Helper()
	var out []wire.UserRoles
	for pages := 0; ; pages++ {
		if pages > 10000 {
			t.Fatal("LIST_USERS does not end")
		}
		var resp wire.ListUsersResponse
		if err := resp.Decode(c.expectResponse(wire.OpListUsers, c.send(wire.OpListUsers, m.AppendTo(nil)))); err != nil {
			t.Fatal(err)
		}
		out = append(out, resp.Entries...)
		if !resp.More {
			return out
		}
		if len(resp.Entries) == 0 {
			t.Fatal("LIST_USERS says more but sent no entry")
		}
		last := resp.Entries[len(resp.Entries)-1]
		m.AfterUser, m.AfterTopic = last.User, last.Topic
	}
}

// rolesOf is what LIST_USERS says user holds on topic ("" for the broker), or -1 for no
// entry at all.
func rolesOf(t testing.TB, c *rawClient, user, topic string) int {
	t.Helper()
	for _, e := range listUsers(t, c, wire.ListUsers{User: user}) {
		if e.Topic == topic {
			return int(e.Roles)
		}
	}
	return -1
}

// userExists says whether LIST_USERS lists user.
func userExists(t testing.TB, c *rawClient, user string) bool {
	t.Helper()
	for _, e := range listUsers(t, c, wire.ListUsers{}) {
		if e.User == user {
			return true
		}
	}
	return false
}
