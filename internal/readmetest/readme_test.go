package readmetest_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/broker/brokertest"
	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/internal/readmetest"
	"github.com/lightq/lightq/wire"
)

// readmeAddr is the broker address README's snippets dial; the test puts its broker's there.
const readmeAddr = `"127.0.0.1:7450"`

// env is what the checks of README's snippets share: one broker for all of them, run in
// README's order (a snippet may use what the ones before it made, as a reader would), and
// what earlier checks learned.
type env struct {
	t    *testing.T
	srv  *broker.Server
	bins map[string]string
	ctx  context.Context

	// From the quick start: where its message was stored.
	helloPartition int32
	helloOffset    int64
}

// check verifies that one README snippet did what README says it does.
type check struct {
	heading string // the heading the snippet is under
	run     func(e *env, s readmetest.Program)
}

// checks has one entry per ```go block of README.md, in order. A new snippet needs a new
// entry: the test fails, naming its line, until it has one.
var checks = []check{
	{"Quick start with the Go client", checkQuickStart},
	{"Quick start with the Go client", checkGroupMember},
}

// TestREADME compiles every Go snippet of README.md as a program, refuses errors they leave
// unchecked, runs them against a broker on a loopback port and checks what they did.
func TestREADME(t *testing.T) {
	root := moduleDir(t)
	md, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	snippets, err := readmetest.Extract(md)
	if err != nil {
		t.Fatalf("README.md: %v", err)
	}
	for i, s := range snippets {
		switch {
		case i >= len(checks):
			t.Fatalf("README.md:%d: the snippet under %q has no check: add one to checks", s.Line, s.Heading)
		case checks[i].heading != s.Heading:
			t.Fatalf("README.md:%d: snippet %d is under %q, but its check expects %q: update checks", s.Line, i+1, s.Heading, checks[i].heading)
		}
	}
	if len(snippets) < len(checks) {
		t.Fatalf("README.md has %d Go snippets, checks expects %d: remove the extra checks", len(snippets), len(checks))
	}

	srv := brokertest.Start(t, nil)
	progs := make([]readmetest.Program, len(snippets))
	for i, s := range snippets {
		code := strings.ReplaceAll(s.Code, readmeAddr, strconv.Quote(srv.Addr()))
		progs[i] = readmetest.NewProgram(s, code, "README.md")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	g := &readmetest.Go{Tool: goTool(t), ModuleDir: root, WorkDir: t.TempDir()}
	begin := time.Now()
	bins, err := g.Build(ctx, progs)
	if err != nil {
		t.Fatalf("README's Go snippets do not compile: %v", err)
	}
	exports, err := g.Exports(ctx, progs)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range progs {
		found, err := readmetest.Unchecked(p.Source, exports)
		if err != nil {
			t.Fatalf("README.md:%d: type-checking the snippet: %v", p.Line, err)
		}
		for _, f := range found {
			t.Errorf("%v", f)
		}
	}
	if t.Failed() {
		return
	}
	t.Logf("%d snippets built and checked in %v", len(progs), time.Since(begin).Round(time.Millisecond))

	e := &env{t: t, srv: srv, bins: bins, ctx: ctx}
	for i, p := range progs {
		checks[i].run(e, p)
	}
}

// start runs the program of snippet s.
func (e *env) start(s readmetest.Program) *proc {
	e.t.Helper()
	return start(e.t, e.bins[s.Name], s.Line, readmetest.AdminPasswordEnv+"="+brokertest.AdminPassword)
}

// dial connects as the user the quick start creates.
func (e *env) dial() *client.Conn {
	e.t.Helper()
	c, err := client.Dial(e.ctx, e.srv.Addr(), client.Options{User: "events-user", Password: "events-password"})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

var storedRE = regexp.MustCompile(`^stored in partition (\d+) at offset (\d+)$`)

// checkQuickStart: the snippet creates the topic and the user, and the message it says it
// stored is in the log where its ack says.
func checkQuickStart(e *env, s readmetest.Program) {
	t := e.t
	p := e.start(s)
	p.wait()
	line := p.waitLine("the ack", storedRE.MatchString)
	m := storedRE.FindStringSubmatch(line)
	part, _ := strconv.ParseInt(m[1], 10, 32)
	off, _ := strconv.ParseInt(m[2], 10, 64)
	if want := wire.PartitionForKey([]byte("user-42"), 2); part != int64(want) {
		t.Errorf("README.md:%d: the keyed message went to partition %d, want %d", s.Line, part, want)
	}

	c := e.dial()
	k, err := c.NewConsumer(e.ctx, client.ConsumerOptions{Topic: "events", Partitions: []int32{int32(part)}, Start: client.AtOffset(off)})
	if err != nil {
		t.Fatalf("README.md:%d: reading back the topic: %v", s.Line, err)
	}
	defer k.Close()
	errGot := errors.New("got it")
	var got string
	err = k.Each(e.ctx, func(r *client.Received) error {
		got = fmt.Sprintf("%d/%d %s=%s", r.Partition, r.Offset, r.Key, r.Value)
		return errGot
	})
	if !errors.Is(err, errGot) {
		t.Fatalf("README.md:%d: reading back the message: %v", s.Line, err)
	}
	if want := fmt.Sprintf("%d/%d user-42=hello", part, off); got != want {
		t.Fatalf("README.md:%d: read back %q, want %q", s.Line, got, want)
	}
	e.helloPartition, e.helloOffset = int32(part), off
}

var recordRE = regexp.MustCompile(`^partition (\d+) offset (\d+): (.*)$`)

// printed returns the records a group member printed, as "partition/offset value".
func printed(p *proc) []string {
	var out []string
	for _, l := range p.stdout.lines() {
		if m := recordRE.FindStringSubmatch(l); m != nil {
			out = append(out, m[1]+"/"+m[2]+" "+m[3])
		}
	}
	return out
}

// checkGroupMember runs the group member twice, as README says: the two share the
// partitions; a member that stops commits and leaves, and the other one takes its
// partition over where it stopped.
func checkGroupMember(e *env, s readmetest.Program) {
	t := e.t
	c := e.dial()
	describe := func() *wire.DescribeGroupResponse {
		d, err := c.DescribeGroup(e.ctx, "billing", "events")
		if err != nil {
			t.Fatalf("DescribeGroup: %v", err)
		}
		return d
	}
	// balanced says whether the group has n members holding n partitions between them, the
	// same number each, none of them being handed over.
	balanced := func(n int) func() bool {
		return func() bool {
			d := describe()
			held := 0
			for _, m := range d.Members {
				if len(m.Revoking) > 0 || len(m.Assigned) != 2/n {
					return false
				}
				held += len(m.Assigned)
			}
			return len(d.Members) == n && held == 2
		}
	}
	produce := func(partition int32, value string) {
		pr, err := c.NewProducer(client.ProducerOptions{Topic: "events"})
		if err != nil {
			t.Fatal(err)
		}
		if err := pr.Send(e.ctx, &client.Message{Value: []byte(value), Partition: partition, HasPartition: true}, nil); err != nil {
			t.Fatal(err)
		}
		if err := pr.Close(); err != nil {
			t.Fatal(err)
		}
	}
	has := func(rec string) func(string) bool {
		return func(l string) bool {
			m := recordRE.FindStringSubmatch(l)
			return m != nil && m[1]+"/"+m[2]+" "+m[3] == rec
		}
	}

	// One member reads the quick start's message.
	a := e.start(s)
	hello := fmt.Sprintf("%d/%d hello", e.helloPartition, e.helloOffset)
	a.waitLine(hello, has(hello))
	poll(t, "the first member to hold both partitions", balanced(1))

	// A second one: they share the partitions, one each, and each reads its own.
	b := e.start(s)
	poll(t, "two members holding one partition each", balanced(2))
	var next [2]int64
	for _, gp := range describe().Partitions {
		next[gp.Partition] = gp.EndOffset
	}
	produce(0, "to-0")
	produce(1, "to-1")
	recs := [2]string{fmt.Sprintf("0/%d to-0", next[0]), fmt.Sprintf("1/%d to-1", next[1])}
	poll(t, "both records to be printed", func() bool {
		all := append(printed(a), printed(b)...)
		return slices.Contains(all, recs[0]) && slices.Contains(all, recs[1])
	})
	bPart := -1
	for i, r := range recs {
		inA, inB := slices.Contains(printed(a), r), slices.Contains(printed(b), r)
		if inA == inB {
			t.Fatalf("README.md:%d: record %s printed by both members or neither (first: %v, second: %v)", s.Line, r, inA, inB)
		}
		if inB {
			bPart = i
		}
	}
	if bPart < 0 || len(printed(b)) != 1 {
		t.Fatalf("README.md:%d: the members do not share the partitions: first printed %q, second %q", s.Line, printed(a), printed(b))
	}

	// Stopping the second: it commits and leaves; the first takes its partition over where
	// it stopped, and prints nothing twice.
	b.interrupt()
	b.wait()
	poll(t, "the first member to hold both partitions again", balanced(1))
	produce(int32(bPart), "after")
	after := fmt.Sprintf("%d/%d after", bPart, next[bPart]+1)
	a.waitLine(after, has(after))
	if got := printed(a); slices.Contains(got, recs[bPart]) {
		t.Fatalf("README.md:%d: the first member read %s again, after the second had committed it: %q", s.Line, recs[bPart], got)
	}

	// Stopping the first: everything read is committed.
	a.interrupt()
	a.wait()
	d := describe()
	if len(d.Members) != 0 {
		t.Fatalf("README.md:%d: members left after both stopped: %+v", s.Line, d.Members)
	}
	for _, gp := range d.Partitions {
		if gp.Lag != 0 {
			t.Errorf("README.md:%d: partition %d committed %d of %d", s.Line, gp.Partition, gp.Committed, gp.EndOffset)
		}
	}
}

// TestREADMEExamples checks that every Example function README.md names is in
// client/example_test.go, so that README never sends a reader to an example that is not there.
func TestREADMEExamples(t *testing.T) {
	root := moduleDir(t)
	md, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`\bExample[A-Z_][A-Za-z0-9_]*`).FindAllString(string(md), -1)
	if len(named) == 0 {
		t.Fatal("README.md names no example of client/example_test.go")
	}
	file := filepath.Join(root, "client", "example_test.go")
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var have []string
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil {
			have = append(have, fd.Name.Name)
		}
	}
	for _, n := range named {
		if !slices.Contains(have, n) {
			t.Errorf("README.md names %s, which client/example_test.go does not have (it has %v)", n, have)
		}
	}
}
