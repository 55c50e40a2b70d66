package broker

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The other process of TestCommitFlood and BenchmarkCommitFairness: this test binary again,
// running TestCommitFloodClient, which does one of two things for the parent's broker
// (floodModeEnv):
//
//   - "commits" or "commits=<n>": the commit flood of issue 9 (floodConns connections
//     pipelining commits to 8,847 pairs, at most n (floodCommits) or for floodFor), the
//     tenant that should not hurt the other;
//   - "load:cores=<x>,dir=<dir>,rate=<r>,bytes=<b>,for=<duration>": no broker work at all.
//     It uses x CPUs' worth, spinning in floodConns goroutines (cores=0: none) and, when dir is
//     set, writes b bytes and fdatasyncs them, one at a time, r times a second (0: as fast
//     as the disk allows), into a file in dir on the broker's disk: what the flood's CPU
//     and the flood's fsyncs cost the other tenant, whatever the broker does.
//
// It prints "FLOOD START" when it begins and "FLOOD RESULT ..." at the end.

// floodAddrEnv names the broker TestCommitFloodClient floods; floodModeEnv what it does.
const (
	floodAddrEnv = "LIGHTQ_TEST_FLOOD_ADDR"
	floodModeEnv = "LIGHTQ_TEST_FLOOD_MODE"
)

// floodChild is a running TestCommitFloodClient process.
type floodChild struct {
	cmd     *exec.Cmd
	stderr  strings.Builder
	started chan struct{} // closed at "FLOOD START"
	done    chan struct{} // closed when its output ends
	result  string        // the "FLOOD RESULT" line, once done is closed
	start   time.Time
}

// niceness says whether a flood child runs at the lowest CPU priority.
type niceness bool

const (
	niced   niceness = true  // nice -n 19: the broker and the quiet tenant come first
	unniced niceness = false // competes for the CPUs as any process
)

// startFloodChild starts the other process against addr in mode and waits until it begins.
//
// A niced child stands for a client on another machine: the flood tests measure what the
// flood costs the other tenant through the broker (its work for the flood, its disk), and a
// flooding client that shares this machine's CPUs with the broker would add what it costs
// the CPUs itself, which in production is another machine's cost and no broker can avoid.
// At nice 19 it gets the CPU the broker and the quiet tenant leave (about 1.5 % of a CPU
// when they want all of it). BenchmarkCommitFairness measures both ways.
func startFloodChild(t testing.TB, addr, mode string, nice niceness) *floodChild {
	t.Helper()
	fc := &floodChild{started: make(chan struct{}), done: make(chan struct{})}
	args := []string{os.Args[0], "-test.run=^TestCommitFloodClient$", "-test.count=1"}
	if nice {
		nice, err := exec.LookPath("nice")
		if err != nil {
			t.Fatalf("the flood client runs under nice(1): %v", err)
		}
		args = append([]string{nice, "-n", "19"}, args...)
	}
	fc.cmd = exec.Command(args[0], args[1:]...)
	fc.cmd.Env = append(os.Environ(), floodAddrEnv+"="+addr, floodModeEnv+"="+mode)
	out, err := fc.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	fc.cmd.Stderr = &fc.stderr
	if err := fc.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fc.cmd.Process.Kill() })
	lines := bufio.NewScanner(out)
	go func() {
		defer close(fc.done)
		for lines.Scan() {
			switch line := lines.Text(); {
			case line == "FLOOD START":
				fc.start = time.Now()
				close(fc.started)
			case strings.HasPrefix(line, "FLOOD RESULT "):
				fc.result = strings.TrimPrefix(line, "FLOOD RESULT ")
			}
		}
	}()
	select {
	case <-fc.started:
	case <-fc.done:
		t.Fatalf("the flood client ended before it started: %v\n%s", fc.cmd.Wait(), fc.stderr.String())
	}
	return fc
}

// floodOutcome is what a flood child did: its result line, how long it ran and the CPU it used.
type floodOutcome struct {
	result  string
	elapsed time.Duration
	cpu     time.Duration // user + system time of the child
}

// wait waits for the child to end and returns what it did.
func (fc *floodChild) wait(t testing.TB) floodOutcome {
	t.Helper()
	<-fc.done
	elapsed := time.Since(fc.start)
	if err := fc.cmd.Wait(); err != nil || fc.result == "" {
		t.Fatalf("flood client: %v %q\n%s", err, fc.result, fc.stderr.String())
	}
	ps := fc.cmd.ProcessState
	return floodOutcome{result: fc.result, elapsed: elapsed, cpu: ps.UserTime() + ps.SystemTime()}
}

// probeDuring commits one at a time on quiet until the child ends or max answers are in, and
// returns the latencies.
func probeDuring(t testing.TB, quiet *commitConn, pair commitPair, fc *floodChild, max int) []time.Duration {
	t.Helper()
	var lat []time.Duration
	for len(lat) < max && !isClosed(fc.done) {
		l, err := quiet.probe(pair, min(10, max-len(lat)), fc.done)
		if err != nil {
			t.Fatal(err)
		}
		lat = append(lat, l...)
	}
	return lat
}

// processCPU is this process's user + system time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// productionProcs gives this test process the GOMAXPROCS the lightq binary runs with: one P
// per CPU plus one per event loop (internal/cli/lightq/procs.go; the loops default to one per
// CPU). A test's broker otherwise runs with one P per CPU, and its event loops, which wait in
// epoll_wait as plain system calls, then hold every P while the flood keeps them busy: the
// quiet tenant's offsets syncer and the test's own client goroutine wait for sysmon to retake
// a P (up to 10 ms), which the real broker never sees.
func productionProcs(t testing.TB) {
	old := runtime.GOMAXPROCS(0)
	runtime.GOMAXPROCS(2 * old)
	t.Cleanup(func() { runtime.GOMAXPROCS(old) })
}

// TestCommitFloodClient is the other process of TestCommitFlood (see floodModeEnv).
func TestCommitFloodClient(t *testing.T) {
	addr := os.Getenv(floodAddrEnv)
	if addr == "" {
		t.Skip("only run by TestCommitFlood and BenchmarkCommitFairness")
	}
	mode := os.Getenv(floodModeEnv)
	if spec, ok := strings.CutPrefix(mode, "load:"); ok {
		l, err := parseLoad(spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.run(); err != nil {
			t.Fatal(err)
		}
		return
	}
	n := floodCommits
	if arg, ok := strings.CutPrefix(mode, "commits="); ok {
		var err error
		if n, err = strconv.Atoi(arg); err != nil || n <= 0 {
			t.Fatalf("%s=%q: want a count of commits", floodModeEnv, mode)
		}
	} else if mode != "" && mode != "commits" {
		t.Fatalf("%s=%q: want commits[=<n>] or load:...", floodModeEnv, mode)
	}
	floodCommitsClient(t, addr, n)
}

// floodLoad is the "load:" mode: CPU and fsyncs without broker work.
type floodLoad struct {
	cores float64       // CPUs' worth to spin
	dir   string        // where to fsync ("": no fsyncs)
	rate  float64       // fsyncs a second (0: back to back)
	bytes int           // written before each fsync
	dur   time.Duration // how long
}

func (l floodLoad) String() string {
	return fmt.Sprintf("load:cores=%.2f,dir=%s,rate=%.0f,bytes=%d,for=%v", l.cores, l.dir, l.rate, l.bytes, l.dur)
}

func parseLoad(spec string) (floodLoad, error) {
	l := floodLoad{bytes: 4 << 10}
	for _, kv := range strings.Split(spec, ",") {
		k, v, _ := strings.Cut(kv, "=")
		var err error
		switch k {
		case "cores":
			l.cores, err = strconv.ParseFloat(v, 64)
			if err == nil && (l.cores < 0 || l.cores > float64(runtime.NumCPU())) {
				err = fmt.Errorf("want 0-%d", runtime.NumCPU())
			}
		case "dir":
			l.dir = v
		case "rate":
			l.rate, err = strconv.ParseFloat(v, 64)
		case "bytes":
			l.bytes, err = strconv.Atoi(v)
			if err == nil && (l.bytes <= 0 || l.bytes > 1<<20) {
				err = fmt.Errorf("want 1 B to 1 MiB")
			}
		case "for":
			l.dur, err = time.ParseDuration(v)
			if err == nil && (l.dur <= 0 || l.dur > time.Minute) {
				err = fmt.Errorf("want up to 1m")
			}
		default:
			err = fmt.Errorf("unknown key")
		}
		if err != nil {
			return l, fmt.Errorf("load:%s: %s: %v", spec, kv, err)
		}
	}
	if l.dur == 0 {
		return l, fmt.Errorf("load:%s: no for=<duration>", spec)
	}
	return l, nil
}

// run does the load and prints what it did.
func (l floodLoad) run() error {
	fmt.Println("FLOOD START")
	start := time.Now()
	var wg sync.WaitGroup
	if l.cores > 0 {
		for range floodConns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				burn(l.cores, start, start.Add(l.dur))
			}()
		}
	}
	n, err := 0, error(nil)
	if l.dir != "" {
		n, err = fsyncLoop(l, start.Add(l.dur))
	}
	wg.Wait()
	el := time.Since(start)
	fmt.Printf("FLOOD RESULT %v: %d fsyncs (%.0f/s)\n", l, n, float64(n)/el.Seconds())
	return err
}

// burn spins until end whenever the process has used less than cores CPUs' worth since
// start, in 20 µs bursts, and sleeps otherwise: the CPU of a load that takes what it can get,
// as the flood does, in short bursts from many threads. Run by several goroutines.
func burn(cores float64, start, end time.Time) {
	for now := time.Now(); now.Before(end); now = time.Now() {
		if processCPU() >= time.Duration(cores*float64(now.Sub(start))) {
			time.Sleep(100 * time.Microsecond)
			continue
		}
		for busy := time.Now(); time.Since(busy) < 20*time.Microsecond; {
		}
	}
}

// fsyncLoop writes l.bytes and fdatasyncs them, one at a time, at l.rate, until end, into a
// preallocated file in l.dir (removed afterwards), as the flood's offsets syncer does.
func fsyncLoop(l floodLoad, end time.Time) (int, error) {
	f, err := os.CreateTemp(l.dir, "fsync-load-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	const span = 16 << 20
	if _, err := f.WriteAt(make([]byte, span), 0); err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	buf := make([]byte, l.bytes)
	var every time.Duration
	if l.rate > 0 {
		every = time.Duration(float64(time.Second) / l.rate)
	}
	n := 0
	for off, next := int64(0), time.Now(); time.Now().Before(end); off = (off + int64(len(buf))) % (span - int64(len(buf))) {
		if _, err := f.WriteAt(buf, off); err != nil {
			return n, err
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return n, err
		}
		n++
		if every > 0 {
			if next = next.Add(every); time.Until(next) > 0 {
				time.Sleep(time.Until(next))
			}
		}
	}
	return n, nil
}

// floodCommitsClient commits n times at most (for floodFor at most) over floodConns
// connections.
func floodCommitsClient(t *testing.T, addr string, n int) {
	pairs := floodPairs("flood-group-", floodGroups, floodParts)
	conns := make([]*commitConn, floodConns)
	for i := range conns {
		conns[i] = dialCommitter(t, addr, "flooder", "flooder-pw", "flood")
	}
	stop := make(chan struct{})
	timer := time.AfterFunc(floodFor, func() { close(stop) })
	defer timer.Stop()
	answered := make([]int, floodConns)
	errs := make([]error, floodConns)
	fmt.Println("FLOOD START")
	start := time.Now()
	var wg sync.WaitGroup
	for i, fc := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answered[i], errs[i] = fc.flood(pairs[i*len(pairs)/floodConns:], floodWindow, n/floodConns, stop)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	total := 0
	for i := range conns {
		if errs[i] != nil {
			t.Fatalf("flood connection %d: %v", i, errs[i])
		}
		total += answered[i]
	}
	fmt.Printf("FLOOD RESULT flood: %d commits in %v (%.0f/s) to %d pairs\n", total, elapsed.Round(time.Millisecond),
		float64(total)/elapsed.Seconds(), len(pairs))
}
