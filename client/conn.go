package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lightq/lightq/wire"
)

// Version is the client version sent in HELLO.
const Version = "0.1.0"

// Errors of the client itself. Errors reported by the broker are *wire.Error values; test them
// with errors.Is(err, &wire.Error{Code: wire.CodeX}) or errors.As. A produced message that
// fails gets a *ProduceError, which also says whether it may have been stored (errors.go).
var (
	// ErrClosed is returned by operations on a Conn, Producer or Subscription that was closed
	// by its owner, and given to requests and callbacks still pending at that moment.
	ErrClosed = errors.New("lightq: closed")
	// ErrConnectionLost wraps the cause when a connection breaks: an I/O error, a broker error
	// that closes the connection (also wrapped, so errors.Is finds its code) or a protocol
	// violation. Requests that were waiting for an answer fail with it, and subscriptions end
	// with it; the Conn reconnects by itself, so the request may be sent again (a Producer
	// re-sends its batches itself). Conn.Err wraps it too once the Conn has given up.
	ErrConnectionLost = errors.New("lightq: connection lost")
	// ErrProtocol marks a broker answer the client cannot make sense of. The connection is
	// closed after it, because the byte stream can no longer be trusted.
	ErrProtocol = errors.New("lightq: protocol violation")
)

// Options configure a connection. The zero value connects without a client name and uses the
// defaults listed on each field.
type Options struct {
	// User and Password log in with AUTH. Leave both empty on a TLS connection whose client
	// certificate the broker verifies: the certificate names the user (TLSOptions).
	User, Password string
	ClientName     string

	// TLS, when not nil, speaks TLS to the broker's TLS port (its tls-addr setting). Nil
	// speaks plaintext, fit for loopback only: passwords and messages cross the network in
	// clear.
	TLS *TLSOptions

	// DialTimeout bounds the TCP connect plus the HELLO and AUTH exchange, of Dial (when its
	// context has no earlier deadline) and of every reconnect attempt. Default 5s.
	DialTimeout time.Duration
	// RequestTimeout bounds a request whose context has no deadline, and every socket write.
	// Default 30s.
	RequestTimeout time.Duration

	// Buffer sizes of the socket reader and writer. Default 64 KiB each.
	WriteBufferSize, ReadBufferSize int

	// KeepAlive is how long the connection may send nothing before the client sends a PING,
	// so that the broker's idle timeout (PROTOCOL.md 4.6; 10 minutes by default) does not
	// close a connection the application still holds, such as a producer between bursts.
	// A PING goes out at most 2 x KeepAlive after the last frame, so keep it under half the
	// broker's idle timeout. Default 1 minute; negative: never.
	KeepAlive time.Duration

	// Logger receives events that no caller is waiting for (an ERROR frame nobody can be
	// given, a DELIVER for an unknown subscription, a lost connection and each reconnect
	// attempt). Nil logs nothing.
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 30 * time.Second
	}
	if o.KeepAlive == 0 {
		o.KeepAlive = time.Minute
	}
	if o.WriteBufferSize <= 0 {
		o.WriteBufferSize = 64 << 10
	}
	if o.ReadBufferSize <= 0 {
		o.ReadBufferSize = 64 << 10
	}
}

// Conn is a connection to a broker that reconnects by itself. All its methods are safe for
// concurrent use; requests from several goroutines are pipelined on the one socket and matched
// to their answers by correlation id.
//
// When the socket breaks (the broker restarts, is killed, shuts down, or the network fails),
// the requests waiting for an answer fail with an error wrapping ErrConnectionLost and
// subscriptions end with it; the Conn then dials again with backoff (50 ms doubling to 2 s,
// with jitter) and logs in again, until it succeeds or is closed. Requests made meanwhile
// wait for the new connection (bounded by their context, or RequestTimeout); Producers re-send
// what was not acknowledged, and consumers resume at their positions. The Conn gives up only
// when the broker refuses the credentials on a reconnect (AUTH_FAILED): Done is closed and Err
// says why.
type Conn struct {
	opts Options
	open func(context.Context) (net.Conn, error) // dials a new socket (Dial: TCP to the address)

	corr atomic.Uint32

	// ctx ends at Close or when the Conn gives up: it cancels a reconnect in progress.
	ctx    context.Context
	cancel context.CancelFunc

	// wmu guards the writer: whoever holds it writes whole frames to wl through bw.
	wmu sync.Mutex
	wl  *link // the connection bw writes to
	bw  *bufio.Writer
	// writes counts the frames written (under wmu), so keepAlive can tell an idle connection.
	writes uint64
	whdr   [wire.HeaderSize]byte

	// mu guards everything below and the fields of each link marked "guarded by Conn.mu".
	mu      sync.Mutex
	cur     *link         // the working connection; nil while reconnecting and at the end
	lastErr error         // why the last connection, or the last reconnect attempt, failed
	err     error         // terminal: set once, by Close or a refused login on a reconnect
	up      chan struct{} // closed when cur is set again or at the end; replaced at each loss
	limits  wire.Limits
	role    wire.Role
	broker  string
	// watchers are told about each failed reconnect attempt (DialConsumer reports them).
	watchers  map[int]func(err error, retryIn time.Duration)
	nextWatch int

	done chan struct{}  // closed with err
	bg   sync.WaitGroup // readers, the reconnector, the keep-alive

	coord coordinators // where consumer-group requests go (coordinator.go)
}

// Dial connects to the broker at addr, sends HELLO and AUTH, and returns the ready connection.
// A refusal by the broker is returned as the *wire.Error it sent, for example
// errors.Is(err, &wire.Error{Code: wire.CodeAuthFailed}) for a wrong password. Dial itself
// does not retry a failed connect: the Conn reconnects only once it has been connected.
func Dial(ctx context.Context, addr string, opts Options) (*Conn, error) {
	if opts.TLS != nil {
		return dial(ctx, opts, func(ctx context.Context) (net.Conn, error) { return dialTLS(ctx, addr, opts.TLS) })
	}
	return dial(ctx, opts, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("lightq: dial %s: %w", addr, err)
		}
		return nc, nil
	})
}

// dial makes a Conn whose sockets open makes, and connects it. Tests open in-memory pipes
// with it instead of TCP connections.
func dial(ctx context.Context, opts Options, open func(context.Context) (net.Conn, error)) (*Conn, error) {
	opts.setDefaults()
	c := &Conn{
		opts: opts, open: open, limits: wire.DefaultLimits(),
		bw: bufio.NewWriterSize(nil, opts.WriteBufferSize),
		up: make(chan struct{}), done: make(chan struct{}),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	l, err := c.connect(ctx)
	if err != nil {
		c.terminate(ErrClosed)
		return nil, err
	}
	if !c.install(l) {
		c.terminate(ErrClosed)
		return nil, lost(l.cause())
	}
	if opts.KeepAlive > 0 {
		c.bg.Add(1)
		go c.keepAlive(opts.KeepAlive)
	}
	return c, nil
}

// keepAlive sends a PING whenever a whole interval passed without a frame written, until the
// Conn ends. A PING that fails needs no handling here: a broken socket fails its connection,
// which every caller sees, and the Conn reconnects.
func (c *Conn) keepAlive(every time.Duration) {
	defer c.bg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	last := uint64(0)
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		c.wmu.Lock()
		n := c.writes
		c.wmu.Unlock()
		if ok, _ := c.Connected(); n == last && ok {
			ctx, cancel := context.WithTimeout(c.ctx, c.opts.RequestTimeout)
			_, _ = c.Ping(ctx)
			cancel()
			c.wmu.Lock()
			n = c.writes
			c.wmu.Unlock()
		}
		last = n
	}
}

// Limits returns the limits the broker announced in its HELLO response (the latest one, after
// a reconnect).
func (c *Conn) Limits() wire.Limits {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.limits
}

// Role returns the role the broker granted at AUTH.
func (c *Conn) Role() wire.Role {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.role
}

// BrokerVersion returns the version string the broker sent in its HELLO response.
func (c *Conn) BrokerVersion() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.broker
}

// Done is closed when the Conn is closed or has given up reconnecting; Err then tells why. A
// connection that breaks and is being reconnected does not close it (see Connected).
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns nil while the Conn works or reconnects, ErrClosed after Close, and an error
// wrapping ErrConnectionLost and the broker's refusal once a reconnect was refused for good.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Connected reports whether the Conn has a working connection now. While it reconnects it
// returns false and why the last connection or reconnect attempt failed.
func (c *Conn) Connected() (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return false, c.err
	}
	return c.cur != nil, c.lastErr
}

// Close closes the connection and stops reconnecting. Pending requests, producer callbacks
// and subscriptions fail with ErrClosed. It is idempotent and safe to call from any goroutine,
// including producer callbacks; it waits for the client's goroutines of this Conn to exit.
func (c *Conn) Close() error {
	c.terminate(ErrClosed)
	c.bg.Wait()
	c.coord.close()
	return nil
}

// terminate makes err the Conn's terminal error (the first call wins), stops reconnecting and
// fails the current connection with it.
func (c *Conn) terminate(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	l := c.cur
	c.cur = nil
	close(c.done)
	select {
	case <-c.up:
	default:
		close(c.up) // whoever waits for a connection sees the end
	}
	c.mu.Unlock()
	c.cancel()
	if l != nil {
		c.failLink(l, err)
	}
}

// lost wraps a cause of connection failure.
func lost(cause error) error { return fmt.Errorf("%w: %w", ErrConnectionLost, cause) }

// nextCorr returns a fresh correlation id; 0 is reserved for connection-level errors.
func (c *Conn) nextCorr() uint32 {
	for {
		if id := c.corr.Add(1); id != 0 {
			return id
		}
	}
}

// current returns the working connection, or nil while reconnecting, with the channel closed
// when that changes (a new connection, or the end) and the terminal error.
func (c *Conn) current() (*link, <-chan struct{}, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur, c.up, c.err
}

// awaitLink returns the working connection, waiting for a reconnect in progress until ctx
// ends.
func (c *Conn) awaitLink(ctx context.Context) (*link, error) {
	for {
		l, up, err := c.current()
		if err != nil {
			return nil, err
		}
		if l != nil {
			return l, nil
		}
		select {
		case <-up:
		case <-ctx.Done():
			_, last := c.Connected()
			if last == nil {
				return nil, fmt.Errorf("lightq: reconnecting: %w", ctx.Err())
			}
			return nil, fmt.Errorf("lightq: reconnecting (%v): %w", last, ctx.Err())
		}
	}
}

// beginWrite locks the writer for connection l and arms the write deadline. It fails, without
// the lock, when l has failed or is no longer the one written to. The caller writes whole
// frames to c.bw and then calls endWrite.
func (c *Conn) beginWrite(l *link) error {
	c.wmu.Lock()
	c.mu.Lock()
	err := l.err
	switch {
	case err != nil:
	case l.werr != nil:
		err = lost(l.werr)
	case c.wl != l:
		err = lost(errReplaced)
	}
	c.mu.Unlock()
	if err != nil {
		c.wmu.Unlock()
		return err
	}
	_ = l.nc.SetWriteDeadline(time.Now().Add(c.opts.RequestTimeout))
	return nil
}

// errReplaced: a write meant for a connection that a reconnect has replaced.
var errReplaced = errors.New("connection replaced by a reconnect")

// flushMode says whether endWrite pushes the buffered frames to the socket.
type flushMode uint8

const (
	flushNow   flushMode = iota // the frame goes out before endWrite returns
	flushLater                  // it waits in the buffer for a later flush (producer batching)
)

// endWrite flushes (with flushNow) and unlocks the writer. A write error breaks connection l:
// a partial frame cannot be taken back.
func (c *Conn) endWrite(l *link, werr error, flush flushMode) error {
	if werr == nil && flush == flushNow {
		werr = c.bw.Flush()
	}
	c.writes++
	c.wmu.Unlock()
	if werr != nil {
		return c.writeFailed(l, werr)
	}
	return nil
}

// writeVectored writes a large frame given in pieces with one writev, after flushing what the
// buffer holds. The caller holds the writer (beginWrite). Writing a large frame through the
// buffer would end it with a small separate segment, which the kernel may hold back until the
// previous one is acknowledged; over loopback that costs a delayed-ACK timeout per frame.
func (c *Conn) writeVectored(v *net.Buffers) error {
	if c.bw.Buffered() > 0 {
		if err := c.bw.Flush(); err != nil {
			return err
		}
	}
	_, err := v.WriteTo(c.wl.nc)
	return err
}

// writeFrame writes one frame on connection l and flushes it.
func (c *Conn) writeFrame(l *link, op wire.Op, corr uint32, body []byte) error {
	if err := c.beginWrite(l); err != nil {
		return err
	}
	wire.PutHeader(c.whdr[:], op, 0, corr, len(body))
	_, err := c.bw.Write(c.whdr[:])
	if err == nil {
		_, err = c.bw.Write(body)
	}
	return c.endWrite(l, err, flushNow)
}

// watch registers f to be told about every failed reconnect attempt, with the wait before
// the next one, on the reconnecting goroutine: f must not block nor close the Conn (Close
// waits for that goroutine). It returns the function that unregisters f.
func (c *Conn) watch(f func(err error, retryIn time.Duration)) func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watchers == nil {
		c.watchers = make(map[int]func(error, time.Duration))
	}
	id := c.nextWatch
	c.nextWatch++
	c.watchers[id] = f
	return func() {
		c.mu.Lock()
		delete(c.watchers, id)
		c.mu.Unlock()
	}
}

func (c *Conn) log(msg string, args ...any) {
	if c.opts.Logger != nil {
		c.opts.Logger.Warn("lightq: "+msg, args...)
	}
}
