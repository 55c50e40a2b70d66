package lqcat

import (
	"strings"
	"testing"
	"time"
)

// TestKcatClientOptions: kcat's -X client properties set the broker, the credentials and the
// client name for every mode and subcommand; an unknown key, or one that disagrees with its
// flag, is a usage error.
func TestKcatClientOptions(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("x", "durable", 1)
	addr := e.vars["LIGHTQ_BROKER"]
	delete(e.vars, "LIGHTQ_BROKER")
	delete(e.vars, "LIGHTQ_USER")
	delete(e.vars, "LIGHTQ_PASSWORD")
	creds := []string{"-X", "bootstrap.servers=" + addr, "-X", "sasl.username=" + userName, "-X", "sasl.password=" + userPass}
	e.ok("a\nb\n", append([]string{"-P", "-t", "x", "-X", "client.id=kcat-habit"}, creds...)...)
	if got := e.ok("", append([]string{"-C", "-t", "x", "-e"}, creds...)...); got != "a\nb\n" {
		t.Errorf("-C with -X: %q", got)
	}
	if got := e.ok("", append(append([]string{}, creds...), "stats", "x")...); !strings.Contains(got, "x") {
		t.Errorf("-X before stats: %q", got)
	}
	e.expect(ExitUsage, "unknown client option", "", append([]string{"-C", "-t", "x", "-e", "-X", "fetch.wait.max.ms=5"}, creds...)...)
	e.expect(ExitUsage, "unknown client option", "", append([]string{"topic", "list", "-X", "segment.bytes=5"}, creds...)...)
	e.expect(ExitUsage, "conflicts with -b", "", append([]string{"-C", "-t", "x", "-e", "-b", "127.0.0.1:1"}, creds...)...)
	e.expect(ExitUsage, "want key=value", "", append([]string{"-C", "-t", "x", "-e", "-X", "novalue"}, creds...)...)
	// topic create still takes topic options, with units.
	e.vars["LIGHTQ_BROKER"] = addr
	e.ok("", "topic", "create", "y", "--kind", "durable", "--user", userName, "--password", userPass, "-X", "segment.bytes=4MiB", "-X", "client.id=creator")
}

// TestKcatConsumeHabits: -o stored, "-G GROUP TOPIC", and repeated flags.
func TestKcatConsumeHabits(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("s", "durable", 1)
	e.ok("a\nb\nc\n", "-P", "-t", "s")
	e.expect(ExitUsage, "-o stored", "", "-C", "-t", "s", "-o", "stored", "-e")
	e.expect(ExitUsage, "two start offsets", "", "-C", "-t", "s", "-G", "g", "-o", "stored", "-o", "beginning", "-e")
	if got := e.ok("", "-C", "-t", "s", "-G", "g", "-c", "1"); got != "a\n" {
		t.Fatalf("first: %q", got)
	}
	// -o stored resumes at the commit; kcat's "-G GROUP TOPIC" implies -C.
	if got := e.ok("", "-C", "-t", "s", "-G", "g", "-o", "stored", "-c", "1"); got != "b\n" {
		t.Errorf("-o stored: %q", got)
	}
	if got := e.ok("", "-G", "g", "s", "-e"); got != "c\n" {
		t.Errorf("-G g s: %q", got)
	}
	e.expect(ExitUsage, "one topic at a time", "", "-G", "g", "s", "other", "-e")
	e.expect(ExitUsage, "differ", "", "-G", "g", "-t", "other", "s", "-e")
	// A repeated flag must agree with itself.
	e.expect(ExitUsage, "given twice with different values", "", "-C", "-t", "s", "-t", "other", "-e")
	e.expect(ExitUsage, "given twice with different values", "", "-C", "-t", "s", "-p", "0", "-p", "1", "-e")
	e.expect(ExitUsage, "given twice with different values", "", "-b", "127.0.0.1:1", "stats", "s", "-b", "127.0.0.1:2")
	e.expect(ExitUsage, "given twice with different values", "", "-C", "-t", "s", "-c", "1", "-c2", "-e")
	e.expect(ExitUsage, "given twice with different values", "", "topic", "create", "z", "--partitions", "2", "-n", "3")
	e.expect(ExitUsage, "given twice with different values", "", "group", "describe", "-G", "a", "-G", "b", "-t", "s")
	e.expect(ExitUsage, "not an integer", "", "-C", "-t", "s", "-c", "many")
	if got := e.ok("", "-C", "-t", "s", "-t", "s", "-c", "1", "-c", "1", "-e", "-o", "-1"); got != "c\n" {
		t.Errorf("-t s -t s: %q", got)
	}
}

// TestCommandLineCredentialsWin: with a topic user in the environment, --admin-password on the
// command line logs in as the admin (here with a wrong password, so it fails) instead of
// silently using the environment's topic user.
func TestCommandLineCredentialsWin(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("c", "durable", 1)
	r := e.expect(ExitAuth, `user "admin"`, "", "topic", "list", "--admin-password", "nope")
	if strings.Contains(r.err, userName) {
		t.Errorf("the error names the topic user: %q", r.err)
	}
	e.ok("", "topic", "list", "--admin-password", adminPass)
	// Without command-line credentials the environment's topic user is used, as before.
	e.ok("", "-C", "-t", "c", "-e")
	// topic create's --user and $LIGHTQ_USER name the new topic's user, not a login.
	e.ok("", "topic", "create", "c2", "--kind", "durable", "--admin-password", adminPass)
}

// TestDefaultPort: -b with only a host gets the broker's default port, 7450.
func TestDefaultPort(t *testing.T) {
	for in, want := range map[string]string{"localhost": "localhost:7450", "127.0.0.1:9000": "127.0.0.1:9000", "[::1]": "[::1]:7450"} {
		c := common{broker: in, timeout: time.Second}
		if err := c.resolve(func(string) string { return "" }); err != nil || c.broker != want {
			t.Errorf("-b %s: %q, %v; want %q", in, c.broker, err, want)
		}
	}
	c := common{timeout: time.Second}
	if err := c.resolve(func(k string) string { return map[string]string{"LIGHTQ_BROKER": "broker.internal"}[k] }); err != nil || c.broker != "broker.internal:7450" {
		t.Errorf("$LIGHTQ_BROKER=broker.internal: %q, %v", c.broker, err)
	}
}

// TestOffsetBeyondEnd: -o N past the end of the log is out of range (exit 9, saying so) with
// -e as without it; -o at the end itself is fine and prints nothing with -e.
func TestOffsetBeyondEnd(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("o", "durable", 1)
	e.ok("a\nb\n", "-P", "-t", "o")
	e.expect(ExitOutOfRange, "beyond the end", "", "-C", "-t", "o", "-o", "99999", "-e")
	r := e.expect(ExitOutOfRange, "beyond the end", "", "-C", "-t", "o", "-o", "99999")
	if strings.Contains(r.err, "topics/") {
		t.Errorf("the error shows a server path: %q", r.err)
	}
	if got := e.ok("", "-C", "-t", "o", "-o", "2", "-e"); got != "" {
		t.Errorf("-o 2 -e (the end): %q", got)
	}
}

// TestDryRunHeading: group reset --dry-run commits nothing, and its table says the offsets are
// what a reset would commit, not what is committed.
func TestDryRunHeading(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("r", "durable", 1)
	e.ok("a\nb\n", "-P", "-t", "r")
	e.ok("", "-C", "-t", "r", "-G", "g", "-c", "1")
	out := e.ok("", "group", "reset", "-G", "g", "-t", "r", "--to-latest", "--dry-run")
	head, _, _ := strings.Cut(out, "\n")
	if !strings.Contains(head, "WOULD COMMIT") || strings.Contains(head, "PREVIOUS") {
		t.Errorf("--dry-run heading: %q", head)
	}
	if got := e.ok("", "-C", "-t", "r", "-G", "g", "-e"); got != "b\n" {
		t.Errorf("after the dry run the group reads %q, want b", got)
	}
}
