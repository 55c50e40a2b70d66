package tlsfront

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// ClientAuth says what the listener asks of client certificates when a client CA is set.
type ClientAuth int

const (
	// ClientCertRequire refuses a handshake without a client certificate the client CA
	// verifies. The default when a client CA is set.
	ClientCertRequire ClientAuth = iota
	// ClientCertOptional verifies a client certificate when one is sent and lets a client
	// without one connect (it then logs in with AUTH).
	ClientCertOptional
)

// Files names the PEM files a listener loads, and reloads on Store.Reload.
type Files struct {
	Cert, Key string // the server certificate (chain) and its private key; both required
	ClientCA  string // CA certificates that verify client certificates; "" asks for none
}

// Settings configure the TLS side of a listener.
type Settings struct {
	Files
	// MinVersion is tls.VersionTLS13 (the default when zero) or tls.VersionTLS12.
	MinVersion uint16
	ClientAuth ClientAuth // used only with Files.ClientCA
}

// material is one loaded generation of the files: a complete server configuration.
type material struct {
	config *tls.Config
	leaf   *x509.Certificate
}

// Store holds the listener's certificate, key and client CA, and swaps all three at once on
// Reload. Safe for concurrent use: handshakes read the current generation with one atomic
// load (tls.Config.GetConfigForClient), so a reload never waits for them nor they for it, and
// connections already established keep the keys they negotiated.
type Store struct {
	settings Settings
	cur      atomic.Pointer[material]
	now      func() time.Time
}

// NewStore validates the settings and loads the files; it fails, naming the file and the
// reason, when a file cannot be read or parsed, the key does not match the certificate, or the
// certificate is not valid now.
func NewStore(s Settings) (*Store, error) {
	switch s.MinVersion {
	case 0:
		s.MinVersion = tls.VersionTLS13
	case tls.VersionTLS12, tls.VersionTLS13:
	default:
		return nil, fmt.Errorf("TLS minimum version %#04x: want TLS 1.2 or 1.3", s.MinVersion)
	}
	if s.Cert == "" || s.Key == "" {
		return nil, errors.New("a TLS listener needs a certificate and a key file")
	}
	if s.ClientAuth != ClientCertRequire && s.ClientAuth != ClientCertOptional {
		return nil, fmt.Errorf("client auth %d: want require or optional", s.ClientAuth)
	}
	st := &Store{settings: s, now: time.Now}
	m, err := st.load()
	if err != nil {
		return nil, err
	}
	st.cur.Store(m)
	return st, nil
}

// Reload reads the files again. On success the next handshakes use the new generation; on
// failure the current one stays in use and the error says why. Safe for concurrent use.
func (st *Store) Reload() error {
	m, err := st.load()
	if err != nil {
		return err
	}
	st.cur.Store(m)
	return nil
}

// Leaf is the certificate handshakes present now.
func (st *Store) Leaf() *x509.Certificate { return st.cur.Load().leaf }

// Settings returns the settings the store was made with (MinVersion filled in).
func (st *Store) Settings() Settings { return st.settings }

// ServerConfig is the configuration a listener hands crypto/tls: every handshake takes the
// store's current generation.
func (st *Store) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: st.settings.MinVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return st.cur.Load().config, nil
		},
	}
}

func (st *Store) load() (*material, error) {
	s := st.settings
	pair, err := tls.LoadX509KeyPair(s.Cert, s.Key)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s and key %s: %w", s.Cert, s.Key, err)
	}
	leaf := pair.Leaf // filled in by LoadX509KeyPair since Go 1.23
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("TLS certificate %s: %w", s.Cert, err)
		}
	}
	if err := validNow(leaf, st.now()); err != nil {
		return nil, fmt.Errorf("TLS certificate %s: %w", s.Cert, err)
	}
	cfg := &tls.Config{
		MinVersion:   s.MinVersion,
		MaxVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{pair},
	}
	if s.ClientCA != "" {
		pool, err := loadPool(s.ClientCA)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		if s.ClientAuth == ClientCertOptional {
			cfg.ClientAuth = tls.VerifyClientCertIfGiven
		}
	}
	return &material{config: cfg, leaf: leaf}, nil
}

// validNow says why a certificate cannot be served at now, if it cannot.
func validNow(c *x509.Certificate, now time.Time) error {
	switch {
	case now.Before(c.NotBefore):
		return fmt.Errorf("not valid before %s (now %s)", c.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	case now.After(c.NotAfter):
		return fmt.Errorf("expired at %s (now %s)", c.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return nil
}

// loadPool reads a PEM file of CA certificates; a file with none is an error, not an empty
// pool that would refuse every client.
func loadPool(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("TLS client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("TLS client CA %s: no PEM certificate in it", path)
	}
	return pool, nil
}

// Describe is a short description of a certificate for logs: subject, DNS names and IPs,
// expiry.
func Describe(c *x509.Certificate) string {
	var b strings.Builder
	fmt.Fprintf(&b, "subject %q", c.Subject.String())
	if len(c.DNSNames) > 0 {
		fmt.Fprintf(&b, ", DNS %s", strings.Join(c.DNSNames, ","))
	}
	for i, ip := range c.IPAddresses {
		if i == 0 {
			b.WriteString(", IP ")
		} else {
			b.WriteString(",")
		}
		b.WriteString(ip.String())
	}
	fmt.Fprintf(&b, ", expires %s", c.NotAfter.UTC().Format(time.RFC3339))
	return b.String()
}
