package lqbench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/broker/brokertest"
	"github.com/lightq/lightq/internal/certgen"
)

// TestMainTLS: the --tls-* flags run a benchmark against the broker's TLS port, transient and
// durable, and a broker certificate the CA does not vouch for fails the run.
func TestMainTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := certgen.NewCA("lqbench test CA", time.Hour)
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
	srv := brokertest.Start(t, func(c *broker.Config) {
		c.AdminPassword = testAdminPass
		c.TLS.Addr, c.TLS.CertFile, c.TLS.KeyFile = "127.0.0.1:0", cert, key
	})
	for _, kind := range []string{"transient", "durable"} {
		var stdout, stderr bytes.Buffer
		args := []string{"e2e", "-b", srv.TLSAddr(), "--tls-ca", caFile, "-t", "tls-" + kind, "--kind", kind, "-m", "3000", "-s", "1KiB", "--json", "-q",
			"--user", testUser, "--password", testPass, "--admin-password", testAdminPass, "--idle", "1s"}
		if code := Main(runCtx(t), args, func(string) string { return "" }, &stdout, &stderr); code != 0 {
			t.Fatalf("%s: exit %d; stderr:\n%s", kind, code, stderr.String())
		}
		var obj map[string]any
		if err := json.Unmarshal(stdout.Bytes(), &obj); err != nil {
			t.Fatal(err)
		}
		if obj["messages"] != float64(3000) || obj["failed"] != float64(0) {
			t.Errorf("%s: %v", kind, obj)
		}
	}
	var stdout, stderr bytes.Buffer
	args := []string{"e2e", "-b", srv.TLSAddr(), "--tls", "-m", "10", "-q", "--user", testUser, "--password", testPass}
	if code := Main(runCtx(t), args, func(string) string { return "" }, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "not signed by a CA this client trusts") {
		t.Fatalf("untrusted certificate: exit %d, stderr %q", code, stderr.String())
	}
}
