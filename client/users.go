package client

import (
	"context"
	"fmt"

	"github.com/lightq/lightq/wire"
)

// Users and their roles (PROTOCOL.md section 5). Every method here needs the admin role;
// like every Conn method they are safe for concurrent use.

func checkUser(user string) error {
	if err := wire.ValidUserName(user); err != nil {
		return fmt.Errorf("lightq: %w", err)
	}
	return nil
}

func checkPassword(password string) error {
	if len(password) == 0 || len(password) > wire.MaxPassword {
		return fmt.Errorf("lightq: a password must be 1-%d bytes, got %d", wire.MaxPassword, len(password))
	}
	return nil
}

// CreateUser creates a user with a password and no roles (Grant gives them). An existing
// user gives wire.CodeUserExists.
func (c *Conn) CreateUser(ctx context.Context, user, password string) error {
	if err := checkUser(user); err != nil {
		return err
	}
	if err := checkPassword(password); err != nil {
		return err
	}
	req := wire.UserPassword{User: user, Password: password}
	_, err := c.anyRoundTrip(ctx, wire.OpCreateUser, req.AppendTo(nil))
	return err
}

// DeleteUser deletes a user and its roles. The broker answers once the user's connections
// are logged out (they must AUTH again); an unknown user gives wire.CodeUnknownUser.
func (c *Conn) DeleteUser(ctx context.Context, user string) error {
	if err := checkUser(user); err != nil {
		return err
	}
	req := wire.UserName{User: user}
	_, err := c.anyRoundTrip(ctx, wire.OpDeleteUser, req.AppendTo(nil))
	return err
}

// SetPassword replaces a user's password. Connections logged in with the old one stay.
func (c *Conn) SetPassword(ctx context.Context, user, password string) error {
	if err := checkUser(user); err != nil {
		return err
	}
	if err := checkPassword(password); err != nil {
		return err
	}
	req := wire.UserPassword{User: user, Password: password}
	_, err := c.anyRoundTrip(ctx, wire.OpSetPassword, req.AppendTo(nil))
	return err
}

// Grant gives user roles on topic: wire.RolesProduce, wire.RolesConsume or both; or, with an
// empty topic, wire.RolesAdmin on the broker. Roles the user holds already are kept.
func (c *Conn) Grant(ctx context.Context, user, topic string, roles wire.Roles) error {
	return c.changeRoles(ctx, wire.OpGrant, user, topic, roles)
}

// Revoke takes roles from user on topic (or the admin role, with an empty topic). The broker
// answers once the user's connections no longer hold what the roles allowed (subscriptions,
// waiting fetches).
func (c *Conn) Revoke(ctx context.Context, user, topic string, roles wire.Roles) error {
	return c.changeRoles(ctx, wire.OpRevoke, user, topic, roles)
}

func (c *Conn) changeRoles(ctx context.Context, op wire.Op, user, topic string, roles wire.Roles) error {
	if err := checkUser(user); err != nil {
		return err
	}
	if topic != "" {
		if err := wire.ValidTopicName(topic); err != nil {
			return fmt.Errorf("lightq: %w", err)
		}
	}
	if roles == 0 || roles&^wire.RolesAll != 0 {
		return fmt.Errorf("lightq: roles %v: want produce, consume or both on a topic, admin on the broker", roles)
	}
	req := wire.Grant{User: user, Topic: topic, Roles: roles}
	_, err := c.anyRoundTrip(ctx, op, req.AppendTo(nil))
	return err
}

// ListUsers lists users and their roles, in (user, topic) order: each user's roles on the
// broker (Topic empty: wire.RolesAdmin or none), then one entry per topic it holds roles on.
// A non-empty user or topic filters (with a topic, the admins are listed too). It asks as many
// times as the broker's answers need.
func (c *Conn) ListUsers(ctx context.Context, user, topic string) ([]wire.UserRoles, error) {
	if user != "" {
		if err := checkUser(user); err != nil {
			return nil, err
		}
	}
	if topic != "" {
		if err := wire.ValidTopicName(topic); err != nil {
			return nil, fmt.Errorf("lightq: %w", err)
		}
	}
	req := wire.ListUsers{User: user, Topic: topic}
	var out []wire.UserRoles
	for {
		body, err := c.anyRoundTrip(ctx, wire.OpListUsers, req.AppendTo(nil))
		if err != nil {
			return nil, err
		}
		var resp wire.ListUsersResponse
		if err := resp.Decode(body); err != nil {
			return nil, fmt.Errorf("%w: LIST_USERS response: %w", ErrProtocol, err)
		}
		out = append(out, resp.Entries...)
		if !resp.More {
			return out, nil
		}
		if len(resp.Entries) == 0 {
			return nil, fmt.Errorf("%w: LIST_USERS answered more without an entry", ErrProtocol)
		}
		last := resp.Entries[len(resp.Entries)-1]
		if last.User < req.AfterUser || last.User == req.AfterUser && last.Topic <= req.AfterTopic {
			return nil, fmt.Errorf("%w: LIST_USERS went back to entry (%q, %q)", ErrProtocol, last.User, last.Topic)
		}
		req.AfterUser, req.AfterTopic = last.User, last.Topic
	}
}
