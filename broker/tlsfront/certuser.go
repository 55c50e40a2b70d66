package tlsfront

import (
	"crypto/x509"
	"fmt"
	"net/url"
	"strings"

	"github.com/lightq/lightq/wire"
)

// UserURIPrefix starts the URI SAN that names a certificate's LightQ user: lightq:user:NAME.
const UserURIPrefix = "lightq:user:"

// UserOf is the LightQ user a verified client certificate stands for: NAME from its first URI
// subject alternative name lightq:user:NAME, else its subject's Common Name. The URI wins so
// that a CA whose certificates carry host names or people's names as CN can still say which
// broker user each one is. It fails when the certificate names no user, or one that no AUTH
// could name (wire.ValidUserName).
func UserOf(c *x509.Certificate) (string, error) {
	for _, u := range c.URIs {
		if name, ok := userFromURI(u); ok {
			return checkUser(name, "URI SAN "+u.String())
		}
	}
	if c.Subject.CommonName == "" {
		return "", fmt.Errorf("client certificate %q names no user: no %sNAME URI SAN and no Common Name", c.Subject.String(), UserURIPrefix)
	}
	return checkUser(c.Subject.CommonName, "Common Name")
}

// userFromURI reads lightq:user:NAME. (url.URL keeps an opaque URI's text after the scheme in
// Opaque, so lightq:user:alice is scheme "lightq", opaque "user:alice".)
func userFromURI(u *url.URL) (string, bool) {
	if !strings.EqualFold(u.Scheme, "lightq") || u.Opaque == "" {
		return "", false
	}
	name, ok := strings.CutPrefix(u.Opaque, "user:")
	return name, ok
}

func checkUser(name, from string) (string, error) {
	if err := wire.ValidUserName(name); err != nil {
		return "", fmt.Errorf("client certificate's %s: %w", from, err)
	}
	return name, nil
}
