package compare

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/lightq/lightq/internal/certgen"
)

// Brokers: each measurement starts a fresh lightq or nats-server on a free port with its own
// data dir, and stops it.

func (r *runner) tempDir(prefix string) string {
	r.seq++
	d := filepath.Join(r.work, fmt.Sprintf("%s-%d", prefix, r.seq))
	_ = os.MkdirAll(d, 0o755)
	return d
}

// brokerRun is a running broker (LightQ or NATS) with a fresh data dir, or a cluster of them
// (members, each with its own data dir under dir; srv is the one the clients use).
type brokerRun struct {
	srv     *server
	members []*server
	addr    string   // LightQ host:port (plaintext) or NATS URL
	mon     string   // NATS monitoring URL
	urls    []string // a NATS cluster's client URLs, one per member
	dir     string
	// conn is how the benchmark clients connect: the address flag and, over TLS, the CA.
	conn []string

	metricsURL string        // lightq's /metrics with -lightq-metrics, else ""
	scrapeEach time.Duration // how often measure scrapes it
}

// transport says whether a case's clients speak TLS to the broker.
type transport int

const (
	plain transport = iota
	overTLS
)

// stop stops the broker and removes its data directory, so that the next measurement
// starts on a clean disk; the error says what could not be removed.
func (b *brokerRun) stop() error {
	var wg sync.WaitGroup
	for _, s := range b.servers() {
		wg.Add(1)
		go func() { defer wg.Done(); s.stop() }()
	}
	wg.Wait()
	if err := os.RemoveAll(b.dir); err != nil {
		return fmt.Errorf("removing the data directory of %s: %w", b.srv.name, err)
	}
	return nil
}

// servers are the broker processes: a cluster's members, or the one broker.
func (b *brokerRun) servers() []*server {
	if b.members != nil {
		return b.members
	}
	if b.srv != nil {
		return []*server{b.srv}
	}
	return nil
}

// makePKI makes the throwaway CA and the server certificate (ECDSA P-256, for 127.0.0.1 and
// localhost, valid for a day) that both brokers serve in the TLS cases.
func (r *runner) makePKI() error {
	dir := r.tempDir("pki")
	ca, err := certgen.NewCA("compare CA", 24*time.Hour)
	if err != nil {
		return err
	}
	if r.pki.ca, err = ca.WriteCA(dir, "ca"); err != nil {
		return err
	}
	r.pki.cert, r.pki.key, err = ca.WriteFiles(dir, "server", certgen.ServerLeaf(24*time.Hour))
	return err
}

func (r *runner) startLightQ(ctx context.Context, tr transport) (*brokerRun, error) {
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
	conn := []string{"-b", addr}
	tlsPort := 0
	if tr == overTLS {
		if tlsPort, err = freePort(); err != nil {
			return nil, err
		}
		tlsAddr := fmt.Sprintf("127.0.0.1:%d", tlsPort)
		args = append(args, "--tls-addr", tlsAddr, "--tls-cert", r.pki.cert, "--tls-key", r.pki.key)
		conn = []string{"-b", tlsAddr, "--tls-ca", r.pki.ca}
	}
	srv, err := startServer("lightq", []string{"LIGHTQ_ADMIN_PASSWORD=" + adminPassword}, filepath.Join(r.bin, "lightq"), args...)
	if err != nil {
		return nil, err
	}
	b := &brokerRun{srv: srv, addr: addr, dir: dir, conn: conn}
	if err := waitPort(ctx, srv, port, 15*time.Second); err != nil {
		_ = b.stop()
		return nil, err
	}
	if httpPort != 0 {
		b.metricsURL, b.scrapeEach = fmt.Sprintf("http://127.0.0.1:%d/metrics", httpPort), r.cfg.LightQMetrics
		if err := waitPort(ctx, srv, httpPort, 15*time.Second); err != nil {
			_ = b.stop()
			return nil, err
		}
	}
	if tlsPort != 0 {
		if err := waitPort(ctx, srv, tlsPort, 15*time.Second); err != nil {
			_ = b.stop()
			return nil, err
		}
	}
	return b, nil
}

// startNATS starts nats-server with JetStream in a fresh store, as peers.sh does.
// syncInterval "" keeps the server default (2 min).
func (r *runner) startNATS(ctx context.Context, syncInterval string, tr transport) (*brokerRun, error) {
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
	scheme, conn := "nats", []string{}
	if tr == overTLS {
		// The certificate and key LightQ's TLS port serves.
		conf += fmt.Sprintf("tls {\n  cert_file: %q\n  key_file: %q\n}\n", r.pki.cert, r.pki.key)
		scheme, conn = "tls", []string{"--tlsca", r.pki.ca}
	}
	confPath := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	srv, err := startServer("nats-server", nil, r.natsServerPath, "-c", confPath)
	if err != nil {
		return nil, err
	}
	url := fmt.Sprintf("%s://127.0.0.1:%d", scheme, port)
	b := &brokerRun{srv: srv, addr: url, mon: fmt.Sprintf("http://127.0.0.1:%d", mon), dir: dir, conn: append([]string{"-s", url}, conn...)}
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
