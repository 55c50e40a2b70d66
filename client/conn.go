package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
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

	// StallTimeout is how long a connection whose requests wait for their answers may
	// receive nothing at all, beyond what the broker may hold a request on purpose (a
	// FETCH's or a held HEARTBEAT's MaxWait, which each such request adds to its own
	// allowance), before the client declares it dead. A broker that stopped without closing
	// its sockets (SIGSTOP, a hung machine, a network that drops everything) otherwise
	// leaves them waiting until their own timeouts. A dead connection is handled as a lost
	// one: its requests fail with an error wrapping ErrStalled and ErrConnectionLost (retry
	// them), producers re-send their batches and consumers resume, in a cluster at the
	// partitions' leaders as another broker names them, and the Conn reconnects (from the
	// next seed address). After half of it in silence the client sends a PING, which a live
	// broker answers at once, so a request that is merely slow (an fsync, a replication
	// round) does not cost its connection. Keep it well under RequestTimeout and the
	// producers' DeliveryTimeout (stall.go). Default 5s; negative: never.
	StallTimeout time.Duration

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
	if o.StallTimeout == 0 {
		o.StallTimeout = 5 * time.Second
	}
	if o.WriteBufferSize <= 0 {
		o.WriteBufferSize = 64 << 10
	}
	if o.ReadBufferSize <= 0 {
		o.ReadBufferSize = 64 << 10
	}
}

// Conn is a connection to a broker, or to the brokers of a cluster, that reconnects by
// itself. All its methods are safe for concurrent use; requests from several goroutines are
// pipelined on the one socket of each broker and matched to their answers by correlation id.
//
// When a socket breaks (the broker restarts, is killed, shuts down, or the network fails),
// the requests waiting for an answer fail with an error wrapping ErrConnectionLost and
// subscriptions end with it; the Conn then dials again with backoff (50 ms doubling to 2 s,
// with jitter) and logs in again, until it succeeds or is closed. Requests made meanwhile
// wait for the new connection (bounded by their context, or RequestTimeout); Producers re-send
// what was not acknowledged, and consumers resume at their positions. The Conn gives up only
// when the broker refuses the credentials on a reconnect (AUTH_FAILED): Done is closed and Err
// says why.
//
// In a cluster (PROTOCOL.md section 16) the Conn keeps a view of the partitions' leaders and
// a connection to each broker it sends a partition's requests to (doc.go, "Clusters").
type Conn struct {
	opts Options
	// dialAddr opens a socket to a broker the cluster view names (TCP, or TLS with
	// Options.TLS).
	dialAddr func(ctx context.Context, addr string) (net.Conn, error)

	corr  atomic.Uint32
	epoch time.Time // the origin of clock (stall.go)

	// ctx ends at Close or when the Conn gives up: it cancels a reconnect in progress.
	ctx    context.Context
	cancel context.CancelFunc

	// boot is the node Dial connected (one of the seed addresses): group, subscription,
	// committed-offset and PING requests go to it, as they did before clusters.
	boot *node

	// mu guards everything below, the fields of each node marked "guarded by Conn.mu", and
	// the fields of each link marked so.
	mu    sync.Mutex
	nodes []*node // boot first, then the other brokers in the order they were first needed
	// changed is closed and replaced whenever a link of any node is installed or fails:
	// producers watch it to follow their partitions' connections.
	changed    chan struct{}
	view       clusterView
	refreshing map[string]*refreshCall // METADATA refreshes in flight, by topic
	err        error                   // terminal: set once, by Close or a refused login on a reconnect
	// watchers are told about each failed reconnect attempt (DialConsumer reports them).
	watchers  map[int]func(err error, retryIn time.Duration)
	nextWatch int

	done chan struct{}  // closed with err
	bg   sync.WaitGroup // readers, the reconnectors, the keep-alive

	coord coordinators // where consumer-group requests go (coordinator.go)
}

// Dial connects to the broker at addr, sends HELLO and AUTH, and returns the ready connection.
// addr may list several brokers of a cluster, separated by commas ("b1:7450,b2:7450"): Dial
// tries them in order and keeps the first that answers; the Conn learns the other brokers
// from it (doc.go, "Clusters"), and its reconnects go through the list again. A refusal by
// the broker is returned as the *wire.Error it sent, for example
// errors.Is(err, &wire.Error{Code: wire.CodeAuthFailed}) for a wrong password. Dial itself
// does not retry a failed connect: the Conn reconnects only once it has been connected.
func Dial(ctx context.Context, addr string, opts Options) (*Conn, error) {
	seeds, err := splitSeeds(addr)
	if err != nil {
		return nil, err
	}
	return dial(ctx, opts, seeds, nil)
}

// splitSeeds reads Dial's comma-separated address list.
func splitSeeds(list string) ([]string, error) {
	var seeds []string
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a != "" {
			seeds = append(seeds, a)
		}
	}
	if len(seeds) == 0 {
		return nil, fmt.Errorf("lightq: no broker address in %q", list)
	}
	return seeds, nil
}

// dialBroker opens a socket to addr: TCP, or TLS with opts.TLS.
func dialBroker(opts *Options) func(ctx context.Context, addr string) (net.Conn, error) {
	if opts.TLS != nil {
		return func(ctx context.Context, addr string) (net.Conn, error) { return dialTLS(ctx, addr, opts.TLS) }
	}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("lightq: dial %s: %w", addr, err)
		}
		return nc, nil
	}
}

// dial makes a Conn whose boot node dials seeds (with open, or TCP/TLS when open is nil) and
// connects it. Tests open in-memory pipes with open instead of TCP connections.
func dial(ctx context.Context, opts Options, seeds []string, open func(context.Context) (net.Conn, error)) (*Conn, error) {
	opts.setDefaults()
	c := &Conn{opts: opts, changed: make(chan struct{}), done: make(chan struct{}), epoch: time.Now()}
	c.dialAddr = dialBroker(&c.opts)
	bootOpen := c.dialAddr
	if open != nil {
		bootOpen = func(ctx context.Context, _ string) (net.Conn, error) { return open(ctx) }
	}
	c.boot = c.newNode(seeds, bootOpen)
	c.nodes = []*node{c.boot}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	l, err := c.boot.connect(ctx)
	if err != nil {
		c.terminate(ErrClosed)
		return nil, err
	}
	if !c.boot.install(l) {
		c.terminate(ErrClosed)
		return nil, lost(l.cause())
	}
	if opts.KeepAlive > 0 {
		c.bg.Add(1)
		go c.keepAlive(opts.KeepAlive)
	}
	if opts.StallTimeout > 0 {
		c.bg.Add(1)
		go c.watchdog(opts.StallTimeout)
	}
	return c, nil
}

// keepAlive sends a PING on each node's connection whenever a whole interval passed without
// a frame written to it, until the Conn ends. A PING that fails needs no handling here: a
// broken socket fails its connection, which every caller sees, and the Conn reconnects.
func (c *Conn) keepAlive(every time.Duration) {
	defer c.bg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		c.mu.Lock()
		nodes := slices.Clone(c.nodes)
		c.mu.Unlock()
		for _, n := range nodes {
			n.wmu.Lock()
			w := n.writes
			n.wmu.Unlock()
			if l, _, _ := n.current(); w == n.seen && l != nil {
				ctx, cancel := context.WithTimeout(c.ctx, c.opts.RequestTimeout)
				_, _ = c.exchange(ctx, l, wire.OpPing, nil, false)
				cancel()
				n.wmu.Lock()
				w = n.writes
				n.wmu.Unlock()
			}
			n.seen = w
		}
	}
}

// Limits returns the limits the broker announced in its HELLO response (the latest one, after
// a reconnect).
func (c *Conn) Limits() wire.Limits {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.boot.limits
}

// Role returns the role the broker granted at AUTH.
func (c *Conn) Role() wire.Role {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.boot.role
}

// BrokerVersion returns the version string the broker sent in its HELLO response.
func (c *Conn) BrokerVersion() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.boot.broker
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

// Connected reports whether the Conn has a working connection now (to the broker Dial
// connected). While it reconnects it returns false and why the last connection or reconnect
// attempt failed.
func (c *Conn) Connected() (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return false, c.err
	}
	return c.boot.cur != nil, c.boot.lastErr
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
	var links []*link
	for _, n := range c.nodes {
		if n.cur != nil {
			links = append(links, n.cur)
		}
		n.cur = nil
		select {
		case <-n.up:
		default:
			close(n.up) // whoever waits for a connection sees the end
		}
	}
	close(c.done)
	c.changedLocked()
	c.mu.Unlock()
	c.cancel()
	for _, l := range links {
		c.failLink(l, err)
	}
}

// changedLocked tells the watchers of c.changed that a link was installed or failed.
// Conn.mu is held.
func (c *Conn) changedLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// linkChanges returns the channel closed at the next change of any node's link.
func (c *Conn) linkChanges() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
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

// awaitLink returns the boot node's working connection, waiting for a reconnect in progress
// until ctx ends.
func (c *Conn) awaitLink(ctx context.Context) (*link, error) { return c.boot.awaitLink(ctx) }

// errReplaced: a write meant for a connection that a reconnect has replaced.
var errReplaced = errors.New("connection replaced by a reconnect")

// flushMode says whether endWrite pushes the buffered frames to the socket.
type flushMode uint8

const (
	flushNow   flushMode = iota // the frame goes out before endWrite returns
	flushLater                  // it waits in the buffer for a later flush (producer batching)
)

// writeFrame writes one frame on connection l and flushes it.
func (c *Conn) writeFrame(l *link, op wire.Op, corr uint32, body []byte) error {
	return l.n.writeFrame(l, op, corr, body)
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
