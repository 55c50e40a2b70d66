package tlsfront

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"strings"
	"testing"
)

func certWith(cn string, uris ...string) *x509.Certificate {
	c := &x509.Certificate{Subject: pkix.Name{CommonName: cn}}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			panic(err)
		}
		c.URIs = append(c.URIs, u)
	}
	return c
}

func TestUserOf(t *testing.T) {
	for _, tc := range []struct {
		name, cn string
		uris     []string
		user     string
		err      string
	}{
		{name: "common name", cn: "alice", user: "alice"},
		{name: "URI wins", cn: "alice.example.com", uris: []string{"lightq:user:alice"}, user: "alice"},
		{name: "first lightq URI", uris: []string{"spiffe://x/y", "lightq:user:bob", "lightq:user:carol"}, user: "bob"},
		{name: "scheme in capitals", uris: []string{"LIGHTQ:user:dave"}, user: "dave"},
		{name: "other lightq URI is not a user", cn: "erin", uris: []string{"lightq:topic:x"}, user: "erin"},
		{name: "user with colons", uris: []string{"lightq:user:a:b"}, user: "a:b"},
		{name: "nothing", err: "names no user"},
		{name: "empty URI user", cn: "frank", uris: []string{"lightq:user:"}, err: "URI SAN lightq:user:"},
		{name: "long name", cn: strings.Repeat("x", 256), err: "1-255 bytes"},
		{name: "control character", cn: "a\x01b", err: "control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			user, err := UserOf(certWith(tc.cn, tc.uris...))
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("got %q, %v; want an error saying %q", user, err, tc.err)
			case tc.err == "" && (err != nil || user != tc.user):
				t.Fatalf("got %q, %v; want %q", user, err, tc.user)
			}
		})
	}
}

// FuzzUserOf: any Common Name and URI give a valid user name or an error, never a name an
// AUTH could not carry.
func FuzzUserOf(f *testing.F) {
	f.Add("alice", "lightq:user:bob")
	f.Add("", "lightq:user:")
	f.Add("x", "mailto:x@y")
	f.Fuzz(func(t *testing.T, cn, uri string) {
		c := &x509.Certificate{Subject: pkix.Name{CommonName: cn}}
		if u, err := url.Parse(uri); err == nil {
			c.URIs = []*url.URL{u}
		}
		user, err := UserOf(c)
		if err == nil && (user == "" || len(user) > 255) {
			t.Fatalf("user %q accepted", user)
		}
	})
}
