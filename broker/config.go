package broker

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/lightq/lightq/broker/auth"
	"github.com/lightq/lightq/broker/group"
	"github.com/lightq/lightq/wire"
)

// DefaultAddr is the broker's default listen address: loopback only, port 7450.
const DefaultAddr = "127.0.0.1:7450"

// Config configures a Server. Start from DefaultConfig and change what you need.
type Config struct {
	Addr    string // host:port to listen on; port 0 picks a free port (see Server.Addr)
	DataDir string // metadata, credentials, durable topics' logs and committed offsets live here

	// AdminUser and AdminPassword set the admin credentials. When the password is empty and
	// the data directory holds no admin yet, the broker generates one and writes it to
	// DataDir/admin-password (mode 0600).
	AdminUser     string
	AdminPassword string

	Limits     wire.Limits
	HashParams auth.Params // argon2id parameters for new credential hashes

	EventLoops    int // gnet event loops; 0 = one per CPU
	ReadBufferCap int // bytes one OnTraffic sees at most; at least a typical produce batch

	// HighWaterMark bounds the bytes queued in user space for one connection. Past it the
	// broker stops delivering to that connection until the socket drains; the subscriber then
	// loses the oldest messages if the ring moves on (it is told how many).
	HighWaterMark int

	// TransferTimeout closes a connection whose FETCH response has not moved for this long:
	// the transfer pins its segment file, which retention may have deleted.
	TransferTimeout time.Duration

	// Connection limits (see PROTOCOL.md section 4.6). ReadTimeout: a frame whose first byte
	// arrived must be complete within it, else TIMEOUT and a close. IdleTimeout: an
	// authenticated connection with nothing outstanding (no subscription, no FETCH waiting or
	// being answered, no request being processed) and no frame read for this long is closed
	// with TIMEOUT; 0 never closes one. A PING resets it.
	ReadTimeout time.Duration
	IdleTimeout time.Duration
	// MaxConnections and MaxConnectionsPerAddr cap the open connections, in all and from one
	// client IP address; a connection past either is answered TOO_MANY_CONNECTIONS and closed.
	// Start lowers MaxConnections to three quarters of the open-file limit when that is less.
	MaxConnections        int
	MaxConnectionsPerAddr int

	RingBytes     int   // default arena size of a transient partition
	RingSlots     int   // default batch capacity of a transient partition
	MaxRingMemory int64 // memory all transient topics' rings preallocate (arenas and slot indexes); CREATE_TOPIC past it: RESOURCE_LIMIT

	// NoColdPrefetch sends FETCH data with sendfile even when it is not in the page cache,
	// which blocks the event loop while the disk reads it. Only for measuring the difference.
	NoColdPrefetch bool
	// FetchCopy sends FETCH data with pread and write instead of sendfile. Only for
	// measuring what sendfile saves.
	FetchCopy bool

	MaxSubscriptionsPerConn int

	// MaxCommittedOffsetsPerTopic and MaxCommittedOffsets cap the (group, partition) pairs
	// with a committed offset, per durable topic and in the whole broker (each costs about
	// 100 bytes of memory plus its group name). A COMMIT_OFFSET for a new pair past either
	// is answered RESOURCE_LIMIT; pairs already stored can always be committed again.
	MaxCommittedOffsetsPerTopic int
	MaxCommittedOffsets         int

	// MaxUsers and MaxGrants cap the users and the (user, topic) grants of roles: all of them
	// are in memory and in the metadata file, which every change rewrites whole. CREATE_USER,
	// GRANT or CREATE_TOPIC past either is answered RESOURCE_LIMIT.
	MaxUsers  int
	MaxGrants int

	ShutdownDrain time.Duration

	// Idempotent produce (PROTOCOL.md section 15). ProducerExpiry: a producer id's state in
	// a partition is dropped after this long without a batch there (1 s to 30 days).
	// MaxProducersPerPartition and MaxProducers cap the states (each about 250 bytes of
	// memory, and up to 148 bytes in each snapshot at a durable segment roll), per partition
	// and in the whole broker; a batch that would start a new state past either is answered
	// RESOURCE_LIMIT.
	ProducerExpiry           time.Duration
	MaxProducersPerPartition int
	MaxProducers             int
	// producerIDBlock is how many producer ids one fsync of the producer-ids file reserves
	// (default 65536; tests make it small).
	producerIDBlock int64

	// Groups configures the consumer group coordinator: the session timeout a member gets by
	// default and the bounds of what it may ask for, and the caps on members per group,
	// groups with members and members in all (a JOIN_GROUP past one: RESOURCE_LIMIT). Its
	// Now is for tests.
	Groups group.Config

	// The worker pools run what would block an event loop. A request that finds its pool's
	// queue full is answered RESOURCE_LIMIT (retry later).
	// AuthPool runs AUTH and the admin changes (topics, users, roles): argon2 (each run uses
	// HashParams memory) and metadata fsyncs.
	AuthPool PoolSize
	IOPool   PoolSize // FETCH of data that may not be in the page cache: reads and prefetch
	MetaPool PoolSize // LIST_OFFSETS by timestamp (COMMIT_OFFSET has its topic's own syncer)

	// HTTPAddr, when set, is where the operations listener serves /metrics (Prometheus),
	// /healthz and /readyz (package opshttp); empty: no listener, and the broker counts
	// nothing for metrics. It listens from New on, before recovery, so /readyz can answer
	// 503 until Start has the listeners up. HTTPPprof also serves net/http/pprof there.
	HTTPAddr  string
	HTTPPprof bool
	// MetricsMaxGroups caps the consumer groups ((topic, group) pairs) whose committed
	// offsets and lag /metrics shows: group names are chosen by clients, and each pair is
	// two series per partition. Commits of groups past it are counted, not shown.
	MetricsMaxGroups int
	// NodeID names this broker in METADATA's cluster layout (PROTOCOL.md section 16) and,
	// in a cluster, among its peers; 0 means 1. A broker without cluster settings answers as
	// a cluster of one that leads every partition.
	NodeID uint32
	// Cluster makes the broker a member of a cluster; off unless Cluster.Peers is set.
	Cluster ClusterConfig

	// TLS configures the TLS client listener, off unless TLS.Addr is set (see TLSConfig).
	TLS TLSConfig

	// LoginThrottle limits failed logins (see auth.ThrottleConfig); zero fields take
	// auth.DefaultThrottleConfig's values.
	LoginThrottle auth.ThrottleConfig

	Logger zerolog.Logger
}

// TLSConfig configures the TLS client listener: a second port beside Addr that speaks the
// same protocol inside TLS (PROTOCOL.md section 4, docs/DESIGN.md "TLS"). The certificate, key
// and client CA are read at New and again on Server.ReloadTLS.
type TLSConfig struct {
	Addr     string // host:port of the TLS listener; "" = no TLS listener
	CertFile string // PEM server certificate (chain); required with Addr
	KeyFile  string // PEM private key of CertFile; required with Addr
	// ClientCAFile holds PEM CA certificates that verify client certificates. A verified
	// certificate authenticates its connection as the user it names (tlsfront.UserOf): no AUTH
	// is needed. "" asks clients for no certificate.
	ClientCAFile string
	// ClientCertOptional lets clients without a certificate connect when ClientCAFile is set
	// (they log in with AUTH); by default a certificate is required.
	ClientCertOptional bool
	// MinVersion is tls.VersionTLS13 (the default when 0) or tls.VersionTLS12.
	MinVersion uint16
	// HandshakeTimeout bounds a TLS handshake from the TCP accept to its end.
	HandshakeTimeout time.Duration
}

// validate reports the first inconsistent TLS setting.
func (t *TLSConfig) validate() error {
	switch {
	case t.Addr == "" && (t.CertFile != "" || t.KeyFile != "" || t.ClientCAFile != ""):
		return fmt.Errorf("TLS certificate, key or client CA given without a TLS listen address")
	case t.Addr == "":
		return nil
	case t.CertFile == "" || t.KeyFile == "":
		return fmt.Errorf("the TLS listener %s needs a certificate and a key file", t.Addr)
	case t.MinVersion != 0 && t.MinVersion != tls.VersionTLS12 && t.MinVersion != tls.VersionTLS13:
		return fmt.Errorf("TLS minimum version %#04x: want TLS 1.2 or 1.3", t.MinVersion)
	case t.HandshakeTimeout <= 0:
		return fmt.Errorf("TLS handshake timeout must be positive")
	}
	return nil
}

// PoolSize sizes one worker pool (see package workpool).
type PoolSize struct {
	Workers int // goroutines running jobs; at least 1
	Queue   int // jobs waiting for a worker before new ones are refused; at least 1
}

// DefaultConfig returns a configuration that listens on DefaultAddr with ./data.
func DefaultConfig() Config {
	return Config{
		Addr:                        DefaultAddr,
		DataDir:                     "data",
		AdminUser:                   "admin",
		Limits:                      wire.DefaultLimits(),
		HashParams:                  auth.DefaultParams(),
		ReadBufferCap:               256 << 10,
		HighWaterMark:               4 << 20,
		RingBytes:                   8 << 20,
		RingSlots:                   1024,
		MaxRingMemory:               4 << 30,
		MaxSubscriptionsPerConn:     1024,
		MaxCommittedOffsetsPerTopic: 100_000,
		MaxCommittedOffsets:         1_000_000,
		MaxUsers:                    10_000,
		MaxGrants:                   100_000,
		ProducerExpiry:              24 * time.Hour,
		MaxProducersPerPartition:    10_000,
		MaxProducers:                100_000,
		Groups:                      group.DefaultConfig(),
		AuthPool:                    PoolSize{Workers: 2, Queue: 256},
		IOPool:                      PoolSize{Workers: 4, Queue: 4096},
		MetaPool:                    PoolSize{Workers: 2, Queue: 4096},
		ShutdownDrain:               2 * time.Second,
		TransferTimeout:             time.Minute,
		ReadTimeout:                 30 * time.Second,
		IdleTimeout:                 10 * time.Minute,
		MaxConnections:              10000,
		MaxConnectionsPerAddr:       1000,
		MetricsMaxGroups:            1000,
		TLS:                         TLSConfig{HandshakeTimeout: 10 * time.Second},
		Logger:                      zerolog.Nop(),
	}
}

// Validate reports the first inconsistent setting, naming it.
func (c *Config) Validate() error {
	if err := c.Limits.Validate(); err != nil {
		return fmt.Errorf("limits: %w", err)
	}
	switch {
	case c.TransferTimeout <= 0:
		return fmt.Errorf("transfer timeout must be positive")
	case c.ReadTimeout <= 0:
		return fmt.Errorf("read timeout must be positive")
	case c.IdleTimeout < 0:
		return fmt.Errorf("idle timeout must not be negative (0: never)")
	case c.MaxConnections < 1 || c.MaxConnectionsPerAddr < 1:
		return fmt.Errorf("max connections and max connections per address must be at least 1")
	case c.EventLoops < 0:
		return fmt.Errorf("event loops must not be negative")
	case c.DataDir == "":
		return fmt.Errorf("data dir must be set")
	case c.AdminUser == "":
		return fmt.Errorf("admin user must be set")
	case c.HighWaterMark < 64<<10:
		return fmt.Errorf("high-water mark %d below 64 KiB (65536)", c.HighWaterMark)
	case c.RingBytes < 2*c.Limits.MaxBatch:
		return fmt.Errorf("ring bytes %d must hold two max batches (%d)", c.RingBytes, 2*c.Limits.MaxBatch)
	case c.RingSlots < 2:
		return fmt.Errorf("ring slots must be at least 2")
	case c.ReadBufferCap < 4096:
		return fmt.Errorf("read buffer cap %d below 4 KiB (4096)", c.ReadBufferCap)
	case !c.AuthPool.valid():
		return fmt.Errorf("auth pool workers and queue must be at least 1")
	case !c.IOPool.valid():
		return fmt.Errorf("I/O pool workers and queue must be at least 1")
	case !c.MetaPool.valid():
		return fmt.Errorf("meta pool workers and queue must be at least 1")
	case c.MaxSubscriptionsPerConn < 1:
		return fmt.Errorf("max subscriptions per connection must be at least 1")
	case c.MaxCommittedOffsetsPerTopic < 1 || c.MaxCommittedOffsets < 1:
		return fmt.Errorf("max committed offsets per topic and per broker must be at least 1")
	case c.MaxUsers < 1 || c.MaxGrants < 1:
		return fmt.Errorf("max users and max grants must be at least 1")
	case c.ProducerExpiry < time.Second || c.ProducerExpiry > maxProducerExpiry:
		return fmt.Errorf("producer expiry %v outside [1s, 720h] (30 days)", c.ProducerExpiry)
	case c.MaxProducersPerPartition < 1 || c.MaxProducers < 1:
		return fmt.Errorf("max producers per partition and per broker must be at least 1")
	case c.MetricsMaxGroups < 0:
		return fmt.Errorf("metrics max groups must not be negative (0: show no group)")
	}
	if err := c.Groups.Validate(); err != nil {
		return err
	}
	if err := c.Cluster.validate(c.nodeID()); err != nil {
		return err
	}
	return c.TLS.validate()
}

// nodeID is NodeID, 1 when unset.
func (c *Config) nodeID() uint32 {
	if c.NodeID == 0 {
		return 1
	}
	return c.NodeID
}

// maxProducerExpiry keeps the expiry within INIT_PRODUCER's u32 of milliseconds.
const maxProducerExpiry = 30 * 24 * time.Hour

func (p PoolSize) valid() bool { return p.Workers >= 1 && p.Queue >= 1 }
