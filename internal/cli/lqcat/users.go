package lqcat

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/lightq/lightq/wire"
)

const userHelp = `Usage:
  lqcat user create NAME [--password P] [--admin]
  lqcat user delete NAME
  lqcat user passwd NAME [--password P]
  lqcat user list [NAME] [-J]

Users of the broker and their roles (lqcat acl gives and takes roles). Every user command
needs the admin's credentials (--admin-password or $LIGHTQ_ADMIN_PASSWORD).

create and passwd read the new password from the terminal (asked twice, not echoed), or, when
stdin is not a terminal, from the first line of stdin:
  printf '%s\n' "$BILLING_PASSWORD" | lqcat user create billing
--password P gives it on the command line instead, where ps shows it; $LIGHTQ_PASSWORD is
never taken for it. create --admin makes the new user an admin too.

delete removes the user and its roles; its connections must log in again. passwd leaves
connections logged in with the old password alone. The broker's configured admin cannot be
deleted and takes its password from the broker's configuration.

list prints each user, whether it is an admin and its roles per topic; -J prints one object
per user: {"user":"billing","admin":false,"grants":[{"topic":"orders","roles":["consume"]}]}

Exit code 8 when the user exists (create), 5 when it does not.
`

const aclHelp = `Usage:
  lqcat acl grant USER -t TOPIC --role produce|consume|both
  lqcat acl grant USER --admin
  lqcat acl revoke USER -t TOPIC --role produce|consume|both
  lqcat acl revoke USER --admin
  lqcat acl list [USER] [-t TOPIC] [-J]

Roles on topics: produce may PRODUCE; consume may read (subscribe, fetch, offsets, consumer
group commits); either lets a user see the topic in -L, topic list and stats. --admin is the
broker's admin role: everything, on every topic, and these commands. Several users may hold
roles on a topic, and a user on several topics; --role takes produce, consume, both, or a
list (produce,consume). A grant adds to what the user holds, a revoke takes away only the
roles named. Changes count at once for the user's connections: a revoked consumer's
subscriptions end. Every acl command needs the admin's credentials.

list prints one line per user and topic (TOPIC * for the broker, where the role is admin); -t
shows who may use TOPIC (its grants and the admins), USER one user's roles. -J prints one
object per line: {"user":"billing","topic":"orders","roles":["consume"]}, topic "" for the
broker.

Example:
  lqcat acl grant billing -t orders --role consume
`

// adminFamily parses the flags of a user or acl command, with extra's, and resolves the
// credentials: these commands connect as the admin, and --user is never a login there (the
// user is an argument).
func (r *runner) adminFamily(name, help string, args []string, extra func(*flag.FlagSet)) ([]string, error) {
	fs := newFlagSet(name)
	r.c.register(fs)
	extra(fs)
	pos, err := r.parse(fs, help, args)
	if err != nil {
		return nil, err
	}
	if r.c.user != "" {
		return nil, usageErr("%s: the user is an argument, not --user", name)
	}
	r.c.adminCommand = true
	return pos, r.c.resolve(r.getenv)
}

func (r *runner) userCmd(ctx context.Context, args []string) error {
	if err := r.subcommandHelp(args, userHelp, "user: say create, delete, passwd or list"); err != nil {
		return err
	}
	sub := args[0]
	var admin bool
	pos, err := r.adminFamily("user "+sub, userHelp, args[1:], func(fs *flag.FlagSet) {
		if sub == "create" {
			fs.BoolVar(&admin, "admin", false, "make the new user an admin")
		}
	})
	if err != nil {
		return err
	}
	// --password is the new password of create and passwd; it names no login here.
	newPassword := r.c.password
	if newPassword != "" && sub != "create" && sub != "passwd" {
		return usageErr("user %s: --password is the new password of user create and user passwd", sub)
	}
	switch sub {
	case "create", "delete", "passwd":
		if len(pos) != 1 {
			return usageErr("user %s takes one NAME", sub)
		}
		name := pos[0]
		if err := wire.ValidUserName(name); err != nil {
			return usageErr("%v", err)
		}
		if sub != "delete" {
			if newPassword, err = r.newPassword(name, newPassword); err != nil {
				return err
			}
		}
		conn, ctx, done, err := r.request(ctx, adminOnly)
		if err != nil {
			return err
		}
		defer done()
		switch sub {
		case "create":
			if err := conn.CreateUser(ctx, name, newPassword); err != nil {
				return fmt.Errorf("user create %q: %w", name, err)
			}
			if admin {
				if err := conn.Grant(ctx, name, "", wire.RolesAdmin); err != nil {
					return fmt.Errorf("user create %q: the user was created, but making it an admin failed: %w", name, err)
				}
			}
			r.say("created user %q%s", name, map[bool]string{true: ", an admin", false: ""}[admin])
		case "delete":
			if err := conn.DeleteUser(ctx, name); err != nil {
				return fmt.Errorf("user delete %q: %w", name, err)
			}
			r.say("deleted user %q", name)
		case "passwd":
			if err := conn.SetPassword(ctx, name, newPassword); err != nil {
				return fmt.Errorf("user passwd %q: %w", name, err)
			}
			r.say("changed the password of user %q", name)
		}
		return nil
	case "list":
		if len(pos) > 1 {
			return usageErr("user list takes at most one NAME")
		}
		name := ""
		if len(pos) == 1 {
			name = pos[0]
		}
		return r.userList(ctx, name)
	}
	return usageErr("user %q: want create, delete, passwd or list", sub)
}

// say prints what a command did on stdout, unless -q.
func (r *runner) say(format string, args ...any) {
	if !r.c.quiet {
		fmt.Fprintf(r.stdout, format+"\n", args...)
	}
}

type jsonGrant struct {
	Topic string   `json:"topic"`
	Roles []string `json:"roles"`
}

type jsonUser struct {
	User   string      `json:"user"`
	Admin  bool        `json:"admin"`
	Grants []jsonGrant `json:"grants"`
}

type jsonACL struct {
	User  string   `json:"user"`
	Topic string   `json:"topic"`
	Roles []string `json:"roles"`
}

// roleList is roles as JSON lists them: their names, never null.
func roleList(r wire.Roles) []string {
	if r == 0 {
		return []string{}
	}
	return strings.Split(r.String(), ",")
}

func (r *runner) userList(ctx context.Context, name string) error {
	conn, ctx, done, err := r.request(ctx, adminOnly)
	if err != nil {
		return err
	}
	defer done()
	entries, err := conn.ListUsers(ctx, name, "")
	if err != nil {
		return fmt.Errorf("user list: %w", err)
	}
	var users []jsonUser
	for _, e := range entries {
		if e.Topic == "" { // each user's first entry: its roles on the broker
			users = append(users, jsonUser{User: e.User, Admin: e.Roles&wire.RolesAdmin != 0, Grants: []jsonGrant{}})
			continue
		}
		if len(users) == 0 || users[len(users)-1].User != e.User {
			return fmt.Errorf("user list: the broker listed %q's roles on %q before its broker entry", e.User, e.Topic)
		}
		u := &users[len(users)-1]
		u.Grants = append(u.Grants, jsonGrant{Topic: e.Topic, Roles: roleList(e.Roles)})
	}
	if r.c.json {
		for _, u := range users {
			if err := writeJSONLine(r.stdout, u); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(r.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "USER\tADMIN\tROLES")
	for _, u := range users {
		var grants []string
		for _, g := range u.Grants {
			grants = append(grants, g.Topic+":"+strings.Join(g.Roles, ","))
		}
		if len(grants) == 0 {
			grants = []string{"-"}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", u.User, map[bool]string{true: "yes", false: "no"}[u.Admin], strings.Join(grants, " "))
	}
	return tw.Flush()
}

func (r *runner) aclCmd(ctx context.Context, args []string) error {
	if err := r.subcommandHelp(args, aclHelp, "acl: say grant, revoke or list"); err != nil {
		return err
	}
	sub := args[0]
	var (
		topic, role string
		admin       bool
	)
	pos, err := r.adminFamily("acl "+sub, aclHelp, args[1:], func(fs *flag.FlagSet) {
		onceVar(fs, &topic, "t", "topic")
		if sub != "list" {
			onceVar(fs, &role, "role", "roles on the topic")
			fs.BoolVar(&admin, "admin", false, "the broker's admin role")
		}
	})
	if err != nil {
		return err
	}
	if r.c.password != "" {
		return usageErr("acl %s: --password names no one here (the admin's is --admin-password)", sub)
	}
	if topic != "" {
		if err := wire.ValidTopicName(topic); err != nil {
			return usageErr("-t: %v", err)
		}
	}
	switch sub {
	case "grant", "revoke":
		if len(pos) != 1 {
			return usageErr("acl %s takes one USER", sub)
		}
		user := pos[0]
		if err := wire.ValidUserName(user); err != nil {
			return usageErr("%v", err)
		}
		var roles wire.Roles
		switch {
		case admin && (topic != "" || role != ""):
			return usageErr("acl %s: --admin is a role on the broker: give it without -t and --role", sub)
		case admin:
			roles = wire.RolesAdmin
		case topic == "" || role == "":
			return usageErr("acl %s: give -t TOPIC and --role produce|consume|both, or --admin", sub)
		default:
			if roles, err = wire.ParseRoles(role); err != nil {
				return usageErr("--role: %v", err)
			}
			if roles&wire.RolesAdmin != 0 {
				return usageErr("--role admin: admin is a role on the broker; use --admin without -t")
			}
		}
		conn, ctx, done, err := r.request(ctx, adminOnly)
		if err != nil {
			return err
		}
		defer done()
		where := fmt.Sprintf("on topic %q", topic)
		if topic == "" {
			where = "on the broker"
		}
		if sub == "grant" {
			if err := conn.Grant(ctx, user, topic, roles); err != nil {
				return fmt.Errorf("acl grant %s to %q %s: %w", roles, user, where, err)
			}
			r.say("granted %s to %q %s", roles, user, where)
			return nil
		}
		if err := conn.Revoke(ctx, user, topic, roles); err != nil {
			return fmt.Errorf("acl revoke %s from %q %s: %w", roles, user, where, err)
		}
		r.say("revoked %s from %q %s", roles, user, where)
		return nil
	case "list":
		if len(pos) > 1 {
			return usageErr("acl list takes at most one USER")
		}
		user := ""
		if len(pos) == 1 {
			user = pos[0]
		}
		return r.aclList(ctx, user, topic)
	}
	return usageErr("acl %q: want grant, revoke or list", sub)
}

func (r *runner) aclList(ctx context.Context, user, topic string) error {
	conn, ctx, done, err := r.request(ctx, adminOnly)
	if err != nil {
		return err
	}
	defer done()
	entries, err := conn.ListUsers(ctx, user, topic)
	if err != nil {
		return fmt.Errorf("acl list: %w", err)
	}
	if r.c.json {
		for _, e := range entries {
			if e.Roles == 0 {
				continue // a user's empty broker entry: no role to list
			}
			if err := writeJSONLine(r.stdout, jsonACL{User: e.User, Topic: e.Topic, Roles: roleList(e.Roles)}); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(r.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "USER\tTOPIC\tROLES")
	for _, e := range entries {
		if e.Roles == 0 {
			continue
		}
		t := e.Topic
		if t == "" {
			t = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", e.User, t, e.Roles)
	}
	return tw.Flush()
}
