package lqcat

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/broker/brokertest"
	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// TestBalancedConsumerProcesses runs two lqcat -C -G processes of the real binary: they split
// the partitions, each prints only its own, every message is printed once across both, and
// SIGINT makes one flush, commit and leave, so the other takes its partitions over at once
// and goes on after what it printed.
func TestBalancedConsumerProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the lqcat binary; skipped with -short")
	}
	bin := buildLqcat(t)
	srv := brokertest.Start(t, func(cfg *broker.Config) { cfg.AdminUser, cfg.AdminPassword = "admin", adminPass })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := client.Dial(ctx, srv.Addr(), client.Options{User: "admin", Password: adminPass})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.CreateTopic(ctx, client.TopicConfig{Name: "ev", Kind: wire.KindDurable, Partitions: 4, User: userName, Password: userPass,
		Options: []wire.Option{{Key: "fsync", Value: "never"}}}); err != nil {
		t.Fatal(err)
	}
	produce := func(from, to int) {
		t.Helper()
		p, err := admin.NewProducer(client.ProducerOptions{Topic: "ev"})
		if err != nil {
			t.Fatal(err)
		}
		for i := from; i < to; i++ {
			if err := p.Send(ctx, &client.Message{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "m%d", i)}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	produce(0, 400)

	a := startLqcat(t, bin, srv.Addr(), "A", "-X", "session.timeout.ms=3000")
	waitFor(t, "A to print the first 400", func() bool { return len(a.printed()) == 400 })
	if d, err := admin.DescribeGroup(ctx, "g", "ev"); err != nil || len(d.Members) != 1 || d.Members[0].SessionTimeoutMs != 3000 {
		t.Fatalf("A as a member: %+v %v", d, err)
	}
	b := startLqcat(t, bin, srv.Addr(), "B")
	var split map[string][]uint32
	waitFor(t, "A and B to hold two partitions each", func() bool {
		split = describe(t, admin)
		return len(split["A"]) == 2 && len(split["B"]) == 2
	})
	produce(400, 800)
	waitFor(t, "all 800 printed", func() bool { return len(a.printed())+len(b.printed()) == 800 })
	for name, pr := range map[string]*lqcatProc{"A": a, "B": b} {
		for _, l := range pr.printed() {
			if l.msg >= 400 && !slices.Contains(split[name], l.partition) {
				t.Fatalf("%s printed m%d of partition %d, which it does not hold (%v)", name, l.msg, l.partition, split[name])
			}
		}
	}

	// SIGINT: A flushes, commits and leaves; B holds everything at once.
	if err := a.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := a.wait(); err != nil {
		t.Fatalf("A after SIGINT: %v\n%s", err, a.stderr.String())
	}
	if got := describe(t, admin); len(got) != 1 {
		t.Fatalf("after A left the group has members %v", got)
	}
	start := time.Now()
	waitFor(t, "B to hold every partition", func() bool { return len(describe(t, admin)["B"]) == 4 })
	if took := time.Since(start); took > time.Second {
		t.Errorf("B took %v to get A's partitions", took)
	}
	produce(800, 1000)
	waitFor(t, "all 1000 printed", func() bool { return len(a.printed())+len(b.printed()) == 1000 })
	if err := b.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := b.wait(); err != nil {
		t.Fatalf("B after SIGINT: %v\n%s", err, b.stderr.String())
	}

	seen := map[int]string{}
	for name, pr := range map[string]*lqcatProc{"A": a, "B": b} {
		for _, l := range pr.printed() {
			if other, dup := seen[l.msg]; dup {
				t.Fatalf("m%d printed by %s and %s", l.msg, other, name)
			}
			seen[l.msg] = name
		}
	}
	if len(seen) != 1000 {
		t.Fatalf("%d distinct messages printed, want 1000", len(seen))
	}
	d, err := admin.DescribeGroup(ctx, "g", "ev")
	if err != nil || len(d.Members) != 0 {
		t.Fatalf("after both left: %+v %v", d, err)
	}
	for _, p := range d.Partitions {
		if p.Committed != p.EndOffset {
			t.Errorf("partition %d committed %d, end %d", p.Partition, p.Committed, p.EndOffset)
		}
	}
}

func buildLqcat(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		if root := os.Getenv("GOROOT"); root != "" {
			goTool = filepath.Join(root, "bin", "go")
		}
	}
	if goTool == "" {
		t.Skip("no go tool to build the binary with")
	}
	bin := filepath.Join(t.TempDir(), "lqcat")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, goTool, "build", "-o", bin, "github.com/lightq/lightq/cmd/lqcat").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// printedLine is one line an lqcat process printed: "%p %s".
type printedLine struct {
	partition uint32
	msg       int
}

type lqcatProc struct {
	cmd    *exec.Cmd
	stderr strings.Builder
	mu     sync.Mutex
	lines  []printedLine
	done   chan error
}

func (p *lqcatProc) printed() []printedLine {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lines)
}

func (p *lqcatProc) wait() error {
	select {
	case err := <-p.done:
		return err
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		return fmt.Errorf("did not exit within 30 s")
	}
}

// startLqcat starts "lqcat -C -G g -t ev" with client id name and more arguments.
func startLqcat(t *testing.T, bin, addr, name string, more ...string) *lqcatProc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"-b", addr, "-C", "-G", "g", "-t", "ev", "-f", `%p %s\n`, "-X", "client.id=" + name}, more...)...)
	cmd.Env = append(os.Environ(), "LIGHTQ_USER="+userName, "LIGHTQ_PASSWORD="+userPass, "LIGHTQ_ADMIN_PASSWORD=")
	p := &lqcatProc{cmd: cmd, done: make(chan error, 1)}
	cmd.Stderr = &syncWriter{mu: &p.mu, b: &p.stderr}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var read sync.WaitGroup
	read.Go(func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var l printedLine
			if _, err := fmt.Sscanf(sc.Text(), "%d m%d", &l.partition, &l.msg); err != nil {
				t.Errorf("%s printed %q", name, sc.Text())
				continue
			}
			p.mu.Lock()
			p.lines = append(p.lines, l)
			p.mu.Unlock()
		}
	})
	go func() {
		read.Wait() // the output is read to its end before the exit is reported
		p.done <- cmd.Wait()
	}()
	return p
}

type syncWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w *syncWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(b)
}

// describe returns the assigned partitions of each member of group g, by client id.
func describe(t *testing.T, admin *client.Conn) map[string][]uint32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := admin.DescribeGroup(ctx, "g", "ev")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]uint32{}
	for _, m := range d.Members {
		out[m.ClientID] = m.Assigned
	}
	return out
}

// waitFor polls cond every few milliseconds for up to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}
