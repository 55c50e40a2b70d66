package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/internal/certgen"
	"github.com/lightq/lightq/wire"
)

// pki is a throwaway PKI: a CA for the broker's certificate and one for client certificates.
type pki struct {
	t                 testing.TB
	dir               string
	ca, clientCA      *certgen.CA
	caFile            string
	clientCAFile      string
	certFile, keyFile string
}

func newPKI(t testing.TB, server certgen.Leaf) *pki {
	t.Helper()
	p := &pki{t: t, dir: t.TempDir()}
	var err error
	if p.ca, err = certgen.NewCA("client test CA", time.Hour); err == nil {
		p.clientCA, err = certgen.NewCA("client test client CA", time.Hour)
	}
	if err == nil {
		p.caFile, err = p.ca.WriteCA(p.dir, "ca")
	}
	if err == nil {
		p.clientCAFile, err = p.clientCA.WriteCA(p.dir, "client-ca")
	}
	if err == nil {
		p.certFile, p.keyFile, err = p.ca.WriteFiles(p.dir, "server", server)
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// clientFiles issues a client certificate for user and returns its files.
func (p *pki) clientFiles(user string) (cert, key string) {
	p.t.Helper()
	cert, key, err := p.clientCA.WriteFiles(p.dir, "client-"+user, certgen.Leaf{CommonName: user, Client: true})
	if err != nil {
		p.t.Fatal(err)
	}
	return cert, key
}

// startTLSBroker starts a broker with a TLS port on p's certificate.
func startTLSBroker(t testing.TB, p *pki, mutate func(*broker.Config)) *broker.Server {
	t.Helper()
	return startBroker(t, func(c *broker.Config) {
		c.TLS.Addr = "127.0.0.1:0"
		c.TLS.CertFile, c.TLS.KeyFile = p.certFile, p.keyFile
		if mutate != nil {
			mutate(c)
		}
	})
}

func tlsDial(t testing.TB, addr string, o client.Options) (*client.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o.ClientName = t.Name()
	c, err := client.Dial(ctx, addr, o)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// TestTLSProduceSubscribeFetch: over the TLS port, a producer's messages reach a subscriber of
// a transient topic, and a durable topic reads back through a consumer (sendfile on the
// broker) every record in order.
func TestTLSProduceSubscribeFetch(t *testing.T) {
	p := newPKI(t, certgen.ServerLeaf(time.Hour))
	srv := startTLSBroker(t, p, nil)
	tlsOpts := &client.TLSOptions{CAFile: p.caFile}
	admin, err := tlsDial(t, srv.TLSAddr(), client.Options{User: itAdminUser, Password: itAdminPass, TLS: tlsOpts})
	if err != nil {
		t.Fatal(err)
	}
	itTopic(t, admin, "live", 2)
	if err := admin.CreateTopic(itCtx(t), client.TopicConfig{Name: "log", Kind: wire.KindDurable, Partitions: 2, User: itUser, Password: itPass,
		Options: []wire.Option{{Key: "fsync", Value: "never"}}}); err != nil {
		t.Fatal(err)
	}
	c, err := tlsDial(t, srv.TLSAddr(), client.Options{User: itUser, Password: itPass, TLS: tlsOpts})
	if err != nil {
		t.Fatal(err)
	}
	sub := itSubscribe(t, c, client.SubscribeOptions{Topic: "live"})
	value := bytes.Repeat([]byte("tls "), 256)
	const n = 3000 // 3 MB: within the transient ring (4 MiB), so that none is dropped
	for _, topic := range []string{"live", "log"} {
		pr := itProducer(t, c, client.ProducerOptions{Topic: topic})
		for i := 0; i < n; i++ {
			if err := pr.Send(itCtx(t), &client.Message{Key: []byte(fmt.Sprint(i % 7)), Value: value}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := pr.Flush(itCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := collect(itCtx(t), sub, n)
	if err != nil || len(got) != n {
		t.Fatalf("subscriber got %d of %d: %v", len(got), n, err)
	}
	k, err := c.NewConsumer(itCtx(t), client.ConsumerOptions{Topic: "log", Isolation: wire.IsolationWritten})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	next := map[int32]int64{}
	count := 0
	err = k.Each(itCtx(t), func(m *client.Received) error {
		if m.Offset != next[m.Partition] || !bytes.Equal(m.Value, value) {
			return fmt.Errorf("partition %d: offset %d (want %d), %d-byte value", m.Partition, m.Offset, next[m.Partition], len(m.Value))
		}
		next[m.Partition]++
		if count++; count == n {
			return errItDone
		}
		return nil
	})
	if !errors.Is(err, errItDone) {
		t.Fatalf("consumer read %d of %d: %v", count, n, err)
	}
}

// TestTLSClientCertificateLogin: with a client certificate and no password, Dial logs in as
// the certificate's user and learns its role; DialConsumer does the same.
func TestTLSClientCertificateLogin(t *testing.T) {
	p := newPKI(t, certgen.ServerLeaf(time.Hour))
	srv := startTLSBroker(t, p, func(c *broker.Config) { c.TLS.ClientCAFile = p.clientCAFile })
	adminCert, adminKey := p.clientFiles(itAdminUser)
	admin, err := tlsDial(t, srv.TLSAddr(), client.Options{TLS: &client.TLSOptions{CAFile: p.caFile, CertFile: adminCert, KeyFile: adminKey}})
	if err != nil {
		t.Fatal(err)
	}
	if admin.Role() != wire.RoleAdmin {
		t.Fatalf("role %d, want admin", admin.Role())
	}
	if err := admin.CreateTopic(itCtx(t), client.TopicConfig{Name: "certs", Kind: wire.KindDurable, Partitions: 1, User: itUser, Password: itPass}); err != nil {
		t.Fatal(err)
	}
	appCert, appKey := p.clientFiles(itUser)
	opts := client.Options{TLS: &client.TLSOptions{CAFile: p.caFile, CertFile: appCert, KeyFile: appKey}}
	app, err := tlsDial(t, srv.TLSAddr(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if app.Role() != wire.RoleUser {
		t.Fatalf("role %d, want a topic user", app.Role())
	}
	pr := itProducer(t, app, client.ProducerOptions{Topic: "certs"})
	if err := pr.Send(itCtx(t), &client.Message{Value: []byte("by certificate")}, nil); err != nil {
		t.Fatal(err)
	}
	if err := pr.Flush(itCtx(t)); err != nil {
		t.Fatal(err)
	}
	k, err := client.DialConsumer(itCtx(t), srv.TLSAddr(), opts, client.ConsumerOptions{Topic: "certs", Isolation: wire.IsolationWritten})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	err = k.Each(itCtx(t), func(m *client.Received) error {
		if string(m.Value) != "by certificate" {
			return fmt.Errorf("got %q", m.Value)
		}
		return errItDone
	})
	if !errors.Is(err, errItDone) {
		t.Fatal(err)
	}
	// The same user's certificate is refused as another topic's user would be.
	if err := app.CreateTopic(itCtx(t), client.TopicConfig{Name: "x", Partitions: 1, User: "u", Password: "p"}); !errors.Is(err, &wire.Error{Code: wire.CodeNotAuthorized}) {
		t.Fatalf("CreateTopic as a topic user: %v", err)
	}
}

// TestTLSDialErrors: each way a TLS dial fails says what is wrong.
func TestTLSDialErrors(t *testing.T) {
	p := newPKI(t, certgen.ServerLeaf(time.Hour))
	srv := startTLSBroker(t, p, func(c *broker.Config) { c.TLS.ClientCAFile = p.clientCAFile; c.TLS.ClientCertOptional = true })
	required := startTLSBroker(t, p, func(c *broker.Config) { c.TLS.ClientCAFile = p.clientCAFile })
	other := newPKI(t, certgen.ServerLeaf(time.Hour))
	soon := certgen.ServerLeaf(time.Hour)
	soon.NotAfter = time.Now().Add(1500 * time.Millisecond)
	expiring := newPKI(t, soon)
	expired := startTLSBroker(t, expiring, nil)
	login := client.Options{User: itAdminUser, Password: itAdminPass}
	with := func(o client.TLSOptions) client.Options { l := login; l.TLS = &o; return l }
	for _, tc := range []struct {
		name string
		addr string
		opts client.Options
		want string
		code wire.Code // the broker's refusal, when it is one
	}{
		{"untrusted CA", srv.TLSAddr(), with(client.TLSOptions{CAFile: other.caFile}), "the broker's certificate is not signed by a CA this client trusts", 0},
		{"system roots", srv.TLSAddr(), with(client.TLSOptions{}), "not signed by a CA this client trusts", 0},
		{"wrong name", srv.TLSAddr(), with(client.TLSOptions{CAFile: p.caFile, ServerName: "broker.example.com"}), `the broker's certificate is not for "broker.example.com"`, 0},
		{"TLS to the plaintext port", srv.Addr(), with(client.TLSOptions{CAFile: p.caFile}),
			"the broker answered in plaintext, so this is not its TLS port (its tls-addr setting): it said NOT_PROTOCOL: not a LightQ peer: looks like a TLS ClientHello: this is the broker's plaintext port", 0},
		{"plaintext to the TLS port", srv.TLSAddr(), login, "this is the broker's TLS port (tls-addr)", wire.CodeNotProtocol},
		{"no client certificate where one is required", required.TLSAddr(), with(client.TLSOptions{CAFile: p.caFile}),
			"the broker refused the TLS connection, most likely the client certificate", 0},
		{"no CA file", srv.TLSAddr(), with(client.TLSOptions{CAFile: p.dir + "/missing.crt"}), "TLS CA file", 0},
		{"certificate without key", srv.TLSAddr(), with(client.TLSOptions{CAFile: p.caFile, CertFile: p.certFile}), "needs both CertFile and KeyFile", 0},
		{"empty AUTH without a certificate", srv.TLSAddr(), client.Options{TLS: &client.TLSOptions{CAFile: p.caFile}}, "stands for a client certificate", wire.CodeAuthFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tlsDial(t, tc.addr, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Dial: %v\nwant an error saying %q", err, tc.want)
			}
			if tc.code != 0 && !errors.Is(err, &wire.Error{Code: tc.code}) {
				t.Fatalf("Dial: %v, want the broker's %s", err, tc.code)
			}
		})
	}
	t.Run("expired broker certificate", func(t *testing.T) {
		// The certificate's validity is in whole seconds.
		itEventually(t, "the broker's certificate expired", func() bool { return time.Now().After(soon.NotAfter.Add(time.Second)) })
		_, err := tlsDial(t, expired.TLSAddr(), with(client.TLSOptions{CAFile: expiring.caFile}))
		if err == nil || !strings.Contains(err.Error(), "the broker's certificate has expired or is not valid yet") {
			t.Fatalf("Dial: %v", err)
		}
	})
	t.Run("InsecureSkipVerify", func(t *testing.T) {
		c, err := tlsDial(t, srv.TLSAddr(), with(client.TLSOptions{InsecureSkipVerify: true}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Ping(itCtx(t)); err != nil {
			t.Fatal(err)
		}
	})
}
