package tlsfront

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/lightq/lightq/wire"
)

// Config configures a Listener.
type Config struct {
	Addr string // host:port; port 0 picks a free one (see Listener.Addr)
	// HandshakeTimeout bounds a TLS handshake from accept(2) to its end.
	HandshakeTimeout time.Duration
	// ReadTimeout bounds the arrival of one TLS record once its first byte came (the
	// broker's read-timeout); time between records is the broker's to judge.
	ReadTimeout time.Duration
	// Linger bounds a session after the broker closed its side: its last output is sent and
	// the client given the chance to close first within it.
	Linger time.Duration
	// InputLimit is how much of a session's plaintext input may wait for the broker (its
	// Pipe's inbox) before the session stops reading the client: at least the largest frame.
	InputLimit int
	Log        zerolog.Logger
}

// Hooks connect a Listener to the broker. Each is called from the session's goroutine.
type Hooks struct {
	// Admit is asked about each accepted connection before its handshake. "" admits it: it
	// then holds a place under the broker's connection caps until Release, whatever happens.
	// Otherwise the client is sent the refusal as an ERROR frame after a handshake, or, when
	// too many refusals are being told already, the connection is closed at once.
	Admit func(remote net.Addr) (tag any, refusal *wire.Error)
	// Enroll hands the broker its end of an established session's socket pair and returns
	// once the broker opened it, or why it could not. The pair carries no bytes: the
	// plaintext goes through s.Pipe(), which the broker must Attach in its OnOpen, and the
	// broker tells the session of its close with s.BrokerClosed.
	Enroll func(s *Session, broker net.Conn) error
	// Release is called once for every admitted connection when its session is over.
	Release func(s *Session)
}

// refusalSlots bounds the handshakes done only to tell a client that it is refused (its
// goroutines are not under the broker's caps); past it refused connections are closed at once.
const refusalSlots = 16

// refusalTimeout bounds such a handshake.
const refusalTimeout = 2 * time.Second

// Listener accepts TLS connections and runs a Session for each.
type Listener struct {
	cfg     Config
	store   *Store
	hooks   Hooks
	ln      net.Listener
	tlsConf *tls.Config
	logs    logLimiter

	refusing chan struct{} // semaphore of refusalSlots

	mu     sync.Mutex
	closed bool
	live   map[*Session]struct{}
	wg     sync.WaitGroup // the accept loop and every connection's goroutine; Add under mu, never once closed
}

// Listen binds cfg.Addr. Serve accepts on it.
func Listen(cfg Config, store *Store, hooks Hooks) (*Listener, error) {
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, err
	}
	l := &Listener{
		cfg: cfg, store: store, hooks: hooks, ln: ln,
		tlsConf:  store.ServerConfig(),
		refusing: make(chan struct{}, refusalSlots),
		live:     map[*Session]struct{}{},
		logs:     logLimiter{burst: 20, every: time.Second},
	}
	l.wg.Add(1) // Serve's
	return l, nil
}

// Addr is the address the listener got.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Serve accepts connections until Close, each in a goroutine of its own. Call it once, after
// Listen: Close waits for it to return.
func (l *Listener) Serve() {
	defer l.wg.Done()
	var delay time.Duration
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and the like: back off as net/http does, instead of spinning.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			l.cfg.Log.Error().Err(err).Dur("retry_in", delay).Msg("TLS listener: accept failed")
			time.Sleep(delay)
			continue
		}
		delay = 0
		l.accepted(nc)
	}
}

// accepted admits or refuses a new connection and starts its goroutine.
func (l *Listener) accepted(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		// As the plaintext listener's sockets (broker/server.go).
		_ = tc.SetReadBuffer(1 << 20)
		_ = tc.SetWriteBuffer(1 << 20)
	}
	tag, refusal := l.hooks.Admit(nc.RemoteAddr())
	if refusal != nil {
		select {
		case l.refusing <- struct{}{}:
			if !l.track() {
				<-l.refusing
				nc.Close()
				return
			}
			go func() {
				defer l.wg.Done()
				defer func() { <-l.refusing }()
				l.refuse(nc, refusal)
			}()
		default:
			nc.Close()
		}
		return
	}
	s := &Session{Remote: nc.RemoteAddr(), Tag: tag, l: l, pipe: newPipe(l.cfg.InputLimit)}
	raw, err := newRawConn(nc, l.cfg.ReadTimeout)
	if err != nil {
		nc.Close()
		l.hooks.Release(s)
		return
	}
	s.raw = raw
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		nc.Close()
		l.hooks.Release(s)
		return
	}
	l.live[s] = struct{}{}
	l.wg.Add(1)
	l.mu.Unlock()
	go l.serve(s)
}

// track counts one more goroutine in wg unless the listener is closed.
func (l *Listener) track() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.wg.Add(1)
	return true
}

// serve runs one session from handshake to close.
func (l *Listener) serve(s *Session) {
	defer l.wg.Done()
	defer func() {
		s.raw.release()
		l.mu.Lock()
		delete(l.live, s)
		l.mu.Unlock()
		l.hooks.Release(s)
	}()
	log := l.cfg.Log.With().Str("remote", s.Remote.String()).Str("listener", "tls").Logger()
	if err := l.handshake(s); err != nil {
		s.raw.Close()
		if l.logs.allow() {
			log.Info().Str("reason", err.Error()).Int64("unlogged", l.logs.unlogged()).Msg("TLS handshake failed")
		}
		return
	}
	brokerEnd, plain, err := socketPair()
	if err == nil {
		s.plain = plain
		err = l.hooks.Enroll(s, brokerEnd)
		if err != nil {
			plain.Close()
		}
		brokerEnd.Close() // the broker has its own copy of the descriptor (or none)
	}
	if err != nil {
		log.Warn().Err(err).Msg("TLS connection could not be handed to the event loops; closing it")
		s.tc.Close()
		return
	}
	ev := log.Debug().Str("tls_version", tls.VersionName(s.Version)).Str("cipher_suite", tls.CipherSuiteName(s.CipherSuite))
	if s.User != "" {
		ev = ev.Str("cert_user", s.User)
	}
	ev.Msg("TLS connection established")
	why := s.pump()
	if why != "" {
		log.Info().Str("reason", why).Msg("TLS connection closed")
		return
	}
	log.Debug().Msg("TLS connection closed")
}

// handshake runs the server handshake within the handshake timeout and maps a verified client
// certificate to its user. Its errors are meant for the broker's log.
func (l *Listener) handshake(s *Session) error {
	deadline := time.Now().Add(l.cfg.HandshakeTimeout)
	_ = s.raw.SetDeadline(deadline)
	s.tc = tls.Server(s.raw, l.tlsConf)
	err := s.tc.Handshake()
	if err != nil {
		return l.explain(s, err, deadline)
	}
	st := s.tc.ConnectionState()
	s.Version, s.CipherSuite = st.Version, st.CipherSuite
	if len(st.VerifiedChains) > 0 {
		user, err := UserOf(st.PeerCertificates[0])
		if err != nil {
			tellAndClose(s.tc, &wire.Error{Code: wire.CodeAuthFailed, Message: err.Error()})
			return err
		}
		s.User = user
	}
	_ = s.raw.SetDeadline(time.Time{})
	s.raw.timed = true
	return nil
}

// explain turns a failed handshake into what the log says. A client that spoke plaintext
// LightQ to this port is answered with a LightQ ERROR frame, in plaintext, that says so.
func (l *Listener) explain(s *Session, err error, deadline time.Time) error {
	var rh tls.RecordHeaderError
	switch {
	case errors.As(err, &rh):
		head := s.raw.head()
		if len(head) < wire.HeaderSize {
			// The client may have sent its header in pieces: read the rest of it.
			_ = s.raw.SetReadDeadline(time.Now().Add(time.Second))
			more := make([]byte, wire.HeaderSize-len(head))
			n, _ := io.ReadFull(s.raw.Conn, more)
			head = append(head, more[:n]...)
		}
		if size, err := wire.FrameSize(head, math.MaxInt32); err == nil && size > 0 {
			msg := "this is the broker's TLS port (tls-addr): connect with TLS, or connect plaintext clients to its plaintext port (addr)"
			frame := wire.AppendFrame(nil, wire.OpError, 0, 0, (&wire.ErrorBody{Code: wire.CodeNotProtocol, Message: msg}).AppendTo(nil))
			_ = s.raw.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = s.raw.Conn.Write(frame)
			return errors.New("the client spoke plaintext LightQ to the TLS port; answered NOT_PROTOCOL")
		}
		return fmt.Errorf("not a TLS client: %s", wire.DescribePeer(head))
	case time.Now().After(deadline):
		return fmt.Errorf("not complete within %s (handshake timeout): %w", l.cfg.HandshakeTimeout, err)
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" && !strings.Contains(op.Err.Error(), "protocol version") {
		err = fmt.Errorf("%w (the client refused the broker's certificate: it does not trust the CA that signed it, or the name it dialled is not in it)", err)
	}
	if leaf := l.store.Leaf(); time.Now().After(leaf.NotAfter) {
		return fmt.Errorf("%w (the certificate this listener serves expired at %s: renew it and send SIGHUP)", err, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return err
}

// refuse tells a client it is refused: a handshake, then one ERROR frame, then a close.
func (l *Listener) refuse(nc net.Conn, refusal *wire.Error) {
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(min(refusalTimeout, l.cfg.HandshakeTimeout)))
	tc := tls.Server(nc, l.tlsConf)
	if err := tc.Handshake(); err != nil {
		return
	}
	tellAndClose(tc, refusal)
}

// tellAndClose sends one ERROR frame (corr id 0) on an established TLS connection, shuts its
// write side and reads what the client still sends for a moment, so that the frame is not
// lost to a reset; the caller closes the connection.
func tellAndClose(tc *tls.Conn, e *wire.Error) {
	frame := wire.AppendFrame(nil, wire.OpError, 0, 0, (&wire.ErrorBody{Code: e.Code, Message: e.Message}).AppendTo(nil))
	_ = tc.SetDeadline(time.Now().Add(refusalTimeout))
	if _, err := tc.Write(frame); err == nil {
		_ = tc.CloseWrite()
		_, _ = io.Copy(io.Discard, io.LimitReader(tc, 64<<10))
	}
}

// Close stops accepting, gives the sessions up to grace to end by themselves (the broker has
// closed its ends by then, so each is lingering), then closes those left and waits for every
// goroutine of the listener. Safe to call more than once.
func (l *Listener) Close(grace time.Duration) {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	_ = l.ln.Close()
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	l.mu.Lock()
	for s := range l.live {
		_ = s.raw.Close()
		s.pipe.close() // down stops waiting for output
		if s.plain != nil {
			_ = s.plain.Close()
		}
	}
	l.mu.Unlock()
	<-done
}

// logLimiter lets through a burst of log lines, then one per interval, and counts the rest,
// so that a flood of failed handshakes cannot flood the log. Safe for concurrent use.
type logLimiter struct {
	burst   int
	every   time.Duration
	mu      sync.Mutex
	tokens  float64
	last    time.Time
	dropped int64
}

func (ll *logLimiter) allow() bool {
	ll.mu.Lock()
	defer ll.mu.Unlock()
	now := time.Now()
	if ll.last.IsZero() {
		ll.tokens = float64(ll.burst)
	} else {
		ll.tokens = min(float64(ll.burst), ll.tokens+float64(now.Sub(ll.last))/float64(ll.every))
	}
	ll.last = now
	if ll.tokens < 1 {
		ll.dropped++
		return false
	}
	ll.tokens--
	return true
}

// unlogged returns and resets the count of lines not let through.
func (ll *logLimiter) unlogged() int64 {
	ll.mu.Lock()
	defer ll.mu.Unlock()
	n := ll.dropped
	ll.dropped = 0
	return n
}
