package lqcat

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/lightq/lightq/client"
)

// tlsSettings are kcat's (librdkafka's) TLS client properties, given with -X.
type tlsSettings struct {
	protocol          string // security.protocol, lower case; "" = plaintext
	caFile            string // ssl.ca.location
	certFile, keyFile string // ssl.certificate.location, ssl.key.location
	noVerify          bool   // enable.ssl.certificate.verification=false
	verifySet         bool
	serverName        string // ssl.endpoint.identification.name (LightQ's own key: the name to check)
}

// tlsOptions are the -X keys of tlsSettings, merged into clientOptions.
var tlsOptions = map[string]clientOption{
	"security.protocol": {"plaintext or ssl (sasl_plaintext and sasl_ssl are the same: LightQ logs in with --user/--password either way)", func(c *common, v string) error {
		p := strings.ToLower(v)
		switch p {
		case "plaintext", "ssl", "sasl_plaintext", "sasl_ssl":
		default:
			return fmt.Errorf("%q: want plaintext or ssl", v)
		}
		return setOnce(&c.tls.protocol, p, "security.protocol")
	}},
	"ssl.ca.location":          {"PEM CA certificates that verify the broker", func(c *common, v string) error { return setOnce(&c.tls.caFile, v, "ssl.ca.location") }},
	"ssl.certificate.location": {"PEM client certificate (it can stand for --user/--password)", func(c *common, v string) error { return setOnce(&c.tls.certFile, v, "ssl.certificate.location") }},
	"ssl.key.location":         {"PEM key of ssl.certificate.location", func(c *common, v string) error { return setOnce(&c.tls.keyFile, v, "ssl.key.location") }},
	"ssl.endpoint.identification.name": {"the name the broker's certificate must carry (default: the host of -b)", func(c *common, v string) error {
		return setOnce(&c.tls.serverName, v, "ssl.endpoint.identification.name")
	}},
	"enable.ssl.certificate.verification": {"false accepts any broker certificate (tests only)", func(c *common, v string) error {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q: want true or false", v)
		}
		if c.tls.verifySet && c.tls.noVerify == on {
			return fmt.Errorf("given twice with different values")
		}
		c.tls.noVerify, c.tls.verifySet = !on, true
		return nil
	}},
}

func init() {
	for k, o := range tlsOptions {
		clientOptions[k] = o
	}
}

// ssl reports whether the connection is to use TLS.
func (t *tlsSettings) ssl() bool { return strings.HasSuffix(t.protocol, "ssl") }

// check refuses ssl.* properties without security.protocol=ssl: they would be ignored, and a
// command meant to be encrypted would run in clear.
func (t *tlsSettings) check() error {
	if t.ssl() {
		if (t.certFile == "") != (t.keyFile == "") {
			return usageErr("-X ssl.certificate.location and ssl.key.location go together")
		}
		return nil
	}
	for k, set := range map[string]bool{"ssl.ca.location": t.caFile != "", "ssl.certificate.location": t.certFile != "",
		"ssl.key.location": t.keyFile != "", "enable.ssl.certificate.verification": t.verifySet, "ssl.endpoint.identification.name": t.serverName != ""} {
		if set {
			return usageErr("-X %s needs -X security.protocol=ssl (the broker's TLS port)", k)
		}
	}
	return nil
}

// options are the client's TLS options, nil for plaintext.
func (t *tlsSettings) options() *client.TLSOptions {
	if !t.ssl() {
		return nil
	}
	return &client.TLSOptions{CAFile: t.caFile, CertFile: t.certFile, KeyFile: t.keyFile, ServerName: t.serverName, InsecureSkipVerify: t.noVerify}
}

// certAuth reports whether a client certificate may stand for the credentials.
func (t *tlsSettings) certAuth() bool { return t.ssl() && t.certFile != "" }
