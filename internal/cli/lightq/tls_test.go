package lightq

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/internal/certgen"
)

// TestRunTLSSettings: the TLS settings reach the broker, and ones it cannot use are refused
// before it starts, naming the setting.
func TestRunTLSSettings(t *testing.T) {
	set, _ := parseConf(defaultConf, "default.conf")
	set["tls-addr"], set["tls-cert"], set["tls-key"] = "127.0.0.1:0", "s.crt", "s.key"
	set["tls-client-ca"], set["tls-client-auth"], set["tls-min-version"] = "ca.crt", "optional", "1.2"
	cfg, err := buildConfig(set, envFunc(nil), &syncBuffer{})
	if err != nil {
		t.Fatal(err)
	}
	if tc := cfg.TLS; tc.Addr != "127.0.0.1:0" || tc.CertFile != "s.crt" || tc.KeyFile != "s.key" || tc.ClientCAFile != "ca.crt" ||
		!tc.ClientCertOptional || tc.MinVersion != tls.VersionTLS12 || tc.HandshakeTimeout != 10*time.Second {
		t.Fatalf("TLS config %+v", tc)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-min-version", "1.1"}, `tls-min-version: "1.1" is not 1.3 or 1.2`},
		{[]string{"--tls-client-auth", "maybe"}, `tls-client-auth: "maybe" is not require or optional`},
		{[]string{"--tls-addr", "7451"}, `tls-addr: "7451" is not host:port`},
		{[]string{"--tls-addr", "127.0.0.1:0"}, "needs a certificate and a key file"},
		{[]string{"--tls-cert", "x.crt"}, "without a TLS listen address"},
	} {
		code, _, stderr := runDirect(t, tc.args, nil)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
	dir := t.TempDir()
	ca, err := certgen.NewCA("run test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	expired := certgen.ServerLeaf(time.Hour)
	expired.NotBefore, expired.NotAfter = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
	cert, key, err := ca.WriteFiles(dir, "expired", expired)
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runDirect(t, []string{"--tls-addr", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key}, nil)
	if code != 1 || !strings.Contains(stderr, "expired at") {
		t.Errorf("expired certificate: exit %d, stderr %q; want 1 and a message saying it expired", code, stderr)
	}
}

// servingCert is the certificate the TLS port at addr presents.
func servingCert(t *testing.T, addr string, pool *x509.CertPool) *x509.Certificate {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0]
}

// testBinaryTLSReload: SIGHUP makes the broker serve the certificate now in its files, while a
// client connected before keeps working; files it cannot use leave the current certificate.
func testBinaryTLSReload(t *testing.T, bin string) {
	const pass = "binary-admin-pw"
	dir := t.TempDir()
	ca, err := certgen.NewCA("binary test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caFile, err := ca.WriteCA(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.WriteFiles(dir, "server", certgen.ServerLeaf(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	p := startBinary(t, bin, pass, "--tls-addr", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key)
	var tlsAddr string
	for _, l := range logLines(p.log.String()) {
		if l["message"] == "lightq listening" {
			tlsAddr, _ = l["tls_addr"].(string)
		}
	}
	if tlsAddr == "" {
		t.Fatalf("no tls_addr in the listening line; log:\n%s", p.log.String())
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	before := servingCert(t, tlsAddr, pool)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, tlsAddr, client.Options{User: "admin", Password: pass, TLS: &client.TLSOptions{CAFile: caFile}})
	if err != nil {
		t.Fatalf("dial: %v; log:\n%s", err, p.log.String())
	}
	defer c.Close()

	hup := func(wantMsg string) {
		t.Helper()
		n := strings.Count(p.log.String(), wantMsg)
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		poll := time.NewTicker(5 * time.Millisecond) // a condition polled until the deadline
		defer poll.Stop()
		for strings.Count(p.log.String(), wantMsg) == n {
			if time.Now().After(deadline) {
				t.Fatalf("no %q after SIGHUP; log:\n%s", wantMsg, p.log.String())
			}
			<-poll.C
		}
	}
	renewed := certgen.ServerLeaf(2 * time.Hour)
	renewed.CommonName = "renewed"
	if _, _, err := ca.WriteFiles(dir, "server", renewed); err != nil {
		t.Fatal(err)
	}
	hup("TLS certificate reloaded")
	after := servingCert(t, tlsAddr, pool)
	if after.Subject.CommonName != "renewed" || after.SerialNumber.Cmp(before.SerialNumber) == 0 {
		t.Fatalf("after SIGHUP the broker serves %q", after.Subject)
	}
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("the connection opened before the reload: %v", err)
	}
	if err := os.WriteFile(cert, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	hup("TLS reload failed: still serving the previous certificate")
	if got := servingCert(t, tlsAddr, pool); got.SerialNumber.Cmp(after.SerialNumber) != 0 {
		t.Fatalf("after a failed reload the broker serves %q", got.Subject)
	}
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("the connection opened before the reloads: %v", err)
	}
	p.terminate(t)
}
