package compare

import (
	"context"
	"errors"
	"time"
)

// One measurement: quiet wait, noise meter, clients, CPU accounting.

// meas wraps one measurement: quiet wait, noise snapshot, clients, CPU accounting.
type meas struct {
	r       *runner
	b       *brokerRun
	s       sample
	clients map[string][]*client
	start   time.Time
	srvCPU  []float64 // each of b.servers()'s CPU seconds at the start
	noise   *noiseMeter
	timeout time.Duration // bound on each client run; 0 = -run-timeout
	cpu     *cpuSampler   // set by sampleCPU: CPU seconds per GB over a measured interval
}

// measure runs body against a fresh broker b (stopped at the end) and fills in the CPU and
// noise figures.
func (r *runner) measure(ctx context.Context, b *brokerRun, body func(m *meas) error) (sample, error) {
	if b == nil {
		b = &brokerRun{}
	}
	defer func() {
		if len(b.servers()) > 0 {
			if err := b.stop(); err != nil {
				r.logf("%v", err)
			}
		}
	}()
	m := &meas{r: r, b: b, s: sample{}, clients: map[string][]*client{}}
	defer func() {
		if m.cpu != nil {
			m.cpu.close()
		}
	}()
	idle := waitQuiet(ctx, r.cfg.QuietIdle, r.cfg.QuietWait, r.logf)
	srvs := b.servers()
	live := func() float64 {
		var sum float64
		for _, s := range srvs {
			sum += s.cpuSeconds()
		}
		return sum
	}
	m.noise = startNoise(live)
	m.srvCPU = make([]float64, len(srvs))
	for i, s := range srvs {
		m.srvCPU[i] = s.cpuSeconds()
	}
	m.start = time.Now()
	var sc *scraper
	if b.metricsURL != "" {
		sc = startScraper(ctx, b.metricsURL, b.scrapeEach)
	}
	err := body(m)
	if sc != nil {
		n, serr := sc.stop()
		m.s["scrapes"] = float64(n)
		err = errors.Join(err, serr)
	}
	if err != nil {
		return nil, err
	}
	wall := time.Since(m.start).Seconds()
	others, steal := m.noise.end()
	for i, s := range srvs {
		if err := s.exited(); err != nil {
			return nil, err
		}
		m.s[s.role+"_cpu_pct"] = 100 * (s.cpuSeconds() - m.srvCPU[i]) / wall
	}
	for role, cs := range m.clients {
		var cpu float64
		for _, c := range cs {
			cpu += c.cpuSeconds()
		}
		m.s[role+"_cpu_pct"] = 100 * cpu / wall
	}
	m.s["wall_s"] = wall
	if idle >= 0 {
		m.s["idle_before"] = idle
	}
	m.s["others_cpu_pct"] = others
	m.s["steal_pct"] = steal
	return m.s, nil
}

// client makes a client process whose CPU counts under role.
func (m *meas) client(ctx context.Context, role string, path string, args ...string) *client {
	var env []string
	if baseName(path) == "lqbench" {
		env = []string{"LIGHTQ_ADMIN_PASSWORD=" + adminPassword}
	}
	timeout := m.timeout
	if timeout == 0 {
		timeout = m.r.cfg.RunTimeout
	}
	c := newClient(ctx, timeout, env, path, args...)
	c.onStart = func(c *client) {
		if m.cpu != nil {
			m.cpu.track(role, c.cmd.Process.Pid, c.startedAt)
		}
	}
	c.onExit = func(c *client) {
		if m.cpu != nil {
			m.cpu.exited(c.cmd.Process.Pid, c.exitedAt, c.cpuSeconds())
		}
	}
	m.clients[role] = append(m.clients[role], c)
	return c
}
