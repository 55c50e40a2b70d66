package tlsfront

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"math/rand"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lightq/lightq/internal/certgen"
	"github.com/lightq/lightq/wire"
)

// echoFront is a Listener whose "broker" echoes every byte back, or hands the session's
// plaintext to a test's function.
type echoFront struct {
	l        *Listener
	pool     *x509.CertPool
	mu       sync.Mutex
	admitted int
	released int
}

// loopConn plays the broker's event loop for one session: Read, Write and Close over the
// session's Pipe, called from one goroutine as the loop would call them.
type loopConn struct {
	s     *Session
	wakes chan struct{}
}

const testHighWater = 1 << 20

func newLoopConn(s *Session) *loopConn {
	c := &loopConn{s: s, wakes: make(chan struct{}, 1)}
	s.Pipe().Attach(func() { signal(c.wakes) }, testHighWater)
	return c
}

// Read waits for input and takes what is pending; io.EOF once the client's side ended.
func (c *loopConn) Read(b []byte) (int, error) {
	p := c.s.Pipe()
	for {
		if n := p.Read(b); n > 0 {
			return n, nil
		}
		if p.InputEnded() && p.InboundBuffered() == 0 {
			return 0, io.EOF
		}
		<-c.wakes
	}
}

// Write queues b, first waiting while the output is at the high-water mark.
func (c *loopConn) Write(b []byte) (int, error) {
	p := c.s.Pipe()
	for p.OutboundBuffered() >= testHighWater {
		<-c.wakes
	}
	return p.Write(b), nil
}

// Close is the broker closing the connection (OnClose).
func (c *loopConn) Close() error {
	c.s.BrokerClosed()
	return nil
}

func startFront(t testing.TB, serve func(s *Session, broker *loopConn)) *echoFront {
	t.Helper()
	dir := t.TempDir()
	ca, err := certgen.NewCA("front test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.WriteFiles(dir, "server", certgen.ServerLeaf(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	store, err := NewStore(Settings{Files: Files{Cert: cert, Key: key}})
	if err != nil {
		t.Fatal(err)
	}
	if serve == nil {
		serve = func(_ *Session, b *loopConn) { _, _ = io.Copy(b, b); b.Close() }
	}
	e := &echoFront{pool: x509.NewCertPool()}
	e.pool.AddCert(ca.Cert)
	e.l, err = Listen(Config{Addr: "127.0.0.1:0", HandshakeTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second, Linger: time.Second, InputLimit: 1 << 20, Log: zerolog.Nop()}, store, Hooks{
		Admit: func(net.Addr) (any, *wire.Error) {
			e.mu.Lock()
			e.admitted++
			e.mu.Unlock()
			return nil, nil
		},
		Enroll: func(s *Session, _ net.Conn) error {
			lc := newLoopConn(s) // attached before the session pumps, as in OnOpen
			go serve(s, lc)
			return nil
		},
		Release: func(*Session) {
			e.mu.Lock()
			e.released++
			e.mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	go e.l.Serve()
	t.Cleanup(func() { e.l.Close(time.Second) })
	return e
}

func (e *echoFront) dial(t testing.TB) *tls.Conn {
	t.Helper()
	c, err := tls.Dial("tcp", e.l.Addr().String(), &tls.Config{RootCAs: e.pool, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestSessionCarriesBytesExactly: writes of every size, from one byte to several records,
// come back through the session and an echoing broker in order and unchanged, and the
// session's buffers all go back to the pool.
func TestSessionCarriesBytesExactly(t *testing.T) {
	e := startFront(t, nil)
	c := e.dial(t)
	rng := rand.New(rand.NewSource(1))
	var sent bytes.Buffer
	done := make(chan []byte)
	go func() {
		got, _ := io.ReadAll(io.LimitReader(c, 24<<20))
		done <- got
	}()
	for sent.Len() < 24<<20 {
		n := min(1+rng.Intn(200<<10), 24<<20-sent.Len())
		if rng.Intn(3) == 0 {
			n = 1 + rng.Intn(64)
		}
		p := make([]byte, n)
		rng.Read(p)
		sent.Write(p)
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	got := <-done
	if !bytes.Equal(got, sent.Bytes()) {
		t.Fatalf("echo differs: %d bytes back of %d", len(got), sent.Len())
	}
}

// holdConn passes its first write (the ClientHello) and holds back every later one until
// release: the client's Finished and its first request then reach the broker in one segment.
type holdConn struct {
	net.Conn
	writes int
	held   []byte
}

func (h *holdConn) Write(p []byte) (int, error) {
	if h.writes++; h.writes == 1 {
		return h.Conn.Write(p)
	}
	h.held = append(h.held, p...)
	return len(p), nil
}

func (h *holdConn) release() error {
	_, err := h.Conn.Write(h.held)
	return err
}

// TestSessionRequestWithFinished: a request that arrives together with the client's Finished,
// which crypto/tls reads with the handshake, is passed on at once: the session must not wait
// for more input first.
func TestSessionRequestWithFinished(t *testing.T) {
	e := startFront(t, nil)
	nc, err := net.Dial("tcp", e.l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	h := &holdConn{Conn: nc}
	c := tls.Client(h, &tls.Config{RootCAs: e.pool, ServerName: "localhost"})
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := h.release(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "hello" {
		t.Fatalf("echo %q, %v", got, err)
	}
}

// TestSessionLingersAfterBrokerClose: what the broker writes before it closes reaches the
// client, which then sees EOF; and the session ends even if the client never closes.
func TestSessionLingersAfterBrokerClose(t *testing.T) {
	e := startFront(t, func(_ *Session, b *loopConn) {
		_, _ = b.Write(bytes.Repeat([]byte("bye "), 100_000))
		b.Close()
	})
	c := e.dial(t)
	got, err := io.ReadAll(c)
	if err != nil || len(got) != 400_000 {
		t.Fatalf("read %d bytes, %v; want 400000 then EOF", len(got), err)
	}
	deadline := time.Now().Add(20 * time.Second)
	poll := time.NewTicker(time.Millisecond) // a condition polled until the deadline
	defer poll.Stop()
	for {
		e.mu.Lock()
		done := e.released == e.admitted
		e.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the session did not end within the linger time while its client stayed open")
		}
		<-poll.C
	}
}

// TestSessionEndsWhenClientResetsWhileBlocked: a client that reads nothing while it sends
// more than the inbox holds, to a broker that stops reading (its output at the high-water
// mark), then resets the connection. down's write fails; up, waiting for inbox room the loop
// will not make, must end too, so that the loop learns the input ended and the session ends
// and is released (before the fix it stayed until shutdown).
func TestSessionEndsWhenClientResetsWhileBlocked(t *testing.T) {
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	e := startFront(t, func(s *Session, b *loopConn) {
		p := s.Pipe()
		for !p.InputEnded() { // the loop: write while below the mark, read nothing
			if p.OutboundBuffered() < testHighWater {
				p.Write(chunk)
				continue
			}
			<-b.wakes
		}
		b.Close()
	})
	c := e.dial(t)
	go func() { // more than the inbox's limit; blocks once TCP's buffers are full too
		for i := 0; i < 64; i++ {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	}()
	// Wait until the session holds a full inbox (up waits in push) and a full outbox.
	deadline := time.Now().Add(20 * time.Second)
	poll := time.NewTicker(time.Millisecond) // a condition polled until the deadline
	defer poll.Stop()
	var sess *Session
	for sess == nil {
		e.l.mu.Lock()
		for s := range e.l.live {
			sess = s
		}
		e.l.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("no session")
		}
		<-poll.C
	}
	for sess.Pipe().InboundBuffered() < sess.pipe.inLimit || sess.Pipe().OutboundBuffered() < testHighWater {
		if time.Now().After(deadline) {
			t.Fatalf("inbox %d of %d, outbox %d of %d: not blocked", sess.Pipe().InboundBuffered(), sess.pipe.inLimit, sess.Pipe().OutboundBuffered(), testHighWater)
		}
		<-poll.C
	}
	tcp := c.NetConn().(*net.TCPConn)
	_ = tcp.SetLinger(0)
	_ = tcp.Close() // a reset
	for {
		e.mu.Lock()
		done := e.released == e.admitted
		e.mu.Unlock()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the session did not end after its client reset the connection")
		}
		<-poll.C
	}
}

// BenchmarkTLS measures a client uploading (a producer) and downloading (a consumer) 64 KiB
// writes over TLS: straight from or into a server tls.Conn (direct), and through a Session and
// the Pipe a broker reads and writes (session). The difference is what the bridge costs
// beyond TLS itself.
func BenchmarkTLS(b *testing.B) {
	for _, dir := range []string{"upload", "download"} {
		for _, via := range []string{"direct", "session"} {
			b.Run(dir+"/"+via, func(b *testing.B) { benchTLS(b, dir == "upload", via == "session") })
		}
	}
}

func benchTLS(b *testing.B, upload, viaSession bool) {
	chunk := make([]byte, 64<<10)
	// The server side: drain what the client uploads, or send downloads until the client
	// closes.
	serve := func(c io.ReadWriteCloser) {
		if upload {
			_, _ = io.Copy(io.Discard, c)
		} else {
			for {
				if _, err := c.Write(chunk); err != nil {
					break
				}
			}
		}
		c.Close()
	}
	var addr string
	var pool *x509.CertPool
	if viaSession {
		e := startFront(b, func(_ *Session, c *loopConn) { serve(c) })
		addr, pool = e.l.Addr().String(), e.pool
	} else {
		dir := b.TempDir()
		ca, err := certgen.NewCA("bench CA", time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		cert, key, err := ca.WriteFiles(dir, "server", certgen.ServerLeaf(time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			b.Fatal(err)
		}
		ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS13})
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go serve(c)
			}
		}()
		addr, pool = ln.Addr().String(), x509.NewCertPool()
		pool.AddCert(ca.Cert)
	}
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost"})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var err error
		if upload {
			_, err = c.Write(chunk)
		} else {
			_, err = io.ReadFull(c, chunk)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}
