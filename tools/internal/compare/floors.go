package compare

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
)

// The limits without a broker: the latency floor (relaylat) and raw TCP (blast), run once
// per round on the LightQ side of their cases.

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
			Bytes    float64 `json:"bytes"`
			RecvCPU  float64 `json:"recv_cpu_s"`
			SendCPU  float64 `json:"send_cpu_s"`
		}
		if err := json.Unmarshal(c.stdout.Bytes(), &res); err != nil {
			return fmt.Errorf("blast output: %v", err)
		}
		m.s["mb"] = res.MBPerSec
		// blast measures both processes' CPU over its own interval (first byte .. EOF).
		if gb := res.Bytes / 1e9; gb > 0 && res.RecvCPU+res.SendCPU > 0 {
			m.s["cpu_gb_send"], m.s["cpu_gb_recv"] = res.SendCPU/gb, res.RecvCPU/gb
			m.s["cpu_gb_total"] = (res.SendCPU + res.RecvCPU) / gb
		}
		return nil
	})
}
