package certgen

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
	"time"
)

// TestIssue: a server certificate verifies for localhost and 127.0.0.1 under its CA, a client
// certificate for client authentication with its URI, and the files load as a key pair.
func TestIssue(t *testing.T) {
	ca, err := NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	dir := t.TempDir()
	certFile, keyFile, err := ca.WriteFiles(dir, "server", ServerLeaf(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"localhost", "127.0.0.1"} {
		if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name}); err != nil {
			t.Errorf("server certificate for %s: %v", name, err)
		}
	}
	if st, err := os.Stat(keyFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, %v", st.Mode(), err)
	}
	certPEM, keyPEM, err := ca.Issue(Leaf{CommonName: "alice", URIs: []string{"lightq:user:alice"}, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if len(cp.Leaf.URIs) != 1 || cp.Leaf.URIs[0].String() != "lightq:user:alice" {
		t.Errorf("URIs %v", cp.Leaf.URIs)
	}
	expired := Leaf{CommonName: "old", NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}
	old, _, err := ca.Issue(expired)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(old, keyPEM); err == nil {
		t.Error("a certificate paired with another's key loaded")
	}
}
