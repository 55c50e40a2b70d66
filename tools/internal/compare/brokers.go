package compare

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Brokers: each measurement starts a fresh lightq or nats-server on a free port with its own
// data dir, and stops it.

func (r *runner) tempDir(prefix string) string {
	r.seq++
	d := filepath.Join(r.work, fmt.Sprintf("%s-%d", prefix, r.seq))
	_ = os.MkdirAll(d, 0o755)
	return d
}

// brokerRun is a running broker (LightQ or NATS) with a fresh data dir.
type brokerRun struct {
	srv  *server
	addr string // LightQ host:port or NATS URL
	mon  string // NATS monitoring URL
	dir  string

	metricsURL string        // lightq's /metrics with -lightq-metrics, else ""
	scrapeEach time.Duration // how often measure scrapes it
}

// stop stops the broker and removes its data directory, so that the next measurement
// starts on a clean disk; the error says what could not be removed.
func (b *brokerRun) stop() error {
	b.srv.stop()
	if err := os.RemoveAll(b.dir); err != nil {
		return fmt.Errorf("removing the data directory of %s: %w", b.srv.name, err)
	}
	return nil
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
	args := []string{"--addr", addr, "--data-dir", dir, "--log-level", "warn", "--hash-params", "m=64,t=1,p=1"}
	httpPort := 0
	if r.cfg.LightQMetrics > 0 {
		if httpPort, err = freePort(); err != nil {
			return nil, err
		}
		args = append(args, "--http-addr", fmt.Sprintf("127.0.0.1:%d", httpPort))
	}
	srv, err := startServer("lightq", []string{"LIGHTQ_ADMIN_PASSWORD=" + adminPassword}, filepath.Join(r.bin, "lightq"), args...)
	if err != nil {
		return nil, err
	}
	b := &brokerRun{srv: srv, addr: addr, dir: dir}
	if err := waitPort(ctx, srv, port, 15*time.Second); err != nil {
		_ = b.stop()
		return nil, err
	}
	if httpPort != 0 {
		b.metricsURL, b.scrapeEach = fmt.Sprintf("http://127.0.0.1:%d/metrics", httpPort), r.cfg.LightQMetrics
		if err := waitPort(ctx, srv, httpPort, 15*time.Second); err != nil {
			b.stop()
			return nil, err
		}
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
		_ = b.stop()
		return nil, err
	}
	if err := waitPort(ctx, srv, mon, 15*time.Second); err != nil {
		_ = b.stop()
		return nil, err
	}
	return b, nil
}
