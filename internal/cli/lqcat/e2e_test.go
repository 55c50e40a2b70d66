package lqcat

// End-to-end tests: Main against a real broker started in-process on a free loopback port.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/broker/brokertest"
	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/internal/version"
	"github.com/lightq/lightq/wire"
)

const (
	adminPass = "e2e-admin-secret"
	userName  = "app"
	userPass  = "e2e-user-secret"
)

// env is a broker and the environment lqcat runs with.
type env struct {
	t    *testing.T
	srv  *broker.Server
	addr string
	vars map[string]string
}

func newEnv(t *testing.T, mutate func(*broker.Config)) *env {
	t.Helper()
	srv := brokertest.Start(t, func(cfg *broker.Config) {
		cfg.AdminUser, cfg.AdminPassword = "admin", adminPass
		cfg.ShutdownDrain = 200 * time.Millisecond
		if mutate != nil {
			mutate(cfg)
		}
	})
	return &env{t: t, srv: srv, addr: srv.Addr(), vars: map[string]string{
		"LIGHTQ_BROKER": srv.Addr(), "LIGHTQ_USER": userName, "LIGHTQ_PASSWORD": userPass, "LIGHTQ_ADMIN_PASSWORD": adminPass,
	}}
}

type result struct {
	out, err string
	code     int
}

// run runs lqcat with stdin and the env's variables.
func (e *env) run(stdin string, args ...string) result {
	e.t.Helper()
	return e.runCtx(context.Background(), stdin, args...)
}

func (e *env) runCtx(ctx context.Context, stdin string, args ...string) result {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code := Main(ctx, args, func(k string) string { return e.vars[k] }, strings.NewReader(stdin), &out, &errb)
	return result{out.String(), errb.String(), code}
}

// ok runs lqcat and fails the test unless it exits 0.
func (e *env) ok(stdin string, args ...string) string {
	e.t.Helper()
	r := e.run(stdin, args...)
	if r.code != 0 {
		e.t.Fatalf("lqcat %q: exit %d\nstderr: %s", args, r.code, r.err)
	}
	return r.out
}

// expect runs lqcat and checks its exit code and that stderr says want.
func (e *env) expect(code int, want string, stdin string, args ...string) result {
	e.t.Helper()
	r := e.run(stdin, args...)
	if r.code != code || !strings.Contains(r.err, want) {
		e.t.Errorf("lqcat %q: exit %d, stderr %q; want exit %d and %q", args, r.code, r.err, code, want)
	}
	// One line per error; -P adds one per failed message before its summary.
	if strings.Count(r.err, "\n") > 1 && code != ExitUsage && !strings.Contains(r.err, "were not acknowledged") {
		e.t.Errorf("lqcat %q: stderr is not one line: %q", args, r.err)
	}
	for _, p := range []string{adminPass, userPass} {
		if strings.Contains(r.out+r.err, p) {
			e.t.Errorf("lqcat %q printed a password", args)
		}
	}
	return r
}

func (e *env) topic(name, kind string, partitions int, extra ...string) {
	e.t.Helper()
	e.ok("", append([]string{"topic", "create", name, "--kind", kind, "--partitions", fmt.Sprint(partitions)}, extra...)...)
}

func (e *env) admin() *client.Conn {
	e.t.Helper()
	c, err := client.Dial(context.Background(), e.addr, client.Options{User: "admin", Password: adminPass})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

// waitCounter waits until a topic's STATS counter satisfies ok.
func (e *env) waitCounter(topic, name string, ok func(uint64) bool) {
	e.t.Helper()
	c := e.admin()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := c.Stats(context.Background(), topic)
		if err != nil {
			e.t.Fatal(err)
		}
		if v, _ := st[0].Get(name); ok(v) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("topic %s: counter %s never got there", topic, name)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func sortedLines(s string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}

func TestDurableProduceConsume(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("d", "durable", 1)
	e.ok("k1:one\nk2:two\n:three\nfour", "-P", "-t", "d", "-K", ":", "-H", "src=test")
	f := []string{"-C", "-t", "d", "-f", `%p/%o %k=%s [%h]\n`}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-e"}, "0/0 k1=one [src=test]\n0/1 k2=two [src=test]\n0/2 =three [src=test]\n0/3 =four [src=test]\n"},
		{[]string{"-o", "beginning", "-c", "2"}, "0/0 k1=one [src=test]\n0/1 k2=two [src=test]\n"},
		{[]string{"-o", "2", "-e"}, "0/2 =three [src=test]\n0/3 =four [src=test]\n"},
		{[]string{"-o2", "-c1"}, "0/2 =three [src=test]\n"},
		{[]string{"-o", "-1", "-e"}, "0/3 =four [src=test]\n"},
		{[]string{"-o", "-100", "-e"}, "0/0 k1=one [src=test]\n0/1 k2=two [src=test]\n0/2 =three [src=test]\n0/3 =four [src=test]\n"},
		{[]string{"-o", "end", "-e"}, ""},
	}
	for _, c := range cases {
		if got := e.ok("", append(slices.Clone(f), c.args...)...); got != c.want {
			t.Errorf("%q: got\n%s\nwant\n%s", c.args, got, c.want)
		}
	}
	// Plain output with -K, and a custom -D.
	if got := e.ok("", "-C", "-t", "d", "-e", "-K", "=", "-D", "|"); got != "k1=one|k2=two|=three|=four|" {
		t.Errorf("plain -K = -D |: %q", got)
	}
	// -o end without -e waits for the next message: produce one while it waits.
	done := make(chan result)
	go func() { done <- e.run("", "-C", "-t", "d", "-o", "end", "-c", "1") }()
	time.Sleep(300 * time.Millisecond)
	e.ok("five\n", "-P", "-t", "d")
	if r := <-done; r.code != 0 || r.out != "five\n" {
		t.Errorf("-o end -c 1: %+v", r)
	}
}

func TestDurablePartitionsAndTimestamps(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("p3", "durable", 3)
	var in strings.Builder
	for i := range 9 {
		fmt.Fprintf(&in, `{"partition":%d,"timestamp":%d,"key":"k%d","value":"v%d"}`+"\n", i%3, 1000*(i/3+1), i, i)
	}
	e.ok(in.String(), "-P", "-t", "p3", "-J")
	f := []string{"-C", "-t", "p3", "-f", `%p %o %T %s\n`}
	all := e.ok("", append(f, "-e")...)
	if want := "0 0 1000 v0\n0 1 2000 v3\n0 2 3000 v6\n1 0 1000 v1\n1 1 2000 v4\n1 2 3000 v7\n2 0 1000 v2\n2 1 2000 v5\n2 2 3000 v8\n"; sortedLines(all) != want {
		t.Errorf("all:\n%s", all)
	}
	if got := sortedLines(e.ok("", append(f, "-o", "-1", "-e")...)); got != "0 2 3000 v6\n1 2 3000 v7\n2 2 3000 v8\n" {
		t.Errorf("-o -1:\n%s", got)
	}
	golden(t, "group-reset-time.golden", e.ok("", "group", "reset", "-G", "g", "-t", "p3", "--to-time", "2500"))
	if got := e.ok("", "-C", "-t", "p3", "-G", "g", "-e", "-f", `%p %o\n`); sortedLines(got) != "0 2\n1 2\n2 2\n" {
		t.Errorf("after --to-time:\n%s", got)
	}
	if got := e.ok("", append(f, "-p", "1", "-o", "s@2000", "-e")...); got != "1 1 2000 v4\n1 2 3000 v7\n" {
		t.Errorf("-p 1 -o s@2000:\n%s", got)
	}
	// e@ in the past: stop before 3000, and at the end of partitions that never get there.
	if got := sortedLines(e.ok("", append(f, "-o", "e@3000")...)); got != "0 0 1000 v0\n0 1 2000 v3\n1 0 1000 v1\n1 1 2000 v4\n2 0 1000 v2\n2 1 2000 v5\n" {
		t.Errorf("-o e@3000:\n%s", got)
	}
	if got := sortedLines(e.ok("", append(f, "-o", "s@2000", "-o", "e@3000")...)); got != "0 1 2000 v3\n1 1 2000 v4\n2 1 2000 v5\n" {
		t.Errorf("-o s@2000 -o e@3000:\n%s", got)
	}
	// -p overrides the JSON partition.
	e.ok(`{"partition":0,"value":"moved"}`+"\n", "-P", "-t", "p3", "-J", "-p", "2")
	if got := e.ok("", "-C", "-t", "p3", "-p", "2", "-o", "-1", "-e"); got != "moved\n" {
		t.Errorf("-p over JSON: %q", got)
	}
}

func TestTransientLive(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("live", "transient", 2)
	done := make(chan result)
	go func() { done <- e.run("", "-C", "-t", "live", "-c", "3", "-J") }()
	e.waitCounter("live", "subscribers", func(v uint64) bool { return v == 1 })
	e.ok("a\nb\nc\nd\n", "-P", "-t", "live", "-p", "1", "-z", "s2")
	r := <-done
	if r.code != 0 {
		t.Fatalf("consumer: %+v", r)
	}
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 lines, got %q", r.out)
	}
	for i, l := range lines {
		p, err := parseJSONLine([]byte(l))
		if err != nil || p.msg.Partition != 1 || string(p.msg.Value) != string(rune('a'+i)) {
			t.Errorf("line %d: %s (%v)", i, l, err)
		}
	}
	// A queue group and -p work; the messages go live to whoever listens now.
	done2 := make(chan result)
	go func() { done2 <- e.run("", "-C", "-t", "live", "-G", "workers", "-p", "0", "-c", "1") }()
	e.waitCounter("live", "subscribers", func(v uint64) bool { return v == 1 })
	e.ok("x\n", "-P", "-t", "live", "-p", "0")
	if r := <-done2; r.code != 0 || r.out != "x\n" {
		t.Errorf("queue group: %+v", r)
	}
	e.expect(ExitUnsupported, "only -o end applies", "", "-C", "-t", "live", "-o", "beginning")
	e.expect(ExitUnsupported, "no end for -e", "", "-C", "-t", "live", "-e")
	e.expect(ExitUnsupported, "transient", "", "-C", "-t", "live", "-o", "e@1000")
	// An interrupt ends a live consumer cleanly.
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		e.waitCounter("live", "subscribers", func(v uint64) bool { return v == 1 })
		cancel()
	}()
	if r := e.runCtx(ctx, "", "-C", "-t", "live"); r.code != 0 {
		t.Errorf("interrupted live consumer: %+v", r)
	}
}

// TestJSONRoundTripBroker copies random binary messages through the broker twice: the JSON of
// the copy must equal the JSON of the original, apart from the topic.
func TestJSONRoundTripBroker(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("src", "durable", 3)
	e.topic("dst", "durable", 3)
	rng := rand.New(rand.NewPCG(7, 8))
	var in bytes.Buffer
	for i := range 300 {
		r := client.Received{Partition: int32(rng.IntN(3)), Timestamp: time.UnixMilli(1_600_000_000_000 + int64(i)),
			Key: randBytes(rng, 16), Value: randBytes(rng, 3000)}
		for range rng.IntN(3) {
			r.Headers = append(r.Headers, wire.RecordHeader{Name: randBytes(rng, 6), Value: randBytes(rng, 40)})
		}
		in.Write(appendJSON(nil, "ignored", &r))
		in.WriteByte('\n')
	}
	e.ok(in.String(), "-P", "-t", "src", "-J", "-z", "zstd")
	first := e.ok("", "-C", "-t", "src", "-J", "-e")
	e.ok(first, "-P", "-t", "dst", "-J")
	second := e.ok("", "-C", "-t", "dst", "-J", "-e")
	if n := strings.Count(first, "\n"); n != 300 {
		t.Fatalf("consumed %d messages, want 300", n)
	}
	if got, want := sortedLines(strings.ReplaceAll(second, `"topic":"dst"`, `"topic":"src"`)), sortedLines(first); got != want {
		t.Errorf("copy differs from the original")
	}
	// And the original input, message for message, within each partition.
	var orig, back []string
	for l := range strings.Lines(in.String()) {
		p, _ := parseJSONLine([]byte(l))
		orig = append(orig, fmt.Sprintf("%d %q %q %d %v", p.msg.Partition, p.msg.Key, p.msg.Value, p.msg.Timestamp.UnixMilli(), p.msg.Headers))
	}
	for l := range strings.Lines(first) {
		p, _ := parseJSONLine([]byte(l))
		back = append(back, fmt.Sprintf("%d %q %q %d %v", p.msg.Partition, p.msg.Key, p.msg.Value, p.msg.Timestamp.UnixMilli(), p.msg.Headers))
	}
	slices.Sort(orig)
	slices.Sort(back)
	if !slices.Equal(orig, back) {
		t.Errorf("consumed messages differ from the produced ones")
	}
}

func TestFilesAndWholeFiles(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("f", "durable", 1)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(a, []byte("1\n2\n"), 0o644)
	os.WriteFile(b, []byte{0, 1, 2, '\n', 0xff}, 0o644)
	e.ok("stdin\n", "-P", "-t", "f", a, "-", a)
	if got := e.ok("", "-C", "-t", "f", "-e"); got != "1\n2\nstdin\n1\n2\n" {
		t.Errorf("line mode: %q", got)
	}
	e.ok("", "-P", "-t", "f", "-l", a, b)
	if got := e.ok("", "-C", "-t", "f", "-o", "-2", "-e", "-f", `%S,`); got != "4,5," {
		t.Errorf("-l sizes: %q", got)
	}
	e.ok("a\nb\nc\nd\n", "-P", "-t", "f", "-c", "2")
	if got := e.ok("", "-C", "-t", "f", "-o", "-2", "-e"); got != "a\nb\n" {
		t.Errorf("-P -c 2: %q", got)
	}
	e.expect(ExitUsage, "no such file", "", "-P", "-t", "f", filepath.Join(dir, "missing"))
}

func TestGroups(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("g", "durable", 2)
	e.ok("a\nb\nc\n", "-P", "-t", "g", "-p", "0")
	e.ok("x\n", "-P", "-t", "g", "-p", "1")
	if got := e.ok("", "-C", "-t", "g", "-G", "billing", "-p", "0", "-c", "2"); got != "a\nb\n" {
		t.Errorf("first read: %q", got)
	}
	desc := e.ok("", "group", "describe", "-G", "billing", "-t", "g")
	golden(t, "group-describe.golden", desc)
	if got := e.ok("", "-C", "-t", "g", "-G", "billing", "-e", "-f", `%p:%s\n`); sortedLines(got) != "0:c\n1:x\n" {
		t.Errorf("resume: %q", got)
	}
	if got := e.ok("", "-C", "-t", "g", "-G", "billing", "-e"); got != "" {
		t.Errorf("nothing left: %q", got)
	}
	golden(t, "group-reset.golden", e.ok("", "group", "reset", "-G", "billing", "-t", "g", "--to-offset", "1", "-p", "0"))
	golden(t, "group-describe-json.golden", e.ok("", "group", "describe", "-G", "billing", "-J"))
	if got := e.ok("", "-C", "-t", "g", "-G", "billing", "-p", "0", "-e"); got != "b\nc\n" {
		t.Errorf("after reset: %q", got)
	}
	e.ok("", "group", "reset", "-G", "billing", "-t", "g", "--to-earliest")
	if got := e.ok("", "group", "reset", "-G", "billing", "-t", "g", "--to-latest", "--dry-run", "-J"); strings.Count(got, `"previous":0`) != 2 {
		t.Errorf("dry run: %s", got)
	}
	golden(t, "group-list.golden", e.ok("", "group", "list", "--groups", "billing,nobody"))
	e.ok("", "-C", "-t", "g", "-G", "other", "-c", "1", "-p", "1")
	if got := e.ok("", "group", "list", "-J"); got != `{"group":"billing","topic":"g","members":0,"generation":0,"partitions":2,"lag":4}`+"\n"+`{"group":"other","topic":"g","members":0,"generation":0,"partitions":1,"lag":0}`+"\n" {
		t.Errorf("group list -J: %s", got)
	}
	e.expect(ExitOutOfRange, "outside the log", "", "group", "reset", "-G", "billing", "-t", "g", "--to-offset", "99")
	e.expect(ExitUsage, "exactly one of", "", "group", "reset", "-G", "billing", "-t", "g")
	e.topic("tr", "transient", 1)
	e.expect(ExitUnsupported, "transient", "", "group", "describe", "-G", "billing", "-t", "tr")
	// -L shows the group's position and lag.
	e.ok("", "-C", "-t", "g", "-G", "billing", "-c", "1", "-p", "0")
	list := strings.ReplaceAll(e.ok("", "-L", "-G", "billing"), e.addr, "ADDR")
	if !strings.Contains(list, `partition 0: leader 1, replicas 1, offsets 0..3 (3 messages), group "billing" at 1, lag 2`) ||
		!strings.Contains(list, `partition 1: leader 1, replicas 1, offsets 0..1 (1 message), group "billing" at 0, lag 1`) {
		t.Errorf("-L -G:\n%s", list)
	}
}

func mask(s, addr, version string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, addr, "ADDR"), version, "VERSION")
}

func TestMetadataTopicsStats(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("events", "durable", 2, "--fsync", "interval=50ms", "--retention", "7d", "--retention", "1GiB")
	e.topic("live", "transient", 1, "--ring-slots", "64")
	e.ok("1\n2\n3\n", "-P", "-t", "events", "-p", "1")
	e.ok("1\n", "-P", "-t", "live")
	e.waitCounter("events", "publishers", func(v uint64) bool { return v == 0 })
	e.waitCounter("live", "publishers", func(v uint64) bool { return v == 0 })
	version := e.admin().BrokerVersion()
	golden(t, "list.golden", mask(e.ok("", "-L"), e.addr, version))
	golden(t, "list-json.golden", mask(e.ok("", "-L", "-J", "-t", "events"), e.addr, version))
	golden(t, "topic-list.golden", e.ok("", "topic", "list"))
	// -b takes a comma-separated list, as kcat's: a broker that refuses is passed over.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	if got, want := e.ok("", "-b", dead+", "+e.addr, "-L"), e.ok("", "-L"); got != want {
		t.Errorf("lqcat -b DEAD,ADDR -L:\n%s\nwant:\n%s", got, want)
	}
	// kcat users put -b first: common flags before the subcommand work too.
	if got, want := e.ok("", "-b", e.addr, "-q", "topic", "list"), e.ok("", "topic", "list"); got != want {
		t.Errorf("lqcat -b ADDR -q topic list:\n%s\nwant:\n%s", got, want)
	}
	golden(t, "topic-list-json.golden", e.ok("", "topic", "list", "-J"))
	// How many batches the lines made depends on timing: mask those counters.
	volatile := regexp.MustCompile(`((?:bytes_in|batches_in)"?:?\s*)\d+`)
	golden(t, "stats.golden", volatile.ReplaceAllString(e.ok("", "stats", "events"), "${1}N"))
	golden(t, "stats-json.golden", volatile.ReplaceAllString(e.ok("", "stats", "-J"), "${1}N"))
	// A topic user sees its own topics only.
	e.vars["LIGHTQ_ADMIN_PASSWORD"] = ""
	if got := e.ok("", "topic", "list"); !strings.Contains(got, "events") {
		t.Errorf("user's topic list: %s", got)
	}
	e.vars["LIGHTQ_ADMIN_PASSWORD"] = adminPass
	e.ok("", "topic", "delete", "live")
	if got := e.ok("", "topic", "list"); strings.Contains(got, "live") {
		t.Errorf("deleted topic still listed: %s", got)
	}
	e.expect(ExitUnknown, "UNKNOWN_TOPIC", "", "topic", "delete", "live")
	e.expect(ExitExists, "TOPIC_EXISTS", "", "topic", "create", "events", "--kind", "durable")
	e.expect(ExitUsage, "durable topics only", "", "topic", "create", "x", "--fsync", "always")
	e.vars["LIGHTQ_ADMIN_PASSWORD"] = ""
	e.expect(ExitUsage, "admin", "", "topic", "create", "x", "--user", "u", "--password", "p")
}

func TestErrorsAndExitCodes(t *testing.T) {
	e := newEnv(t, func(c *broker.Config) {
		c.Limits.MaxBatch = 16 << 10
		c.Limits.MaxFrame = 17 << 10
		c.Limits.MaxMessage = 15 << 10
	})
	e.topic("t", "durable", 2)

	// Usage.
	e.expect(ExitUsage, "one of -P, -C or -L", "")
	e.expect(ExitUsage, "exactly one of", "", "-P", "-C", "-t", "t")
	e.expect(ExitUsage, "-t TOPIC is required", "", "-C")
	e.expect(ExitUsage, "flag provided but not defined", "", "-C", "-t", "t", "-Q")
	e.expect(ExitUsage, "-o", "", "-C", "-t", "t", "-o", "yesterday")
	e.expect(ExitUsage, "unknown field %x", "", "-C", "-t", "t", "-f", "%x")
	e.expect(ExitUsage, "consumer flags", "", "-P", "-t", "t", "-e")
	e.expect(ExitUsage, "unknown compression", "", "-P", "-t", "t", "-z", "lz4")

	// Connection and authentication.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln.Addr().String()
	ln.Close()
	e.expect(ExitConnect, "cannot connect to "+closed, "", "-L", "-b", closed)
	r := e.expect(ExitAuth, `authentication failed for user "app"`, "", "-L", "--password", "wrong-password")
	if strings.Contains(r.err, "wrong-password") {
		t.Errorf("password echoed: %s", r.err)
	}
	e.vars["LIGHTQ_USER"], e.vars["LIGHTQ_PASSWORD"] = "", ""
	e.expect(ExitAuth, `user "admin"`, "", "-L", "--admin-password", "nope-nope")

	// Unknown topic or partition; a topic user cannot tell unknown from forbidden.
	e.vars["LIGHTQ_USER"], e.vars["LIGHTQ_PASSWORD"] = "", ""
	e.expect(ExitUnknown, "UNKNOWN_TOPIC", "", "-C", "-t", "nope", "-e")
	e.expect(ExitUnknown, "UNKNOWN_TOPIC", "x\n", "-P", "-t", "nope")
	e.vars["LIGHTQ_USER"], e.vars["LIGHTQ_PASSWORD"] = userName, userPass
	e.expect(ExitAuth, "NOT_AUTHORIZED", "", "-C", "-t", "nope", "-e")
	e.expect(ExitUnknown, "partitions 0-1, not 5", "x\n", "-P", "-t", "t", "-p", "5")
	e.expect(ExitUnknown, "partitions 0-1, not 5", "", "-C", "-t", "t", "-p", "5")
	e.expect(ExitAuth, "NOT_AUTHORIZED", "", "stats", "nope")

	// Message too large: the long line fails alone, the others are stored.
	big := strings.Repeat("x", 20<<10)
	r = e.expect(ExitTooLarge, "message 2", "small\n"+big+"\nafter\n", "-P", "-t", "t", "-p", "0")
	if !strings.Contains(r.err, "1 of 3 messages were not acknowledged") {
		t.Errorf("summary: %s", r.err)
	}
	if got := e.ok("", "-C", "-t", "t", "-p", "0", "-e"); got != "small\nafter\n" {
		t.Errorf("around the large line: %q", got)
	}
	e.expect(ExitTooLarge, "MESSAGE_TOO_LARGE", "", "-P", "-t", "t", "-l", writeTemp(t, big))
	// A line of exactly MaxMessage bytes, with a key, goes through.
	e.ok("k\t"+strings.Repeat("y", 15<<10-1)+"\n", "-P", "-t", "t", "-p", "1", "-K", `\t`)
	if got := e.ok("", "-C", "-t", "t", "-p", "1", "-e", "-f", `%K %S\n`); got != "1 15359\n" {
		t.Errorf("MaxMessage line: %q", got)
	}

	// Offset out of range.
	e.expect(ExitOutOfRange, "beyond the end", "", "-C", "-t", "t", "-p", "0", "-o", "100")
}

func writeTemp(t *testing.T, s string) string {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestHelp(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"--help"}, func(string) string { return "" }, nil, &out, &errb); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, want := range []string{"Exit codes:", "Examples:", "-P -t TOPIC", "base64"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	for _, args := range [][]string{{"topic", "--help"}, {"group", "--help"}, {"stats", "-h"}, {"-C", "-h"}, {"user", "--help"}, {"acl", "-h"}, {"acl", "grant", "-h"}, {"cluster", "--help"}, {"cluster", "move", "-h"}, {"cluster", "membership", "-h"}} {
		out.Reset()
		if code := Main(context.Background(), args, func(string) string { return "" }, nil, &out, &errb); code != 0 || out.Len() == 0 {
			t.Errorf("%q: exit %d, %d bytes", args, code, out.Len())
		}
	}
}

// TestProduceStreams checks that -P sends each line as it arrives, without waiting for the
// end of stdin.
func TestProduceStreams(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("s", "durable", 1)
	pr, pw := io.Pipe()
	done := make(chan int)
	var errb bytes.Buffer
	go func() {
		done <- Main(context.Background(), []string{"-P", "-t", "s"}, func(k string) string { return e.vars[k] }, pr, io.Discard, &errb)
	}()
	if _, err := pw.Write([]byte("first\n")); err != nil {
		t.Fatal(err)
	}
	if got := e.ok("", "-C", "-t", "s", "-c", "1"); got != "first\n" {
		t.Fatalf("while stdin is open: %q", got)
	}
	pw.Write([]byte("second"))
	pw.Close()
	if code := <-done; code != 0 {
		t.Fatalf("producer: exit %d: %s", code, errb.String())
	}
	if got := e.ok("", "-C", "-t", "s", "-e"); got != "first\nsecond\n" {
		t.Errorf("after EOF: %q", got)
	}
}

// TestVersion: -V and --version print the build's version line, as kcat's -V does.
func TestVersion(t *testing.T) {
	for _, arg := range []string{"-V", "--version"} {
		var out, errb bytes.Buffer
		if code := Main(context.Background(), []string{arg}, func(string) string { return "" }, nil, &out, &errb); code != 0 || out.String() != version.String("lqcat")+"\n" {
			t.Errorf("%s: exit %d, printed %q %q", arg, code, out.String(), errb.String())
		}
	}
}
