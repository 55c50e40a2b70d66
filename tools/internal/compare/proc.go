package compare

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lightq/lightq/tools/internal/proccpu"
)

// server is a broker process started by this tool in its own process group.
type server struct {
	name string
	role string // what its CPU is reported as: "server", or in a cluster "leader", "follower1", ...
	cmd  *exec.Cmd
	log  *bytes.Buffer
	done chan struct{}
	err  error
}

// startServer starts name with args in its own process group (so a Ctrl-C at the terminal
// reaches this tool only, which then stops it in order) and returns at once.
func startServer(name string, env []string, path string, args ...string) (*server, error) {
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s := &server{name: name, role: "server", cmd: cmd, log: &out, done: make(chan struct{})}
	go func() { s.err = cmd.Wait(); close(s.done) }()
	return s, nil
}

// stop sends SIGTERM, waits up to 15 s, then kills the process group. Safe to call twice.
func (s *server) stop() {
	if s == nil {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
}

// exited reports whether the server died (and why) without being stopped.
func (s *server) exited() error {
	select {
	case <-s.done:
		return fmt.Errorf("%s exited: %v; output:\n%s", s.name, s.err, tail(s.log.String(), 2000))
	default:
		return nil
	}
}

// cpuSeconds is the CPU (user + system) the live server has used so far.
func (s *server) cpuSeconds() float64 {
	return procCPUSeconds(s.cmd.Process.Pid)
}

var clockTick = float64(proccpu.ClockTick) // USER_HZ, the unit of /proc/stat's times

// procCPUSeconds reads utime+stime of a live process from /proc; 0 when unreadable.
func procCPUSeconds(pid int) float64 {
	s, err := proccpu.Seconds(pid)
	if err != nil {
		return 0
	}
	return s
}

// client is one benchmark client process, bounded by a timeout and killed with its process
// group when ctx ends.
type client struct {
	name   string
	cmd    *exec.Cmd
	stdout bytes.Buffer
	stderr bytes.Buffer
	cancel context.CancelFunc

	startedAt, exitedAt time.Time     // set by start and wait
	onStart, onExit     func(*client) // called after start and wait when set (CPU sampling)
}

func newClient(ctx context.Context, timeout time.Duration, env []string, path string, args ...string) *client {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	c := &client{name: baseName(path) + " " + strings.Join(args[:min(2, len(args))], " "), cancel: cancel}
	c.cmd = exec.CommandContext(ctx, path, args...)
	c.cmd.Env = append(os.Environ(), env...)
	c.cmd.Stdout = &c.stdout
	c.cmd.Stderr = &c.stderr
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.cmd.Cancel = func() error { return syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL) }
	c.cmd.WaitDelay = 5 * time.Second
	return c
}

func (c *client) start() error {
	c.startedAt = time.Now()
	if err := c.cmd.Start(); err != nil {
		c.cancel()
		return fmt.Errorf("%s: %w", c.name, err)
	}
	if c.onStart != nil {
		c.onStart(c)
	}
	return nil
}

func (c *client) wait() error {
	defer c.cancel()
	err := c.cmd.Wait()
	c.exitedAt = time.Now()
	if c.onExit != nil && c.cmd.ProcessState != nil {
		c.onExit(c)
	}
	if err != nil {
		return fmt.Errorf("%s: %w; stderr: %s", c.name, err, tail(strings.TrimSpace(c.stderr.String()+"\n"+c.stdout.String()), 600))
	}
	return nil
}

func (c *client) run() error {
	if err := c.start(); err != nil {
		return err
	}
	return c.wait()
}

// cpuSeconds is the CPU the finished client used (its reaped children included).
func (c *client) cpuSeconds() float64 {
	if c.cmd.ProcessState == nil {
		return 0
	}
	return (c.cmd.ProcessState.UserTime() + c.cmd.ProcessState.SystemTime()).Seconds()
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// freePort returns a loopback TCP port nobody listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// freePorts returns n distinct loopback TCP ports nobody listens on now: all are held open
// until every one is picked, since freePort called n times in a row may get one back twice.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitPort waits until something accepts connections on 127.0.0.1:port, the server dies, or
// the timeout passes.
func waitPort(ctx context.Context, s *server, port int, timeout time.Duration) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if err := s.exited(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: nothing listening on %s after %v", s.name, addr, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// --- machine CPU, as peers.sh measures it -------------------------------------------

// cpuTimes is one reading of the first line of /proc/stat, in ticks.
type cpuTimes struct{ total, busy, idle, steal float64 }

func readCPU() (cpuTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTimes{}, errors.New("/proc/stat: unexpected first line")
	}
	v := make([]float64, 9)
	for i := 1; i <= 8; i++ {
		v[i], _ = strconv.ParseFloat(f[i], 64)
	}
	var t cpuTimes
	for i := 1; i <= 8; i++ {
		t.total += v[i]
	}
	t.busy = v[1] + v[2] + v[3] // user nice system: irq/softirq are charged to no process
	t.idle = v[4] + v[5]        // idle + iowait
	t.steal = v[8]
	return t, nil
}

// idlePct measures CPU idle % (idle + iowait, all cores) over the next second.
func idlePct(ctx context.Context) float64 {
	a, err := readCPU()
	if err != nil {
		return 100
	}
	select {
	case <-ctx.Done():
		return 100
	case <-time.After(time.Second):
	}
	b, err := readCPU()
	if err != nil || b.total == a.total {
		return 100
	}
	return 100 * (b.idle - a.idle) / (b.total - a.total)
}

// waitQuiet waits until CPU idle >= minIdle %, for at most maxWait, and returns the last
// idle reading. minIdle <= 0 turns it off.
func waitQuiet(ctx context.Context, minIdle float64, maxWait time.Duration, logf func(string, ...any)) float64 {
	if minIdle <= 0 {
		return -1
	}
	deadline := time.Now().Add(maxWait)
	for {
		idle := idlePct(ctx)
		if idle >= minIdle || ctx.Err() != nil {
			return idle
		}
		if time.Now().After(deadline) {
			logf("machine still busy (CPU idle %.0f%%); measuring anyway", idle)
			return idle
		}
	}
}

// noiseMeter measures the CPU used by anything but this tool's processes during a
// measurement, and the CPU stolen by the hypervisor, as % of the whole machine.
type noiseMeter struct {
	start cpuTimes
	ours  float64 // CPU seconds of this process and its reaped children at the start
	live  func() float64
}

func ownCPUSeconds() float64 {
	var self, kids syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}

// startNoise takes a snapshot; live returns the CPU seconds of live (not yet reaped)
// processes that are ours, i.e. the server.
func startNoise(live func() float64) *noiseMeter {
	t, _ := readCPU()
	return &noiseMeter{start: t, ours: ownCPUSeconds() + live(), live: live}
}

// end returns others_cpu_pct and steal_pct since the snapshot.
func (m *noiseMeter) end() (others, steal float64) {
	t, err := readCPU()
	if err != nil || t.total == m.start.total {
		return 0, 0
	}
	total := t.total - m.start.total
	oursTicks := (ownCPUSeconds() + m.live() - m.ours) * clockTick
	others = 100 * (t.busy - m.start.busy - oursTicks) / total
	return max(others, 0), 100 * (t.steal - m.start.steal) / total
}
