package compare

import (
	"sync"
	"time"

	"github.com/lightq/lightq/tools/internal/proccpu"
)

// CPU seconds per GB over a measured interval: while a measurement runs, a sampler reads
// the cumulative CPU time (utime + stime, /proc/<pid>/stat) of the broker and of every
// client process every cpuEvery, and each client's rusage when it exits. A case then asks
// for the CPU each role used within its measured interval (lqbench reports it on the wall
// clock), interpolating linearly between samples: each end of the interval is off by at most
// one 10 ms clock tick per process, so an interval of a second or more gives figures to a
// few percent. Process start-up, connecting, creating the topic and a subscriber's wait for
// the publisher fall outside the interval.

// cpuEvery is how often the sampler reads the stat files.
const cpuEvery = 10 * time.Millisecond

// cpuPoint is a process's CPU seconds used by wall-clock time t (unix ns).
type cpuPoint struct {
	t   int64
	cpu float64
}

// procSeries is one process's cumulative CPU over time, points in increasing t.
type procSeries struct {
	role string
	pid  int
	pts  []cpuPoint
	done bool // exited: the last point is its rusage at exit
}

// at is the CPU the process had used by time t: linear between points, the first point's
// value before it, the last's after it.
func (s *procSeries) at(t int64) float64 {
	p := s.pts
	switch {
	case len(p) == 0:
		return 0
	case t <= p[0].t:
		return p[0].cpu
	case t >= p[len(p)-1].t:
		return p[len(p)-1].cpu
	}
	i := 1
	for p[i].t < t {
		i++
	}
	a, b := p[i-1], p[i]
	return a.cpu + (b.cpu-a.cpu)*float64(t-a.t)/float64(b.t-a.t)
}

// add appends a sample, keeping the series increasing in time and in CPU.
func (s *procSeries) add(t int64, cpu float64) {
	if n := len(s.pts); n > 0 {
		if t <= s.pts[n-1].t {
			return
		}
		cpu = max(cpu, s.pts[n-1].cpu)
	}
	s.pts = append(s.pts, cpuPoint{t, cpu})
}

// exit ends the series with the process's total at exit: samples after it (the stat file of
// a recycled pid) are dropped, and none may exceed it (rusage and the stat file round
// differently).
func (s *procSeries) exit(t int64, total float64) {
	keep := s.pts[:0]
	for _, p := range s.pts {
		if p.t < t {
			p.cpu = min(p.cpu, total)
			keep = append(keep, p)
		}
	}
	s.pts = append(keep, cpuPoint{t, total})
	s.done = true
}

// cpuSampler samples a measurement's processes. Safe for concurrent use.
type cpuSampler struct {
	mu    sync.Mutex
	procs []*procSeries
	read  func(pid int) (float64, error) // proccpu.Seconds; a seam for tests
	stop  chan struct{}
	done  chan struct{}
}

func newCPUSampler(read func(int) (float64, error)) *cpuSampler {
	s := &cpuSampler{read: read, stop: make(chan struct{}), done: make(chan struct{})}
	go s.loop()
	return s
}

func (s *cpuSampler) loop() {
	defer close(s.done)
	t := time.NewTicker(cpuEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.sample()
		}
	}
}

// close stops the sampler. Call it once.
func (s *cpuSampler) close() {
	close(s.stop)
	<-s.done
}

// track adds a process: started is when it was started (it had used no CPU then), or zero
// for one that has been running (the broker), which gets a first sample now.
func (s *cpuSampler) track(role string, pid int, started time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := &procSeries{role: role, pid: pid}
	if !started.IsZero() {
		p.add(started.UnixNano(), 0)
	} else if cpu, err := s.read(pid); err == nil {
		p.add(time.Now().UnixNano(), cpu)
	}
	s.procs = append(s.procs, p)
}

// exited records a tracked process's end and its total CPU (rusage).
func (s *cpuSampler) exited(pid int, at time.Time, total float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		if p.pid == pid && !p.done {
			p.exit(at.UnixNano(), total)
		}
	}
}

// sample reads every live process once.
func (s *cpuSampler) sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		if p.done {
			continue
		}
		now := time.Now().UnixNano()
		if cpu, err := s.read(p.pid); err == nil {
			p.add(now, cpu)
		}
	}
}

// window returns the CPU seconds each role used from t0 to t1 (unix ns), after a fresh
// sample of the live processes.
func (s *cpuSampler) window(t0, t1 int64) map[string]float64 {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]float64{}
	for _, p := range s.procs {
		out[p.role] += p.at(t1) - p.at(t0)
	}
	return out
}

// cpuGBKey is the sample key of a role's CPU-per-GB figure: cpu_gb_broker for the one
// broker ("server"), cpu_gb_<role> for the others (pub, sub, leader, follower1, ...).
func cpuGBKey(role string) string {
	if role == "server" {
		return "cpu_gb_broker"
	}
	return "cpu_gb_" + role
}

// perGB turns the CPU seconds of each role over an interval that moved bytes into CPU
// seconds per GB (1e9 bytes), per role and in total.
func perGB(cpu map[string]float64, bytes float64) sample {
	s := sample{}
	gb := bytes / 1e9
	var total float64
	for role, v := range cpu {
		s[cpuGBKey(role)] = v / gb
		total += v
	}
	s["cpu_gb_total"] = total / gb
	return s
}

// sampleCPU starts sampling the broker and every client made from now on; measure stops it.
func (m *meas) sampleCPU() {
	m.cpu = newCPUSampler(proccpu.Seconds)
	for _, s := range m.b.servers() {
		m.cpu.track(s.role, s.cmd.Process.Pid, time.Time{})
	}
}

// cpuPerGB records CPU seconds per GB over [t0, t1] (unix ns), in which bytes were
// delivered; nothing when the measurement was not sampled or the interval is empty.
func (m *meas) cpuPerGB(t0, t1 int64, bytes float64) {
	if m.cpu == nil || t1 <= t0 || !(bytes > 0) {
		return
	}
	cpu := m.cpu.window(t0, t1)
	for k, v := range perGB(cpu, bytes) {
		m.s[k] = v
	}
	m.s["cpu_window_s"] = float64(t1-t0) / 1e9
	var total float64
	for _, v := range cpu {
		total += v
	}
	// Cores the measured processes kept busy on average over the interval.
	m.s["cpu_cores"] = total / (float64(t1-t0) / 1e9)
}

// cpuGBRows are the table rows of the CPU-per-GB figures.
func cpuGBRows() []rowDef {
	return []rowDef{
		{key: "cpu_gb_broker", label: "CPU s/GB, broker (measured interval)", lowerBetter: true},
		{key: "cpu_gb_pub", label: "CPU s/GB, producer", lowerBetter: true},
		{key: "cpu_gb_sub", label: "CPU s/GB, consumer", lowerBetter: true},
		{key: "cpu_gb_total", label: "CPU s/GB, all three", lowerBetter: true},
	}
}
