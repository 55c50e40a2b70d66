package tlsfront

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Buffer sizes of a session's two pumps, pooled (pool.go). Up (client to broker): the
// plaintext of the records that arrived together, passed to the broker's inbox at once (pipe.go).
// Down (broker to client): what the broker queued, encrypted downRead bytes at a time into
// records of 16 KiB, each downRead's records sent with one write.
const (
	upBufferSize   = 64 << 10
	downBufferSize = 128 << 10
	maxRecordPlain = 16 << 10 // the most plaintext one TLS record carries (RFC 8446 5.1)
	// downRead is how much down encrypts at once: its records, with their headers and tags,
	// then fit a coalescing buffer of downBufferSize.
	downRead = downBufferSize - 4<<10
)

// pairBuffer is the socket buffer size of each end of a session's socket pair. The pair
// carries no plaintext (the Pipe does), only the connection's life: small buffers do.
const pairBuffer = 4 << 10

// Session is one TLS connection: its handshake, then two pumps between the tls.Conn and the
// broker's event loop, through a Pipe; the broker enrolls one end of a socket pair to give the
// connection a place in its loops (see the package doc). Its exported fields are set before
// the broker sees it (Hooks.Enroll) and not changed after.
type Session struct {
	Remote net.Addr // the client's TCP address
	Tag    any      // what Hooks.Admit returned for it
	// User is the user a verified client certificate names (UserOf), "" without one.
	User string
	// Version and CipherSuite are what the handshake negotiated (crypto/tls constants).
	Version, CipherSuite uint16

	l     *Listener
	raw   *rawConn
	tc    *tls.Conn
	pipe  *Pipe
	plain net.Conn // the session's end of the socket pair; the broker enrolled the other end

	brokerGone atomic.Bool // the broker closed its end (BrokerClosed)
}

// Pipe is the session's plaintext, for the broker's loop: see Pipe for who may call what.
func (s *Session) Pipe() *Pipe { return s.pipe }

// BrokerClosed tells the session that the broker closed the connection: what the broker
// queued before is still sent, and the TLS connection is closed within the linger time even
// if the client reads nothing and sends nothing. Safe from any goroutine; idempotent.
func (s *Session) BrokerClosed() {
	if s.brokerGone.CompareAndSwap(false, true) {
		s.pipe.close()
		s.raw.linger(time.Now().Add(s.l.cfg.Linger))
	}
}

// pump runs the established session until both directions are done. It returns why it ended.
func (s *Session) pump() string {
	downDone := make(chan string, 1)
	go func() { downDone <- s.down() }()
	why := s.up()
	// The client's side is done (or the linger time after the broker's close is over): the
	// broker takes what arrived and closes the connection (Pipe.InputEnded), after which down
	// sends what it queued, within the linger time.
	s.pipe.endInput()
	if d := <-downDone; d != "" && why == "" {
		why = d
	}
	_ = s.plain.Close()
	_ = s.tc.Close()
	return why
}

// up copies the client's plaintext to the broker until the client's side ends. It takes a
// buffer only once input arrived, and decrypts every whole record that arrived with it before
// it passes them on (reads with raw.noBlock end with errWouldBlock when crypto/tls needs
// bytes that have not arrived). Once the broker has closed its end it keeps reading and
// discarding, so that the connection is not reset with input unread (which would drop the
// broker's last answers), until the client closes or the linger time runs out.
func (s *Session) up() string {
	for {
		buf := getBuf(upBufferSize)
		n := 0
		var err error
		for err == nil && len(*buf)-n >= maxRecordPlain {
			s.raw.noBlock = true
			var m int
			m, err = s.tc.Read((*buf)[n:])
			s.raw.noBlock = false
			n += m
			if errors.Is(err, errWouldBlock) {
				err = nil
				break
			}
		}
		if n == 0 && err == nil {
			// Nothing decrypted, nothing buffered: wait for the socket holding no buffer.
			putBuf(buf)
			if err := s.raw.fill(); err != nil {
				return s.readEnded(err)
			}
			continue
		}
		s.raw.pause()
		if n > 0 {
			s.pipe.push((*buf)[:n]) // waits while the broker has a frame's worth unread
		}
		putBuf(buf)
		if err != nil {
			return s.readEnded(err)
		}
	}
}

// readEnded says why reading from the client stopped; "" is the normal end (the client closed,
// or the broker closed first and the linger ran out).
func (s *Session) readEnded(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF):
		return ""
	case s.brokerGone.Load():
		return "" // the linger deadline, or the client reset a connection the broker closed
	case errors.As(err, &ne) && ne.Timeout() && s.raw.midRecord():
		return fmt.Sprintf("TLS record not complete after %s (read timeout)", s.l.cfg.ReadTimeout)
	case errors.Is(err, net.ErrClosed):
		return "" // the listener closed it at shutdown
	}
	return "read: " + err.Error()
}

// down sends what the broker writes to the client: it takes the broker's output a chunk of
// up to downRead bytes at a time (Pipe.take), encrypts it and sends its records with one
// write. Once the broker closed and everything is sent, it sends TLS close_notify and
// shuts down the TCP write side; up then waits for the client to close. A failed write
// closes the TCP connection, so that up ends too.
func (s *Session) down() string {
	for {
		buf, n := s.pipe.take()
		if buf == nil {
			_ = s.tc.CloseWrite()
			return ""
		}
		s.raw.coalesce(n)
		_, werr := s.tc.Write((*buf)[:n])
		if ferr := s.raw.flush(); werr == nil {
			werr = ferr
		}
		s.pipe.sent(n)
		putBuf(buf)
		if werr != nil {
			_ = s.raw.Close()
			// up may be waiting in push for room the loop will not make (it stops reading
			// while its output is at the high-water mark, and nothing drains that now): let it
			// go, so that it reads the closed socket and ends the input, which tells the loop.
			s.pipe.close()
			if s.brokerGone.Load() || errors.Is(werr, net.ErrClosed) {
				return "" // the linger ran out, or up closed the connection
			}
			return "write: " + werr.Error()
		}
	}
}

// socketPair returns two connected stream sockets: the broker enrolls the first in its event
// loops, the session pumps the second.
func socketPair() (broker, session net.Conn, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	for _, fd := range fds {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, pairBuffer)
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, pairBuffer)
	}
	conns := make([]net.Conn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "lightq-tls-pair")
		c, err := net.FileConn(f) // dups the descriptor
		f.Close()
		if err != nil {
			if i == 0 {
				unix.Close(fds[1])
			} else {
				conns[0].Close()
			}
			return nil, nil, fmt.Errorf("socketpair: %w", err)
		}
		conns[i] = c
	}
	return conns[0], conns[1], nil
}
