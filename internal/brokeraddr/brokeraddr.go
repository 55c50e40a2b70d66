// Package brokeraddr completes a broker address given on a command line: "localhost" means
// "localhost:7450", the broker's default port, as kcat's -b adds Kafka's, and so does each
// address of a comma-separated list (a cluster's brokers). lqcat and lqbench use it; the Go
// client does not, so a program's address is always what it says.
//
// Its functions are safe for concurrent use.
package brokeraddr

import (
	"net"
	"strings"
)

// ListWithDefaultPort is WithDefaultPort applied to each address of a comma-separated list
// (spaces around the commas dropped), as the Go client's Dial takes a cluster's seeds.
func ListWithDefaultPort(list string) string {
	if !strings.Contains(list, ",") {
		return WithDefaultPort(strings.TrimSpace(list))
	}
	parts := strings.Split(list, ",")
	for i, a := range parts {
		parts[i] = WithDefaultPort(strings.TrimSpace(a))
	}
	return strings.Join(parts, ",")
}

// DefaultPort is the port lightq listens on unless told otherwise (its default addr).
const DefaultPort = "7450"

// WithDefaultPort returns addr with DefaultPort added when it names only a host: a name, an
// IPv4 address, a bracketed IPv6 address ("[::1]") or a bare one ("::1"). An address with a
// port, and anything it cannot read, is returned as it is, so the dial reports the problem.
func WithDefaultPort(addr string) string {
	if addr == "" {
		return addr
	}
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	host := addr
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	} else if strings.ContainsAny(host, "[]") || (strings.Count(host, ":") == 1) {
		return addr // "host:" or a malformed bracket: leave it to the dial's error
	}
	return net.JoinHostPort(host, DefaultPort)
}
