// Package certgen makes throwaway certificate authorities and certificates (ECDSA P-256,
// short-lived) for tests and benchmarks: the TLS tests generate theirs at run time, and
// `make compare` generates the one certificate both brokers serve. Nothing it makes is meant
// for production. Safe for concurrent use.
package certgen

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority that issues leaf certificates.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     *ecdsa.PrivateKey
}

// NewCA makes a self-signed CA named name, valid from a minute ago for validFor.
func NewCA(name string, validFor time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"LightQ test CA"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, CertPEM: pemBlock("CERTIFICATE", der), key: key}, nil
}

// Leaf describes a certificate to issue.
type Leaf struct {
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	URIs       []string // e.g. "lightq:user:alice"
	// NotBefore and NotAfter default to a minute ago and an hour from now.
	NotBefore, NotAfter time.Time
	// Client makes it a client certificate (ExtKeyUsageClientAuth); otherwise it is a server
	// certificate.
	Client bool
}

// ServerLeaf is a server certificate for localhost and 127.0.0.1, valid for validFor.
func ServerLeaf(validFor time.Duration) Leaf {
	return Leaf{CommonName: "localhost", DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		NotAfter: time.Now().Add(validFor)}
}

// Issue signs a certificate for l and returns it and its new private key, PEM-encoded.
func (ca *CA) Issue(l Leaf) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	if l.NotBefore.IsZero() {
		l.NotBefore = now.Add(-time.Minute)
	}
	if l.NotAfter.IsZero() {
		l.NotAfter = now.Add(time.Hour)
	}
	usage := x509.ExtKeyUsageServerAuth
	if l.Client {
		usage = x509.ExtKeyUsageClientAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: l.CommonName},
		DNSNames:     l.DNSNames,
		IPAddresses:  l.IPs,
		NotBefore:    l.NotBefore,
		NotAfter:     l.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	for _, s := range l.URIs {
		u, err := url.Parse(s)
		if err != nil {
			return nil, nil, fmt.Errorf("URI SAN %q: %w", s, err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", keyDER), nil
}

// WriteFiles issues a certificate for l and writes it and its key to dir/name.crt and
// dir/name.key (mode 0600), returning the two paths.
func (ca *CA) WriteFiles(dir, name string, l Leaf) (certFile, keyFile string, err error) {
	certPEM, keyPEM, err := ca.Issue(l)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// WriteCA writes the CA certificate to dir/name.crt and returns the path.
func (ca *CA) WriteCA(dir, name string) (string, error) {
	path := filepath.Join(dir, name+".crt")
	return path, os.WriteFile(path, ca.CertPEM, 0o600)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
