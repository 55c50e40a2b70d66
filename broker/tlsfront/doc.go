// Package tlsfront is the broker's TLS port: it accepts TCP connections, runs the TLS
// handshake with crypto/tls, and carries each established connection's plaintext to and from
// the broker's event loop in memory, through the session's Pipe (pipe.go). gnet has no TLS,
// and Go's crypto/tls needs a blocking net.Conn; the broker enrolls one end of a socket pair
// per session, which gives the connection its place in a loop (its wake and its close) and
// carries no bytes, and serves the Pipe as that connection's input and output, so the event
// loops and the protocol code are the ones plaintext clients get (docs/DESIGN.md, "TLS", has
// the design and its measurements).
//
// One connection is one Session and two goroutines: the session's own (handshake, then "up":
// client to broker) and "down" (broker to client). Up takes a pooled buffer only once its
// socket has input (pool.go), so an idle session holds only crypto/tls's own state; it
// decrypts every whole record that arrived together and appends them to the Pipe's inbox at
// once; down takes the outbox a chunk at a time, encrypts it and sends its records with one
// write (rawconn.go).
//
// Bounds. Hooks.Admit gives each accepted connection its place under the broker's caps before
// its handshake, so handshakes in progress count. A handshake must end within
// Config.HandshakeTimeout; a TLS record whose first byte arrived must be complete within
// Config.ReadTimeout (records are followed on the raw stream, records.go); the broker's own
// read, auth and idle timeouts judge the plaintext inside. A Pipe's inbox holds at most
// Config.InputLimit: past it up stops reading, and the client waits on TCP. Once the broker
// closes its end,
// the session sends what the broker queued and ends within Config.Linger. Refusals get a
// handshake and an ERROR frame from at most refusalSlots goroutines at a time.
//
// Certificates. A Store holds the certificate, key and client CA and swaps them at once on
// Reload; handshakes take the current ones (tls.Config.GetConfigForClient). A verified client
// certificate names a user (UserOf).
//
// Concurrency: a Listener's methods and Session.BrokerClosed are safe for concurrent use; the
// Hooks are called from session goroutines, concurrently; a Pipe's loop side belongs to the
// connection's event loop (see Pipe).
package tlsfront
