package lqcat

import (
	"strings"
	"testing"
	"time"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/internal/certgen"
)

// tlsEnv is an env whose broker has a TLS port, with a CA file for lqcat and a client CA.
type tlsEnv struct {
	*env
	tlsAddr, caFile string
	clientCA        *certgen.CA
	dir             string
}

func newTLSEnv(t *testing.T) *tlsEnv {
	t.Helper()
	dir := t.TempDir()
	ca, err := certgen.NewCA("lqcat test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	clientCA, err := certgen.NewCA("lqcat test client CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caFile, err := ca.WriteCA(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	clientCAFile, err := clientCA.WriteCA(dir, "client-ca")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.WriteFiles(dir, "server", certgen.ServerLeaf(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	te := &tlsEnv{caFile: caFile, clientCA: clientCA, dir: dir}
	te.env = newEnv(t, func(c *broker.Config) {
		c.TLS.Addr, c.TLS.CertFile, c.TLS.KeyFile = "127.0.0.1:0", cert, key
		c.TLS.ClientCAFile, c.TLS.ClientCertOptional = clientCAFile, true
	})
	te.tlsAddr = te.srv.TLSAddr()
	return te
}

// TestKcatTLSOptions: kcat's security.protocol and ssl.* properties connect lqcat to the TLS
// port, with a password or a client certificate; TLS errors are clear; ssl.* without
// security.protocol=ssl is refused rather than ignored.
func TestKcatTLSOptions(t *testing.T) {
	e := newTLSEnv(t)
	e.topic("secure", "durable", 1)
	ssl := []string{"-b", e.tlsAddr, "-X", "security.protocol=ssl", "-X", "ssl.ca.location=" + e.caFile}
	e.ok("one\ntwo\n", append([]string{"-P", "-t", "secure"}, ssl...)...)
	if got := e.ok("", append([]string{"-C", "-t", "secure", "-e"}, ssl...)...); got != "one\ntwo\n" {
		t.Errorf("consumed over TLS: %q", got)
	}
	// A client certificate stands for the user and password.
	cert, key, err := e.clientCA.WriteFiles(e.dir, "app", certgen.Leaf{CommonName: userName, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	delete(e.vars, "LIGHTQ_USER")
	delete(e.vars, "LIGHTQ_PASSWORD")
	delete(e.vars, "LIGHTQ_ADMIN_PASSWORD")
	withCert := append(append([]string{}, ssl...), "-X", "ssl.certificate.location="+cert, "-X", "ssl.key.location="+key)
	if got := e.ok("", append([]string{"-C", "-t", "secure", "-e", "-X", "security.protocol=SSL"}, withCert...)...); got != "one\ntwo\n" {
		t.Errorf("consumed with a client certificate: %q", got)
	}
	e.expect(ExitUsage, "no credentials", "", append([]string{"-C", "-t", "secure", "-e"}, ssl...)...)
	e.vars["LIGHTQ_USER"], e.vars["LIGHTQ_PASSWORD"] = userName, userPass

	e.expect(ExitConnect, "not signed by a CA this client trusts", "", "-C", "-t", "secure", "-e", "-b", e.tlsAddr, "-X", "security.protocol=ssl")
	e.ok("", "-C", "-t", "secure", "-e", "-b", e.tlsAddr, "-X", "security.protocol=ssl", "-X", "enable.ssl.certificate.verification=false")
	e.expect(ExitConnect, "this is the broker's TLS port", "", "-C", "-t", "secure", "-e", "-b", e.tlsAddr)
	e.expect(ExitConnect, "the broker answered in plaintext", "", append([]string{"-C", "-t", "secure", "-e"}, append(ssl[2:], "-b", e.addr)...)...)
	e.expect(ExitConnect, `is not for "other.example.com"`, "", append([]string{"-C", "-t", "secure", "-e", "-X", "ssl.endpoint.identification.name=other.example.com"}, ssl...)...)
	e.expect(ExitUsage, "needs -X security.protocol=ssl", "", "-C", "-t", "secure", "-e", "-X", "ssl.ca.location="+e.caFile)
	e.expect(ExitUsage, "want plaintext or ssl", "", "-C", "-t", "secure", "-e", "-X", "security.protocol=tls")
	e.expect(ExitUsage, "go together", "", append([]string{"-C", "-t", "secure", "-e", "-X", "ssl.key.location=" + key}, ssl...)...)
	if r := e.run("", "--help"); !strings.Contains(r.err+r.out, "ssl.ca.location") {
		t.Errorf("--help does not describe the TLS options")
	}
}
