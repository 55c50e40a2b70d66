package broker

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"math/rand"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lightq/lightq/internal/certgen"
	"github.com/lightq/lightq/wire"
)

// tlsFixture is a throwaway PKI for one test: a CA that signs the broker's certificate, and a
// second CA that signs client certificates (the broker's tls-client-ca).
type tlsFixture struct {
	t                 testing.TB
	dir               string
	ca, clientCA      *certgen.CA
	caFile            string // the server CA, for clients
	clientCAFile      string // the client CA, for the broker
	certFile, keyFile string // the broker's certificate
}

func newTLSFixture(t testing.TB) *tlsFixture {
	t.Helper()
	f := &tlsFixture{t: t, dir: t.TempDir()}
	var err error
	if f.ca, err = certgen.NewCA("lightq test server CA", time.Hour); err != nil {
		t.Fatal(err)
	}
	if f.clientCA, err = certgen.NewCA("lightq test client CA", time.Hour); err != nil {
		t.Fatal(err)
	}
	if f.caFile, err = f.ca.WriteCA(f.dir, "ca"); err != nil {
		t.Fatal(err)
	}
	if f.clientCAFile, err = f.clientCA.WriteCA(f.dir, "client-ca"); err != nil {
		t.Fatal(err)
	}
	if f.certFile, f.keyFile, err = f.ca.WriteFiles(f.dir, "server", certgen.ServerLeaf(time.Hour)); err != nil {
		t.Fatal(err)
	}
	return f
}

// mutate points a broker configuration at the fixture: a TLS listener on a free port.
func (f *tlsFixture) mutate(c *Config) {
	c.TLS.Addr = "127.0.0.1:0"
	c.TLS.CertFile, c.TLS.KeyFile = f.certFile, f.keyFile
}

// clientCert issues a client certificate signed by ca.
func (f *tlsFixture) clientCert(ca *certgen.CA, leaf certgen.Leaf) tls.Certificate {
	f.t.Helper()
	leaf.Client = true
	certPEM, keyPEM, err := ca.Issue(leaf)
	if err != nil {
		f.t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		f.t.Fatal(err)
	}
	return pair
}

// clientConfig trusts the fixture's server CA and presents certs.
func (f *tlsFixture) clientConfig(certs ...tls.Certificate) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(f.ca.Cert)
	return &tls.Config{RootCAs: pool, ServerName: "localhost", Certificates: certs, MinVersion: tls.VersionTLS12}
}

// dialTLSRaw opens a TLS connection, handshake done, to speak the protocol byte by byte.
func dialTLSRaw(t testing.TB, addr string, cfg *tls.Config) *rawClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(nc, cfg)
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		nc.Close()
		t.Fatalf("TLS handshake: %v", err)
	}
	_ = tc.SetDeadline(time.Time{})
	t.Cleanup(func() { tc.Close() })
	return &rawClient{t: t, conn: tc, r: bufio.NewReaderSize(tc, 1<<20)}
}

// loginTLS dials the TLS port, says HELLO and authenticates with a password.
func loginTLS(t testing.TB, srv *Server, f *tlsFixture, user, pass string) *rawClient {
	t.Helper()
	c := dialTLSRaw(t, srv.TLSAddr(), f.clientConfig())
	c.hello()
	c.auth(user, pass)
	return c
}

// TestTLSTransientEndToEnd: produce and subscribe over the TLS port, and a plaintext
// subscriber sees the same messages.
func TestTLSTransientEndToEnd(t *testing.T) {
	f := newTLSFixture(t)
	srv := startBroker(t, f.mutate)
	admin := loginTLS(t, srv, f, testAdminUser, testAdminPass)
	admin.createTopic("tls-events", 1, "u", "u-pw")
	sub := loginTLS(t, srv, f, "u", "u-pw")
	id := sub.subscribe("tls-events", 0, "", 1<<20)
	plain := login(t, srv.Addr(), "u", "u-pw")
	plainID := plain.subscribe("tls-events", 0, "", 1<<20)
	pub := loginTLS(t, srv, f, "u", "u-pw")
	for i := 0; i < 50; i++ {
		pub.produce("tls-events", 0, testBatch(t, "a", "b", string(make([]byte, 3000))))
	}
	for _, c := range []struct {
		rc *rawClient
		id uint32
	}{{sub, id}, {plain, plainID}} {
		for i := 0; i < 50; i++ {
			d := c.rc.readDeliver()
			if d.sub != c.id || len(d.values) != 3 || d.values[0] != "a" {
				t.Fatalf("delivery %d: sub %d values %d", i, d.sub, len(d.values))
			}
		}
	}
}

// logBuffer collects a broker's JSON log for a test to wait on.
type logBuffer struct {
	mu   sync.Mutex
	b    bytes.Buffer
	from int // waitLog looks at the log from here on (skip)
}

// skip makes waitLog look only at lines logged from now on.
func (l *logBuffer) skip() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.from = l.b.Len()
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) since() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()[l.from:]
}

// logTo makes the broker log (debug level included) to a new logBuffer.
func logTo(c *Config) *logBuffer {
	l := &logBuffer{}
	c.Logger = zerolog.New(l).Level(zerolog.DebugLevel)
	return l
}

// waitLog waits until the log (since the last skip) has a line with message msg that also
// contains every one of parts, and returns that line. It fails the test with the whole log
// after 20 s.
func (l *logBuffer) waitLog(t testing.TB, msg string, parts ...string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	poll := time.NewTicker(time.Millisecond) // a condition polled until the deadline
	defer poll.Stop()
	for {
		for _, line := range strings.Split(l.since(), "\n") {
			if !strings.Contains(line, `"message":"`+msg+`"`) {
				continue
			}
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(line, p)
			}
			if ok {
				return line
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q line with %q after 20 s; log:\n%s", msg, parts, l.String())
		}
		<-poll.C
	}
}

// TestTLSDurableFetchEndToEnd: batches produced over TLS to a durable topic are fetched back
// over TLS byte for byte, 24 MiB of them through the sendfile path (and the copy path), with
// fetch sizes that cut the stream anywhere.
func TestTLSDurableFetchEndToEnd(t *testing.T) {
	for _, copyPath := range []bool{false, true} {
		name := "sendfile"
		if copyPath {
			name = "copy"
		}
		t.Run(name, func(t *testing.T) {
			f := newTLSFixture(t)
			srv := startBroker(t, func(c *Config) { f.mutate(c); c.FetchCopy = copyPath })
			admin := loginTLS(t, srv, f, testAdminUser, testAdminPass)
			admin.createDurable("tls-log", 1, wire.Option{Key: "fsync", Value: "never"}, wire.Option{Key: "segment.bytes", Value: "4194304"})
			pub := loginTLS(t, srv, f, "d-user", "d-pw")
			const recs, size = 64, 1000
			want := int64(24<<20) / (size + 10)
			if copyPath {
				want /= 3
			}
			var next int64
			for next < want {
				if resp := pub.produceAcks("tls-log", 0, wire.AcksWritten, offsetBatch(t, next, recs, size)); resp.BaseOffset != next {
					t.Fatalf("batch acked at %d, want %d", resp.BaseOffset, next)
				}
				next += recs
			}
			c := loginTLS(t, srv, f, "d-user", "d-pw")
			rng := rand.New(rand.NewSource(7))
			var off, bytesRead int64
			for off < next {
				m := wire.Fetch{Topic: "tls-log", Partition: 0, Offset: off, MaxBytes: uint32(16<<10 + rng.Intn(2<<20)), Isolation: wire.IsolationWritten}
				var resp wire.FetchResponse
				if err := resp.Decode(c.expectResponse(wire.OpFetch, c.send(wire.OpFetch, m.AppendTo(nil)))); err != nil {
					t.Fatal(err)
				}
				bytesRead += int64(len(resp.Batches))
				off = checkBatches(t, resp.Batches, off)
			}
			t.Logf("fetched %d MiB over TLS byte-exact", bytesRead>>20)
		})
	}
}

// TestTLSClientCertificates: with tls-client-ca, a verified certificate logs its connection in
// as the user it names (URI SAN lightq:user:NAME before the Common Name), without AUTH; AUTH
// with an empty user answers that user's role; a certificate naming an unknown user is refused
// at once with AUTH_FAILED; without a certificate the handshake fails when one is required and
// AUTH is needed when it is optional.
func TestTLSClientCertificates(t *testing.T) {
	f := newTLSFixture(t)
	var log *logBuffer
	srv := startBroker(t, func(c *Config) { f.mutate(c); c.TLS.ClientCAFile = f.clientCAFile; log = logTo(c) })
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createTopic("mine", 1, "alice", "alice-pw")
	admin.createTopic("theirs", 1, "bob", "bob-pw")

	metadata := func(c *rawClient, topic string) wire.Code {
		c.t.Helper()
		corr := c.send(wire.OpMetadata, (&wire.MetadataRequest{Topics: []string{topic}}).AppendTo(nil))
		fr := c.mustRead()
		if fr.h.Corr != corr {
			t.Fatalf("answer to %d, want %d", fr.h.Corr, corr)
		}
		if fr.h.Op != wire.OpError {
			return 0
		}
		var eb wire.ErrorBody
		_ = eb.Decode(fr.body)
		return eb.Code
	}
	roleOf := func(c *rawClient) wire.Role {
		c.t.Helper()
		var ar wire.AuthResponse
		if err := ar.Decode(c.expectResponse(wire.OpAuth, c.send(wire.OpAuth, (&wire.Auth{}).AppendTo(nil)))); err != nil {
			t.Fatal(err)
		}
		return ar.Role
	}

	t.Run("common name", func(t *testing.T) {
		c := dialTLSRaw(t, srv.TLSAddr(), f.clientConfig(f.clientCert(f.clientCA, certgen.Leaf{CommonName: "alice"})))
		c.hello()
		if code := metadata(c, "mine"); code != 0 {
			t.Fatalf("METADATA on alice's topic without AUTH: %s", code)
		}
		if code := metadata(c, "theirs"); code != wire.CodeNotAuthorized {
			t.Fatalf("METADATA on bob's topic: %v, want NOT_AUTHORIZED", code)
		}
		if r := roleOf(c); r != wire.RoleUser {
			t.Fatalf("empty AUTH answered role %d, want %d", r, wire.RoleUser)
		}
		log.waitLog(t, "authenticated by client certificate", `"user":"alice"`)
	})
	t.Run("URI SAN before common name", func(t *testing.T) {
		c := dialTLSRaw(t, srv.TLSAddr(), f.clientConfig(f.clientCert(f.clientCA, certgen.Leaf{CommonName: "alice", URIs: []string{"https://example.com/x", "lightq:user:bob"}})))
		c.hello()
		if code := metadata(c, "theirs"); code != 0 {
			t.Fatalf("METADATA on bob's topic as bob: %s", code)
		}
		if code := metadata(c, "mine"); code != wire.CodeNotAuthorized {
			t.Fatalf("METADATA on alice's topic as bob: %v, want NOT_AUTHORIZED", code)
		}
	})
	t.Run("admin", func(t *testing.T) {
		c := dialTLSRaw(t, srv.TLSAddr(), f.clientConfig(f.clientCert(f.clientCA, certgen.Leaf{CommonName: testAdminUser})))
		c.hello()
		if r := roleOf(c); r != wire.RoleAdmin {
			t.Fatalf("role %d, want admin", r)
		}
	})
	t.Run("a password AUTH replaces the certificate's user", func(t *testing.T) {
		c := dialTLSRaw(t, srv.TLSAddr(), f.clientConfig(f.clientCert(f.clientCA, certgen.Leaf{CommonName: "alice"})))
		c.hello()
		c.auth("bob", "bob-pw")
		if code := metadata(c, "mine"); code != wire.CodeNotAuthorized {
			t.Fatalf("after AUTH as bob, METADATA on alice's topic: %v", code)
		}
		if r := roleOf(c); r != wire.RoleUser {
			t.Fatal("empty AUTH did not return to the certificate's user")
		}
		if code := metadata(c, "mine"); code != 0 {
			t.Fatalf("back as alice, METADATA on her topic: %s", code)
		}
	})
	t.Run("unknown user", func(t *testing.T) {
		c := dialTLSRaw(t, srv.TLSAddr(), f.clientConfig(f.clientCert(f.clientCA, certgen.Leaf{CommonName: "nobody"})))
		h, eb := c.errorFrame(10 * time.Second)
		if h.Corr != 0 || eb.Code != wire.CodeAuthFailed || !strings.Contains(eb.Message, `names user "nobody", who does not exist`) {
			t.Fatalf("got %s corr %d: %s", eb.Code, h.Corr, eb.Message)
		}
		c.expectClosed()
		log.waitLog(t, "client certificate names an unknown user; closing", `"cert_user":"nobody"`)
	})
	t.Run("no user in the certificate", func(t *testing.T) {
		c := dialTLSRaw(t, srv.TLSAddr(), f.clientConfig(f.clientCert(f.clientCA, certgen.Leaf{URIs: []string{"lightq:user:"}})))
		h, eb := c.errorFrame(10 * time.Second)
		if h.Corr != 0 || eb.Code != wire.CodeAuthFailed || !strings.Contains(eb.Message, "URI SAN lightq:user:") {
			t.Fatalf("got %s corr %d: %s", eb.Code, h.Corr, eb.Message)
		}
		c.expectClosed()
	})
	t.Run("empty AUTH without a certificate", func(t *testing.T) {
		c := login(t, srv.Addr(), testAdminUser, testAdminPass) // plaintext: no certificate
		eb := c.expectError(c.send(wire.OpAuth, (&wire.Auth{}).AppendTo(nil)), wire.CodeAuthFailed)
		if !strings.Contains(eb.Message, "stands for a client certificate") {
			t.Fatalf("message %q", eb.Message)
		}
	})
}

// TestTLSClientCertificateOptional: with tls-client-auth optional, a client without a
// certificate connects and logs in with a password, and one with a certificate needs none.
func TestTLSClientCertificateOptional(t *testing.T) {
	f := newTLSFixture(t)
	srv := startBroker(t, func(c *Config) { f.mutate(c); c.TLS.ClientCAFile = f.clientCAFile; c.TLS.ClientCertOptional = true })
	c := dialTLSRaw(t, srv.TLSAddr(), f.clientConfig())
	c.hello()
	c.expectError(c.send(wire.OpMetadata, (&wire.MetadataRequest{}).AppendTo(nil)), wire.CodeNotAuthenticated)
	c.auth(testAdminUser, testAdminPass)
	c.ping()
	cert := dialTLSRaw(t, srv.TLSAddr(), f.clientConfig(f.clientCert(f.clientCA, certgen.Leaf{CommonName: testAdminUser})))
	cert.hello()
	cert.expectResponse(wire.OpMetadata, cert.send(wire.OpMetadata, (&wire.MetadataRequest{}).AppendTo(nil)))
}

// TestTLSReload: ReloadTLS swaps the certificate for new handshakes while a connection made
// with the old one keeps working; files that cannot be used leave the current certificate in
// place and say why.
func TestTLSReload(t *testing.T) {
	f := newTLSFixture(t)
	var log *logBuffer
	srv := startBroker(t, func(c *Config) { f.mutate(c); log = logTo(c) })
	serving := func() *x509.Certificate {
		c := dialTLSRaw(t, srv.TLSAddr(), f.clientConfig())
		defer c.conn.Close()
		c.hello()
		return c.conn.(*tls.Conn).ConnectionState().PeerCertificates[0]
	}
	first := serving()
	old := loginTLS(t, srv, f, testAdminUser, testAdminPass)
	old.createTopic("reload", 1, "u", "u-pw")

	renewed := certgen.ServerLeaf(2 * time.Hour)
	renewed.CommonName = "renewed"
	if _, _, err := f.ca.WriteFiles(f.dir, "server", renewed); err != nil {
		t.Fatal(err)
	}
	if err := srv.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	log.waitLog(t, "TLS certificate reloaded", `CN=renewed`)
	second := serving()
	if second.Subject.CommonName != "renewed" || second.SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Fatalf("after the reload the broker serves %q serial %v, want the renewed certificate", second.Subject, second.SerialNumber)
	}
	old.ping() // the connection made before the reload still works
	old.produce("reload", 0, testBatch(t, "still here"))

	expired := certgen.ServerLeaf(time.Hour)
	expired.NotBefore, expired.NotAfter = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
	otherKey := func() {
		// a key that does not belong to the certificate: another certificate's
		_, key, err := f.ca.WriteFiles(t.TempDir(), "other", certgen.ServerLeaf(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(key)
		if err := os.WriteFile(f.keyFile, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []struct {
		name, why string
		write     func()
	}{
		{"garbage", "failed to find any PEM data", func() { _ = os.WriteFile(f.certFile, []byte("not a certificate"), 0o600) }},
		{"expired", "expired at", func() {
			if _, _, err := f.ca.WriteFiles(f.dir, "server", expired); err != nil {
				t.Fatal(err)
			}
		}},
		{"key of another certificate", "private key does not match public key", func() {
			if _, _, err := f.ca.WriteFiles(f.dir, "server", certgen.ServerLeaf(time.Hour)); err != nil {
				t.Fatal(err)
			}
			otherKey()
		}},
		{"missing", "no such file", func() { _ = os.Remove(f.certFile) }},
	} {
		bad.write()
		err := srv.ReloadTLS()
		if err == nil || !strings.Contains(err.Error(), bad.why) {
			t.Fatalf("%s: reload error %v, want one saying %q", bad.name, err, bad.why)
		}
		log.waitLog(t, "TLS reload failed: still serving the previous certificate", bad.why)
		if got := serving(); got.SerialNumber.Cmp(second.SerialNumber) != 0 {
			t.Fatalf("%s: after a failed reload the broker serves %q, want the renewed certificate", bad.name, got.Subject)
		}
	}
	old.ping()
}

// TestTLSConfigErrors: a broker does not start with TLS files it cannot use.
func TestTLSConfigErrors(t *testing.T) {
	f := newTLSFixture(t)
	expired := certgen.ServerLeaf(time.Hour)
	expired.NotBefore, expired.NotAfter = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
	expCert, expKey, err := f.ca.WriteFiles(t.TempDir(), "expired", expired)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		mutate     func(*Config)
	}{
		{"no key", "needs a certificate and a key", func(c *Config) { c.TLS.KeyFile = "" }},
		{"files without an address", "without a TLS listen address", func(c *Config) { c.TLS.Addr = "" }},
		{"expired", "expired at", func(c *Config) { c.TLS.CertFile, c.TLS.KeyFile = expCert, expKey }},
		{"client CA without certificates", "no PEM certificate", func(c *Config) { c.TLS.ClientCAFile = f.keyFile }},
		{"TLS 1.1", "want TLS 1.2 or 1.3", func(c *Config) { c.TLS.MinVersion = tls.VersionTLS11 }},
	} {
		cfg := testConfig(t)
		f.mutate(&cfg)
		tc.mutate(&cfg)
		_, err := New(cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New returned %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}
