package readmetest_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Running the snippets' programs and the go command in tests.

// waitLimit bounds every wait of these tests: generous, for a loaded machine.
const waitLimit = 30 * time.Second

// goTool finds the go command, or skips the test.
func goTool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if root := os.Getenv("GOROOT"); root != "" {
		return filepath.Join(root, "bin", "go")
	}
	t.Skip("no go command to build the snippets with")
	return ""
}

// moduleDir is the module's root, two levels above this package.
func moduleDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	return dir
}

// output collects a process's output and signals each write.
type output struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // cap 1: something was written
}

func newOutput() *output { return &output{changed: make(chan struct{}, 1)} }

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	n, err := o.buf.Write(p)
	o.mu.Unlock()
	select {
	case o.changed <- struct{}{}:
	default:
	}
	return n, err
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// lines returns the complete lines written so far.
func (o *output) lines() []string {
	s := o.String()
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return strings.Split(s[:i], "\n")
	}
	return nil
}

// proc is a running snippet program.
type proc struct {
	t       *testing.T
	line    int // the snippet's README.md line
	cmd     *exec.Cmd
	stdout  *output
	stderr  *output
	exited  chan struct{}
	waitErr error // once exited is closed
}

// start runs bin, the program of the snippet at README.md:line, with env added to the
// test's environment. The process is killed when the test ends.
func start(t *testing.T, bin string, line int, env ...string) *proc {
	t.Helper()
	p := &proc{t: t, line: line, stdout: newOutput(), stderr: newOutput(), exited: make(chan struct{})}
	p.cmd = exec.Command(bin)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("README.md:%d: %v", line, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// fail ends the test with what the program wrote.
func (p *proc) fail(format string, args ...any) {
	p.t.Helper()
	p.t.Fatalf("README.md:%d: "+format+"\nstdout:\n%s\nstderr:\n%s", append(append([]any{p.line}, args...), p.stdout, p.stderr)...)
}

// waitLine waits until the program has written a line of standard output that match
// accepts, and returns it.
func (p *proc) waitLine(what string, match func(string) bool) string {
	p.t.Helper()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for {
		for _, l := range p.stdout.lines() {
			if match(l) {
				return l
			}
		}
		select {
		case <-p.stdout.changed:
		case <-p.exited:
			for _, l := range p.stdout.lines() {
				if match(l) {
					return l
				}
			}
			p.fail("exited (%v) before printing %s", p.waitErr, what)
		case <-deadline.C:
			p.fail("printed no %s within %v", what, waitLimit)
		}
	}
}

// interrupt sends SIGINT, which ends the program's ctx, as Ctrl-C would.
func (p *proc) interrupt() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		p.fail("SIGINT: %v", err)
	}
}

// wait waits for the program to exit and fails the test unless it exited 0 with nothing
// on standard error.
func (p *proc) wait() {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(waitLimit):
		p.fail("still running after %v", waitLimit)
	}
	if p.waitErr != nil {
		p.fail("the snippet failed: %v", p.waitErr)
	}
	if s := p.stderr.String(); s != "" {
		p.fail("the snippet wrote to standard error")
	}
}

// poll calls cond until it returns true, for up to waitLimit, with a pause between calls.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("timed out after %v waiting for %s", waitLimit, what)
		}
	}
}
