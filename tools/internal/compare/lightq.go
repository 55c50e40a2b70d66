package compare

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/lightq/lightq/wire"

	lq "github.com/lightq/lightq/client"
)

// The LightQ side of the cases: lqbench runs against a fresh lightq broker.

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
	// The measured interval on the wall clock (unix ns).
	StartNs int64 `json:"start_unix_ns"`
	EndNs   int64 `json:"end_unix_ns"`
	// e2e at a fixed rate: latency from the actual send rather than the intended slot.
	SendP50  float64 `json:"send_p50_us"`
	SendP99  float64 `json:"send_p99_us"`
	SendP999 float64 `json:"send_p999_us"`
	SendMax  float64 `json:"send_max_us"`
	// produce at a fixed rate: produce-to-ack latency, from the slot and from the actual send.
	AckCount    int64   `json:"ack_count"`
	AckP50      float64 `json:"ack_p50_us"`
	AckP99      float64 `json:"ack_p99_us"`
	AckP999     float64 `json:"ack_p999_us"`
	AckMax      float64 `json:"ack_max_us"`
	AckSendP50  float64 `json:"ack_send_p50_us"`
	AckSendP99  float64 `json:"ack_send_p99_us"`
	AckSendP999 float64 `json:"ack_send_p999_us"`
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
	full := append(append([]string{args[0]}, m.b.conn...), "--json", "-q")
	full = append(full, args[1:]...)
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
func (r *runner) lqTransient(ctx context.Context, tr transport, size, msgs, subs int, pubArgs ...string) (sample, error) {
	b, err := r.startLightQ(ctx, tr)
	if err != nil {
		return nil, err
	}
	return r.measure(ctx, b, func(m *meas) error {
		m.sampleCPU()
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
		// CPU per GB delivered, from the first send to the last message received or acked.
		m.cpuPerGB(p.StartNs, max(p.EndNs, s.EndNs), float64(s.Messages)*float64(size))
		return nil
	})
}

// lqDurable: a sustained durable case on a fresh lightq broker: lqDurableRun of
// -sustain-bytes.
func (r *runner) lqDurable(ctx context.Context, tr transport, size int, fsync, acks string, sh shape) (sample, error) {
	if err := r.checkDisk(); err != nil {
		return nil, err
	}
	b, err := r.startLightQ(ctx, tr)
	if err != nil {
		return nil, err
	}
	return r.measure(ctx, b, func(m *meas) error {
		return m.lqDurableRun(ctx, r.cfg.SustainBytes, size, fsync, acks, sh, false)
	})
}

// lqDurableRun: bytes of size-byte messages produced by `lqbench produce` and consumed by
// `lqbench consume` from the beginning of the log, after the producer is done (thenReadBack)
// or while it produces (atOnce: the consumer starts first; whichever of the two comes first
// creates the topic, with the same options), both on the broker m.b.conn names. With cpu,
// CPU seconds per GB are recorded over the producer's measured interval.
func (m *meas) lqDurableRun(ctx context.Context, bytes int64, size int, fsync, acks string, sh shape, cpu bool) error {
	m.timeout = m.r.cfg.SustainTimeout
	if cpu {
		m.sampleCPU()
	}
	n := sustainMsgs(bytes, size)
	topic := []string{"-t", "bench", "--kind", "durable", "--fsync", fsync, "-s", strconv.Itoa(size), "-m", strconv.Itoa(n)}
	consume := func() *client {
		return m.lqbench(ctx, "sub", slices.Concat([]string{"consume"}, topic, []string{"--idle", "10s"})...)
	}
	var sub *client
	if sh == atOnce {
		sub = consume()
		if err := sub.start(); err != nil {
			return err
		}
	}
	pub := m.lqbench(ctx, "pub", slices.Concat([]string{"produce"}, topic,
		[]string{"--acks", acks, "--batch", strconv.Itoa(lqBatch), "--inflight", strconv.Itoa(lqInflight)})...)
	perr := pub.run()
	var serr error
	switch {
	case sub != nil && perr != nil:
		sub.cancel()
		_ = sub.wait()
	case sub != nil:
		serr = sub.wait()
	case perr == nil:
		sub = consume()
		serr = sub.run()
	}
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
	if p.Messages != int64(n) || s.Messages != int64(n) {
		return fmt.Errorf("produced %d and consumed %d of %d messages", p.Messages, s.Messages, n)
	}
	m.s.setProduced(n, p.Seconds, size)
	m.s["sub"] = s.MsgsPerSec
	m.s["sub_mb"] = s.MsgsPerSec * float64(size) / 1e6
	if cpu {
		m.cpuPerGB(p.StartNs, p.EndNs, float64(n)*float64(size))
	}
	return nil
}

// lqLatency: lqbench e2e at a fixed rate (open loop; latency from the intended send time).
func (r *runner) lqLatency(ctx context.Context, kind wire.Kind, extra ...string) (sample, error) {
	b, err := r.startLightQ(ctx, plain)
	if err != nil {
		return nil, err
	}
	return r.measure(ctx, b, func(m *meas) error {
		n := int(float64(r.cfg.LatencyRate) * r.cfg.LatencyDuration.Seconds())
		args := []string{"e2e", "-t", "bench", "-s", "100", "-m", strconv.Itoa(n), "--rate", strconv.Itoa(r.cfg.LatencyRate), "--idle", "3s", "--linger=" + r.cfg.LatencyLinger}
		if kind == wire.KindDurable {
			args = append(args, "--kind", "durable", "--fsync", "interval=2m", "--acks", "written")
		}
		args = append(args, extra...)
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
