package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lightq/lightq/wire"
)

// Version is the client version sent in HELLO.
const Version = "0.1.0"

// Errors of the client itself. Errors reported by the broker are *wire.Error values; test them
// with errors.Is(err, &wire.Error{Code: wire.CodeX}) or errors.As.
var (
	// ErrClosed is returned by operations on a Conn, Producer or Subscription that was closed
	// by its owner, and given to requests and callbacks still pending at that moment.
	ErrClosed = errors.New("lightq: closed")
	// ErrConnectionLost wraps the cause when the connection breaks: an I/O error, a fatal
	// broker error (also wrapped, so errors.Is finds its code) or a protocol violation.
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

	// DialTimeout bounds the TCP connect plus the HELLO and AUTH exchange when the Dial
	// context has no earlier deadline. Default 5s.
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
	// given, a DELIVER for an unknown subscription). Nil logs nothing.
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

// Conn is one authenticated connection to a broker. All its methods are safe for concurrent
// use; requests from several goroutines are pipelined on the one socket and matched to their
// answers by correlation id.
type Conn struct {
	nc     net.Conn
	opts   Options
	limits wire.Limits
	role   wire.Role
	broker string

	maxFrame atomic.Int64 // limit the reader checks every frame length against
	corr     atomic.Uint32

	// wmu guards the buffered writer; whoever holds it writes whole frames only.
	wmu sync.Mutex
	// writes counts the frames written (under wmu), so keepAlive can tell an idle connection.
	writes uint64
	bw     *bufio.Writer
	whdr   [wire.HeaderSize]byte

	// mu guards everything below.
	mu      sync.Mutex
	err     error // terminal: set once, by fail
	pending map[uint32]pendingEntry
	subs    map[uint32]*Subscription
	oneWay  [oneWaySlots]oneWayEntry
	oneWayN int

	done       chan struct{} // closed by fail, with err set
	readerDone chan struct{}
}

// responder receives the outcome of one request: the response body (valid only during the
// call, which runs on the reader goroutine and must not block) or an error, never both.
type responder interface {
	respond(body []byte, err error)
}

type pendingEntry struct {
	op wire.Op
	r  responder
}

// oneWayOwner is told about an ERROR frame answering a frame that expects no response
// (PRODUCE with AcksNone, CREDIT).
type oneWayOwner interface {
	oneWayError(err *wire.Error)
}

type oneWayEntry struct {
	corr  uint32
	owner oneWayOwner
}

// oneWaySlots is how many recent one-way frames an ERROR can still be attributed to.
const oneWaySlots = 1024

// Dial connects to the broker at addr, sends HELLO and AUTH, and returns the ready connection.
// A refusal by the broker is returned as the *wire.Error it sent, for example
// errors.Is(err, &wire.Error{Code: wire.CodeAuthFailed}) for a wrong password.
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

// dial opens a connection with open and runs the handshake on it, both within DialTimeout.
// Tests open in-memory pipes with it instead of TCP connections.
func dial(ctx context.Context, opts Options, open func(context.Context) (net.Conn, error)) (*Conn, error) {
	opts.setDefaults()
	ctx, cancel := context.WithTimeout(ctx, opts.DialTimeout)
	defer cancel()
	nc, err := open(ctx)
	if err != nil {
		return nil, err
	}
	c := newConn(nc, opts)
	if err := c.handshake(ctx); err != nil {
		c.Close()
		return nil, err
	}
	if opts.KeepAlive > 0 {
		go c.keepAlive(opts.KeepAlive)
	}
	return c, nil
}

// keepAlive sends a PING whenever a whole interval passed without a frame written, until the
// connection fails or closes. A failed PING needs no handling here: it fails the connection,
// which every caller then sees.
func (c *Conn) keepAlive(every time.Duration) {
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
		if n == last {
			ctx, cancel := context.WithTimeout(context.Background(), c.opts.RequestTimeout)
			_, _ = c.Ping(ctx) // a failure fails the connection (see above)
			cancel()
			c.wmu.Lock()
			n = c.writes
			c.wmu.Unlock()
		}
		last = n
	}
}

func newConn(nc net.Conn, opts Options) *Conn {
	c := &Conn{
		nc:         nc,
		opts:       opts,
		limits:     wire.DefaultLimits(),
		bw:         bufio.NewWriterSize(nc, opts.WriteBufferSize),
		pending:    make(map[uint32]pendingEntry),
		subs:       make(map[uint32]*Subscription),
		done:       make(chan struct{}),
		readerDone: make(chan struct{}),
	}
	c.maxFrame.Store(int64(c.limits.MaxFrame))
	go c.readLoop(bufio.NewReaderSize(nc, opts.ReadBufferSize))
	return c
}

func (c *Conn) handshake(ctx context.Context) error {
	hello := wire.Hello{ClientName: c.opts.ClientName, ClientVersion: "lightq-go/" + Version}
	body, err := c.roundTrip(ctx, wire.OpHello, hello.AppendTo(nil))
	if err != nil {
		return handshakeErr("HELLO", explainTLSRefusal(err))
	}
	var hr wire.HelloResponse
	if err := hr.Decode(body); err != nil {
		return fmt.Errorf("%w: HELLO response: %w", ErrProtocol, err)
	}
	if err := hr.Limits.Validate(); err != nil {
		return fmt.Errorf("%w: broker announced bad limits: %v", ErrProtocol, err)
	}
	c.limits = hr.Limits
	c.broker = hr.BrokerVersion
	c.maxFrame.Store(int64(hr.Limits.MaxFrame))

	body, err = c.authenticate(ctx)
	if err != nil {
		return handshakeErr("AUTH", err)
	}
	var ar wire.AuthResponse
	if err := ar.Decode(body); err != nil {
		return fmt.Errorf("%w: AUTH response: %w", ErrProtocol, err)
	}
	c.role = ar.Role
	return nil
}

// authenticate sends AUTH, again while the broker answers RESOURCE_LIMIT: it bounds the
// logins it verifies at once (PROTOCOL.md 4.2), so a service that opens many connections at
// start gets some of them refused until the first login has been verified, after which the
// others are answered from the broker's cache. The connection stays open across such an
// answer; the retries back off from 10 ms to 500 ms, with jitter, until ctx (DialTimeout) ends.
func (c *Conn) authenticate(ctx context.Context) ([]byte, error) {
	auth := wire.Auth{User: c.opts.User, Password: c.opts.Password}
	req := auth.AppendTo(nil)
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		body, err := c.roundTrip(ctx, wire.OpAuth, req)
		if !errors.Is(err, &wire.Error{Code: wire.CodeResourceLimit}) {
			return body, err
		}
		t := time.NewTimer(wait/2 + rand.N(wait/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

// handshakeErr returns broker refusals as they are and names the step otherwise.
func handshakeErr(step string, err error) error {
	var we *wire.Error
	if errors.As(err, &we) && !errors.Is(err, ErrConnectionLost) {
		return we
	}
	return fmt.Errorf("lightq: %s: %w", step, err)
}

// Limits returns the limits the broker announced in its HELLO response.
func (c *Conn) Limits() wire.Limits { return c.limits }

// Role returns the role the broker granted at AUTH.
func (c *Conn) Role() wire.Role { return c.role }

// BrokerVersion returns the version string the broker sent in its HELLO response.
func (c *Conn) BrokerVersion() string { return c.broker }

// Done is closed when the connection is closed or broken; Err then tells why.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns nil while the connection works, ErrClosed after Close, and an error wrapping
// ErrConnectionLost after a failure.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close closes the connection. Pending requests, producer callbacks and subscriptions fail
// with ErrClosed. It is idempotent and safe to call from any goroutine, including producer
// callbacks; it waits for the reader goroutine to exit.
func (c *Conn) Close() error {
	c.fail(ErrClosed)
	<-c.readerDone
	return nil
}

// fail makes err the connection's terminal error (the first call wins), closes the socket and
// hands err to every pending request and subscription, each exactly once.
func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	pending, subs := c.pending, c.subs
	c.pending, c.subs = nil, nil
	c.oneWay = [oneWaySlots]oneWayEntry{}
	close(c.done)
	c.mu.Unlock()

	_ = c.nc.Close()
	for _, p := range pending {
		p.r.respond(nil, err)
	}
	for _, s := range subs {
		s.fail(err)
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

// register records r as waiting for the answer to corr, unless the connection is down.
func (c *Conn) register(corr uint32, op wire.Op, r responder) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	c.pending[corr] = pendingEntry{op: op, r: r}
	return nil
}

// unregister removes corr's slot. It reports false when the slot was already taken by a
// response or a failure, in which case its responder has been or is being called.
func (c *Conn) unregister(corr uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pending[corr]; !ok {
		return false
	}
	delete(c.pending, corr)
	return true
}

// registerOneWay remembers who sent the one-way frame corr, so that an ERROR for it can be
// reported. Only the last oneWaySlots such frames are remembered.
func (c *Conn) registerOneWay(corr uint32, owner oneWayOwner) {
	c.mu.Lock()
	c.oneWay[c.oneWayN%oneWaySlots] = oneWayEntry{corr: corr, owner: owner}
	c.oneWayN++
	c.mu.Unlock()
}

// beginWrite locks the writer and arms the write deadline. The caller writes whole frames to
// c.bw and then calls endWrite.
func (c *Conn) beginWrite() error {
	c.wmu.Lock()
	if err := c.Err(); err != nil {
		c.wmu.Unlock()
		return err
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.opts.RequestTimeout))
	return nil
}

// flushMode says whether endWrite pushes the buffered frames to the socket.
type flushMode uint8

const (
	flushNow   flushMode = iota // the frame goes out before endWrite returns
	flushLater                  // it waits in the buffer for a later flush (producer batching)
)

// endWrite flushes (with flushNow) and unlocks the writer. A write error breaks the
// connection: a partial frame cannot be taken back.
func (c *Conn) endWrite(werr error, flush flushMode) error {
	if werr == nil && flush == flushNow {
		werr = c.bw.Flush()
	}
	c.writes++
	c.wmu.Unlock()
	if werr != nil {
		c.fail(lost(werr))
		return c.Err()
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
	_, err := v.WriteTo(c.nc)
	return err
}

// writeFrame writes one frame and flushes it.
func (c *Conn) writeFrame(op wire.Op, corr uint32, body []byte) error {
	if err := c.beginWrite(); err != nil {
		return err
	}
	wire.PutHeader(c.whdr[:], op, 0, corr, len(body))
	_, err := c.bw.Write(c.whdr[:])
	if err == nil {
		_, err = c.bw.Write(body)
	}
	return c.endWrite(err, flushNow)
}

// readLoop reads frames until the connection fails and dispatches each one. The frame buffer
// is reused: dispatch targets copy what they keep.
func (c *Conn) readLoop(br *bufio.Reader) {
	defer close(c.readerDone)
	buf := make([]byte, 64<<10)
	for {
		if _, err := io.ReadFull(br, buf[:wire.HeaderSize]); err != nil {
			c.fail(lost(err))
			return
		}
		n, err := wire.FrameSize(buf[:wire.HeaderSize], int(c.maxFrame.Load()))
		if err != nil {
			c.fail(lost(fmt.Errorf("%w: %w", ErrProtocol, err)))
			return
		}
		if h, _ := wire.PeekHeader(buf[:wire.HeaderSize]); h.Op == wire.OpDeliver {
			if s := c.subscription(h.Corr); s != nil {
				// Read the body straight into a buffer the subscription keeps: the batch
				// is not copied again on its way to the consumer.
				body := s.takeBuffer(h.BodyLen())
				if _, err := io.ReadFull(br, body); err != nil {
					c.fail(lost(err))
					return
				}
				if err := s.deliverOwned(body); err != nil {
					c.fail(lost(err))
					return
				}
				continue
			}
		}
		if n > len(buf) {
			nb := make([]byte, n)
			copy(nb, buf[:wire.HeaderSize])
			buf = nb
		}
		if _, err := io.ReadFull(br, buf[wire.HeaderSize:n]); err != nil {
			c.fail(lost(err))
			return
		}
		h, body, err := wire.ParseFrame(buf[:n])
		if err != nil {
			c.fail(lost(fmt.Errorf("%w: %w", ErrProtocol, err)))
			return
		}
		if err := c.dispatch(h, body); err != nil {
			c.fail(lost(err))
			return
		}
	}
}

// dispatch routes one frame. A returned error breaks the connection.
func (c *Conn) dispatch(h wire.Header, body []byte) error {
	if h.Op == wire.OpDeliver {
		s := c.subscription(h.Corr)
		if s == nil {
			c.log("DELIVER for an unknown subscription", "subscription", h.Corr)
			return nil
		}
		return s.deliver(body)
	}
	var werr *wire.Error
	if h.Op == wire.OpError {
		var eb wire.ErrorBody
		if err := eb.Decode(body); err != nil {
			return fmt.Errorf("%w: ERROR body: %w", ErrProtocol, err)
		}
		werr = &wire.Error{Code: eb.Code, Message: eb.Message}
	} else if h.Flags&wire.FlagResponse == 0 {
		return fmt.Errorf("%w: unexpected %v request from the broker", ErrProtocol, h.Op)
	}

	c.mu.Lock()
	p, ok := c.pending[h.Corr]
	if ok {
		delete(c.pending, h.Corr)
	}
	var owner oneWayOwner
	if !ok && werr != nil && h.Corr != 0 {
		for i := range c.oneWay {
			if c.oneWay[i].corr == h.Corr && c.oneWay[i].owner != nil {
				owner = c.oneWay[i].owner
				c.oneWay[i] = oneWayEntry{}
				break
			}
		}
	}
	c.mu.Unlock()

	switch {
	case ok && werr != nil:
		p.r.respond(nil, werr)
	case ok && h.Op != p.op:
		p.r.respond(nil, fmt.Errorf("%w: %v answered by %v", ErrProtocol, p.op, h.Op))
		return fmt.Errorf("%w: %v answered by %v", ErrProtocol, p.op, h.Op)
	case ok:
		p.r.respond(body, nil)
	case owner != nil:
		owner.oneWayError(werr)
	case werr != nil:
		c.log("broker error", "corr", h.Corr, "err", werr)
	default:
		// The answer to a request whose caller gave up (context cancelled): discard it.
	}
	if werr != nil && werr.Code.Fatal() {
		return werr
	}
	return nil
}

// subscription returns the subscription with broker id id, or nil.
func (c *Conn) subscription(id uint32) *Subscription {
	c.mu.Lock()
	s := c.subs[id]
	c.mu.Unlock()
	return s
}

func (c *Conn) log(msg string, args ...any) {
	if c.opts.Logger != nil {
		c.opts.Logger.Warn("lightq: "+msg, args...)
	}
}
