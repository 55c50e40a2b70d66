package broker

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/lightq/lightq/broker/auth"
	"github.com/lightq/lightq/broker/meta"
	"github.com/lightq/lightq/wire"
)

// This file holds who a connection is: the admin credentials the broker starts with, AUTH,
// and what changes when a connection's identity does.

// AdminPasswordFile is where a generated admin password is written, inside the data dir.
const AdminPasswordFile = "admin-password"

// ensureAdmin makes sure the admin user exists with the configured password, generating and
// storing one on first start when none was given.
func (s *Server) ensureAdmin() error {
	st := s.meta.State()
	existing, ok := st.Users[s.cfg.AdminUser]
	password := s.cfg.AdminPassword
	if ok && existing.Admin {
		if password == "" {
			return nil
		}
		if good, err := auth.Verify(existing.Hash, password); err == nil && good {
			return nil
		}
		s.log.Info().Str("user", s.cfg.AdminUser).Msg("admin password changed by configuration; storing the new hash")
	} else if ok {
		return fmt.Errorf("admin user %q is already a user without the admin role; choose another admin user name", s.cfg.AdminUser)
	}
	if password == "" {
		gen, err := auth.GeneratePassword()
		if err != nil {
			return err
		}
		password = gen
		path := filepath.Join(s.cfg.DataDir, AdminPasswordFile)
		if err := writeSecretFile(path, []byte(password+"\n")); err != nil {
			return fmt.Errorf("store generated admin password: %w", err)
		}
		s.log.Warn().Str("user", s.cfg.AdminUser).Str("password_file", path).
			Msg("no admin password configured: generated one and stored it (mode 0600); set LIGHTQ_ADMIN_PASSWORD to choose your own")
	}
	hash, err := auth.Hash(password, s.cfg.HashParams)
	if err != nil {
		return err
	}
	return s.meta.Update(func(st *meta.State) error {
		u := st.Users[s.cfg.AdminUser] // keeps the grants of an existing admin
		u.Name, u.Hash, u.Admin = s.cfg.AdminUser, hash, true
		st.Users[s.cfg.AdminUser] = u
		return nil
	})
}

// writeSecretFile writes a file readable only by its owner, durably.
func writeSecretFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// handleAuth answers AUTH. The throttle (package auth; its doc gives the policy) is asked
// three times: Admit here on the loop refuses at once what is blocked or over the in-flight
// bounds; Evaluate takes the decision again on the worker, just before the password is
// hashed, so attempts queued behind failures that block them are refused unhashed; Finish
// records the outcome and gives a failure's delay. A success the verifier has cached is
// answered here on the loop (after the same Evaluate), so a storm of logins with credentials
// that already worked costs neither a worker nor an in-flight slot for long.
func (c *conn) handleAuth(corr uint32, body []byte) {
	if !c.helloDone {
		c.sendError(corr, wire.CodeHandshakeRequired, "send HELLO before AUTH")
		return
	}
	var m wire.Auth
	if !c.decodeOr(corr, wire.OpAuth, m.Decode(body)) {
		return
	}
	s := c.srv
	attempt, refusal := s.throttle.Admit(c.remote, m.User, time.Now())
	if refusal != auth.Admitted {
		c.refuseLogin(corr, m.User, refusal)
		return
	}
	user := s.lookupUser(m.User)
	known := user != nil
	hash := s.dummyHash // an unknown user costs as much as a wrong password
	if known {
		hash = user.hash
	}
	if known && s.verifier.CheckCached(m.User, hash, m.Password) {
		if refusal := s.throttle.Evaluate(attempt, time.Now()); refusal != auth.Admitted {
			s.throttle.Finish(attempt, auth.Unverified, time.Now())
			c.refuseLogin(corr, m.User, refusal)
			return
		}
		s.throttle.Finish(attempt, auth.Succeeded, time.Now())
		c.loggedIn(corr, user)
		return
	}
	submitted := c.runBackground(corr, wire.OpAuth, func() (func(*conn), time.Duration) {
		if refusal := s.throttle.Evaluate(attempt, time.Now()); refusal != auth.Admitted {
			s.throttle.Finish(attempt, auth.Unverified, time.Now())
			return func(c *conn) { c.refuseLogin(corr, m.User, refusal) }, 0
		}
		if s.verifier.Check(m.User, hash, m.Password) && known {
			s.throttle.Finish(attempt, auth.Succeeded, time.Now())
			return func(c *conn) { c.loggedIn(corr, user) }, 0
		}
		delay, blocked := s.throttle.Finish(attempt, auth.Failed, time.Now())
		s.metrics.authFailed()
		return func(c *conn) {
			c.log.Info().Str("user", m.User).Dur("delay", delay).Msg("failed login")
			c.setPrincipal(nil)
			if blocked != auth.Admitted {
				c.log.Warn().Str("user", m.User).Str("refusal", blocked.Message()).Msg("failed login: blocking further attempts")
				c.refuseLogin(corr, m.User, blocked)
				return
			}
			c.sendError(corr, wire.CodeAuthFailed, "wrong user or password")
		}, delay
	})
	if !submitted {
		s.throttle.Finish(attempt, auth.Unverified, time.Now())
	}
}

// refuseLogin answers an AUTH the throttle refused: RESOURCE_LIMIT (the connection stays
// open; retry shortly) when too many logins are in flight, TOO_MANY_ATTEMPTS (closes) when
// failures are being penalised. A refused AUTH was not processed: it leaves the principal
// as it was (TOO_MANY_ATTEMPTS closes the connection anyway). Refusals are logged at debug
// level only, so that a flood of them cannot flood the log; the failure that sets a block
// is logged as a warning. Runs on the connection's loop.
func (c *conn) refuseLogin(corr uint32, user string, r auth.Refusal) {
	c.log.Debug().Str("user", user).Str("refusal", r.Message()).Msg("login refused by the throttle")
	c.srv.metrics.loginRefused(r)
	if r.Busy() {
		c.sendError(corr, wire.CodeResourceLimit, "AUTH refused: "+r.Message())
		return
	}
	c.sendError(corr, wire.CodeTooManyAttempts, r.Message())
}

// loggedIn makes the user of account a the connection's principal and answers AUTH. An
// account deleted (or given a new password) since its password was checked no longer logs
// in: that AUTH fails like a wrong password. Runs on the loop.
func (c *conn) loggedIn(corr uint32, a *account) {
	c.setPrincipal(&principal{user: a.name, incarnation: a.incarnation})
	// After setPrincipal published the name: a DELETE_USER either sees this connection
	// (recheckUser) or has published the table this reads.
	if cur := c.srv.lookupUser(a.name); cur == nil || cur.incarnation != a.incarnation || cur.hash != a.hash {
		c.setPrincipal(nil)
		c.sendError(corr, wire.CodeAuthFailed, "wrong user or password")
		return
	}
	role := wire.RoleUser
	if a.admin {
		role = wire.RoleAdmin
	}
	c.log = c.log.With().Str("user", a.name).Logger()
	c.log.Debug().Msg("authenticated")
	resp := wire.AuthResponse{Role: role}
	c.respond(wire.OpAuth, corr, resp.AppendTo)
}

// setPrincipal makes p (nil: nobody) the connection's identity. Losing the identity (a failed
// AUTH) puts the connection back on the authentication deadline; subscriptions and waiting
// FETCHes the new identity may not use end with NOT_AUTHORIZED. Runs on the connection's loop.
func (c *conn) setPrincipal(p *principal) {
	c.principal = p
	name := ""
	if p != nil {
		name = p.user
	}
	c.authUser.Store(&name)
	s := c.srv
	s.connsMu.Lock()
	if c.closed() {
		// An AUTH's completion run by finishClose after OnClose left the server's sets:
		// putting the connection back would keep it there, and the ticker waking it, forever.
		delete(s.preauth, c)
	} else if p == nil {
		c.authDeadline = time.Now().Add(s.cfg.Limits.AuthTimeout)
		s.preauth[c] = c.authDeadline
	} else {
		delete(s.preauth, c)
	}
	s.connsMu.Unlock()
	c.endUnauthorized("the connection is no longer authorized for it")
}

// endUnauthorized ends, with NOT_AUTHORIZED saying why, the subscriptions and the waiting
// FETCHes whose topics the connection may no longer consume from. Runs on the loop.
func (c *conn) endUnauthorized(why string) {
	kept := c.subs[:0]
	for _, sub := range c.subs {
		if c.may(wire.OpSubscribe, sub.topic) {
			kept = append(kept, sub)
			continue
		}
		sub.close()
		c.sendError(sub.id, wire.CodeNotAuthorized, fmt.Sprintf("subscription %d to %q ended: %s", sub.id, sub.topic.name, why))
	}
	clear(c.subs[len(kept):])
	c.subs = kept
	for i := 0; i < len(c.fetches); i++ {
		if fw := c.fetches[i]; !c.may(wire.OpFetch, fw.t) {
			c.sendError(fw.corr, wire.CodeNotAuthorized, fmt.Sprintf("FETCH on %q ended: %s", fw.t.name, why))
			c.dropFetch(i)
			i--
		}
	}
}

// recheckAccess applies a change of the principal's rights to what the connection holds:
// with its user deleted, the connection loses its principal (pre-auth again, as after a failed
// AUTH); else the subscriptions and FETCHes of topics it may no longer consume from end. Runs
// on the loop, as a completion queued by Server.recheckUser.
func (c *conn) recheckAccess() {
	if c.closed() || c.principal == nil {
		return
	}
	user := c.principal.user
	if c.account() == nil {
		c.log.Info().Str("user", user).Msg("the connection's user was deleted: it must authenticate again")
		// Nothing is allowed any more: end all the connection holds saying why, then go back
		// to pre-auth.
		c.principal = nil
		c.endUnauthorized(fmt.Sprintf("user %q was deleted", user))
		c.setPrincipal(nil)
		return
	}
	c.endUnauthorized(fmt.Sprintf("user %q no longer holds the consume role on it", user))
}
