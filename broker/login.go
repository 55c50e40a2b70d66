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
		return fmt.Errorf("admin user %q is already a topic user; choose another admin user name", s.cfg.AdminUser)
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
		st.Users[s.cfg.AdminUser] = meta.User{Name: s.cfg.AdminUser, Hash: hash, Admin: true}
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
	if s.throttle.Blocked(c.remote, time.Now()) {
		c.sendError(corr, wire.CodeTooManyAttempts, "too many failed logins from this address; try later")
		return
	}
	user, known := (*s.users.Load())[m.User]
	hash := user.Hash
	if !known {
		hash = s.dummyHash // an unknown user costs as much as a wrong password
	}
	c.runBackground(corr, wire.OpAuth, func() (func(*conn), time.Duration) {
		ok := s.verifier.Check(m.User, hash, m.Password) && known
		var delay time.Duration
		if !ok {
			delay = s.throttle.Failure(c.remote, time.Now())
		} else {
			s.throttle.Success(c.remote)
		}
		return func(c *conn) {
			if !ok {
				c.log.Info().Str("user", m.User).Dur("delay", delay).Msg("failed login")
				c.setPrincipal(nil)
				if s.throttle.Blocked(c.remote, time.Now()) {
					c.sendError(corr, wire.CodeTooManyAttempts, "too many failed logins from this address; try later")
					return
				}
				c.sendError(corr, wire.CodeAuthFailed, "wrong user or password")
				return
			}
			c.setPrincipal(&principal{user: m.User, admin: user.Admin})
			role := wire.RoleUser
			if user.Admin {
				role = wire.RoleAdmin
			}
			c.log = c.log.With().Str("user", m.User).Logger()
			c.log.Debug().Msg("authenticated")
			resp := wire.AuthResponse{Role: role}
			c.respond(wire.OpAuth, corr, resp.AppendTo)
		}, delay
	})
}

// setPrincipal makes p (nil: nobody) the connection's identity. Losing the identity (a failed
// AUTH) puts the connection back on the authentication deadline; subscriptions the new
// identity may not use end with NOT_AUTHORIZED. Runs on the connection's loop.
func (c *conn) setPrincipal(p *principal) {
	c.principal = p
	s := c.srv
	s.connsMu.Lock()
	if p == nil {
		c.authDeadline = time.Now().Add(s.cfg.Limits.AuthTimeout)
		s.preauth[c] = c.authDeadline
	} else {
		delete(s.preauth, c)
	}
	s.connsMu.Unlock()
	kept := c.subs[:0]
	for _, sub := range c.subs {
		if p.mayUse(sub.topic) {
			kept = append(kept, sub)
			continue
		}
		sub.close()
		c.sendError(sub.id, wire.CodeNotAuthorized, fmt.Sprintf("subscription %d to %q ended: the connection is no longer authorized for it", sub.id, sub.topic.name))
	}
	clear(c.subs[len(kept):])
	c.subs = kept
	for i := 0; i < len(c.fetches); i++ {
		if fw := c.fetches[i]; !p.mayUse(fw.t) {
			c.sendError(fw.corr, wire.CodeNotAuthorized, fmt.Sprintf("FETCH on %q ended: the connection is no longer authorized for it", fw.t.name))
			c.dropFetch(i)
			i--
		}
	}
}
