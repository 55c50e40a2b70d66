package broker

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/lightq/lightq/broker/auth"
	"github.com/lightq/lightq/broker/meta"
	cmeta "github.com/lightq/lightq/cluster/meta"
	"github.com/lightq/lightq/wire"
)

// This file holds the user table's changes: CREATE_USER, DELETE_USER, SET_PASSWORD, GRANT
// and REVOKE, run on the auth pool under Server.adminMu like the topic changes (hashing and
// metadata fsyncs), and LIST_USERS, answered on the loop from the published table. All need
// the admin role, which handle checks (authz.go).
//
// What a change does to live connections (PROTOCOL.md section 5): rights are read per
// request, so a GRANT or REVOKE counts from each connection's next request; a REVOKE that
// takes the consume role also ends the user's subscriptions and waiting FETCHes on the topic,
// and DELETE_USER de-authorises the user's connections (pre-auth again, as after a failed
// AUTH). Both are done before the change is answered (recheckUser). SET_PASSWORD leaves
// logged-in connections alone; the next AUTH needs the new password.

// recheckWait bounds how long a change waits for the connections of its user to apply it.
const recheckWait = 5 * time.Second

// listUsersPage is about how many bytes of entries one LIST_USERS answer holds, unless the
// broker's MaxFrame is smaller (see handleListUsers).
const listUsersPage = 64 << 10

// checkUserLimits refuses a change that would add users or grants past Config.MaxUsers or
// Config.MaxGrants.
func (s *Server) checkUserLimits(st *meta.State, users, grants int) error {
	if users > 0 && len(st.Users)+users > s.cfg.MaxUsers {
		return answer(wire.CodeResourceLimit, "broker holds %d users, its limit", s.cfg.MaxUsers)
	}
	if grants > 0 && st.GrantCount()+grants > s.cfg.MaxGrants {
		return answer(wire.CodeResourceLimit, "broker holds %d grants of roles on topics, its limit", s.cfg.MaxGrants)
	}
	return nil
}

// adminJob runs change on the auth pool, logs what it did (done) when it worked, and answers
// op with an empty response or the error. Once started, a change is made even if the
// connection closes meanwhile, as CREATE_TOPIC's is.
func (c *conn) adminJob(corr uint32, op wire.Op, change func() error, done func()) {
	c.runBackground(corr, op, func() (func(*conn), time.Duration) {
		err := change()
		if err == nil {
			done()
		}
		return func(c *conn) {
			c.reply(corr, err, func() { c.respondEmpty(op, corr) })
		}, 0
	})
}

func (c *conn) handleCreateUser(corr uint32, body []byte) {
	var m wire.UserPassword
	if !c.decodeOr(corr, wire.OpCreateUser, m.Decode(body)) {
		return
	}
	s, log := c.srv, c.log
	c.adminJob(corr, wire.OpCreateUser, func() error { return s.createUser(m.User, m.Password) },
		func() { log.Info().Str("new_user", m.User).Msg("user created") })
}

func (c *conn) handleDeleteUser(corr uint32, body []byte) {
	var m wire.UserName
	if !c.decodeOr(corr, wire.OpDeleteUser, m.Decode(body)) {
		return
	}
	s, log := c.srv, c.log
	c.adminJob(corr, wire.OpDeleteUser, func() error { return s.deleteUser(m.User) },
		func() { log.Info().Str("deleted_user", m.User).Msg("user deleted") })
}

func (c *conn) handleSetPassword(corr uint32, body []byte) {
	var m wire.UserPassword
	if !c.decodeOr(corr, wire.OpSetPassword, m.Decode(body)) {
		return
	}
	s, log := c.srv, c.log
	c.adminJob(corr, wire.OpSetPassword, func() error { return s.setPassword(m.User, m.Password) },
		func() { log.Info().Str("of_user", m.User).Msg("password changed") })
}

// handleGrant answers GRANT and REVOKE, which share their body.
func (c *conn) handleGrant(op wire.Op, corr uint32, body []byte) {
	var m wire.Grant
	if !c.decodeOr(corr, op, m.Decode(body)) {
		return
	}
	s, log := c.srv, c.log
	c.adminJob(corr, op, func() error { return s.changeRoles(op == wire.OpGrant, m) },
		func() {
			log.Info().Str("of_user", m.User).Str("topic", m.Topic).Str("roles", m.Roles.String()).Bool("granted", op == wire.OpGrant).Msg("roles changed")
		})
}

// checkNewPassword is the rule for a password CREATE_USER or SET_PASSWORD stores.
func checkNewPassword(password string) error {
	if password == "" {
		return answer(wire.CodeInvalidRequest, "a user needs a password of 1-%d bytes", wire.MaxPassword)
	}
	return nil
}

// createUser hashes, persists and publishes a new user, without roles. Runs on a worker.
func (s *Server) createUser(name, password string) error {
	if err := wire.ValidUserName(name); err != nil {
		return answer(wire.CodeInvalidRequest, "%v", err)
	}
	if err := checkNewPassword(password); err != nil {
		return err
	}
	hash, err := auth.Hash(password, s.cfg.HashParams) // before the lock: it takes a while
	if err != nil {
		return err
	}
	if s.lookupUser(name) == nil && s.cluster != nil {
		return s.cluster.change(&cmeta.CreateUser{Name: name, Hash: []byte(hash)})
	}
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	if s.lookupUser(name) != nil {
		return answer(wire.CodeUserExists, "user %q exists", name)
	}
	if err := s.meta.Update(func(st *meta.State) error {
		if err := s.checkUserLimits(st, 1, 0); err != nil {
			return err
		}
		st.Users[name] = meta.User{Name: name, Hash: hash}
		return nil
	}); err != nil {
		return err
	}
	s.publishAccounts(s.accountState())
	return nil
}

// configuredAdmin refuses to change what the broker's configuration owns: its admin user
// (Config.AdminUser) always exists, is an admin, and takes its password from the configuration.
func (s *Server) configuredAdmin(name, what string) error {
	if name == s.cfg.AdminUser {
		return answer(wire.CodeInvalidRequest, "user %q is the broker's configured admin (setting admin-user): %s", name, what)
	}
	return nil
}

// deleteUser removes a user and its grants, and de-authorises its connections. Runs on a worker.
func (s *Server) deleteUser(name string) error {
	if err := s.configuredAdmin(name, "it cannot be deleted"); err != nil {
		return err
	}
	if err := s.inClusterUsers(name, &cmeta.DeleteUser{Name: name}); err != errLocalUser {
		if err == nil {
			s.recheckUser(name)
		}
		return err
	}
	if err := s.deleteUserLocked(name); err != nil {
		return err
	}
	s.recheckUser(name)
	return nil
}

func (s *Server) deleteUserLocked(name string) error {
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	if s.lookupUser(name) == nil {
		return answer(wire.CodeUnknownUser, "no user %q", name)
	}
	if err := s.meta.Update(func(st *meta.State) error {
		st.RemoveUser(name)
		return nil
	}); err != nil {
		return err
	}
	for _, t := range *s.topics.Load() {
		if *t.user.Load() == name {
			t.user.Store(new(string))
		}
	}
	s.publishAccounts(s.accountState())
	s.verifier.Forget(name)
	return nil
}

// setPassword stores a user's new password. Connections logged in with the old one stay as
// they are. Runs on a worker.
func (s *Server) setPassword(name, password string) error {
	if err := s.configuredAdmin(name, "its password comes from LIGHTQ_ADMIN_PASSWORD (or the generated admin-password file)"); err != nil {
		return err
	}
	if err := checkNewPassword(password); err != nil {
		return err
	}
	hash, err := auth.Hash(password, s.cfg.HashParams)
	if err != nil {
		return err
	}
	if err := s.inClusterUsers(name, &cmeta.SetPassword{Name: name, Hash: []byte(hash)}); err != errLocalUser {
		return err
	}
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	if s.lookupUser(name) == nil {
		return answer(wire.CodeUnknownUser, "no user %q", name)
	}
	if err := s.meta.Update(func(st *meta.State) error {
		u := st.Users[name]
		u.Hash = hash
		st.Users[name] = u
		return nil
	}); err != nil {
		return err
	}
	s.publishAccounts(s.accountState())
	s.verifier.Forget(name)
	return nil
}

// checkGrant is the rule for the roles of a GRANT or REVOKE: admin on the broker (empty
// topic), produce and consume on a topic.
func checkGrant(m wire.Grant) error {
	switch {
	case m.Roles == 0:
		return answer(wire.CodeInvalidRequest, "no roles given")
	case m.Topic == "" && m.Roles != wire.RolesAdmin:
		return answer(wire.CodeInvalidRequest, "roles %v need a topic; on the broker (empty topic) the role is admin", m.Roles)
	case m.Topic != "" && m.Roles&^wire.RolesTopic != 0:
		return answer(wire.CodeInvalidRequest, "admin is a role on the broker, not on a topic: give an empty topic")
	}
	return nil
}

// changeRoles grants (or revokes) m.Roles to m.User on m.Topic, or the admin role on the
// broker. A revoke waits until the user's connections have applied it. Runs on a worker.
func (s *Server) changeRoles(grant bool, m wire.Grant) error {
	if err := checkGrant(m); err != nil {
		return err
	}
	if !grant && m.Topic == "" {
		if err := s.configuredAdmin(m.User, "it keeps the admin role"); err != nil {
			return err
		}
	}
	var cmd cmeta.Command = &cmeta.Grant{User: m.User, Topic: m.Topic, Roles: m.Roles}
	if !grant {
		cmd = &cmeta.Revoke{User: m.User, Topic: m.Topic, Roles: m.Roles}
	}
	if err := s.inClusterUsers(m.User, cmd); err == errLocalUser {
		err = s.changeRolesLocked(grant, m)
		if err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	if !grant {
		s.recheckUser(m.User)
	}
	return nil
}

func (s *Server) changeRolesLocked(grant bool, m wire.Grant) error {
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	a := s.lookupUser(m.User)
	if a == nil {
		return answer(wire.CodeUnknownUser, "no user %q", m.User)
	}
	if m.Topic != "" {
		if t := (*s.topics.Load())[m.Topic]; t == nil || t.deleted.Load() {
			return answer(wire.CodeUnknownTopic, "no topic %q", m.Topic)
		}
	}
	if err := s.meta.Update(func(st *meta.State) error {
		switch {
		case m.Topic == "":
			u := st.Users[m.User]
			u.Admin = grant
			st.Users[m.User] = u
		case !grant:
			st.Revoke(m.User, m.Topic, m.Roles)
		default:
			if st.Users[m.User].Grants[m.Topic] == 0 {
				if err := s.checkUserLimits(st, 0, 1); err != nil {
					return err
				}
			}
			st.Grant(m.User, m.Topic, m.Roles)
		}
		return nil
	}); err != nil {
		return err
	}
	s.publishAccounts(s.accountState())
	return nil
}

// recheckUser has every connection logged in as name apply the user's current rights to what
// it holds (recheckAccess), and waits until they have (at most recheckWait), so that when the
// change is answered no subscription the user lost is served any more. Runs on a worker,
// holding no lock.
func (s *Server) recheckUser(name string) {
	var conns []*conn
	s.connsMu.Lock()
	for c := range s.conns {
		if u := c.authUser.Load(); u != nil && *u == name {
			conns = append(conns, c)
		}
	}
	s.connsMu.Unlock()
	if len(conns) == 0 {
		return
	}
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		if !c.complete(func(c *conn) { defer wg.Done(); c.recheckAccess() }) {
			wg.Done() // closed: it holds nothing any more
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(recheckWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.log.Warn().Str("user", name).Int("connections", len(conns)).Dur("waited", recheckWait).
			Msg("a change of the user's rights is answered before all of its connections applied it")
	}
}

// handleListUsers answers LIST_USERS from the published user table: one page of entries in
// (user, topic) order after the request's cursor, each user's broker entry (topic "") first.
func (c *conn) handleListUsers(corr uint32, body []byte) {
	var m wire.ListUsers
	if !c.decodeOr(corr, wire.OpListUsers, m.Decode(body)) {
		return
	}
	tbl := c.srv.accounts.Load()
	if m.User != "" && tbl.byName[m.User] == nil {
		c.sendError(corr, wire.CodeUnknownUser, fmt.Sprintf("no user %q", m.User))
		return
	}
	if t := (*c.srv.topics.Load())[m.Topic]; m.Topic != "" && (t == nil || t.deleted.Load()) {
		c.sendError(corr, wire.CodeUnknownTopic, fmt.Sprintf("no topic %q", m.Topic))
		return
	}
	var resp wire.ListUsersResponse
	// The answer must fit the frame limit the client was announced: its header, the more
	// flag and the count, then entries. One entry (at most 509 bytes) always fits.
	page := min(listUsersPage, c.srv.cfg.Limits.MaxFrame-wire.HeaderSize-5)
	size := 0
	add := func(e wire.UserRoles) bool {
		if m.AfterUser != "" && (e.User < m.AfterUser || e.User == m.AfterUser && e.Topic <= m.AfterTopic) {
			return true
		}
		n := 5 + len(e.User) + len(e.Topic) // its encoded size
		if size+n > page && len(resp.Entries) > 0 {
			resp.More = true
			return false
		}
		size += n
		resp.Entries = append(resp.Entries, e)
		return true
	}
	names := tbl.names[sort.SearchStrings(tbl.names, m.AfterUser):]
	if m.User != "" {
		names = []string{m.User}
	}
list:
	for _, name := range names {
		a := tbl.byName[name]
		var broker wire.Roles
		if a.admin {
			broker = wire.RolesAdmin
		}
		if m.Topic == "" || a.admin { // with a topic, admins are listed: they may use it too
			if !add(wire.UserRoles{User: name, Roles: broker}) {
				break list
			}
		}
		for _, topic := range a.topics {
			if m.Topic != "" && topic != m.Topic {
				continue
			}
			if !add(wire.UserRoles{User: name, Topic: topic, Roles: a.grants[topic]}) {
				break list
			}
		}
	}
	c.respond(wire.OpListUsers, corr, resp.AppendTo)
}

// errLocalUser: the user is the broker's own, not the cluster's: change it here.
var errLocalUser = errors.New("a user of this broker alone")

// inClusterUsers makes a change of user name through the cluster's metadata when name is a
// cluster user (errLocalUser when it is not, or there is no cluster): in a cluster, every
// user but the configured admin is the cluster's, created there by CREATE_USER or
// CREATE_TOPIC.
func (s *Server) inClusterUsers(name string, cmd cmeta.Command) error {
	if s.cluster == nil {
		return errLocalUser
	}
	if _, ok := s.cluster.meta.State().User(name); !ok {
		if s.lookupUser(name) == nil {
			return answer(wire.CodeUnknownUser, "no user %q", name)
		}
		return errLocalUser
	}
	return s.cluster.change(cmd)
}
