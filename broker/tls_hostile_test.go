package broker

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lightq/lightq/internal/certgen"
	"github.com/lightq/lightq/wire"
)

// tryTLS dials addr with cfg and, when the handshake succeeds, says HELLO and reads the answer.
// It returns the handshake's error or else the error of that first exchange.
func tryTLS(t *testing.T, addr string, cfg *tls.Config) error {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	tc := tls.Client(nc, cfg)
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		return err
	}
	if _, err := tc.Write(wire.AppendFrame(nil, wire.OpHello, 0, 1, (&wire.Hello{ClientName: "t"}).AppendTo(nil))); err != nil {
		return err
	}
	_, err = io.ReadFull(tc, make([]byte, wire.HeaderSize))
	return err
}

// TestTLSHandshakeFailures: each way a TLS connection fails to be set up gives the client an
// error that says what went wrong and the broker a log line that does too.
func TestTLSHandshakeFailures(t *testing.T) {
	f := newTLSFixture(t)
	var log *logBuffer
	srv := startBroker(t, func(c *Config) { f.mutate(c); c.TLS.ClientCAFile = f.clientCAFile; log = logTo(c) })
	otherCA, err := certgen.NewCA("some other CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	alice := f.clientCert(f.clientCA, certgen.Leaf{CommonName: testAdminUser})
	expiredLeaf := certgen.Leaf{CommonName: testAdminUser, NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}
	for _, tc := range []struct {
		name       string
		cfg        func() *tls.Config
		client     string // in the client's error
		brokerLogs string // in the broker's "TLS handshake failed" line
	}{
		{"client does not trust the broker's CA", func() *tls.Config {
			c := f.clientConfig(alice)
			c.RootCAs = x509Pool(otherCA)
			return c
		}, "certificate signed by unknown authority", "remote error: tls: bad certificate (the client refused the broker's certificate"},
		{"wrong server name", func() *tls.Config {
			c := f.clientConfig(alice)
			c.ServerName = "broker.example.com"
			return c
		}, "not broker.example.com", "the name it dialled is not in it"},
		{"no client certificate", func() *tls.Config { return f.clientConfig() }, "certificate required", "client didn't provide a certificate"},
		{"client certificate from another CA", func() *tls.Config {
			// Go's client sends no certificate the broker's CA list does not name: force it, as
			// other clients do.
			cert := f.clientCert(otherCA, certgen.Leaf{CommonName: testAdminUser})
			c := f.clientConfig()
			c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
			return c
		}, "unknown certificate authority", "certificate signed by unknown authority"},
		{"expired client certificate", func() *tls.Config {
			return f.clientConfig(f.clientCert(f.clientCA, expiredLeaf))
		}, "expired certificate", "certificate has expired"},
		{"TLS 1.2 client, TLS 1.3 broker", func() *tls.Config {
			c := f.clientConfig(alice)
			c.MaxVersion = tls.VersionTLS12
			return c
		}, "protocol version not supported", "client offered only unsupported versions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log.skip()
			err := tryTLS(t, srv.TLSAddr(), tc.cfg())
			if err == nil || !strings.Contains(err.Error(), tc.client) {
				t.Fatalf("client error %v, want one saying %q", err, tc.client)
			}
			log.waitLog(t, "TLS handshake failed", tc.brokerLogs)
		})
	}
	t.Run("plaintext LightQ to the TLS port", func(t *testing.T) {
		log.skip()
		c := dialRaw(t, srv.TLSAddr())
		c.send(wire.OpHello, (&wire.Hello{ClientName: "plain"}).AppendTo(nil))
		h, eb := c.errorFrame(10 * time.Second)
		if h.Corr != 0 || eb.Code != wire.CodeNotProtocol || !strings.Contains(eb.Message, "this is the broker's TLS port (tls-addr)") {
			t.Fatalf("got %s corr %d: %s", eb.Code, h.Corr, eb.Message)
		}
		c.expectClosed()
		log.waitLog(t, "TLS handshake failed", "the client spoke plaintext LightQ to the TLS port")
	})
	t.Run("HTTP to the TLS port", func(t *testing.T) {
		log.skip()
		c := dialRaw(t, srv.TLSAddr())
		c.write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		c.expectClosed()
		log.waitLog(t, "TLS handshake failed", "not a TLS client: looks like an HTTP request")
	})
	t.Run("TLS to the plaintext port", func(t *testing.T) {
		log.skip()
		err := tryTLS(t, srv.Addr(), f.clientConfig(alice))
		var rh tls.RecordHeaderError
		if !errors.As(err, &rh) {
			t.Fatalf("client error %v, want a tls.RecordHeaderError", err)
		}
		log.waitLog(t, "closing connection: unreadable input", "looks like a TLS ClientHello", "TLS port")
	})
	waitUntil(t, "every TLS session released", func() bool { return tlsCounts(srv) == [3]int{} })
}

func x509Pool(ca *certgen.CA) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// tlsCounts is what the broker counts of connections: open in conns, TLS sessions, and their
// places not in conns.
func tlsCounts(s *Server) [3]int {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	return [3]int{len(s.conns), s.tlsSessions, s.tlsPending}
}

// TestTLSServerCertificateExpires: a certificate that expires while the broker serves it makes
// clients fail with "expired", and the broker's log says its certificate expired.
func TestTLSServerCertificateExpires(t *testing.T) {
	f := newTLSFixture(t)
	leaf := certgen.ServerLeaf(time.Hour)
	leaf.NotAfter = time.Now().Add(1500 * time.Millisecond)
	if _, _, err := f.ca.WriteFiles(f.dir, "server", leaf); err != nil {
		t.Fatal(err)
	}
	var log *logBuffer
	srv := startBroker(t, func(c *Config) { f.mutate(c); log = logTo(c) })
	waitUntil(t, "the certificate expired", func() bool { return time.Now().After(leaf.NotAfter.Add(time.Second)) })
	err := tryTLS(t, srv.TLSAddr(), f.clientConfig())
	if err == nil || !strings.Contains(err.Error(), "certificate has expired") {
		t.Fatalf("client error %v, want one saying the certificate has expired", err)
	}
	log.waitLog(t, "TLS handshake failed", "the certificate this listener serves expired at", "SIGHUP")
}

// TestTLSMinVersion12: with MinVersion TLS 1.2 a TLS 1.2 client is served.
func TestTLSMinVersion12(t *testing.T) {
	f := newTLSFixture(t)
	srv := startBroker(t, func(c *Config) { f.mutate(c); c.TLS.MinVersion = tls.VersionTLS12 })
	cfg := f.clientConfig()
	cfg.MaxVersion = tls.VersionTLS12
	c := dialTLSRaw(t, srv.TLSAddr(), cfg)
	c.hello()
	c.auth(testAdminUser, testAdminPass)
	if v := c.conn.(*tls.Conn).ConnectionState().Version; v != tls.VersionTLS12 {
		t.Fatalf("negotiated %s", tls.VersionName(v))
	}
}

// cutConn passes writes through until cut is set; then it sends only the first keep bytes of
// the next write and nothing after, as a client that stops in the middle of a TLS record.
type cutConn struct {
	net.Conn
	cut  bool
	keep int
}

func (c *cutConn) Write(p []byte) (int, error) {
	switch {
	case !c.cut:
		return c.Conn.Write(p)
	case c.keep > 0:
		n := min(c.keep, len(p))
		c.keep = 0
		if _, err := c.Conn.Write(p[:n]); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// TestTLSSlowloris: a TLS connection that stalls is bounded as a plaintext one: a handshake
// not done within the handshake timeout, a TLS record not complete within the read timeout,
// and a LightQ frame not complete within the read timeout each close it; and connections in
// their handshake count against the connection caps.
func TestTLSSlowloris(t *testing.T) {
	f := newTLSFixture(t)
	const handshakeTimeout, readTimeout = 400 * time.Millisecond, 400 * time.Millisecond
	var log *logBuffer
	srv := startBroker(t, func(c *Config) {
		f.mutate(c)
		c.TLS.HandshakeTimeout, c.ReadTimeout = handshakeTimeout, readTimeout
		c.MaxConnectionsPerAddr = 3
		log = logTo(c)
	})
	t.Run("handshake never done", func(t *testing.T) {
		start := time.Now()
		silent := dialRaw(t, srv.TLSAddr())
		silent.expectClosed()
		if d := time.Since(start); d < handshakeTimeout {
			t.Fatalf("closed after %v, before the handshake timeout", d)
		}
		log.waitLog(t, "TLS handshake failed", "not complete within 400ms (handshake timeout)")
	})
	t.Run("handshakes in progress count against the caps", func(t *testing.T) {
		srv2 := startBroker(t, func(c *Config) {
			f.mutate(c)
			c.TLS.HandshakeTimeout = time.Minute
			c.MaxConnectionsPerAddr = 2
		})
		a, b := dialRaw(t, srv2.TLSAddr()), dialRaw(t, srv2.TLSAddr()) // TCP only: no ClientHello
		waitUntil(t, "two sessions admitted", func() bool { return tlsCounts(srv2)[1] == 2 })
		c := dialTLSRaw(t, srv2.TLSAddr(), f.clientConfig())
		c.expectRefused("the connection limit per client address (2 open from 127.0.0.1)")
		dialRaw(t, srv2.Addr()).expectRefused("the connection limit per client address (2 open from 127.0.0.1)")
		a.conn.Close()
		b.conn.Close()
		waitUntil(t, "the silent sessions released", func() bool { return tlsCounts(srv2) == [3]int{} })
		loginTLS(t, srv2, f, testAdminUser, testAdminPass).ping()
	})
	t.Run("TLS record never finished", func(t *testing.T) {
		nc, err := net.DialTimeout("tcp", srv.TLSAddr(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		cc := &cutConn{Conn: nc}
		tc := tls.Client(cc, f.clientConfig())
		defer tc.Close()
		c := &rawClient{t: t, conn: tc, r: bufio.NewReader(tc)}
		c.hello()
		c.auth(testAdminUser, testAdminPass)
		cc.cut, cc.keep = true, 9 // the record header and 4 bytes of its body
		start := time.Now()
		c.send(wire.OpPing, nil)
		c.expectClosed()
		if d := time.Since(start); d < readTimeout {
			t.Fatalf("closed after %v, before the read timeout", d)
		}
		log.waitLog(t, "TLS connection closed", "TLS record not complete after 400ms (read timeout)")
	})
	t.Run("LightQ frame never finished", func(t *testing.T) {
		c := loginTLS(t, srv, f, testAdminUser, testAdminPass)
		frame := wire.AppendFrame(nil, wire.OpMetadata, 0, c.nextCorr(), make([]byte, 24))
		c.write(frame[:20])
		c.expectTimeout(10*time.Second, "20 of its 40 bytes arrived")
	})
	t.Run("no AUTH after the handshake", func(t *testing.T) {
		srv3 := startBroker(t, func(c *Config) { f.mutate(c); c.Limits.AuthTimeout = 300 * time.Millisecond })
		c := dialTLSRaw(t, srv3.TLSAddr(), f.clientConfig())
		c.hello()
		h, eb := c.errorFrame(10 * time.Second)
		if eb.Code != wire.CodeAuthTimeout || h.Corr != 0 {
			t.Fatalf("got %s corr %d: %s", eb.Code, h.Corr, eb.Message)
		}
		c.expectClosed()
	})
	waitUntil(t, "every TLS session released", func() bool { return tlsCounts(srv) == [3]int{} })
}

// TestTLSSessionsLeakNothing: hundreds of TLS connections that end every way (closed, reset,
// abandoned in the handshake, refused) leave no place under the caps and no goroutine.
func TestTLSSessionsLeakNothing(t *testing.T) {
	f := newTLSFixture(t)
	srv := startBroker(t, func(c *Config) { f.mutate(c); c.TLS.HandshakeTimeout = time.Second })
	loginTLS(t, srv, f, testAdminUser, testAdminPass).conn.Close()
	waitUntil(t, "the first session released", func() bool { return tlsCounts(srv) == [3]int{} })
	base := runtime.NumGoroutine()
	for i := 0; i < 200; i++ {
		switch i % 4 {
		case 0:
			c := loginTLS(t, srv, f, testAdminUser, testAdminPass)
			c.conn.Close()
		case 1:
			c := loginTLS(t, srv, f, testAdminUser, testAdminPass)
			c.conn.(*tls.Conn).NetConn().(*net.TCPConn).SetLinger(0)
			c.conn.(*tls.Conn).NetConn().Close()
		case 2:
			c := dialRaw(t, srv.TLSAddr())
			c.write([]byte{0x16, 0x03, 0x01}) // a ClientHello that never comes
			c.conn.Close()
		case 3:
			c := dialTLSRaw(t, srv.TLSAddr(), f.clientConfig())
			c.hello()
			c.send(wire.OpMetadata, nil) // before AUTH: answered, and the client leaves
			c.conn.Close()
		}
	}
	waitUntil(t, "every TLS session released", func() bool { return tlsCounts(srv) == [3]int{} })
	waitUntil(t, "the sessions' goroutines gone", func() bool { return runtime.NumGoroutine() <= base+2 })
	srv.connsMu.Lock()
	left := len(srv.perAddr)
	srv.connsMu.Unlock()
	if left != 0 {
		t.Fatalf("%d addresses still counted", left)
	}
}

// TestTLSShutdown: at shutdown a TLS client gets SHUTTING_DOWN through its session, and the
// listener's goroutines end.
func TestTLSShutdown(t *testing.T) {
	f := newTLSFixture(t)
	srv := startBroker(t, f.mutate)
	base := runtime.NumGoroutine()
	c := loginTLS(t, srv, f, testAdminUser, testAdminPass)
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(t.Context()) }()
	h, eb := c.errorFrame(10 * time.Second)
	if eb.Code != wire.CodeShuttingDown || h.Corr != 0 {
		t.Fatalf("got %s corr %d: %s", eb.Code, h.Corr, eb.Message)
	}
	c.expectClosed()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the listener's goroutines gone", func() bool { return runtime.NumGoroutine() <= base })
	if _, err := net.DialTimeout("tcp", srv.TLSAddr(), time.Second); err == nil {
		t.Fatal("the TLS port still accepts connections after Shutdown")
	}
}
