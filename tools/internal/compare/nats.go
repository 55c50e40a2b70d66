package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The NATS side of the cases: nats bench and nats latency against a fresh nats-server.

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
	full := append(append([]string{"--no-context"}, m.b.conn...), args...)
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
func (r *runner) natsCore(ctx context.Context, tr transport, size, msgs, subs int) (sample, error) {
	b, err := r.startNATS(ctx, "", tr)
	if err != nil {
		return nil, err
	}
	return r.measure(ctx, b, func(m *meas) error {
		m.sampleCPU()
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
		// nats bench prints no times: CPU per GB from the publisher's start to the last
		// client's exit (the publisher's start-up and connect fall inside).
		m.cpuPerGB(pub.startedAt.UnixNano(), max(pub.exitedAt.UnixNano(), sub.exitedAt.UnixNano()), float64(msgs*subs)*float64(size))
		return nil
	})
}

// natsJS: a sustained durable case on a JetStream file stream (1 replica, async publish in
// batches, as peers.sh) on a fresh nats-server: natsJSRun.
func (r *runner) natsJS(ctx context.Context, tr transport, size int, syncInterval string, sh shape) (sample, error) {
	if err := r.checkDisk(); err != nil {
		return nil, err
	}
	b, err := r.startNATS(ctx, syncInterval, tr)
	if err != nil {
		return nil, err
	}
	return r.measure(ctx, b, func(m *meas) error { return m.natsJSRun(ctx, size, sh, 1, false) })
}

// natsJSPubArgs are the `nats bench js pub async` arguments that publish n size-byte
// messages into benchstream (file storage, replicas replicas, created or checked first).
func (r *runner) natsJSPubArgs(size, n, replicas int) []string {
	return []string{"bench", "js", "pub", "async", "bench.js", "--create", "--storage", "file", "--replicas", strconv.Itoa(replicas),
		"--maxbytes", strconv.FormatInt(r.natsMaxBytes(), 10), "--batch", strconv.Itoa(r.cfg.JSBatch), "--msgs", strconv.Itoa(n),
		"--size", strconv.Itoa(size), "--no-progress"}
}

// natsJSRun publishes for at least -sustain-time, then (thenReadBack) an ordered consumer
// reads everything. atOnce: publishing for a tenth of that (which also creates the stream
// with nats bench's own settings) gives the rate and is purged; then the ordered consumer
// starts and a publisher sends enough messages for -sustain-time while it reads. With cpu,
// CPU seconds per GB are recorded over the publishing: from the first publisher's start to
// the last one's exit (nats bench prints no times).
func (m *meas) natsJSRun(ctx context.Context, size int, sh shape, replicas int, cpu bool) error {
	r := m.r
	m.timeout = r.cfg.SustainTimeout
	if cpu {
		m.sampleCPU()
	}
	sz := strconv.Itoa(size)
	var pubs []*client
	publish := func(n int) (float64, error) {
		pub := m.nats(ctx, "pub", r.natsJSPubArgs(size, n, replicas)...)
		pubs = append(pubs, pub)
		if err := pub.run(); err != nil {
			return 0, err
		}
		return natsRate(clientOut(pub))
	}
	ordered := func(n int) *client {
		return m.nats(ctx, "sub", "bench", "js", "ordered", "--msgs", strconv.Itoa(n), "--size", sz, "--no-progress")
	}
	minSecs := r.cfg.SustainTime.Seconds()
	var total int
	var secs float64
	var sub *client
	var err error
	switch sh {
	case thenReadBack:
		total, secs, err = natsProduceFor(minSecs, publish)
		if err != nil {
			return err
		}
		if cpu && len(pubs) > 0 {
			m.cpuPerGB(pubs[0].startedAt.UnixNano(), pubs[len(pubs)-1].exitedAt.UnixNano(), float64(total)*float64(size))
		}
		sub = ordered(total)
		if err := sub.run(); err != nil {
			return err
		}
	case atOnce:
		n, t, err := natsProduceFor(natsCalibration(minSecs), publish)
		if err != nil {
			return err
		}
		if err := m.nats(ctx, "admin", "stream", "purge", "benchstream", "-f").run(); err != nil {
			return err
		}
		total = natsAtOnceCount(float64(n)/t, minSecs)
		sub = ordered(total)
		if err := sub.start(); err != nil {
			return err
		}
		first := len(pubs)
		rate, perr := publish(total)
		serr := sub.wait()
		if err := errors.Join(perr, serr); err != nil {
			return err
		}
		secs = float64(total) / rate
		if cpu {
			m.cpuPerGB(pubs[first].startedAt.UnixNano(), pubs[first].exitedAt.UnixNano(), float64(total)*float64(size))
		}
	}
	s, err := natsRate(clientOut(sub))
	if err != nil {
		return err
	}
	m.s.setProduced(total, secs, size)
	m.s["sub"] = s
	m.s["sub_mb"] = s * float64(size) / 1e6
	return nil
}

// natsLatency: `nats latency` with both connections on the one server, at the fixed rate.
// It stamps the actual send time (not an intended schedule slot) and paces by sleeping.
func (r *runner) natsLatency(ctx context.Context) (sample, error) {
	b, err := r.startNATS(ctx, "", plain)
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
