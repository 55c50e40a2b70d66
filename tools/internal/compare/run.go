package compare

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	lq "github.com/lightq/lightq/client"
)

// sample is one measurement: named values (rates in msgs/s, latencies in µs, CPU in % of
// one core, noise in % of the machine).
type sample map[string]float64

// rowDef is one line of the table: a value of a case's samples.
type rowDef struct {
	key, label  string
	lowerBetter bool
	noRatio     bool // a sanity figure, not a comparison
	lightqOnly  bool // NATS's tool has no such figure: "-" on its side
	target      *target
}

// target is a goal from the issue, checked on the medians.
type target struct {
	text  string
	check func(lq, nats float64) bool
}

func ratioAtLeast(x float64) *target {
	return &target{text: fmt.Sprintf(">= %gx", x), check: func(l, n float64) bool { return n > 0 && l/n >= x }}
}

// caseDef is one measured case. nats is nil when NATS has no counterpart.
type caseDef struct {
	id, family, title string
	size              int
	rows              []rowDef
	lightq, nats      func(ctx context.Context) (sample, error)
}

type runner struct {
	cfg  Config
	bin  string // lightq, lqbench, blast, relaylat
	work string
	logf func(string, ...any)
	seq  int

	natsServerPath, natsCLIPath string // "" = NATS side skipped
}

const adminPassword = "compare-admin-password"

// Run builds LightQ, makes sure the peers are there, runs every case for cfg.Rounds rounds
// and returns the report (also written to cfg.DocPath / SVGPath / RawPath when set).
func Run(ctx context.Context, cfg Config) (*report, error) {
	logf := func(format string, a ...any) { fmt.Fprintf(cfg.Log, "# "+format+"\n", a...) }
	if cfg.Repo == "" {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == os.DevNull {
			return nil, errors.New("cannot find the LightQ module root: run from inside the repository or pass -repo")
		}
		cfg.Repo = filepath.Dir(strings.TrimSpace(string(out)))
	}
	work, err := os.MkdirTemp("", "lightq-compare-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	r := &runner{cfg: cfg, bin: filepath.Join(work, "bin"), work: work, logf: logf}

	logf("building lightq, lqbench, blast, relaylat")
	build := exec.CommandContext(ctx, "go", "build", "-o", r.bin+"/", "./cmd/lightq", "./cmd/lqbench", "./tools/blast", "./tools/relaylat")
	build.Dir = cfg.Repo
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build: %v\n%s", err, out)
	}
	if contains(cfg.Brokers, "nats") {
		if err := r.findPeers(ctx); err != nil {
			return nil, err
		}
	}
	logf("%s", machine())
	if r.natsServerPath != "" {
		logf("nats-server %s and nats CLI %s from %s", natsServerVersion, natsCLIVersion, filepath.Dir(r.natsServerPath))
	}
	cases := r.cases()
	rep := newReport(cfg, cases, r.natsServerPath != "")
	start := time.Now()
	for round := 0; round < cfg.Rounds; round++ {
		for _, c := range cases {
			for _, side := range []string{"lightq", "nats"} {
				fn := c.lightq
				if side == "nats" {
					fn = c.nats
				}
				if fn == nil || (side == "nats" && r.natsServerPath == "") || !contains(cfg.Brokers, side) {
					continue
				}
				if err := ctx.Err(); err != nil {
					return rep, err
				}
				s, err := fn(ctx)
				if err != nil {
					if ctx.Err() != nil {
						return rep, ctx.Err()
					}
					rep.failed++
					logf("round %d %s %s FAILED: %v", round+1, c.id, side, err)
					continue
				}
				rep.add(c.id, side, round, s)
				fmt.Fprintf(cfg.Log, "round=%d case=%s broker=%s %s\n", round+1, c.id, side, s.String())
			}
		}
	}
	logf("done in %v", time.Since(start).Round(time.Second))
	rep.finish(time.Since(start))
	if cfg.RawPath != "" {
		if err := rep.writeRaw(cfg.RawPath); err != nil {
			return rep, err
		}
	}
	if cfg.SVGPath != "" {
		if err := os.WriteFile(cfg.SVGPath, rep.svg(), 0o644); err != nil {
			return rep, err
		}
	}
	if cfg.DocPath != "" {
		if err := rep.updateDoc(cfg.DocPath); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

func (s sample) String() string {
	keys := sortedKeys(s)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%s", k, fmtNum(s[k]))
	}
	return b.String()
}

// --- peers --------------------------------------------------------------------------

// peersOK reports whether dir holds nats-server and nats at the pinned versions.
func peersOK(dir string) bool {
	sv, err1 := exec.Command(filepath.Join(dir, "nats-server"), "--version").Output()
	cv, err2 := exec.Command(filepath.Join(dir, "nats"), "--version").Output()
	return err1 == nil && err2 == nil && strings.Contains(string(sv), natsServerVersion) &&
		strings.TrimSpace(string(cv)) == natsCLIVersion
}

// findPeers uses the pinned peers in cfg.PeersBin, installing them there first if needed.
func (r *runner) findPeers(ctx context.Context) error {
	dir := r.cfg.PeersBin
	if !peersOK(dir) {
		if !r.cfg.Install {
			return fmt.Errorf("nats-server %s / nats %s not in %s (pass -install or -brokers lightq)", natsServerVersion, natsCLIVersion, dir)
		}
		for _, m := range []string{natsServerModule + "@" + natsServerVersion, natsCLIModule + "@" + natsCLIVersion} {
			r.logf("go install %s (GOBIN=%s)", m, dir)
			cmd := exec.CommandContext(ctx, "go", "install", m)
			cmd.Env = append(os.Environ(), "GOBIN="+dir)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("go install %s: %v\n%s", m, err, out)
			}
		}
		if !peersOK(dir) {
			return fmt.Errorf("installed peers in %s do not report %s / %s", dir, natsServerVersion, natsCLIVersion)
		}
	}
	r.natsServerPath, r.natsCLIPath = filepath.Join(dir, "nats-server"), filepath.Join(dir, "nats")
	return nil
}

// --- brokers ------------------------------------------------------------------------

func (r *runner) tempDir(prefix string) string {
	r.seq++
	d := filepath.Join(r.work, fmt.Sprintf("%s-%d", prefix, r.seq))
	_ = os.MkdirAll(d, 0o755)
	return d
}

// lightqRun is a running LightQ broker with a fresh data dir.
type brokerRun struct {
	srv  *server
	addr string // LightQ host:port or NATS URL
	mon  string // NATS monitoring URL
	dir  string
}

func (b *brokerRun) stop() {
	b.srv.stop()
	_ = os.RemoveAll(b.dir)
}

func (r *runner) startLightQ(ctx context.Context) (*brokerRun, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir := r.tempDir("lightq")
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// Cheap password hashing: an argon2 login costs ~0.1 s of CPU per connection, which has
	// nothing to do with messaging (NATS runs without authentication here).
	srv, err := startServer("lightq", []string{"LIGHTQ_ADMIN_PASSWORD=" + adminPassword}, filepath.Join(r.bin, "lightq"),
		"--addr", addr, "--data-dir", dir, "--log-level", "warn", "--hash-params", "m=64,t=1,p=1")
	if err != nil {
		return nil, err
	}
	b := &brokerRun{srv: srv, addr: addr, dir: dir}
	if err := waitPort(ctx, srv, port, 15*time.Second); err != nil {
		b.stop()
		return nil, err
	}
	return b, nil
}

// startNATS starts nats-server with JetStream in a fresh store, as peers.sh does.
// syncInterval "" keeps the server default (2 min).
func (r *runner) startNATS(ctx context.Context, syncInterval string) (*brokerRun, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	mon, err := freePort()
	if err != nil {
		return nil, err
	}
	dir := r.tempDir("nats")
	conf := fmt.Sprintf("listen: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\njetstream {\n  store_dir: %q\n", port, mon, filepath.Join(dir, "store"))
	if syncInterval != "" {
		conf += fmt.Sprintf("  sync_interval: %q\n", syncInterval)
	}
	conf += "}\n"
	confPath := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	srv, err := startServer("nats-server", nil, r.natsServerPath, "-c", confPath)
	if err != nil {
		return nil, err
	}
	b := &brokerRun{srv: srv, addr: fmt.Sprintf("nats://127.0.0.1:%d", port), mon: fmt.Sprintf("http://127.0.0.1:%d", mon), dir: dir}
	if err := waitPort(ctx, srv, port, 15*time.Second); err != nil {
		b.stop()
		return nil, err
	}
	if err := waitPort(ctx, srv, mon, 15*time.Second); err != nil {
		b.stop()
		return nil, err
	}
	return b, nil
}

// --- one measurement ------------------------------------------------------------------

// meas wraps one measurement: quiet wait, noise snapshot, clients, CPU accounting.
type meas struct {
	r       *runner
	b       *brokerRun
	s       sample
	clients map[string][]*client
	start   time.Time
	srvCPU  float64
	noise   *noiseMeter
}

// measure runs body against a fresh broker b (stopped at the end) and fills in the CPU and
// noise figures.
func (r *runner) measure(ctx context.Context, b *brokerRun, body func(m *meas) error) (sample, error) {
	if b == nil {
		b = &brokerRun{}
	}
	defer func() {
		if b.srv != nil {
			b.stop()
		}
	}()
	m := &meas{r: r, b: b, s: sample{}, clients: map[string][]*client{}}
	idle := waitQuiet(ctx, r.cfg.QuietIdle, r.cfg.QuietWait, r.logf)
	live := func() float64 { return 0 }
	if b.srv != nil {
		live = b.srv.cpuSeconds
	}
	m.noise = startNoise(live)
	m.srvCPU = live()
	m.start = time.Now()
	if err := body(m); err != nil {
		return nil, err
	}
	wall := time.Since(m.start).Seconds()
	others, steal := m.noise.end()
	if b.srv != nil {
		if err := b.srv.exited(); err != nil {
			return nil, err
		}
		m.s["server_cpu_pct"] = 100 * (live() - m.srvCPU) / wall
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
	c := newClient(ctx, m.r.cfg.RunTimeout, env, path, args...)
	m.clients[role] = append(m.clients[role], c)
	return c
}

// --- LightQ side --------------------------------------------------------------------

// lqResult is the part of lqbench --json the tool reads.
type lqResult struct {
	Messages   int64   `json:"messages"`
	Seconds    float64 `json:"seconds"`
	MsgsPerSec float64 `json:"msgs_per_sec"`
	Produced   int64   `json:"produced"`
	Dropped    uint64  `json:"dropped"`
	Failed     int64   `json:"failed"`
	FirstError string  `json:"first_error"`
	P50        float64 `json:"p50_us"`
	P99        float64 `json:"p99_us"`
	P999       float64 `json:"p999_us"`
	Max        float64 `json:"max_us"`
	// e2e at a fixed rate: latency from the actual send rather than the intended slot.
	SendP50  float64 `json:"send_p50_us"`
	SendP99  float64 `json:"send_p99_us"`
	SendP999 float64 `json:"send_p999_us"`
	SendMax  float64 `json:"send_max_us"`
}

func parseLQ(c *client) (*lqResult, error) {
	var res lqResult
	if err := json.Unmarshal(c.stdout.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("%s: output is not lqbench JSON: %v: %q", c.name, err, tail(c.stdout.String(), 300))
	}
	if res.Failed > 0 {
		return nil, fmt.Errorf("%s: %d failed sends (%s)", c.name, res.Failed, res.FirstError)
	}
	return &res, nil
}

func (m *meas) lqbench(ctx context.Context, role string, args ...string) *client {
	full := append([]string{args[0], "-b", m.b.addr, "--json", "-q"}, args[1:]...)
	return m.client(ctx, role, filepath.Join(m.r.bin, "lqbench"), full...)
}

// waitLQSubscribers polls the broker's STATS until topic has n subscribers.
func waitLQSubscribers(ctx context.Context, addr, topic string, n int, sub *client) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	c, err := lq.Dial(ctx, addr, lq.Options{User: "admin", Password: adminPassword, ClientName: "compare"})
	if err != nil {
		return fmt.Errorf("admin connection: %w", err)
	}
	defer c.Close()
	for {
		st, err := c.Stats(ctx, topic)
		if err == nil && len(st) > 0 {
			if v, ok := st[0].Get("subscribers"); ok && int(v) >= n {
				return nil
			}
		}
		if sub.cmd.ProcessState != nil {
			return fmt.Errorf("%s exited early: %s", sub.name, tail(sub.stderr.String(), 300))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topic %s: %d subscribers not registered: %v", topic, n, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// lqTransient: `lqbench consume` (subs subscribers in one process) and `lqbench produce` as
// separate processes, the consumer subscribed first, as nats bench sub / pub.
func (r *runner) lqTransient(ctx context.Context, size, msgs, subs int, pubArgs ...string) (sample, error) {
	b, err := r.startLightQ(ctx)
	if err != nil {
		return nil, err
	}
	return r.measure(ctx, b, func(m *meas) error {
		sz, n := strconv.Itoa(size), strconv.Itoa(msgs)
		sub := m.lqbench(ctx, "sub", "consume", "-t", "bench", "-s", sz, "-m", n, "--consumers", strconv.Itoa(subs), "--idle", "3s")
		if err := sub.start(); err != nil {
			return err
		}
		if err := waitLQSubscribers(ctx, b.addr, "bench", subs, sub); err != nil {
			sub.cancel()
			_ = sub.wait()
			return err
		}
		pub := m.lqbench(ctx, "pub", append([]string{"produce", "-t", "bench", "-s", sz, "-m", n}, pubArgs...)...)
		perr := pub.run()
		serr := sub.wait()
		if err := errors.Join(perr, serr); err != nil {
			return err
		}
		p, err := parseLQ(pub)
		if err != nil {
			return err
		}
		s, err := parseLQ(sub)
		if err != nil {
			return err
		}
		m.s["pub"] = p.MsgsPerSec
		m.s["sub"] = s.MsgsPerSec / float64(subs) // per subscriber
		m.s["sub_mb"] = m.s["sub"] * float64(size) / 1e6
		m.s["received"] = float64(s.Messages)
		m.s["dropped"] = float64(s.Dropped)
		m.s["delivered_pct"] = 100 * float64(s.Messages) / float64(msgs*subs)
		if s.Messages+int64(s.Dropped) < int64(msgs*subs) {
			return fmt.Errorf("subscribers accounted for %d of %d messages", s.Messages+int64(s.Dropped), msgs*subs)
		}
		return nil
	})
}

// lqDurable: produce to a durable topic, then read everything back from the beginning.
func (r *runner) lqDurable(ctx context.Context, size, msgs int, fsync, acks string, readBack bool) (sample, error) {
	b, err := r.startLightQ(ctx)
	if err != nil {
		return nil, err
	}
	return r.measure(ctx, b, func(m *meas) error {
		sz, n := strconv.Itoa(size), strconv.Itoa(msgs)
		pub := m.lqbench(ctx, "pub", "produce", "-t", "bench", "--kind", "durable", "--fsync", fsync, "--acks", acks, "-s", sz, "-m", n)
		if err := pub.run(); err != nil {
			return err
		}
		p, err := parseLQ(pub)
		if err != nil {
			return err
		}
		m.s["pub"] = p.MsgsPerSec
		if !readBack {
			return nil
		}
		sub := m.lqbench(ctx, "sub", "consume", "-t", "bench", "--kind", "durable", "-s", sz, "-m", n, "--idle", "3s")
		if err := sub.run(); err != nil {
			return err
		}
		s, err := parseLQ(sub)
		if err != nil {
			return err
		}
		if s.Messages != int64(msgs) {
			return fmt.Errorf("read back %d of %d messages", s.Messages, msgs)
		}
		m.s["sub"] = s.MsgsPerSec
		return nil
	})
}

// lqLatency: lqbench e2e at a fixed rate (open loop; latency from the intended send time).
func (r *runner) lqLatency(ctx context.Context, durable bool) (sample, error) {
	b, err := r.startLightQ(ctx)
	if err != nil {
		return nil, err
	}
	return r.measure(ctx, b, func(m *meas) error {
		n := int(float64(r.cfg.LatencyRate) * r.cfg.LatencyDuration.Seconds())
		args := []string{"e2e", "-t", "bench", "-s", "100", "-m", strconv.Itoa(n), "--rate", strconv.Itoa(r.cfg.LatencyRate), "--idle", "3s", "--linger=" + r.cfg.LatencyLinger}
		if durable {
			args = append(args, "--kind", "durable", "--fsync", "interval=2m", "--acks", "written")
		}
		c := m.lqbench(ctx, "clients", args...)
		if err := c.run(); err != nil {
			return err
		}
		res, err := parseLQ(c)
		if err != nil {
			return err
		}
		if res.Messages < int64(n) {
			return fmt.Errorf("received %d of %d messages (%d dropped)", res.Messages, n, res.Dropped)
		}
		m.s["p50"], m.s["p99"], m.s["p999"], m.s["max"] = res.P50, res.P99, res.P999, res.Max
		if res.SendP50 > 0 {
			m.s["send_p50"], m.s["send_p99"], m.s["send_p999"], m.s["send_max"] = res.SendP50, res.SendP99, res.SendP999, res.SendMax
		}
		m.s["rate"] = res.MsgsPerSec
		return nil
	})
}

// latencyFloor: tools/relaylat at the latency case's rate, duration and size, no broker: a
// producer paced as lqbench's, a plain read/write relay process, and a consumer. What any
// broker could reach on this machine.
func (r *runner) latencyFloor(ctx context.Context) (sample, error) {
	s, err := r.measure(ctx, nil, func(m *meas) error {
		n := int(float64(r.cfg.LatencyRate) * r.cfg.LatencyDuration.Seconds())
		c := m.client(ctx, "clients", filepath.Join(r.bin, "relaylat"), "-json", "-size", "100", "-count", strconv.Itoa(n),
			"-rate", strconv.Itoa(r.cfg.LatencyRate), "-timeout", r.cfg.RunTimeout.String())
		if err := c.run(); err != nil {
			return err
		}
		var res struct {
			lqResult
			RelayReads float64 `json:"relay_reads"`
			CPU        float64 `json:"cpu_s"`
			RelayCPU   float64 `json:"relay_cpu_s"`
		}
		if err := json.Unmarshal(c.stdout.Bytes(), &res); err != nil {
			return fmt.Errorf("relaylat output: %v: %q", err, tail(c.stdout.String(), 300))
		}
		if res.Messages != int64(n) {
			return fmt.Errorf("relaylat received %d of %d messages", res.Messages, n)
		}
		m.s["p50"], m.s["p99"], m.s["p999"], m.s["max"] = res.P50, res.P99, res.P999, res.Max
		m.s["send_p50"], m.s["send_p99"], m.s["send_p999"], m.s["send_max"] = res.SendP50, res.SendP99, res.SendP999, res.SendMax
		m.s["rate"], m.s["relay_reads"] = res.MsgsPerSec, res.RelayReads
		m.s["cpu_s"], m.s["relay_cpu_s"] = res.CPU, res.RelayCPU
		return nil
	})
	if err != nil {
		return nil, err
	}
	// The relay is relaylat's child: split the process's CPU (its reaped child included)
	// into the two processes, from relaylat's own figures.
	if w := s["wall_s"]; w > 0 {
		s["clients_cpu_pct"], s["relay_cpu_pct"] = 100*s["cpu_s"]/w, 100*s["relay_cpu_s"]/w
	}
	return s, nil
}

// tcpLimit: the blast tool, two processes on loopback.
func (r *runner) tcpLimit(ctx context.Context) (sample, error) {
	return r.measure(ctx, nil, func(m *meas) error {
		c := m.client(ctx, "clients", filepath.Join(r.bin, "blast"), "-json", "-bytes", strconv.FormatInt(r.cfg.TCPBytes, 10),
			"-timeout", r.cfg.RunTimeout.String())
		if err := c.run(); err != nil {
			return err
		}
		var res struct {
			MBPerSec float64 `json:"mb_per_sec"`
		}
		if err := json.Unmarshal(c.stdout.Bytes(), &res); err != nil {
			return fmt.Errorf("blast output: %v", err)
		}
		m.s["mb"] = res.MBPerSec
		return nil
	})
}

// --- NATS side ----------------------------------------------------------------------

var natsRateRE = regexp.MustCompile(`stats: ([0-9,.]+) msgs/sec`)

// natsRate reads msgs/sec from the first `stats:` line of nats bench output, as peers.sh.
func natsRate(out string) (float64, error) {
	m := natsRateRE.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no stats line in nats bench output: %q", tail(out, 400))
	}
	return strconv.ParseFloat(strings.ReplaceAll(m[1], ",", ""), 64)
}

func (m *meas) nats(ctx context.Context, role string, args ...string) *client {
	full := append([]string{"--no-context", "-s", m.b.addr}, args...)
	return m.client(ctx, role, m.r.natsCLIPath, full...)
}

func clientOut(c *client) string { return c.stdout.String() + "\n" + c.stderr.String() }

// waitNATSSubscribers polls /connz?subs=1 until subj has n subscriptions.
func waitNATSSubscribers(ctx context.Context, mon, subj string, n int, sub *client) error {
	deadline := time.Now().Add(15 * time.Second)
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := hc.Get(mon + "/connz?subs=1")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Count(string(body), `"`+subj+`"`) >= n {
				return nil
			}
		}
		if sub.cmd.ProcessState != nil {
			return fmt.Errorf("%s exited early: %s", sub.name, tail(clientOut(sub), 300))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d subscriptions not registered", subj, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// natsCore: nats bench sub (subs clients in one process) and nats bench pub, as peers.sh.
func (r *runner) natsCore(ctx context.Context, size, msgs, subs int) (sample, error) {
	b, err := r.startNATS(ctx, "")
	if err != nil {
		return nil, err
	}
	return r.measure(ctx, b, func(m *meas) error {
		sz, n := strconv.Itoa(size), strconv.Itoa(msgs)
		sub := m.nats(ctx, "sub", "bench", "sub", "bench.core", "--msgs", n, "--size", sz, "--clients", strconv.Itoa(subs), "--no-progress")
		if err := sub.start(); err != nil {
			return err
		}
		if err := waitNATSSubscribers(ctx, b.mon, "bench.core", subs, sub); err != nil {
			sub.cancel()
			_ = sub.wait()
			return err
		}
		pub := m.nats(ctx, "pub", "bench", "pub", "bench.core", "--msgs", n, "--size", sz, "--no-progress")
		perr := pub.run()
		serr := sub.wait()
		if err := errors.Join(perr, serr); err != nil {
			return err
		}
		p, err := natsRate(clientOut(pub))
		if err != nil {
			return err
		}
		s, err := natsRate(clientOut(sub))
		if err != nil {
			return err
		}
		m.s["pub"] = p
		m.s["sub"] = s / float64(subs) // the aggregated rate over subs subscribers
		// nats bench sub ends only once every subscriber has received --msgs messages.
		m.s["delivered_pct"] = 100
		m.s["sub_mb"] = m.s["sub"] * float64(size) / 1e6
		return nil
	})
}

// natsJS: JetStream file stream, async publish in batches, then an ordered consumer reads
// everything, as peers.sh.
func (r *runner) natsJS(ctx context.Context, size, msgs int, syncInterval string, readBack bool) (sample, error) {
	b, err := r.startNATS(ctx, syncInterval)
	if err != nil {
		return nil, err
	}
	return r.measure(ctx, b, func(m *meas) error {
		sz, n := strconv.Itoa(size), strconv.Itoa(msgs)
		pub := m.nats(ctx, "pub", "bench", "js", "pub", "async", "bench.js", "--create", "--storage", "file", "--replicas", "1",
			"--maxbytes", strconv.Itoa(msgs*(size+512)), "--batch", strconv.Itoa(r.cfg.JSBatch), "--msgs", n, "--size", sz, "--no-progress")
		if err := pub.run(); err != nil {
			return err
		}
		p, err := natsRate(clientOut(pub))
		if err != nil {
			return err
		}
		m.s["pub"] = p
		if !readBack {
			return nil
		}
		sub := m.nats(ctx, "sub", "bench", "js", "ordered", "--msgs", n, "--size", sz, "--no-progress")
		if err := sub.run(); err != nil {
			return err
		}
		s, err := natsRate(clientOut(sub))
		if err != nil {
			return err
		}
		m.s["sub"] = s
		return nil
	})
}

// natsLatency: `nats latency` with both connections on the one server, at the fixed rate.
// It stamps the actual send time (not an intended schedule slot) and paces by sleeping.
func (r *runner) natsLatency(ctx context.Context) (sample, error) {
	b, err := r.startNATS(ctx, "")
	if err != nil {
		return nil, err
	}
	return r.measure(ctx, b, func(m *meas) error {
		c := m.nats(ctx, "clients", "latency", "--server-b", b.addr, "--size", "100",
			"--rate", strconv.Itoa(r.cfg.LatencyRate), "--duration", r.cfg.LatencyDuration.String())
		if err := c.run(); err != nil {
			return err
		}
		out := clientOut(c)
		for key, pct := range map[string]string{"p50": "50", "p99": "99", "p999": `99\.9`, "max": "100"} {
			v, err := natsPct(out, pct)
			if err != nil {
				return err
			}
			m.s[key] = v
		}
		if mm := regexp.MustCompile(`Actual Msgs/Sec: ([0-9]+)`).FindStringSubmatch(out); mm != nil {
			m.s["rate"], _ = strconv.ParseFloat(mm[1], 64)
		}
		return nil
	})
}

// natsPct reads a percentile line of `nats latency` ("99:       123µs") in µs.
func natsPct(out, pct string) (float64, error) {
	re := regexp.MustCompile(`(?m)(?:^|\s)` + pct + `:\s+(\S+)\s*$`)
	m := re.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no %s percentile in nats latency output: %q", pct, tail(out, 400))
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		return 0, fmt.Errorf("nats latency percentile %q: %v", m[1], err)
	}
	return float64(d) / float64(time.Microsecond), nil
}

// --- the cases ----------------------------------------------------------------------

func plotCount(bytes, size int) int {
	return min(max(bytes/size, 10_000), 1_000_000)
}

func (r *runner) cases() []caseDef {
	cfg := r.cfg
	var out []caseDef
	want := func(f string) bool { return contains(cfg.Cases, f) }
	subRow := func(t *target) []rowDef {
		return []rowDef{{key: "sub", label: "msgs/s (subscriber)", target: t}, {key: "pub", label: "msgs/s (publisher)"},
			{key: "delivered_pct", label: "% delivered (rest dropped: subscriber behind the ring)", noRatio: true}}
	}
	transient := func(size, msgs int, t *target, family string) caseDef {
		return caseDef{id: fmt.Sprintf("transient-%d", size), family: family, size: size,
			title: fmt.Sprintf("transient %d B (NATS core)", size), rows: subRow(t),
			lightq: func(ctx context.Context) (sample, error) { return r.lqTransient(ctx, size, msgs, 1) },
			nats:   func(ctx context.Context) (sample, error) { return r.natsCore(ctx, size, msgs, 1) }}
	}
	if want("transient") {
		out = append(out, transient(100, cfg.Msgs100, ratioAtLeast(3), "transient"), transient(1024, cfg.Msgs1K, ratioAtLeast(2), "transient"))
		// The same 1024 B case with NATS core's guarantee: no acknowledgement of a publish
		// (LightQ's default, acks=written, answers every batch once it is in the ring).
		out = append(out, caseDef{id: "transient-1024-acks-none", family: "transient", size: 1024,
			title: "transient 1024 B, LightQ acks=none as NATS core (no publish acks)", rows: subRow(nil),
			lightq: func(ctx context.Context) (sample, error) {
				return r.lqTransient(ctx, 1024, cfg.Msgs1K, 1, "--acks", "none")
			},
			nats: func(ctx context.Context) (sample, error) { return r.natsCore(ctx, 1024, cfg.Msgs1K, 1) }})
	}
	if want("fanout") {
		k := cfg.FanoutSubs
		out = append(out, caseDef{id: fmt.Sprintf("fanout%d-100", k), family: "fanout", size: 100,
			title: fmt.Sprintf("fan-out to %d, 100 B (NATS core)", k),
			rows: []rowDef{{key: "sub", label: "msgs/s per subscriber", target: ratioAtLeast(3)}, {key: "pub", label: "msgs/s (publisher)"},
				{key: "delivered_pct", label: "% delivered (rest dropped: subscriber behind the ring)", noRatio: true}},
			lightq: func(ctx context.Context) (sample, error) {
				return r.lqTransient(ctx, 100, cfg.FanoutMsgs, k)
			},
			nats: func(ctx context.Context) (sample, error) { return r.natsCore(ctx, 100, cfg.FanoutMsgs, k) }})
	}
	if want("durable") {
		for _, size := range []int{100, 1024} {
			var tp, ts *target
			if size == 100 {
				tp, ts = ratioAtLeast(10), ratioAtLeast(5)
			}
			out = append(out, caseDef{id: fmt.Sprintf("durable-%d", size), family: "durable", size: size,
				title: fmt.Sprintf("durable %d B, acks=written (JetStream file, async pub)", size),
				rows:  []rowDef{{key: "pub", label: "msgs/s produce", target: tp}, {key: "sub", label: "msgs/s read-back", target: ts}},
				lightq: func(ctx context.Context) (sample, error) {
					// interval=2m: acknowledged after the write, fsync every 2 min = JetStream's default.
					return r.lqDurable(ctx, size, cfg.DurableMsgs, "interval=2m", "written", true)
				},
				nats: func(ctx context.Context) (sample, error) { return r.natsJS(ctx, size, cfg.DurableMsgs, "", true) }})
		}
	}
	if want("fsync") {
		out = append(out, caseDef{id: "fsync-100", family: "fsync", size: 100,
			title: "durable 100 B, fsync before ack (fsync=always vs sync_interval=always)",
			rows:  []rowDef{{key: "pub", label: "msgs/s produce", target: ratioAtLeast(100)}},
			lightq: func(ctx context.Context) (sample, error) {
				return r.lqDurable(ctx, 100, cfg.FsyncMsgs, "always", "durable", false)
			},
			nats: func(ctx context.Context) (sample, error) {
				return r.natsJS(ctx, 100, cfg.FsyncMsgsNATS, "always", false)
			}})
	}
	if want("latency") {
		rows := func(transient bool) []rowDef {
			var t *target
			if transient {
				t = &target{text: "<= NATS, < 1000 us", check: func(l, n float64) bool { return l < 1000 && (n == 0 || l <= n) }}
			}
			const send = " from the actual send"
			return []rowDef{{key: "p50", label: "p50 us", lowerBetter: true}, {key: "p99", label: "p99 us", lowerBetter: true, target: t},
				{key: "p999", label: "p99.9 us", lowerBetter: true},
				{key: "send_p50", label: "p50 us" + send, lowerBetter: true, lightqOnly: true},
				{key: "send_p99", label: "p99 us" + send, lowerBetter: true, lightqOnly: true},
				{key: "send_p999", label: "p99.9 us" + send, lowerBetter: true, lightqOnly: true}}
		}
		rate := fmt.Sprintf("%dK msg/s x %v, LightQ linger %s", cfg.LatencyRate/1000, cfg.LatencyDuration, cfg.LatencyLinger)
		out = append(out, caseDef{id: "latency-transient", family: "latency", size: 100,
			title: "latency, transient 100 B at " + rate + " (NATS core)", rows: rows(true),
			lightq: func(ctx context.Context) (sample, error) { return r.lqLatency(ctx, false) },
			nats:   func(ctx context.Context) (sample, error) { return r.natsLatency(ctx) }},
			caseDef{id: "latency-durable", family: "latency", size: 100,
				title: "latency, durable 100 B at " + rate + " (no NATS tool)", rows: rows(false),
				lightq: func(ctx context.Context) (sample, error) { return r.lqLatency(ctx, true) }},
			caseDef{id: "latency-floor", family: "latency", size: 100,
				title:  fmt.Sprintf("latency floor: paced producer -> plain Go relay -> consumer, 100 B at %dK msg/s x %v", cfg.LatencyRate/1000, cfg.LatencyDuration),
				rows:   rows(false),
				lightq: func(ctx context.Context) (sample, error) { return r.latencyFloor(ctx) }})
	}
	if want("tcp") {
		out = append(out, caseDef{id: "tcp", family: "tcp", title: "raw TCP, 512 KiB writes, 1 MiB socket buffers",
			rows:   []rowDef{{key: "mb", label: "MB/s (1e6 B)"}},
			lightq: func(ctx context.Context) (sample, error) { return r.tcpLimit(ctx) }})
	}
	if want("sizes") {
		for _, size := range cfg.PlotSizes {
			if size == 100 || size == 1024 {
				continue
			}
			out = append(out, transient(size, plotCount(cfg.PlotBytes, size), nil, "sizes"))
		}
	}
	return out
}
