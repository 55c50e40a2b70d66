package lqcat

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/lightq/lightq/wire"
)

// noSecret fails the test if any of secrets shows in r's output.
func noSecret(t *testing.T, r result, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(r.out+r.err, s) {
			t.Errorf("lqcat printed the password %q:\n%s%s", s, r.out, r.err)
		}
	}
}

// TestUserAndACLCommands: lqcat user and acl against a real broker: new passwords from stdin
// or --password, grants and revokes that the users' own lqcat runs then feel, the lists in
// text and JSON, and the exit codes of refusals.
func TestUserAndACLCommands(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("orders", "durable", 2) // with user app, from the environment
	delete(e.vars, "LIGHTQ_USER")
	delete(e.vars, "LIGHTQ_PASSWORD")
	if out := e.ok("", "topic", "create", "bare", "--kind", "durable"); !strings.Contains(out, "no users yet") {
		t.Errorf("topic create without a user: %q", out)
	}
	const writerPass, readerPass, opsPass = "writer-secret-1", "reader-secret-2", "ops-secret-3"
	r := e.run(writerPass+"\n", "user", "create", "writer")
	if r.code != 0 || r.out != "created user \"writer\"\n" {
		t.Fatalf("user create from stdin: exit %d, %q %q", r.code, r.out, r.err)
	}
	noSecret(t, r, writerPass)
	e.ok(readerPass+"\r\nignored second line\n", "user", "create", "reader")
	e.ok("", "user", "create", "ops", "--admin", "--password", opsPass)
	e.ok("", "acl", "grant", "writer", "-t", "orders", "--role", "produce")
	e.ok("", "acl", "grant", "reader", "-t", "orders", "--role", "consume")
	e.ok("", "acl", "grant", "reader", "-t", "bare", "--role", "produce,consume")

	// The roles as the users' own runs see them.
	as := func(user, pass string) []string { return []string{"--user", user, "--password", pass} }
	e.ok("a\nb\n", append([]string{"-P", "-t", "orders", "-p", "0"}, as("writer", writerPass)...)...)
	e.expect(ExitAuth, "needs the consume role", "", append([]string{"-C", "-t", "orders", "-e"}, as("writer", writerPass)...)...)
	if got := e.ok("", append([]string{"-C", "-t", "orders", "-e"}, as("reader", readerPass)...)...); got != "a\nb\n" {
		t.Errorf("reader: %q", got)
	}
	e.expect(ExitAuth, "needs the produce role", "c\n", append([]string{"-P", "-t", "orders"}, as("reader", readerPass)...)...)
	if got := e.ok("", append([]string{"topic", "list"}, as("writer", writerPass)...)...); !strings.Contains(got, "orders") || strings.Contains(got, "bare") {
		t.Errorf("writer's topic list:\n%s", got)
	}
	e.ok("", append([]string{"user", "list"}, "--admin-user", "ops", "--admin-password", opsPass)...)

	// The lists.
	wantUsers := "USER    ADMIN  ROLES\n" +
		"admin   yes    -\n" +
		"app     no     orders:produce,consume\n" +
		"ops     yes    -\n" +
		"reader  no     bare:produce,consume orders:consume\n" +
		"writer  no     orders:produce\n"
	if got := e.ok("", "user", "list"); got != wantUsers {
		t.Errorf("user list:\n%s\nwant:\n%s", got, wantUsers)
	}
	var u jsonUser
	if err := json.Unmarshal([]byte(e.ok("", "user", "list", "reader", "-J")), &u); err != nil ||
		u.User != "reader" || u.Admin || len(u.Grants) != 2 || u.Grants[1].Topic != "orders" || strings.Join(u.Grants[1].Roles, ",") != "consume" {
		t.Errorf("user list reader -J: %+v, %v", u, err)
	}
	wantOrders := "USER    TOPIC   ROLES\n" +
		"admin   *       admin\n" +
		"app     orders  produce,consume\n" +
		"ops     *       admin\n" +
		"reader  orders  consume\n" +
		"writer  orders  produce\n"
	if got := e.ok("", "-b", e.addr, "acl", "list", "-t", "orders"); got != wantOrders {
		t.Errorf("acl list -t orders:\n%s\nwant:\n%s", got, wantOrders)
	}
	if got := e.ok("", "acl", "list", "reader", "-J"); got != `{"user":"reader","topic":"bare","roles":["produce","consume"]}`+"\n"+`{"user":"reader","topic":"orders","roles":["consume"]}`+"\n" {
		t.Errorf("acl list reader -J:\n%s", got)
	}

	// Revoke, passwd, delete.
	e.ok("", "acl", "revoke", "reader", "-t", "bare", "--role", "consume")
	e.ok("", "acl", "revoke", "ops", "--admin")
	e.expect(ExitAuth, "NOT_AUTHORIZED", "", "user", "list", "--admin-user", "ops", "--admin-password", opsPass)
	if got := e.ok("", "acl", "list", "reader"); got != "USER    TOPIC   ROLES\nreader  bare    produce\nreader  orders  consume\n" {
		t.Errorf("after the revoke:\n%s", got)
	}
	e.ok("reader-secret-new\n", "user", "passwd", "reader")
	e.expect(ExitAuth, `authentication failed for user "reader"`, "", append([]string{"-L"}, as("reader", readerPass)...)...)
	e.ok("", append([]string{"-L"}, as("reader", "reader-secret-new")...)...)
	e.ok("", "user", "delete", "writer")
	e.expect(ExitAuth, `authentication failed for user "writer"`, "", append([]string{"-L"}, as("writer", writerPass)...)...)

	// Refusals and their exit codes.
	e.expect(ExitExists, "USER_EXISTS", "pw\n", "user", "create", "reader")
	e.expect(ExitUnknown, "UNKNOWN_USER", "", "user", "delete", "writer")
	e.expect(ExitUnknown, "UNKNOWN_USER", "", "acl", "grant", "nobody", "-t", "orders", "--role", "consume")
	e.expect(ExitUnknown, "UNKNOWN_TOPIC", "", "acl", "grant", "reader", "-t", "nope", "--role", "consume")
	e.expect(ExitUnknown, "UNKNOWN_USER", "", "user", "list", "nobody")
	e.expect(ExitFailed, "configured admin", "", "user", "delete", "admin")
	e.expect(ExitUsage, "no password", "", "user", "create", "carol")
	e.expect(ExitUsage, "limit 1024", strings.Repeat("p", wire.MaxPassword+1)+"\n", "user", "create", "carol")
	e.expect(ExitUsage, "the user is an argument", "", "user", "delete", "--user", "x")
	e.expect(ExitUsage, "new password of user create", "", "user", "delete", "reader", "--password", "p")
	e.expect(ExitUsage, "takes one NAME", "", "user", "create")
	e.expect(ExitUsage, "--role admin", "", "acl", "grant", "reader", "-t", "orders", "--role", "admin")
	e.expect(ExitUsage, "unknown role", "", "acl", "grant", "reader", "-t", "orders", "--role", "read")
	e.expect(ExitUsage, "give -t TOPIC and --role", "", "acl", "grant", "reader", "-t", "orders")
	e.expect(ExitUsage, "without -t and --role", "", "acl", "revoke", "reader", "--admin", "-t", "orders")
	e.expect(ExitUsage, "say grant, revoke or list", "", "acl")
	e.vars["LIGHTQ_ADMIN_PASSWORD"] = ""
	e.expect(ExitUsage, "admin's credentials", "", "acl", "list")
}

// TestUserCommandsIgnoreTopicUserEnv: user and acl connect as the admin whatever
// $LIGHTQ_USER says, and $LIGHTQ_PASSWORD never becomes a new user's password.
func TestUserCommandsIgnoreTopicUserEnv(t *testing.T) {
	e := newEnv(t, nil) // LIGHTQ_USER and LIGHTQ_PASSWORD are set to the topic user's
	e.topic("t", "durable", 1)
	e.ok("", "acl", "list")
	e.expect(ExitUsage, "no password", "", "user", "create", "carol")
	e.ok("carol-pw\n", "user", "create", "carol")
	e.expect(ExitAuth, `authentication failed for user "carol"`, "", "-L", "--user", "carol", "--password", userPass)
}

// TestFlagsWinOverEnvironment: credentials on the command line are used whatever the
// environment says, for the admin and for the user, given as flags or as -X.
func TestFlagsWinOverEnvironment(t *testing.T) {
	e := newEnv(t, nil) // the environment: topic user app, and the admin's right password
	e.topic("t", "durable", 1)
	e.ok("r-pw\n", "user", "create", "reader")
	e.ok("", "acl", "grant", "reader", "-t", "t", "--role", "consume")
	e.ok("o-pw\n", "user", "create", "ops")
	e.ok("", "acl", "grant", "ops", "--admin")
	e.ok("x\n", "-P", "-t", "t") // as app, from the environment

	// The admin: --admin-user and --admin-password win over $LIGHTQ_ADMIN_*.
	e.expect(ExitAuth, `user "ops"`, "", "user", "list", "--admin-user", "ops", "--admin-password", "wrong-one")
	e.expect(ExitAuth, `user "admin"`, "", "user", "list", "--admin-password", "wrong-two")
	e.vars["LIGHTQ_ADMIN_PASSWORD"] = "wrong-three"
	e.ok("", "user", "list", "--admin-user", "ops", "--admin-password", "o-pw")
	e.vars["LIGHTQ_ADMIN_PASSWORD"] = adminPass
	// With the admin's on the command line, the environment's topic user is not used.
	e.expect(ExitAuth, `user "admin"`, "", "topic", "list", "--admin-password", "wrong-four")

	// The user: --user/--password and -X sasl.* win over $LIGHTQ_USER/$LIGHTQ_PASSWORD. reader
	// may consume but not produce, so which one logged in shows.
	for _, creds := range [][]string{
		{"--user", "reader", "--password", "r-pw"},
		{"-X", "sasl.username=reader", "-X", "sasl.password=r-pw"},
	} {
		e.expect(ExitAuth, `user "reader" holds consume`, "y\n", append([]string{"-P", "-t", "t"}, creds...)...)
		if got := e.ok("", append([]string{"-C", "-t", "t", "-e"}, creds...)...); got != "x\n" {
			t.Errorf("%q: -C printed %q", creds, got)
		}
	}
	e.expect(ExitAuth, `user "reader"`, "", "-L", "--user", "reader", "--password", "wrong-five")
	if r := e.run("", "-L", "--user", "reader", "--password", "wrong-five"); strings.Contains(r.err, `"app"`) {
		t.Errorf("the error names the environment's user: %q", r.err)
	}
}

// TestNewPasswordFirstLineOnly: with stdin not a terminal the first line is read and nothing
// after it (so a pipe that stays open does not block lqcat).
func TestNewPasswordFirstLineOnly(t *testing.T) {
	for in, want := range map[string]string{
		"pw\n": "pw", "pw\r\n": "pw", "pw": "pw", "pw\nmore\n": "pw", "\n": "", "": "", "a b c\n": "a b c",
	} {
		r := &runner{stdin: strings.NewReader(in)}
		got, err := r.readNewPassword("u", "")
		if err != nil || got != want {
			t.Errorf("stdin %q: %q, %v; want %q", in, got, err, want)
		}
	}
	pr := &blockingAfter{data: []byte("first\n")}
	r := &runner{stdin: pr}
	if got, err := r.readNewPassword("u", ""); err != nil || got != "first" {
		t.Errorf("an open pipe: %q, %v", got, err)
	}
	r = &runner{stdin: strings.NewReader("from stdin\n")}
	if got, _ := r.readNewPassword("u", "given"); got != "given" {
		t.Errorf("--password: %q", got)
	}
}

// errPastTheLine is what blockingAfter answers a read after its data: where a pipe whose
// writer keeps it open would block.
var errPastTheLine = errors.New("read past the first line: a pipe kept open would block here")

// blockingAfter gives its data, then errPastTheLine.
type blockingAfter struct {
	data []byte
	off  int
}

func (b *blockingAfter) Read(p []byte) (int, error) {
	if b.off >= len(b.data) {
		return 0, errPastTheLine
	}
	n := copy(p, b.data[b.off:])
	b.off += n
	return n, nil
}
