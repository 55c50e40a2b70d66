package tlsfront

import (
	"errors"
	"net"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// rawConn is the TCP connection under a session's tls.Conn. It does three things crypto/tls
// cannot be asked to do:
//
//   - It reads the socket into a pooled buffer (none while the socket is idle) and, while
//     noBlock is set, answers a Read it cannot serve from that buffer with errWouldBlock
//     instead of waiting. The session uses that to decrypt every record that already
//     arrived before it writes to the broker: one write for many records instead of one
//     each.
//   - It follows the record boundaries (recordTracker) and, once the handshake is done,
//     bounds how long one record may take to arrive: the TLS form of the broker's read
//     timeout, under which a started frame must be complete.
//   - While coalescing, it gathers the records one tls.Conn.Write makes and sends them with
//     one write(2) (flush).
//
// Read, fill, pause and the reading state belong to the session's reading goroutine
// (crypto/tls reads under its input lock). Writes come from either goroutine, serialised by
// crypto/tls's output lock; the coalescing buffer is guarded by wmu. The read deadline is set
// under mu, by Read and by linger, so that the linger deadline always wins.
type rawConn struct {
	net.Conn
	sc          syscall.RawConn
	readTimeout time.Duration

	rbuf         *[]byte // pooled; nil while nothing is buffered
	rpos, rend   int
	readFn       func(fd uintptr) bool // fill's callback, made once: a closure per read would allocate
	readN        int                   // readFn's result
	readErr      error
	noBlock      bool // Read returns errWouldBlock instead of waiting for the socket
	track        recordTracker
	timed        bool      // the handshake is done: records are timed
	partialSince time.Time // when the wait for the rest of the current record began; zero: none
	first        []byte    // the first bytes crypto/tls read: what a non-TLS client sent

	wmu        sync.Mutex
	coalescing bool
	wbuf       []byte  // the writes gathered while coalescing, in wbufPool's buffer
	wbufPool   *[]byte // pooled while coalescing

	mu        sync.Mutex
	lingering bool      // the broker side closed: the linger deadline stands
	deadline  time.Time // the read deadline Read set last
}

// errWouldBlock is what Read returns with noBlock set when nothing is buffered. It is a
// temporary net.Error, which crypto/tls returns without making it the connection's error.
var errWouldBlock error = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "tlsfront: no buffered input" }
func (wouldBlock) Timeout() bool   { return true }
func (wouldBlock) Temporary() bool { return true }

// keepFirst is how many of the first bytes rawConn keeps: a LightQ header and then some.
const keepFirst = 64

// readBufferSize is the size of rawConn's socket reads: several records.
const readBufferSize = 64 << 10

func newRawConn(nc net.Conn, readTimeout time.Duration) (*rawConn, error) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil, errors.New("tlsfront: not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	r := &rawConn{Conn: nc, sc: rc, readTimeout: readTimeout}
	r.readFn = r.readSocket
	return r, nil
}

func (r *rawConn) Read(p []byte) (int, error) {
	if r.rpos == r.rend {
		if r.noBlock {
			return 0, errWouldBlock
		}
		if err := r.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, (*r.rbuf)[r.rpos:r.rend])
	if len(r.first) < keepFirst {
		r.first = append(r.first, p[:min(n, keepFirst-len(r.first))]...)
	}
	r.rpos += n
	if r.track.feed(p[:n]) > 0 {
		r.partialSince = time.Time{} // the record ended: its clock stops
	}
	if r.rpos == r.rend {
		putBuf(r.rbuf)
		r.rbuf, r.rpos, r.rend = nil, 0, 0
	}
	return n, nil
}

// fill waits for input and reads what the socket holds into a pooled buffer, taken only once
// the socket is readable. It applies the record deadline (armDeadline).
func (r *rawConn) fill() error {
	if r.timed {
		r.armDeadline()
	}
	err := r.sc.Read(r.readFn)
	n, rerr := r.readN, r.readErr
	r.readErr = nil
	switch {
	case err == nil && rerr == nil && n > 0:
		r.rpos, r.rend = 0, n
		return nil
	case r.rbuf != nil:
		putBuf(r.rbuf)
		r.rbuf = nil
	}
	switch {
	case err != nil:
		return err // a deadline, or the connection closed
	case rerr != nil:
		return &net.OpError{Op: "read", Net: "tcp", Source: r.LocalAddr(), Addr: r.RemoteAddr(), Err: rerr}
	}
	return errEOF
}

// readSocket is fill's syscall.RawConn.Read callback: it reads the socket into a pooled
// buffer, or, when the socket has nothing, gives the buffer back and asks to wait.
func (r *rawConn) readSocket(fd uintptr) bool {
	if r.rbuf == nil {
		r.rbuf = getBuf(readBufferSize)
	}
	for {
		r.readN, r.readErr = unix.Read(int(fd), *r.rbuf)
		if r.readErr != unix.EINTR {
			break
		}
	}
	if r.readErr == unix.EAGAIN {
		putBuf(r.rbuf)
		r.rbuf = nil
		return false // wait until the socket is readable, holding no buffer
	}
	return true
}

// armDeadline sets the read deadline of the wait about to start: the current record's start
// plus the read timeout when the stream stopped inside a record, none when it stopped between
// records (then the broker's idle and auth timeouts judge the connection).
func (r *rawConn) armDeadline() {
	var want time.Time
	if r.track.midRecord() {
		if r.partialSince.IsZero() {
			r.partialSince = time.Now()
		}
		want = r.partialSince.Add(r.readTimeout)
	}
	if want.Equal(r.deadline) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lingering {
		return
	}
	r.deadline = want
	_ = r.Conn.SetReadDeadline(want)
}

// pause stops the record clock: the session stops reading to hand the broker what it got,
// which may wait on the broker (a paused connection, unread answers). The clock starts again
// at the next wait, as the broker's own read timeout does not count its own waits.
func (r *rawConn) pause() { r.partialSince = time.Time{} }

// midRecord reports whether the client stopped inside a TLS record.
func (r *rawConn) midRecord() bool { return r.track.midRecord() }

// head is what the client sent first, for telling what it is when it does not speak TLS.
func (r *rawConn) head() []byte {
	h := append([]byte(nil), r.first...)
	if r.rbuf != nil {
		h = append(h, (*r.rbuf)[r.rpos:r.rend]...)
	}
	return h
}

func (r *rawConn) Write(p []byte) (int, error) {
	r.wmu.Lock()
	if r.coalescing {
		r.wbuf = append(r.wbuf, p...)
		r.wmu.Unlock()
		return len(p), nil
	}
	r.wmu.Unlock()
	return r.Conn.Write(p)
}

// coalesce starts gathering writes (sized for a tls.Conn.Write of n bytes); flush sends them.
func (r *rawConn) coalesce(n int) {
	r.wmu.Lock()
	r.coalescing = true
	if r.wbufPool == nil {
		r.wbufPool = getBuf(n + (n/16384+1)*64) // room for the records' headers and tags
		r.wbuf = (*r.wbufPool)[:0]
	}
	r.wmu.Unlock()
}

// flush writes what was gathered since coalesce with one write (Go's Write loops until all
// is written or the deadline passes) and stops gathering.
func (r *rawConn) flush() error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	r.coalescing = false
	if r.wbufPool == nil {
		return nil
	}
	var err error
	if len(r.wbuf) > 0 {
		_, err = r.Conn.Write(r.wbuf)
	}
	if cap(r.wbuf) == cap(*r.wbufPool) { // else append outgrew it: leave it to the GC
		putBuf(r.wbufPool)
	}
	r.wbuf, r.wbufPool = nil, nil
	return err
}

// linger bounds what is left of the connection once the broker closed its side: reads and
// writes end by until. Safe from any goroutine.
func (r *rawConn) linger(until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lingering {
		return
	}
	r.lingering = true
	_ = r.Conn.SetDeadline(until)
}

// release returns the read buffer to the pool when the connection is done.
func (r *rawConn) release() {
	if r.rbuf != nil {
		putBuf(r.rbuf)
		r.rbuf = nil
	}
}
