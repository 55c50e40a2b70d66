// Package compare is the compare command (tools/compare is its main): it runs the same
// benchmark cases against LightQ and NATS on this machine, alternating the two (A B A B ...)
// for several rounds, and prints one table: per case LightQ's median, NATS's median, and the
// ratio with its min and max over rounds.
//
//	go run ./tools/compare [-rounds 3] [-cases transient,fanout,durable,tls,fsync,latency,tcp,sizes,replicated]
//	                       [-sustain-bytes 2GB] [-sustain-time 10s] [-repl-bytes 2GB] [-work-dir DIR]
//	                       [-doc docs/PERFORMANCE.md] [-doc-replicated docs/PERFORMANCE-REPLICATION.md]
//	                       [-svg docs/throughput-by-size.svg]
//
// The peer is pinned: nats-server v2.15.2 and the nats CLI v0.5.0 (its `nats bench` and
// `nats latency`), installed from the Go module proxy into -peers-bin unless they are there
// already. LightQ's side is lightq and lqbench, built from this checkout. Every broker is
// started on a free 127.0.0.1 port with a temp data dir, fresh for each measurement, and
// stopped by this tool (also on Ctrl-C); every client run is bounded by -run-timeout.
//
// The conventions follow shared/bench/peers.sh so figures stay comparable with it: before
// each measurement wait until the CPU is idle (>= -quiet-idle %, at most -quiet-wait);
// publisher rate = messages / (first send .. last ack or flush); subscriber rate = messages
// / (first .. last message received); JetStream: file storage, 1 replica, async publish in
// batches of 500, the server's default sync_interval (2 min) unless the case says always.
// The replicated cases run three brokers of each: a LightQ cluster with the topic replicated
// on all three and a JetStream cluster with a stream of three replicas (replicated.go).
// Each measurement also records the CPU used by others and stolen by the hypervisor
// (others_cpu_pct, steal_pct): high values mean a noisy figure.
//
// stderr: one line per measurement (key=value) and progress; stdout: the table.
//
// Files: cli.go (Config, flags, Main), run.go (Run: build, rounds, report), cases.go (the
// cases, their rows and targets), sustained.go (the durable and fsync cases, the disk
// reference, free space), replicated.go (the replicated cases), cluster.go (three-broker
// clusters of each), lqmeta.go (a LightQ partition's leader, from METADATA), lightq.go and
// nats.go (each side's clients per case),
// floors.go (relaylat and blast, no broker), brokers.go (starting a fresh broker), peers.go
// (the pinned NATS peers), measure.go (one measurement), proc.go (processes, CPU, noise),
// report.go (table, doc section, raw file), svg.go (the plot), scrape.go (-lightq-metrics).
package compare

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/lightq/lightq/internal/size"
)

// Config is what one comparison runs.
type Config struct {
	Rounds     int
	Cases      []string // case families: transient fanout durable tls fsync latency tcp sizes
	Brokers    []string // lightq, nats
	RunTimeout time.Duration
	QuietIdle  float64
	QuietWait  time.Duration

	Msgs100, Msgs1K int // transient 1 pub 1 sub
	FanoutMsgs      int // per subscriber
	FanoutSubs      int
	// The sustained durable cases: a LightQ measurement and the disk reference move
	// SustainBytes, a NATS one publishes for at least SustainTime; their client runs are
	// bounded by SustainTimeout.
	SustainBytes   int64
	SustainTime    time.Duration
	SustainTimeout time.Duration
	// ReplBytes is what each replicated LightQ measurement and its single-node reference
	// produce (0: SustainBytes); NATS's side publishes for SustainTime.
	ReplBytes        int64
	WorkDir          string // where the brokers' data and the disk reference go ("" = the temp dir)
	LatencyRate      int
	LatencyDuration  time.Duration
	LatencyLinger    string // lqbench --linger in the latency case
	TCPBytes         int64
	PlotSizes        []int // extra transient sizes for the plot
	PlotBytes        int   // payload bytes per plot measurement (count = this / size, bounded)
	JSBatch          int
	NATSSyncDefault  string // "" = server default (2m), as peers.sh
	PeersBin         string // where nats-server and nats are, or are installed
	Install          bool
	Repo             string // module root
	DocPath, SVGPath string
	DocReplPath      string // the replicated cases' generated section goes here when set
	RawPath          string
	Log              io.Writer

	LightQMetrics time.Duration // > 0: lightq with --http-addr, /metrics scraped this often (scrape.go)
}

const (
	natsServerVersion = "v2.15.2"
	natsCLIVersion    = "v0.5.0"
	natsServerModule  = "github.com/nats-io/nats-server/v2"
	natsCLIModule     = "github.com/nats-io/natscli/nats"
)

var allCases = []string{"transient", "fanout", "durable", "tls", "fsync", "latency", "tcp", "sizes", "replicated"}

func defaultConfig() Config {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	return Config{
		Rounds: 3, Cases: allCases, Brokers: []string{"lightq", "nats"},
		RunTimeout: 30 * time.Second, QuietIdle: 80, QuietWait: 30 * time.Second,
		Msgs100: 1_000_000, Msgs1K: 1_000_000, FanoutMsgs: 300_000, FanoutSubs: 4,
		SustainBytes: 2e9, SustainTime: 10 * time.Second, SustainTimeout: 3 * time.Minute,
		LatencyRate: 50_000, LatencyDuration: 10 * time.Second, LatencyLinger: "-1ms",
		TCPBytes: 2 << 30, PlotSizes: []int{16, 64, 256, 4096, 16384, 65536}, PlotBytes: 256 << 20,
		JSBatch: 500, PeersBin: filepath.Join(cache, "lightq-compare", "bin"), Install: true,
		Log: os.Stderr,
	}
}

// Main parses flags, runs the comparison and prints the table; it returns the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := defaultConfig()
	cfg.Log = stderr
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cases := fs.String("cases", strings.Join(allCases, ","), "case families to run: "+strings.Join(allCases, ","))
	brokers := fs.String("brokers", "lightq,nats", "sides to run: lightq, nats (tcp and the latency floor run with lightq)")
	plotSizes := fs.String("plot-sizes", "16,64,256,4096,16384,65536", "extra transient message sizes for the plot (100 and 1024 come from the transient case)")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "rounds; each runs every case on LightQ then NATS")
	fs.DurationVar(&cfg.RunTimeout, "run-timeout", cfg.RunTimeout, "bound on each client run")
	fs.Float64Var(&cfg.QuietIdle, "quiet-idle", cfg.QuietIdle, "before each measurement wait until CPU idle >= this % (0: off)")
	fs.DurationVar(&cfg.QuietWait, "quiet-wait", cfg.QuietWait, "... but at most this long")
	fs.IntVar(&cfg.Msgs100, "msgs-100", cfg.Msgs100, "messages, 100-byte transient")
	fs.IntVar(&cfg.Msgs1K, "msgs-1024", cfg.Msgs1K, "messages, 1024-byte transient")
	fs.IntVar(&cfg.FanoutMsgs, "msgs-fanout", cfg.FanoutMsgs, "messages published in the fan-out case (each subscriber gets all)")
	fs.IntVar(&cfg.FanoutSubs, "fanout", cfg.FanoutSubs, "subscribers in the fan-out case")
	fs.Var((*size.Value)(&cfg.SustainBytes), "sustain-bytes", "durable and fsync cases: payload bytes each LightQ measurement and disk reference moves (with a unit: 2GB)")
	fs.Var((*size.Value)(&cfg.ReplBytes), "repl-bytes", "replicated cases: payload bytes each LightQ measurement (replicated, and single-node for reference) produces (default: -sustain-bytes)")
	fs.DurationVar(&cfg.SustainTime, "sustain-time", cfg.SustainTime, "durable and fsync cases: NATS publishes for at least this long")
	fs.DurationVar(&cfg.SustainTimeout, "sustain-timeout", cfg.SustainTimeout, "bound on each client run of the durable and fsync cases")
	fs.StringVar(&cfg.WorkDir, "work-dir", "", "directory for the brokers' data and the disk reference (default: the temp dir; it must be on the disk to measure, not tmpfs)")
	fs.IntVar(&cfg.LatencyRate, "latency-rate", cfg.LatencyRate, "messages per second in the latency case")
	fs.DurationVar(&cfg.LatencyDuration, "latency-duration", cfg.LatencyDuration, "duration of the latency case")
	fs.StringVar(&cfg.LatencyLinger, "latency-linger", cfg.LatencyLinger, "LightQ producer linger in the latency case (negative: a batch leaves as soon as an in-flight slot is free; lqbench's default is 1ms)")
	fs.Int64Var(&cfg.TCPBytes, "tcp-bytes", cfg.TCPBytes, "bytes the raw TCP blast sends")
	fs.IntVar(&cfg.PlotBytes, "plot-bytes", cfg.PlotBytes, "payload bytes per plot measurement (count = bytes/size, 10K..1M)")
	fs.IntVar(&cfg.JSBatch, "js-batch", cfg.JSBatch, "JetStream async publish batch (nats bench default)")
	fs.DurationVar(&cfg.LightQMetrics, "lightq-metrics", 0, "run lightq with its metrics on (--http-addr) and scrape /metrics this often during each measurement (0: metrics off)")
	fs.StringVar(&cfg.PeersBin, "peers-bin", cfg.PeersBin, "directory holding (or to install) nats-server and nats")
	fs.BoolVar(&cfg.Install, "install", cfg.Install, "install the pinned NATS peers into -peers-bin when missing")
	fs.StringVar(&cfg.Repo, "repo", "", "LightQ module root (default: found from the working directory)")
	fs.StringVar(&cfg.DocPath, "doc", "", "rewrite the generated section of this Markdown file (between compare:begin/end markers)")
	fs.StringVar(&cfg.DocReplPath, "doc-replicated", "", "rewrite the replicated cases' generated section in this Markdown file instead of -doc's")
	fs.StringVar(&cfg.SVGPath, "svg", "", "write the throughput-by-size plot to this SVG file")
	fs.StringVar(&cfg.RawPath, "raw", "", "write every measurement as JSON to this file")
	smokeRun := fs.Bool("smoke", false, "every case in seconds: one round, tiny counts, no idle wait (checks the tool; its figures mean nothing); other flags still apply")
	fromRaw := fs.String("from-raw", "", "measure nothing: render the table, -doc and -svg from a -raw file of an earlier run (pass the same case and count flags)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *smokeRun {
		// Shrink everything, then parse again so that flags given explicitly still win.
		cfg = smoke(cfg)
		_ = fs.Parse(args)
	}
	cfg.Cases = splitList(*cases)
	cfg.Brokers = splitList(*brokers)
	if !*smokeRun || flagSet(fs, "plot-sizes") {
		cfg.PlotSizes = nil
		for _, s := range splitList(*plotSizes) {
			n, err := strconv.Atoi(s)
			if err != nil || n < 16 {
				fmt.Fprintf(stderr, "compare: -plot-sizes: %q is not a size >= 16\n", s)
				return 2
			}
			cfg.PlotSizes = append(cfg.PlotSizes, n)
		}
	}
	for _, c := range cfg.Cases {
		if !contains(allCases, c) {
			fmt.Fprintf(stderr, "compare: unknown case %q (want %s)\n", c, strings.Join(allCases, ","))
			return 2
		}
	}
	if cfg.Rounds < 1 {
		fmt.Fprintln(stderr, "compare: -rounds must be at least 1")
		return 2
	}
	if *fromRaw != "" {
		return render(cfg, *fromRaw, stdout, stderr)
	}
	rep, err := Run(ctx, cfg)
	if rep != nil {
		rep.writeText(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "compare:", err)
		return 1
	}
	if rep.failed > 0 {
		fmt.Fprintf(stderr, "compare: %d measurement(s) failed\n", rep.failed)
		return 1
	}
	return 0
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// render re-renders an earlier run from its -raw file.
func render(cfg Config, raw string, stdout, stderr io.Writer) int {
	r := &runner{cfg: cfg}
	rep := newReport(cfg, r.cases())
	err := rep.loadRaw(raw)
	if err == nil && cfg.SVGPath != "" {
		err = os.WriteFile(cfg.SVGPath, rep.svg(), 0o644)
	}
	if err == nil && cfg.DocPath != "" {
		err = rep.updateDocs(cfg.DocPath, cfg.DocReplPath)
	}
	if err != nil {
		fmt.Fprintln(stderr, "compare:", err)
		return 1
	}
	rep.writeText(stdout)
	return 0
}
