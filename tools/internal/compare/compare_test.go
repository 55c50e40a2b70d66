package compare

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSmoke runs every case end to end with tiny counts so the tool cannot rot: the LightQ
// side always (against lightq, lqbench, blast and relaylat built from this checkout), the NATS side
// only when the pinned nats-server and nats are already installed (on PATH, or in the
// directory `make compare` installs them to). Installing them takes minutes of compiling,
// so CI does not: without them that half is skipped, and says so.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the broker and runs it as a separate process")
	}
	cfg := smoke(defaultConfig())
	cfg.Repo = "../../.."
	cfg.Install = false
	cfg.Brokers = []string{"lightq"}
	if dir := installedPeers(cfg.PeersBin); dir != "" {
		cfg.PeersBin = dir
		cfg.Brokers = append(cfg.Brokers, "nats")
		t.Logf("NATS side against the peers in %s", dir)
	} else {
		t.Logf("NATS side skipped: nats-server %s and nats %s are not installed (make compare installs them)", natsServerVersion, natsCLIVersion)
	}
	dir := t.TempDir()
	cfg.DocPath, cfg.SVGPath, cfg.RawPath = filepath.Join(dir, "PERF.md"), filepath.Join(dir, "plot.svg"), filepath.Join(dir, "raw.json")
	if err := os.WriteFile(cfg.DocPath, []byte("# title\n\n"+docBegin+"\nold\n"+docEnd+"\n\nafter\n\n"+docReplBegin+"\nold\n"+docReplEnd+"\n\nend\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	cfg.Log = &log
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	t.Logf("log:\n%s", log.String())
	if err != nil {
		t.Fatal(err)
	}
	if rep.failed > 0 {
		t.Fatalf("%d measurement(s) failed", rep.failed)
	}
	for _, c := range rep.cases {
		for _, side := range sides {
			fn := map[string]func(context.Context) (sample, error){"ref": c.ref, "lightq": c.lightq, "nats": c.nats}[side]
			if fn == nil || side == "nats" && !contains(cfg.Brokers, "nats") {
				continue
			}
			s := rep.data[c.id][side]
			if len(s) != 1 || s[0] == nil {
				t.Errorf("%s %s: no measurement", c.id, side)
				continue
			}
			for _, row := range c.rows {
				if row.ref != (side == "ref") || row.share != nil && row.share.num != "" {
					continue // another side's figure, or another case's
				}
				if side == "nats" && row.lightqOnly {
					if v, ok := s[0][row.key]; ok {
						t.Errorf("%s nats: %s = %v, NATS has no such figure", c.id, row.key, v)
					}
					continue
				}
				if v, ok := s[0][row.key]; !ok || !(v > 0) {
					t.Errorf("%s %s: %s = %v, want > 0", c.id, side, row.key, v)
				}
			}
		}
	}
	for _, l := range rep.lines() {
		if l.of != "" && !(l.ratio > 0 && l.rmin <= l.ratio && l.ratio <= l.rmax) {
			t.Errorf("%s / %s: share %v (%v-%v), want > 0 within its range", l.title, l.metric, l.ratio, l.rmin, l.rmax)
		}
	}
	var table bytes.Buffer
	rep.writeText(&table)
	t.Logf("table:\n%s", table.String())
	for _, want := range []string{"transient 100 B", "acks=none as NATS core", "fan-out to 2", "fsync before ack", "p99.9 us", "raw TCP", "% of TCP",
		"latency floor: paced producer -> plain Go relay -> consumer", "p99 us from the actual send", "LightQ p99 / floor p99", "LightQ p50 / floor p50", "<= 1.5x the floor",
		"x the floor (", "relay ", "produce then read back", "produce and consume at once", "% of the disk (", "disk reference MB/s (group-commit", "CPU s/GB, all three", "x TCP's (",
		"replicated x3, durable 100 B, acks 1, fsync=interval=2m", "replicated x3, durable 1024 B, acks 2, fsync=always", "% of single-node (",
		"x single-node's (", "produce-to-ack p99 us", "single-node p99 us", "leader ", "follower 2 "} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q", want)
		}
	}
	for _, side := range cfg.Brokers {
		// The CPU per GB of the 1 KiB transient case: every process used some within the
		// interval, and the parts add up.
		s := rep.data["transient-1024"][side][0]
		if s == nil || !(s["cpu_gb_broker"] > 0 && s["cpu_gb_pub"] > 0 && s["cpu_gb_sub"] > 0) ||
			math.Abs(s["cpu_gb_broker"]+s["cpu_gb_pub"]+s["cpu_gb_sub"]-s["cpu_gb_total"]) > 1e-9 || !(s["cpu_window_s"] > 0 || side == "nats") {
			t.Errorf("transient-1024 %s: CPU per GB %v", side, s)
		}
	}
	if s := rep.data["latency-floor"]["lightq"][0]; s != nil && !(s["relay_cpu_pct"] > 0 && s["clients_cpu_pct"] > 0) {
		t.Errorf("latency floor: CPU not split between relay and clients: %v", s)
	}
	// A replicated case: every broker of the cluster reported under its role, the followers'
	// CPU per GB adding up, and the single-node reference's as one broker's.
	for _, side := range cfg.Brokers {
		s := rep.data["replicated-1024-acks1"][side][0]
		if s == nil || !(s["leader_cpu_pct"] > 0 && s["follower1_cpu_pct"] > 0 && s["follower2_cpu_pct"] > 0) ||
			math.Abs(s["cpu_gb_follower1"]+s["cpu_gb_follower2"]-s["cpu_gb_followers"]) > 1e-9 || s["server_cpu_pct"] != 0 {
			t.Errorf("replicated-1024-acks1 %s: CPU by member %v", side, s)
		}
	}
	if s := rep.data["replicated-1024-acks1"]["ref"][0]; s == nil || !(s["server_cpu_pct"] > 0 && s["cpu_gb_broker"] > 0) || s["leader_cpu_pct"] != 0 {
		t.Errorf("replicated-1024-acks1 single-node reference: %v", s)
	}

	doc, err := os.ReadFile(cfg.DocPath)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(doc); !strings.HasPrefix(s, "# title\n\n"+docBegin) || !strings.Contains(s, docEnd+"\n\nafter\n\n"+docReplBegin) ||
		!strings.HasSuffix(s, docReplEnd+"\n\nend\n") || strings.Contains(s, "\nold\n") || !strings.Contains(s, "| transient 100 B (NATS core) |") ||
		!strings.Contains(s[strings.Index(s, docReplBegin):], "| replicated x3, durable 1024 B, acks 2") {
		t.Errorf("doc sections not replaced in place:\n%s", s)
	}
	svg, err := os.ReadFile(cfg.SVGPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := wellFormed(svg); err != nil {
		t.Errorf("SVG is not well-formed XML: %v", err)
	}
	if n := strings.Count(string(svg), "<circle"); n < 4 { // 4 sizes x 2 panels, LightQ at least
		t.Errorf("SVG has %d points, want >= 4", n)
	}
	if raw, err := os.ReadFile(cfg.RawPath); err != nil || !bytes.Contains(raw, []byte(`"case": "tcp"`)) ||
		!bytes.Contains(raw, []byte(`"case": "latency-floor"`)) || !bytes.Contains(raw, []byte(`"case": "replicated-latency-acks2"`)) {
		t.Errorf("raw JSON: %v %.200s", err, raw)
	}

	// -from-raw renders the same table again, and the doc section.
	again := cfg
	again.DocPath, again.SVGPath, again.RawPath = filepath.Join(dir, "PERF2.md"), "", ""
	var rendered, rerr bytes.Buffer
	if code := render(again, cfg.RawPath, &rendered, &rerr); code != 0 {
		t.Fatalf("render from raw: exit %d: %s", code, rerr.String())
	}
	if rendered.String() != table.String() {
		t.Errorf("table rendered from the raw file differs:\n%s\nwant:\n%s", rendered.String(), table.String())
	}
	if doc2, err := os.ReadFile(again.DocPath); err != nil || !bytes.Contains(doc2, []byte("| latency, transient vs the floor | LightQ p99 / floor p99 |")) {
		t.Errorf("doc rendered from the raw file: %v\n%s", err, doc2)
	}
}

// installedPeers returns a directory holding the pinned nats-server and nats: the one on
// PATH, else dflt; "" when neither has them.
func installedPeers(dflt string) string {
	if p, err := exec.LookPath("nats-server"); err == nil && peersOK(filepath.Dir(p)) {
		return filepath.Dir(p)
	}
	if peersOK(dflt) {
		return dflt
	}
	return ""
}

func wellFormed(b []byte) error {
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		if _, err := d.Token(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

func TestParseNATSBench(t *testing.T) {
	single := "18:20:01 Starting Core NATS subscriber benchmark [...]\nNATS Core NATS subscriber stats: 1,234,567 msgs/sec ~ 117.7 MiB/sec\n"
	if v, err := natsRate(single); err != nil || v != 1234567 {
		t.Errorf("single client: %v %v", v, err)
	}
	multi := "  [1] 300,000 msgs/sec ~ 28.6 MiB/sec (1,000 msgs)\n  [2] 310,000 msgs/sec ~ 29.6 MiB/sec (1,000 msgs)\n\n NATS Core NATS subscriber aggregated stats: 600,123 msgs/sec ~ 57.2 MiB/sec\n message rates min 300,000 | avg 305,000 | max 310,000 | stddev 5,000 msgs\n"
	if v, err := natsRate(multi); err != nil || v != 600123 {
		t.Errorf("aggregated: %v %v", v, err)
	}
	if _, err := natsRate("nothing"); err == nil {
		t.Error("no stats line: no error")
	}
	lat := "18:14:01 50:       635µs\n18:14:01 75:       1ms\n18:14:01 99:       6.86ms\n18:14:01 99.9:     11.261ms\n18:14:01 99.99:    29.343ms\n18:14:01 100:      2s\n"
	for pct, want := range map[string]float64{"50": 635, "99": 6860, `99\.9`: 11261, "100": 2e6} {
		if v, err := natsPct(lat, pct); err != nil || math.Abs(v-want) > 1e-6 {
			t.Errorf("p%s = %v (%v), want %v", pct, v, err, want)
		}
	}
}

func TestStats(t *testing.T) {
	nan := math.NaN()
	if m := median([]float64{3, nan, 1, 2}); m != 2 {
		t.Errorf("median = %v", m)
	}
	if m := median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Errorf("median even = %v", m)
	}
	if !math.IsNaN(median([]float64{nan})) {
		t.Error("median of nothing is not NaN")
	}
	lo, hi, ok := ratioRange([]float64{2, 9, nan}, []float64{1, 3, 5})
	if !ok || lo != 2 || hi != 3 {
		t.Errorf("ratioRange = %v %v %v", lo, hi, ok)
	}
	for f, want := range map[float64]string{1234567.4: "1,234,567", 999.6: "1,000", 123.4: "123", 12.34: "12.3", 1.234: "1.23", -4321: "-4,321"} {
		if got := fmtNum(f); got != want {
			t.Errorf("fmtNum(%v) = %q, want %q", f, got, want)
		}
	}
}
