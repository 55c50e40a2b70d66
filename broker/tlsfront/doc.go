// Package tlsfront is the broker's TLS port: it accepts TCP connections, runs the TLS
// handshake with crypto/tls, and bridges each established connection's plaintext to one end of
// a socket pair whose other end the broker serves in its event loops like any plaintext
// connection. gnet has no TLS, and Go's crypto/tls needs a blocking net.Conn; bridging keeps
// the event loops, the protocol code and the sendfile path exactly as they are for plaintext
// clients (docs/DESIGN.md, "TLS", has the design and its measurements).
//
// One connection is one Session and two goroutines: the session's own (handshake, then "up":
// client to broker) and "down" (broker to client). Each pump takes a pooled buffer only once
// its socket has input (pool.go), so an idle session holds only crypto/tls's own state; up
// decrypts every whole record that arrived together and writes them to the broker at once;
// down encrypts one read of the broker's output and sends its records with one write
// (rawconn.go).
//
// Bounds. Hooks.Admit gives each accepted connection its place under the broker's caps before
// its handshake, so handshakes in progress count. A handshake must end within
// Config.HandshakeTimeout; a TLS record whose first byte arrived must be complete within
// Config.ReadTimeout (records are followed on the raw stream, records.go); the broker's own
// read, auth and idle timeouts judge the plaintext inside. Once the broker closes its end,
// the session sends what the broker queued and ends within Config.Linger. Refusals get a
// handshake and an ERROR frame from at most refusalSlots goroutines at a time.
//
// Certificates. A Store holds the certificate, key and client CA and swaps them at once on
// Reload; handshakes take the current ones (tls.Config.GetConfigForClient). A verified client
// certificate names a user (UserOf).
//
// Concurrency: a Listener's methods and Session.BrokerClosed are safe for concurrent use; the
// Hooks are called from session goroutines, concurrently.
package tlsfront
