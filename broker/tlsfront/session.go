package tlsfront

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Buffer sizes of a session's two pumps, pooled (pool.go). Up (client to broker): the
// plaintext of the records that arrived together, passed to the broker with one write.
// Down (broker to client): one read of what the broker queued, encrypted into records of 16
// KiB and sent with one write.
const (
	upBufferSize   = 64 << 10
	downBufferSize = 128 << 10
	maxRecordPlain = 16 << 10 // the most plaintext one TLS record carries (RFC 8446 5.1)
	// downRead is how much down reads at once: its records, with their headers and tags,
	// then fit a coalescing buffer of downBufferSize too.
	downRead = downBufferSize - 4<<10
)

// pairBuffer is the socket buffer size of each end of a session's socket pair, as the TCP
// sockets of the plaintext port (gnet.WithSocketSendBuffer in broker/server.go).
const pairBuffer = 1 << 20

// Session is one TLS connection: its handshake, then two pumps between the tls.Conn and the
// socket the broker enrolled (see the package doc). Its exported fields are set before the
// broker sees it (Hooks.Enroll) and not changed after.
type Session struct {
	Remote net.Addr // the client's TCP address
	Tag    any      // what Hooks.Admit returned for it
	// User is the user a verified client certificate names (UserOf), "" without one.
	User string
	// Version and CipherSuite are what the handshake negotiated (crypto/tls constants).
	Version, CipherSuite uint16

	l       *Listener
	raw     *rawConn
	tc      *tls.Conn
	plain   net.Conn // the session's end of the socket pair; the broker enrolled the other end
	plainRC syscall.RawConn
	// down's read of plain: the callback, made once, and its results (down's goroutine only).
	plainFn  func(fd uintptr) bool
	plainBuf *[]byte
	plainN   int
	plainErr error

	brokerGone atomic.Bool // the broker closed its end (BrokerClosed, or EOF on plain)
}

// BrokerClosed tells the session that the broker closed its end of the socket pair: what the
// broker queued before is still sent, and the TLS connection is closed within the linger time
// even if the client reads nothing and sends nothing. Safe from any goroutine; idempotent.
func (s *Session) BrokerClosed() {
	if s.brokerGone.CompareAndSwap(false, true) {
		s.raw.linger(time.Now().Add(s.l.cfg.Linger))
	}
}

// pump runs the established session until both directions are done. It returns why it ended.
func (s *Session) pump() string {
	downDone := make(chan string, 1)
	go func() { downDone <- s.down() }()
	why := s.up()
	// The client's side is done (or the linger time after the broker's close is over): the
	// broker sees EOF, and whatever down was sending is cut.
	_ = s.plain.Close()
	_ = s.tc.Close()
	if d := <-downDone; d != "" && why == "" {
		why = d
	}
	return why
}

// up copies the client's plaintext to the broker until the client's side ends. It takes a
// buffer only once input arrived, and decrypts every whole record that arrived with it before
// it writes to the broker (reads with raw.noBlock end with errWouldBlock when crypto/tls
// needs bytes that have not arrived). Once the broker has closed its end it keeps reading and
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
		if n > 0 && !s.brokerGone.Load() {
			if _, werr := s.plain.Write((*buf)[:n]); werr != nil {
				s.BrokerClosed()
			}
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

// down copies what the broker writes to the client: a pooled buffer taken once the broker's
// output is there, one tls.Conn.Write of it, its records sent with one write. At the broker's
// EOF it sends TLS close_notify and shuts down the TCP write side; up then waits for the client
// to close.
func (s *Session) down() string {
	for {
		buf, n, err := s.readPlain()
		if n > 0 {
			s.raw.coalesce(n)
			_, werr := s.tc.Write((*buf)[:n])
			if ferr := s.raw.flush(); werr == nil {
				werr = ferr
			}
			putBuf(buf)
			if werr != nil {
				if s.brokerGone.Load() || errors.Is(werr, net.ErrClosed) {
					return "" // the linger ran out, or up closed the connection
				}
				return "write: " + werr.Error()
			}
			continue
		}
		if errors.Is(err, io.EOF) {
			s.BrokerClosed()
			_ = s.tc.CloseWrite()
		}
		return ""
	}
}

// readPlain waits for the broker's output and reads it into a pooled buffer taken only once
// there is some. It returns n > 0 with a buffer to put back, or an error (io.EOF: the broker
// closed its end).
func (s *Session) readPlain() (*[]byte, int, error) {
	if s.plainFn == nil {
		s.plainFn = s.readPlainSocket
	}
	err := s.plainRC.Read(s.plainFn)
	buf, n, rerr := s.plainBuf, s.plainN, s.plainErr
	s.plainBuf, s.plainErr = nil, nil
	if err == nil && rerr == nil && n > 0 {
		return buf, n, nil
	}
	if buf != nil {
		putBuf(buf)
	}
	switch {
	case err != nil:
		return nil, 0, err
	case rerr != nil:
		return nil, 0, rerr
	}
	return nil, 0, io.EOF
}

// readPlainSocket is readPlain's syscall.RawConn.Read callback.
func (s *Session) readPlainSocket(fd uintptr) bool {
	if s.plainBuf == nil {
		s.plainBuf = getBuf(downBufferSize)
	}
	for {
		s.plainN, s.plainErr = unix.Read(int(fd), (*s.plainBuf)[:downRead])
		if s.plainErr != unix.EINTR {
			break
		}
	}
	if s.plainErr == unix.EAGAIN {
		putBuf(s.plainBuf)
		s.plainBuf = nil
		return false
	}
	return true
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
