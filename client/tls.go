package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/lightq/lightq/wire"
)

// TLSOptions connect to the broker's TLS port (its tls-addr setting; PROTOCOL.md section 4)
// instead of the plaintext one. The zero value verifies the broker against the system's root
// CAs and the host name in the address.
type TLSOptions struct {
	// CAFile is a PEM file of the CA certificates that verify the broker's certificate. CAs is
	// the same as a pool. With neither, the system roots verify it.
	CAFile string
	CAs    *x509.CertPool
	// CertFile and KeyFile are a client certificate and its key in PEM (mutual TLS). When the
	// broker verifies it (its tls-client-ca), the certificate authenticates the connection as
	// the user it names: leave Options.User and Password empty and Dial sends no password
	// (PROTOCOL.md 4.2). Certificates is the same, already loaded.
	CertFile, KeyFile string
	Certificates      []tls.Certificate
	// ServerName is the name the broker's certificate must carry. Default: the host of the
	// address given to Dial.
	ServerName string
	// InsecureSkipVerify accepts any broker certificate: anyone on the path can then read and
	// change the traffic. For tests against a broker with a throwaway certificate only.
	InsecureSkipVerify bool
	// MinVersion is the lowest TLS version to accept; default TLS 1.2 (the broker's own
	// minimum, TLS 1.3 unless configured otherwise, decides).
	MinVersion uint16
}

// config builds the crypto/tls configuration for a connection to addr.
func (o *TLSOptions) config(addr string) (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion:         o.MinVersion,
		ServerName:         o.ServerName,
		RootCAs:            o.CAs,
		Certificates:       o.Certificates,
		InsecureSkipVerify: o.InsecureSkipVerify, //nolint:gosec // explicit opt-in, documented
	}
	if cfg.MinVersion == 0 {
		cfg.MinVersion = tls.VersionTLS12
	}
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		cfg.ServerName = host
	}
	if o.CAFile != "" {
		if o.CAs != nil {
			return nil, errors.New("lightq: TLS: give CAFile or CAs, not both")
		}
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("lightq: TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("lightq: TLS CA file %s holds no PEM certificate", o.CAFile)
		}
		cfg.RootCAs = pool
	}
	if o.CertFile != "" || o.KeyFile != "" {
		if o.CertFile == "" || o.KeyFile == "" {
			return nil, errors.New("lightq: TLS: a client certificate needs both CertFile and KeyFile")
		}
		pair, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("lightq: TLS client certificate: %w", err)
		}
		cfg.Certificates = append(cfg.Certificates, pair)
	}
	return cfg, nil
}

// dialTLS opens a TCP connection to addr and runs the TLS handshake on it within ctx.
func dialTLS(ctx context.Context, addr string, o *TLSOptions) (net.Conn, error) {
	cfg, err := o.config(addr)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("lightq: dial %s: %w", addr, err)
	}
	rec := &firstBytes{Conn: nc}
	g := &gatherConn{Conn: rec}
	tc := newTLSConn(g, g, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		nc.Close()
		return nil, explainTLS(addr, err, rec)
	}
	return tc, nil
}

// firstBytes keeps the first bytes read from a connection: when the broker answers a
// ClientHello in plaintext, crypto/tls has already read its frame.
type firstBytes struct {
	net.Conn
	first []byte
}

// keepFirst is how much firstBytes keeps: a NOT_PROTOCOL frame with its message.
const keepFirst = 1024

func (f *firstBytes) Read(p []byte) (int, error) {
	n, err := f.Conn.Read(p)
	if len(f.first) < keepFirst {
		f.first = append(f.first, p[:min(n, keepFirst-len(f.first))]...)
	}
	return n, err
}

// explainTLS says in words what a failed handshake usually means, keeping the cause.
func explainTLS(addr string, err error, rec *firstBytes) error {
	var (
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		hostname x509.HostnameError
		header   tls.RecordHeaderError
	)
	prefix := "lightq: TLS handshake with " + addr
	switch {
	case errors.As(err, &unknown):
		return fmt.Errorf("%s: the broker's certificate is not signed by a CA this client trusts (TLSOptions.CAFile, lqcat -X ssl.ca.location): %w", prefix, err)
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return fmt.Errorf("%s: the broker's certificate has expired or is not valid yet: %w", prefix, err)
	case errors.As(err, &hostname):
		return fmt.Errorf("%s: the broker's certificate is not for %q (TLSOptions.ServerName names the host to check): %w", prefix, hostname.Host, err)
	case errors.As(err, &header):
		if why := plaintextAnswer(rec); why != "" {
			return fmt.Errorf("%s: the broker answered in plaintext, so this is not its TLS port (its tls-addr setting): %s", prefix, why)
		}
		return fmt.Errorf("%s: the peer does not speak TLS: %w", prefix, err)
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

// plaintextAnswer decodes the LightQ frame a plaintext broker port answers a ClientHello with
// (NOT_PROTOCOL) from the first bytes the connection read, and returns its message, or ""
// when they are not LightQ.
func plaintextAnswer(rec *firstBytes) string {
	head := rec.first
	if len(head) < wire.HeaderSize {
		// The rest of the frame may still be on its way.
		_ = rec.SetReadDeadline(time.Now().Add(time.Second))
		more := make([]byte, wire.HeaderSize-len(head))
		n, _ := io.ReadFull(rec.Conn, more)
		head = append(head, more[:n]...)
	}
	size, err := wire.FrameSize(head, keepFirst)
	switch {
	case err != nil || size == 0:
		return ""
	case size > len(head):
		_ = rec.SetReadDeadline(time.Now().Add(time.Second))
		more := make([]byte, size-len(head))
		n, _ := io.ReadFull(rec.Conn, more)
		head = append(head, more[:n]...)
		if len(head) < size {
			return "it sent part of a LightQ frame"
		}
	}
	fh, body, err := wire.ParseFrame(head[:size])
	if err != nil || fh.Op != wire.OpError {
		return "it sent a LightQ frame"
	}
	var eb wire.ErrorBody
	if eb.Decode(body) != nil {
		return "it sent a LightQ ERROR frame"
	}
	return fmt.Sprintf("it said %s: %s", eb.Code, eb.Message)
}

// explainTLSRefusal annotates an error that ended a TLS connection during the handshake's
// first exchange: a TLS alert from the broker after the handshake (in TLS 1.3 the broker
// checks the client certificate only then) is about this client's certificate.
func explainTLSRefusal(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" {
		return fmt.Errorf("lightq: the broker refused the TLS connection, most likely the client certificate (TLSOptions.CertFile: missing, not signed by the broker's tls-client-ca, or expired): %w", err)
	}
	return err
}
