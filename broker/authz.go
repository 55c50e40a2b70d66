package broker

import (
	"fmt"
	"slices"

	"github.com/lightq/lightq/broker/meta"
	"github.com/lightq/lightq/wire"
)

// This file is the one place that says who may do what: opNeeds maps every request to what
// its principal needs, handle refuses admin requests before they run, and the topic requests
// find their topic through lookupTopic, which applies the op's need. A request without a rule
// is not served (TestEveryOpHasARule).
//
// Rights are read per request from the published user table (Server.accounts), so a GRANT,
// REVOKE or DELETE_USER counts for the next request of every live connection of that user;
// what a connection holds (subscriptions, waiting FETCHes) is checked again by recheckAccess.

// need is what a request needs of its principal.
type need uint8

const (
	needUnset   need = iota // no rule: not a request (ERROR, DELIVER) or an op this broker lacks
	needNothing             // HELLO, AUTH, PING: allowed before AUTH
	needLogin               // any principal; works on the connection's own state (CREDIT, UNSUBSCRIBE)
	needAnyRole             // any role on the named topic: describe it (METADATA, STATS)
	needProduce             // the produce role on the topic
	needConsume             // the consume role on the topic
	needAdmin               // the broker's admin role
)

func (n need) String() string {
	switch n {
	case needNothing:
		return "nothing"
	case needLogin:
		return "a login"
	case needAnyRole:
		return "a role on the topic"
	case needProduce:
		return "the produce role"
	case needConsume:
		return "the consume role"
	case needAdmin:
		return "the admin role"
	}
	return "no rule"
}

// opNeeds is what each request needs. An admin may do everything. New requests get a row here
// (a consumer-group request that reads a topic's positions: needConsume) and, if they name a
// topic, find it with lookupTopic(corr, op, name), or check a topic they hold with authorize.
var opNeeds = [256]need{
	wire.OpHello: needNothing, wire.OpAuth: needNothing, wire.OpPing: needNothing,

	wire.OpCreateTopic: needAdmin, wire.OpDeleteTopic: needAdmin,
	wire.OpCreateUser: needAdmin, wire.OpDeleteUser: needAdmin, wire.OpSetPassword: needAdmin,
	wire.OpGrant: needAdmin, wire.OpRevoke: needAdmin, wire.OpListUsers: needAdmin,
	// Cluster membership (PROTOCOL.md section 16.2); MEMBERSHIP shows every broker's
	// addresses and every partition's placement.
	wire.OpAddBroker: needAdmin, wire.OpMoveReplicas: needAdmin, wire.OpDrainBroker: needAdmin,
	wire.OpRemoveBroker: needAdmin, wire.OpMembership: needAdmin,
	wire.OpClusterStatus: needAdmin,

	// Named topics need a role on them; the lists of every topic show only those.
	wire.OpMetadata: needAnyRole, wire.OpStats: needAnyRole,

	wire.OpProduce: needProduce,
	// INIT_PRODUCER names no topic: each PRODUCE it numbers is checked on its own.
	wire.OpInitProducer: needLogin,

	wire.OpSubscribe: needConsume, wire.OpFetch: needConsume, wire.OpListOffsets: needConsume,
	wire.OpCommitOffset: needConsume, wire.OpFetchCommitted: needConsume,

	// Consumer groups: members read the topic's positions. LIST_GROUPS of every topic lists
	// the groups of the topics the caller may consume (handleListGroups filters).
	wire.OpJoinGroup: needConsume, wire.OpHeartbeat: needConsume, wire.OpLeaveGroup: needConsume,
	wire.OpGroupCommit: needConsume, wire.OpDescribeGroup: needConsume, wire.OpListGroups: needConsume,

	// FIND_COORDINATOR names a broker, nothing of a topic.
	wire.OpFindCoordinator: needLogin,

	// Only ever the connection's own subscriptions.
	wire.OpUnsubscribe: needLogin, wire.OpCredit: needLogin,
}

// account is a user as the broker serves it. Published accounts are never changed (a change
// publishes new ones), so any goroutine may read them through Server.accounts without a lock.
type account struct {
	name   string
	hash   string
	admin  bool
	grants map[string]wire.Roles // topic -> roles
	topics []string              // the keys of grants, sorted (LIST_USERS)
	// incarnation tells creations of a name apart: a principal of a user that was deleted and
	// created again holds the old incarnation, which the new account does not honour.
	incarnation uint64
}

// accountTable is a published user table.
type accountTable struct {
	byName map[string]*account
	names  []string // sorted
}

// lookupUser returns the user named name, or nil. It is the one way from a name to a user's
// credentials and rights, for AUTH and for any other way of establishing who a client is.
// Safe for concurrent use.
func (s *Server) lookupUser(name string) *account {
	return s.accounts.Load().byName[name]
}

// publishAccounts makes st's users the live user table. Users that were in the previous table
// keep their incarnation, new ones get a fresh one. Caller holds adminMu (or is New).
func (s *Server) publishAccounts(st meta.State) {
	prev := s.accounts.Load()
	t := &accountTable{byName: make(map[string]*account, len(st.Users)), names: make([]string, 0, len(st.Users))}
	for name, u := range st.Users {
		a := &account{name: name, hash: u.Hash, admin: u.Admin, grants: u.Grants}
		for topic := range u.Grants {
			a.topics = append(a.topics, topic)
		}
		slices.Sort(a.topics)
		if old := prev.byName[name]; old != nil {
			a.incarnation = old.incarnation
		} else {
			s.incarnations++
			a.incarnation = s.incarnations
		}
		t.byName[name] = a
		t.names = append(t.names, name)
	}
	slices.Sort(t.names)
	s.accounts.Store(t)
}

// principal is who a connection authenticated as: a user name and the incarnation of that
// user it logged in as. What it may do is looked up per request (see account).
type principal struct {
	user        string
	incarnation uint64
}

// account returns the live account of the connection's principal, or nil when there is no
// principal or its user was deleted (even if a user of that name was created again).
// Runs on the loop.
func (c *conn) account() *account {
	if c.principal == nil {
		return nil
	}
	a := c.srv.lookupUser(c.principal.user)
	if a == nil || a.incarnation != c.principal.incarnation {
		return nil
	}
	return a
}

// authorize reports whether the connection's principal may do what n needs on t (nil for a
// need that names no topic). An admin may do everything. Runs on the loop; allocates nothing
// (PRODUCE asks it for every batch).
func (c *conn) authorize(t *topic, n need) bool {
	a := c.account()
	switch {
	case a == nil || n == needUnset:
		return false
	case a.admin || n == needNothing || n == needLogin:
		return true
	case t == nil:
		return false
	}
	roles := a.grants[t.name]
	switch n {
	case needAnyRole:
		return roles != 0
	case needProduce:
		return roles&wire.RolesProduce != 0
	case needConsume:
		return roles&wire.RolesConsume != 0
	}
	return false
}

// may reports whether the connection may do op on t. Runs on the loop.
func (c *conn) may(op wire.Op, t *topic) bool { return c.authorize(t, opNeeds[op]) }

// lookupTopic finds the topic op names, if the connection may do op on it, and answers the
// error otherwise. A user without a role on a topic gets NOT_AUTHORIZED whether or not the
// topic exists, so it cannot probe topic names; only an admin learns that a topic does not
// exist, and a user with another role on it is told which it lacks.
func (c *conn) lookupTopic(corr uint32, op wire.Op, name []byte) *topic {
	t := (*c.srv.topics.Load())[string(name)]
	if t != nil && t.deleted.Load() {
		t = nil
	}
	a := c.account()
	switch {
	case t != nil && c.may(op, t):
		return t
	case a != nil && a.admin:
		c.sendError(corr, wire.CodeUnknownTopic, fmt.Sprintf("no topic %q", name))
	case a != nil && t != nil && a.grants[t.name] != 0:
		c.sendError(corr, wire.CodeNotAuthorized, fmt.Sprintf("%s on topic %q needs %v; user %q holds %v", op, name, opNeeds[op], a.name, a.grants[t.name]))
	default:
		c.sendError(corr, wire.CodeNotAuthorized, fmt.Sprintf("topic %q does not exist or user %q may not use it", name, c.principal.user))
	}
	return nil
}

// refuseAdmin answers a request that needs the admin role from a principal without it.
func (c *conn) refuseAdmin(corr uint32, op wire.Op) {
	c.sendError(corr, wire.CodeNotAuthorized, op.String()+" needs the admin role")
}
