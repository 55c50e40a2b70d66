package broker

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/lightq/lightq/broker/tlsfront"
	"github.com/lightq/lightq/wire"
)

// This file joins the TLS front (package tlsfront) to the broker: a TLS session's place under
// the connection caps, its enrollment in the event loops, the principal of a verified client
// certificate, and certificate reloads. Through its pipeConn a TLS connection is an ordinary
// connection to the protocol code; only a FETCH response is copied instead of sent with
// sendfile (pumpTransfer), as its bytes must be encrypted.

// tlsPeer is the broker's side of one TLS session, from its admission before the handshake
// to the end of its goroutines. It rides into OnOpen in the gnet context of the enrolled
// socket (gnet.NewContext), where newConn takes the client's address from it.
type tlsPeer struct {
	remote net.Addr
	ip     string // remote's IP, the key of Server.perAddr
	sess   *tlsfront.Session

	// Under Server.connsMu. opened: the connection is registered in Server.conns (between
	// OnOpen and OnClose). done: the session's goroutines ended (Hooks.Release).
	opened, done bool
}

// pipeConn is the gnet.Conn a TLS connection's protocol code sees: gnet's conn for the
// enrolled end of the session's socket pair, whose loop, wake, context and close it keeps,
// with the input and output methods the broker uses served by the session's Pipe instead, in
// memory (tlsfront/pipe.go). The other I/O methods (Next, ReadFrom, WriteTo, AsyncWrite,
// SendTo, ...) would reach the socket pair, which nobody reads: the broker does not call them.
// Every method is the loop's, as gnet's conn methods are.
type pipeConn struct {
	gnet.Conn
	p *tlsfront.Pipe
}

func (pc *pipeConn) InboundBuffered() int           { return pc.p.InboundBuffered() }
func (pc *pipeConn) Peek(n int) ([]byte, error)     { return pc.p.Peek(n) }
func (pc *pipeConn) Discard(n int) (int, error)     { return pc.p.Discard(n), nil }
func (pc *pipeConn) Read(b []byte) (int, error)     { return pc.p.Read(b), nil }
func (pc *pipeConn) Write(b []byte) (int, error)    { return pc.p.Write(b), nil }
func (pc *pipeConn) Writev(b [][]byte) (int, error) { return pc.p.Writev(b), nil }
func (pc *pipeConn) Flush() error                   { return nil }
func (pc *pipeConn) OutboundBuffered() int          { return pc.p.OutboundBuffered() }

// tlsTraffic is OnTraffic for a TLS connection. Its input ends when the client's side of the
// session does (Pipe.InputEnded): the connection then closes once a turn that began after the
// end took what it could, as gnet closes a plaintext connection at EOF after a last
// OnTraffic, dropping input the broker could not take. On the loop.
func (c *conn) tlsTraffic() gnet.Action {
	p := c.tls.sess.Pipe()
	c.wakePending.Store(false) // before looking: an end recorded after this wakes the loop again
	ended := p.InputEnded()
	before := c.gc.InboundBuffered()
	p.BeginTurn()
	act := c.onTraffic()
	if act == gnet.None && !c.closed() {
		act = c.enforceTimeouts()
	}
	p.EndTurn()
	if act != gnet.None || c.closed() || !ended {
		return act
	}
	if left := c.gc.InboundBuffered(); left > 0 && left < before {
		c.wakeNow() // it is still taking input: one more turn
		return gnet.None
	}
	return gnet.Close
}

// tlsInputSlack is what a TLS session's inbox holds beyond the largest frame before the
// session stops reading the client (tlsfront.Config.InputLimit).
const tlsInputSlack = 256 << 10

// tlsDescriptors is what a TLS connection costs in file descriptors: the client's TCP socket,
// the session's end of the socket pair and the end the event loop serves.
const tlsDescriptors = 3

// newTLS loads the certificate files; New calls it so that a bad file stops the broker before
// it listens anywhere.
func (s *Server) newTLS() error {
	t := s.cfg.TLS
	if t.Addr == "" {
		return nil
	}
	settings := tlsfront.Settings{
		Files:      tlsfront.Files{Cert: t.CertFile, Key: t.KeyFile, ClientCA: t.ClientCAFile},
		MinVersion: t.MinVersion,
	}
	if t.ClientCertOptional {
		settings.ClientAuth = tlsfront.ClientCertOptional
	}
	store, err := tlsfront.NewStore(settings)
	if err != nil {
		return err
	}
	s.tlsStore = store
	return nil
}

// startTLS listens on the TLS address once the event loops run (Start).
func (s *Server) startTLS() error {
	if s.tlsStore == nil {
		return nil
	}
	select {
	case <-s.loopsUp:
	case <-s.done:
		return fmt.Errorf("the event loops stopped before the TLS listener started: %w", s.runErr)
	}
	ln, err := tlsfront.Listen(tlsfront.Config{
		Addr:             s.cfg.TLS.Addr,
		HandshakeTimeout: s.cfg.TLS.HandshakeTimeout,
		ReadTimeout:      s.cfg.ReadTimeout,
		Linger:           s.cfg.ShutdownDrain,
		InputLimit:       s.cfg.Limits.MaxFrame + tlsInputSlack,
		Log:              s.log,
	}, s.tlsStore, tlsfront.Hooks{Admit: s.admitTLS, Enroll: s.enrollTLS, Release: s.releaseTLS})
	if err != nil {
		return fmt.Errorf("TLS listen on %s: %w", s.cfg.TLS.Addr, err)
	}
	s.tlsLn = ln
	addr := ln.Addr().String()
	s.tlsAddr.Store(&addr)
	go ln.Serve()
	return nil
}

// OnTick runs once, on gnet's ticker goroutine, when a TLS listener asked for the ticker. gnet
// (v2.9.7, engine_unix.go) calls OnBoot before it registers the event loops with its load
// balancer and starts the ticker after, so the first tick is the earliest moment another
// goroutine may call Engine.Register without racing with that registration. The broker's own
// ticker (runTicker) does the periodic work; this one then sleeps.
func (s *Server) OnTick() (time.Duration, gnet.Action) {
	s.loopsUpOnce.Do(func() { close(s.loopsUp) })
	return 24 * time.Hour, gnet.None
}

// TLSAddr is the address of the TLS listener, or "" when there is none (or before Start).
// Safe for concurrent use.
func (s *Server) TLSAddr() string {
	if a := s.tlsAddr.Load(); a != nil {
		return *a
	}
	return ""
}

// ReloadTLS reads the TLS certificate, key and client CA files again: handshakes from now on
// use them, connections already open keep theirs. When a file cannot be used the current ones
// stay, and the error (also logged) says why. lightq calls it on SIGHUP. Safe for concurrent
// use; an error without a TLS listener.
func (s *Server) ReloadTLS() error {
	if s.tlsStore == nil {
		return fmt.Errorf("no TLS listener (tls-addr) to reload")
	}
	if err := s.tlsStore.Reload(); err != nil {
		s.log.Error().Err(err).Str("serving", tlsfront.Describe(s.tlsStore.Leaf())).
			Msg("TLS reload failed: still serving the previous certificate")
		return err
	}
	s.log.Info().Str("certificate", tlsfront.Describe(s.tlsStore.Leaf())).Msg("TLS certificate reloaded")
	return nil
}

// admitTLS is tlsfront's Hooks.Admit: a connection accepted on the TLS port takes its place
// under the connection caps before its handshake, so that handshakes in progress (and their
// goroutines) count like open connections.
func (s *Server) admitTLS(remote net.Addr) (any, *wire.Error) {
	if s.stopping.Load() {
		return nil, &wire.Error{Code: wire.CodeShuttingDown, Message: "broker is shutting down"}
	}
	p := &tlsPeer{remote: remote, ip: remoteIP(remote)}
	s.connsMu.Lock()
	refusal := s.refusal(p.ip, tlsDescriptors)
	if refusal == "" {
		s.tlsSessions++
		s.tlsPending++
		s.perAddr[p.ip]++
	}
	s.connsMu.Unlock()
	if refusal != "" {
		s.logRefusal(s.log.With().Str("remote", remote.String()).Str("listener", "tls").Logger(), refusal)
		return nil, &wire.Error{Code: wire.CodeTooManyConnections, Message: refusal}
	}
	return p, nil
}

// enrollTLS is Hooks.Enroll: it hands the broker's end of the session's socket pair to an
// event loop and waits until OnOpen ran for it.
func (s *Server) enrollTLS(sess *tlsfront.Session, plain net.Conn) error {
	p := sess.Tag.(*tlsPeer)
	p.sess = sess
	ctx := gnet.NewNetConnContext(gnet.NewContext(context.Background(), p), plain)
	ch, err := s.eng.Register(ctx)
	if err != nil {
		return err
	}
	select {
	case res := <-ch:
		return res.Err
	case <-s.done:
		// The loops stopped (shutdown) before this connection was opened on one: gnet's
		// registration may never answer.
		return fmt.Errorf("the event loops stopped")
	}
}

// releaseTLS is Hooks.Release: the session is over; its place under the caps goes unless its
// connection is still registered (OnClose then frees it).
func (s *Server) releaseTLS(sess *tlsfront.Session) {
	p := sess.Tag.(*tlsPeer)
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	p.done = true
	s.tlsSessions--
	if !p.opened {
		s.tlsPending--
		s.dropAddr(p.ip)
	}
}

// openTLS turns the place a TLS session held into its connection's registration. OnOpen;
// caller holds connsMu.
func (s *Server) openTLS(c *conn) {
	c.tls.opened = true
	s.tlsPending--
	s.conns[c] = struct{}{} // the place was counted at admission (perAddr included)
}

// closeTLS is OnClose's part for a TLS connection: while the session's goroutines still run
// (they send what the broker queued, then wait for the client to close), the session keeps
// its place under the caps. Caller holds connsMu.
func (s *Server) closeTLS(c *conn) {
	if !c.tls.opened {
		return
	}
	c.tls.opened = false
	delete(s.conns, c)
	if c.tls.done {
		s.dropAddr(c.tls.ip)
		return
	}
	s.tlsPending++
}

// certLogin makes the user a verified client certificate names the connection's principal,
// or returns the refusal to send when that user does not exist. OnOpen, on the loop.
func (c *conn) certLogin() *wire.Error {
	name := c.tls.sess.User
	if !c.certPrincipal(name) {
		c.log.Info().Str("cert_user", name).Msg("client certificate names an unknown user; closing")
		return &wire.Error{Code: wire.CodeAuthFailed, Message: fmt.Sprintf("the client certificate names user %q, who does not exist on this broker", name)}
	}
	c.log = c.log.With().Str("user", name).Str("auth", "certificate").Logger()
	c.log.Debug().Msg("authenticated by client certificate")
	return nil
}

// handleCertAuth answers an AUTH with an empty user and password, which asks for the
// connection's client certificate to be its principal (again): answered with that user's role,
// or AUTH_FAILED on a connection no certificate authenticated. It reports false for any other
// AUTH, which handleAuth takes. On the loop.
func (c *conn) handleCertAuth(corr uint32, body []byte) bool {
	var m wire.Auth
	if m.Decode(body) != nil || m.User != "" || m.Password != "" || !c.helloDone {
		return false
	}
	if c.tls == nil || c.tls.sess.User == "" {
		c.sendError(corr, wire.CodeAuthFailed, "an AUTH with an empty user stands for a client certificate, and this connection has none (the broker's TLS port with tls-client-ca verifies them)")
		return true
	}
	name := c.tls.sess.User
	if !c.certPrincipal(name) {
		c.sendError(corr, wire.CodeAuthFailed, fmt.Sprintf("the client certificate names user %q, who does not exist on this broker", name))
		return true
	}
	role := wire.RoleUser
	if a := c.account(); a != nil && a.admin {
		role = wire.RoleAdmin
	}
	resp := wire.AuthResponse{Role: role}
	c.respond(wire.OpAuth, corr, resp.AppendTo)
	return true
}

// certPrincipal makes the user name the connection's principal, as a password login does
// (loggedIn), or clears the principal and reports false when no such user exists. A
// DELETE_USER racing it either sees the connection (recheckUser) or has published the table
// the second look-up reads. On the loop.
func (c *conn) certPrincipal(name string) bool {
	a := c.srv.lookupUser(name)
	if a == nil {
		c.setPrincipal(nil)
		return false
	}
	c.setPrincipal(&principal{user: a.name, incarnation: a.incarnation})
	if cur := c.srv.lookupUser(a.name); cur == nil || cur.incarnation != a.incarnation {
		c.setPrincipal(nil)
		return false
	}
	return true
}

// shutdownTLS stops the TLS listener after the event loops closed every connection: sessions
// get the linger time to deliver the broker's last frames, then are cut.
func (s *Server) shutdownTLS() {
	if s.tlsLn != nil {
		s.tlsLn.Close(s.cfg.ShutdownDrain + time.Second)
	}
}

// remoteIP is the IP of a TCP address as text ("" for other addresses).
func remoteIP(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	return ""
}
