package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/lightq/lightq/broker/auth"
	"github.com/lightq/lightq/broker/group"
	"github.com/lightq/lightq/broker/meta"
	"github.com/lightq/lightq/broker/opshttp"
	"github.com/lightq/lightq/broker/tlsfront"
	"github.com/lightq/lightq/broker/workpool"
	"github.com/lightq/lightq/log/producerstate"
	"github.com/lightq/lightq/wire"
)

// Version is the broker version announced in HELLO.
const Version = "0.1.0"

// tickInterval is how often the ticker wakes connections that wait for their socket to drain.
const tickInterval = 2 * time.Millisecond

// deadlineInterval is how often the ticker checks authentication and transfer deadlines, and
// how long it sleeps when no connection is stalled. (A ticker that woke every 2 ms whatever
// happened cost an idle broker 6% of a core on a VM, where every wake-up is expensive.)
const deadlineInterval = 50 * time.Millisecond

// Server is a running broker. Its exported methods are safe for concurrent use.
type Server struct {
	gnet.BuiltinEventEngine

	cfg Config
	log zerolog.Logger

	meta     *meta.Store
	verifier *auth.Verifier
	throttle *auth.Throttle
	authPool *workpool.Pool   // credential checks and topic changes (Config.AuthPool)
	ioPool   *workpool.Pool   // cold FETCH reads and prefetch (Config.IOPool)
	metaPool *workpool.Pool   // LIST_OFFSETS by time (Config.MetaPool)
	watcher  *writableWatcher // EPOLLOUT for sendfile transfers
	offsets  *offsetStore
	groups   *group.Coordinator // consumer group membership (groups.go); in memory only
	sessions *groupSessions     // the longest group session granted, for the start withhold (groupsessions.go); nil in a cluster
	loops    loopStates         // per-event-loop scratch (record validation); see loopState
	metrics  *brokerMetrics     // nil unless Config.HTTPAddr is set (metrics.go)
	ops      *opshttp.Server    // the operations listener, or nil (metrics_http.go)

	cluster        *clusterNode          // nil without cluster settings (cluster.go)
	pids           *producerIDs          // INIT_PRODUCER's ids (producerids.go)
	producerBudget *producerstate.Budget // caps producer states in all partitions (Config.MaxProducers)

	dummyHash string // verified for unknown users, so they cost what a wrong password costs

	adminMu      sync.Mutex // serialises topic and user changes
	ringMemory   int64      // under adminMu: memory the rings of live topics preallocated (ring.Memory)
	incarnations uint64     // under adminMu: the last account incarnation given out (publishAccounts)

	topics   atomic.Pointer[map[string]*topic] // copy-on-write, read without locks
	accounts atomic.Pointer[accountTable]      // users and their rights; replaced whole, read without locks

	eng      gnet.Engine
	booted   chan gnet.Engine
	done     chan struct{} // closed when gnet.Run returns; runErr is set before
	runErr   error
	addr     atomic.Pointer[string] // set by Start once listening; read by Addr from any goroutine
	stopping atomic.Bool
	stopOnce sync.Once

	connsMu   sync.Mutex          // guards the sets below; a leaf (see doc.go)
	conns     map[*conn]struct{}  // every open connection, for shutdown and the timeouts
	perAddr   map[string]int      // open connections per client IP (Config.MaxConnectionsPerAddr)
	stalled   map[*conn]struct{}  // connections waiting for their socket to drain
	preauth   map[*conn]time.Time // unauthenticated connections and their deadlines
	transfers map[*conn]struct{}  // connections sending a FETCH response
	tickKick  chan struct{}       // cap 1: a connection stalled, tick now and then often
	lastCheck time.Time           // ticker goroutine only: when deadlines were last checked

	timeoutScan     time.Duration // how often the ticker looks for read and idle timeouts
	lastTimeoutScan time.Time     // ticker goroutine only
	lastSweep       time.Time     // ticker goroutine only: when expired producer states were dropped

	// TLS listener (tlsconn.go); nil without one. The counts are under connsMu: tlsSessions
	// are the live TLS sessions, from admission before their handshake to the end of their
	// goroutines; tlsPending are those of them not registered in conns (before OnOpen, after
	// OnClose), which the connection caps count besides conns. fdRoom: descriptors
	// connections may use (limits.go), 0 = unknown.
	tlsStore    *tlsfront.Store
	tlsLn       *tlsfront.Listener
	loopsUp     chan struct{} // closed by the first OnTick (TLS only): Engine.Register is safe
	loopsUpOnce sync.Once
	tlsAddr     atomic.Pointer[string]
	tlsSessions int
	tlsPending  int
	fdRoom      int

	refusalLogNext   atomic.Int64 // unix ns before which refused connections are not logged
	refusalsUnlogged atomic.Int64 // refused connections not logged since the last line
}

// New opens the data directory, loads topics and credentials and prepares a broker. It does
// not listen yet; call Start.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("broker config: %w", err)
	}
	ops, reg, err := listenOps(&cfg)
	if err != nil {
		return nil, err
	}
	s, err := newServer(cfg, ops, reg)
	if err != nil {
		_ = ops.Close(context.Background())
		return nil, err
	}
	return s, nil
}

// newServer is New once the operations listener and its registry (nil: metrics off) are up.
func newServer(cfg Config, ops *opshttp.Server, reg *prometheus.Registry) (*Server, error) {
	store, err := meta.Open(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	pids, err := openProducerIDs(cfg.DataDir, cfg.producerIDBlock)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:       cfg,
		log:       cfg.Logger,
		meta:      store,
		verifier:  auth.NewVerifier(4096, 10*time.Minute),
		throttle:  auth.NewThrottle(cfg.LoginThrottle),
		booted:    make(chan gnet.Engine, 1),
		done:      make(chan struct{}),
		conns:     map[*conn]struct{}{},
		perAddr:   map[string]int{},
		stalled:   map[*conn]struct{}{},
		tickKick:  make(chan struct{}, 1),
		preauth:   map[*conn]time.Time{},
		transfers: map[*conn]struct{}{},
		ops:       ops,
		loopsUp:   make(chan struct{}),
	}
	if reg != nil {
		s.metrics = newBrokerMetrics(s, reg)
	}
	s.pids, s.producerBudget = pids, producerstate.NewBudget(cfg.MaxProducers)
	s.timeoutScan = timeoutScanInterval(&cfg)
	s.accounts.Store(&accountTable{})
	if from := store.MigratedFrom(); from != 0 {
		s.log.Warn().Str("file", filepath.Join(cfg.DataDir, meta.FileName)).Str("backup", filepath.Join(cfg.DataDir, meta.BackupV1)).
			Int("from", from).Int("to", meta.FormatVersion).
			Msg("metadata migrated: each topic's user now holds the produce and consume roles on it; the old file is kept as the backup")
	}
	// A random password per process: nobody can make the dummy check succeed (and cached).
	dummy, err := auth.GeneratePassword()
	if err != nil {
		return nil, err
	}
	if s.dummyHash, err = auth.Hash(dummy, cfg.HashParams); err != nil {
		return nil, err
	}
	if err := s.ensureAdmin(); err != nil {
		return nil, err
	}
	if err := s.newTLS(); err != nil {
		return nil, err
	}
	s.offsets = newOffsetStore(cfg.DataDir, cfg.MaxCommittedOffsetsPerTopic, cfg.MaxCommittedOffsets, func(format string, args ...any) {
		s.log.Warn().Msgf(format, args...)
	})
	s.groups = group.New(cfg.Groups)
	s.loadTopics(store.State())
	if !cfg.Cluster.Enabled() {
		if err := s.withholdAtStart(store.State()); err != nil {
			return nil, err
		}
	}
	s.trackStoredGroups()
	return s, nil
}

// loadTopics builds the live registry from persisted metadata.
func (s *Server) loadTopics(st meta.State) {
	topics := make(map[string]*topic, len(st.Topics))
	for _, mt := range st.Topics {
		t, err := s.buildTopic(mt)
		if err != nil {
			s.log.Error().Err(err).Str("topic", mt.Name).Msg("topic cannot be loaded; skipping it")
			continue
		}
		topics[mt.Name] = t
		s.ringMemory += t.ringMemory()
		if mt.Kind == wire.KindDurable {
			if err := s.offsets.load(mt.Name); err != nil {
				s.log.Error().Err(err).Str("topic", mt.Name).Msg("committed offsets cannot be read; the topic's COMMIT_OFFSET and FETCH_COMMITTED answer STORAGE_ERROR until the file is repaired")
			}
		}
	}
	s.topics.Store(&topics)
	s.publishAccounts(st)
	s.log.Info().Int("topics", len(topics)).Int("users", len(st.Users)).Msg("metadata loaded")
}

// Start listens and serves in the background. It returns once the listener is ready.
func (s *Server) Start() error {
	s.authPool = workpool.New(s.cfg.AuthPool.Workers, s.cfg.AuthPool.Queue)
	s.ioPool = workpool.New(s.cfg.IOPool.Workers, s.cfg.IOPool.Queue)
	s.metaPool = workpool.New(s.cfg.MetaPool.Workers, s.cfg.MetaPool.Queue)
	w, err := newWritableWatcher()
	if err != nil {
		return err
	}
	s.watcher = w
	s.fitConnectionsToFDLimit()
	opts := []gnet.Option{
		gnet.WithMulticore(true),
		gnet.WithReuseAddr(true),
		gnet.WithReadBufferCap(s.cfg.ReadBufferCap),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		gnet.WithLogger(gnetLogger{s.log}),
		gnet.WithSocketSendBuffer(1 << 20),
		gnet.WithSocketRecvBuffer(1 << 20),
	}
	if s.cfg.EventLoops > 0 {
		opts = append(opts, gnet.WithNumEventLoop(s.cfg.EventLoops))
	}
	if s.tlsStore != nil {
		// TLS sessions are enrolled with Engine.Register from their own goroutines, which
		// would race with the acceptor over round robin's counter (gnet.go says so). The
		// ticker is only there to say when Register is safe to call (OnTick).
		opts = append(opts, gnet.WithLoadBalancing(gnet.LeastConnections), gnet.WithTicker(true))
	}
	go func() {
		s.runErr = gnet.Run(s, "tcp://"+s.cfg.Addr, opts...)
		close(s.done)
	}()
	select {
	case eng := <-s.booted:
		s.eng = eng
		go s.runTicker()
	case <-s.done:
		s.authPool.Close()
		s.ioPool.Close()
		s.metaPool.Close()
		if s.sessions != nil {
			s.sessions.close()
		}
		s.watcher.close()
		s.closeOps()
		return fmt.Errorf("listen on %s: %w", s.cfg.Addr, s.runErr)
	}
	addr, err := listenerAddr(s.eng)
	if err == nil {
		err = s.startTLS()
	}
	if err == nil {
		s.addr.Store(&addr)
		if s.cfg.Cluster.Enabled() {
			err = s.startCluster()
		}
	}
	if err != nil {
		_ = s.Shutdown(context.Background())
		return err
	}
	s.setReady() // before the log line, which tests and scripts wait for
	ev := s.log.Info().Str("addr", addr).Str("data_dir", s.cfg.DataDir).Str("version", Version)
	if a := s.TLSAddr(); a != "" {
		ev = ev.Str("tls_addr", a).Str("tls_certificate", tlsfront.Describe(s.tlsStore.Leaf()))
	}
	ev.Msg("lightq listening")
	return nil
}

// Addr is the address the broker listens on (with the real port when Config.Addr said 0), or
// "" before Start has the listener. Safe for concurrent use, also with Start.
func (s *Server) Addr() string {
	if a := s.addr.Load(); a != nil {
		return *a
	}
	return ""
}

// Wait blocks until the event loops stop and returns why.
func (s *Server) Wait() error {
	<-s.done
	return s.runErr
}

// listenerAddr asks the kernel which address the listener got.
func listenerAddr(eng gnet.Engine) (string, error) {
	fd, err := eng.Dup()
	if err != nil {
		return "", fmt.Errorf("dup listener: %w", err)
	}
	defer unix.Close(fd)
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return "", fmt.Errorf("getsockname: %w", err)
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return net.JoinHostPort(net.IP(a.Addr[:]).String(), fmt.Sprint(a.Port)), nil
	case *unix.SockaddrInet6:
		return net.JoinHostPort(net.IP(a.Addr[:]).String(), fmt.Sprint(a.Port)), nil
	}
	return "", fmt.Errorf("listener has a %T address", sa)
}

// Shutdown stops the broker gracefully: new connections and new batches are refused with
// SHUTTING_DOWN; every connection gets what its credit allows of the messages already
// accepted and its buffered output flushed, then a SHUTTING_DOWN error and a close. After
// Config.ShutdownDrain (or when ctx ends) the connections still open are closed as they are
// and the loops stop. Safe to call more than once.
func (s *Server) Shutdown(ctx context.Context) error {
	var err error
	s.stopOnce.Do(func() {
		s.stopping.Store(true)
		s.groups.Stop() // answers held heartbeats, so their connections can drain
		s.setNotReady()
		s.log.Info().Msg("shutting down: draining connections")
		deadline := time.Now().Add(s.cfg.ShutdownDrain)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			if s.undrained() == 0 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if n := s.undrained(); n > 0 {
			s.log.Warn().Int("connections", n).Msg("drain deadline passed; closing connections with output still queued")
		}
		// Engine.Stop polls every 500 ms for the loops to end; gnet.Run returns as soon as
		// they have, so wait for that instead.
		stopErr := make(chan error, 1)
		go func() {
			stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			stopErr <- s.eng.Stop(stopCtx)
		}()
		select {
		case <-s.done:
		case e := <-stopErr:
			if e != nil && !errors.Is(e, context.Canceled) {
				err = e
			}
			<-s.done
		}
		s.shutdownTLS()
		if s.cluster != nil {
			s.cluster.close() // no more reconciling: the topic table stays as it is
		}
		s.authPool.Close()
		s.ioPool.Close()
		s.metaPool.Close()
		if s.sessions != nil {
			s.sessions.close()
		}
		s.watcher.close()
		s.offsets.close()
		s.loops.close() // the loops have stopped
		for _, t := range *s.topics.Load() {
			if e := t.closeLogs(); e != nil {
				s.log.Error().Err(e).Str("topic", t.name).Msg("closing logs")
				if err == nil {
					err = e
				}
			}
		}
		if s.cluster != nil {
			s.cluster.closeTransport() // after the replicas closed with their topics
		}
		s.closeOps()
		s.log.Info().Msg("stopped")
	})
	return err
}

// undrained wakes every connection, so that drained ones close themselves, and counts those
// still open.
func (s *Server) undrained() int {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	for c := range s.conns {
		c.wake()
	}
	return len(s.conns)
}

// OnBoot publishes the engine to Start.
func (s *Server) OnBoot(eng gnet.Engine) gnet.Action {
	s.booted <- eng
	return gnet.None
}

// OnOpen sets up a connection's state. Runs on the connection's loop.
func (s *Server) OnOpen(gc gnet.Conn) ([]byte, gnet.Action) {
	c := newConn(s, gc)
	gc.SetContext(c)
	if c.tls == nil {
		return s.open(c)
	}
	c.tls.sess.Pipe().Attach(c.wake, s.cfg.HighWaterMark)
	out, act := s.open(c)
	if len(out) > 0 { // a TLS connection's output goes through its pipe, not the socket pair
		_, _ = c.gc.Write(out)
	}
	return nil, act
}

// open is OnOpen's admission: what to send and whether to close.
func (s *Server) open(c *conn) ([]byte, gnet.Action) {
	if s.stopping.Load() {
		return wire.AppendFrame(nil, wire.OpError, 0, 0, errorBody(wire.CodeShuttingDown, "broker is shutting down")), gnet.Close
	}
	s.connsMu.Lock()
	var refusal string
	if c.tls != nil {
		s.openTLS(c) // admitted before its handshake
	} else {
		refusal = s.admit(c) // registers c in conns unless a connection cap is reached
	}
	if refusal == "" {
		s.preauth[c] = c.authDeadline
	}
	s.connsMu.Unlock()
	if refusal != "" {
		s.logRefusal(c.log, refusal)
		return wire.AppendFrame(nil, wire.OpError, 0, 0, errorBody(wire.CodeTooManyConnections, refusal)), gnet.Close
	}
	if c.tls != nil && c.tls.sess.User != "" {
		if e := c.certLogin(); e != nil {
			return wire.AppendFrame(nil, wire.OpError, 0, 0, errorBody(e.Code, e.Message)), gnet.Close
		}
	}
	c.log.Debug().Msg("connection opened")
	return nil, gnet.None
}

// OnClose releases a connection's subscriptions. Runs on the connection's loop, possibly from
// inside one of our own writes (gnet closes on a write error).
func (s *Server) OnClose(gc gnet.Conn, err error) gnet.Action {
	c, ok := gc.Context().(*conn)
	if !ok {
		return gnet.None
	}
	c.onClose()
	if c.tls != nil {
		c.tls.sess.BrokerClosed() // its last output goes out, bounded by the linger time
	}
	s.connsMu.Lock()
	if c.tls != nil {
		s.closeTLS(c)
	} else {
		s.forget(c) // from conns and its address's count
	}
	delete(s.stalled, c)
	delete(s.preauth, c)
	delete(s.transfers, c)
	s.connsMu.Unlock()
	ev := c.log.Debug()
	if err != nil && !isPeerGone(err) {
		ev = c.log.Info().Err(err)
	}
	ev.Msg("connection closed")
	return gnet.None
}

// OnTraffic handles input, completed background work and deliveries. Runs on the loop.
func (s *Server) OnTraffic(gc gnet.Conn) gnet.Action {
	c, ok := gc.Context().(*conn)
	if !ok {
		return gnet.Close
	}
	if c.tls != nil {
		return c.tlsTraffic()
	}
	act := c.onTraffic()
	if act == gnet.None && !c.closed() {
		act = c.enforceTimeouts() // read and idle timeouts, judged after the turn read its input
	}
	if act == gnet.None {
		c.lend() // other loops may deliver to its idle socket until the next turn (direct.go)
	}
	return act
}

// runTicker wakes stalled connections every tickInterval while there are any, and checks
// deadlines every deadlineInterval (read and idle timeouts every timeoutScan, see limits.go).
// It replaces gnet's ticker, which cannot be woken early: a connection that stalls kicks it
// (see setStalled). It only calls Wake; it ends with gnet.
func (s *Server) runTicker() {
	t := time.NewTimer(deadlineInterval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-s.tickKick:
		case <-t.C:
		}
		t.Reset(s.tick())
	}
}

// tick does one round of the ticker and returns how long to sleep before the next.
func (s *Server) tick() time.Duration {
	now := time.Now()
	checkDeadlines := now.Sub(s.lastCheck) >= deadlineInterval
	if checkDeadlines {
		s.lastCheck = now
	}
	if now.Sub(s.lastSweep) >= producerSweepInterval {
		s.lastSweep = now
		s.sweepProducers(now)
	}
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	for c := range s.stalled {
		c.wake()
	}
	if checkDeadlines {
		for c, deadline := range s.preauth {
			if now.After(deadline) {
				c.wake()
			}
		}
		for c := range s.transfers {
			if now.UnixNano()-c.xferProgress.Load() > int64(s.cfg.TransferTimeout) {
				c.wakeNow() // onTraffic closes it
			}
		}
		if now.Sub(s.lastTimeoutScan) >= s.timeoutScan {
			s.lastTimeoutScan = now
			s.wakeTimedOut(now)
		}
	}
	if len(s.stalled) > 0 {
		return tickInterval
	}
	return deadlineInterval
}

// isPeerGone says whether a connection's close error is the client going away in the
// normal way: an orderly close (gnet reports the read of 0 bytes as "read: EOF"), a reset
// or a broken pipe. OnClose logs those at debug level; anything else stays at info.
func isPeerGone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, unix.ECONNRESET) || errors.Is(err, unix.EPIPE) || errors.Is(err, net.ErrClosed)
}
