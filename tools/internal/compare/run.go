package compare

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/lightq/lightq/tools/internal/diskfree"
)

// sample is one measurement: named values (rates in msgs/s, latencies in µs, CPU in % of
// one core, noise in % of the machine).
type sample map[string]float64

type runner struct {
	cfg  Config
	bin  string // lightq, lqbench, blast, relaylat
	work string
	logf func(string, ...any)
	seq  int

	natsServerPath, natsCLIPath string // "" = NATS side skipped

	pki struct{ ca, cert, key string } // the TLS cases' CA file and the certificate both brokers serve
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
	work, err := os.MkdirTemp(cfg.WorkDir, workPrefix)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	r := &runner{cfg: cfg, bin: filepath.Join(work, "bin"), work: work, logf: logf}

	logf("building lightq, lqbench, blast, relaylat, diskref")
	build := exec.CommandContext(ctx, "go", "build", "-o", r.bin+"/", "./cmd/lightq", "./cmd/lqbench", "./tools/blast", "./tools/relaylat", "./tools/diskref")
	build.Dir = cfg.Repo
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build: %v\n%s", err, out)
	}
	if contains(cfg.Brokers, "nats") {
		if err := r.findPeers(ctx); err != nil {
			return nil, err
		}
	}
	if contains(cfg.Cases, "tls") {
		if err := r.makePKI(); err != nil {
			return nil, err
		}
	}
	logf("%s", machine())
	if r.natsServerPath != "" {
		logf("nats-server %s and nats CLI %s from %s", natsServerVersion, natsCLIVersion, filepath.Dir(r.natsServerPath))
	}
	cases := r.cases()
	replicated := slices.ContainsFunc(cases, func(c caseDef) bool { return c.family == "replicated" })
	if replicated {
		if err := r.checkDiskFor(r.replBytes(), clusterSize); err != nil {
			return nil, fmt.Errorf("refusing to start: %w", err)
		}
	}
	if slices.ContainsFunc(cases, isSustained) || replicated {
		if err := r.checkDisk(); err != nil {
			return nil, fmt.Errorf("refusing to start: %w", err)
		}
		if diskfree.InMemory(work) {
			logf("WARNING: %s is on tmpfs: the durable cases would measure memory, not a disk (pass -work-dir)", work)
		}
	}
	rep := newReport(cfg, cases)
	rep.hasNATS = r.natsServerPath != ""
	start := time.Now()
	for round := 0; round < cfg.Rounds; round++ {
		for _, c := range cases {
			for _, side := range sides {
				fn, runs := c.lightq, contains(cfg.Brokers, "lightq")
				switch side {
				case "ref":
					fn = c.ref
				case "nats":
					fn, runs = c.nats, r.natsServerPath != "" && contains(cfg.Brokers, "nats")
				}
				if fn == nil || !runs {
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
		if err := rep.updateDocs(cfg.DocPath, cfg.DocReplPath); err != nil {
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
