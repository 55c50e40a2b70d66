package lightq

import (
	"bufio"
	"crypto/tls"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/term"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/broker/auth"
	"github.com/lightq/lightq/internal/size"
)

// defaultConf is every setting with its default; --print-config prints it, and its keys are
// the flags (and, as LIGHTQ_<KEY>, the environment variables).
//
//go:embed default.conf
var defaultConf string

var confHelp = map[string]string{
	"addr":             "listen address (host:port)",
	"data-dir":         "directory for metadata and credentials",
	"log-level":        "debug, info, warn or error",
	"log-format":       "json, console or auto (console on a terminal)",
	"admin-user":       "admin user name (password: LIGHTQ_ADMIN_PASSWORD)",
	"max-batch":        "largest record batch in bytes",
	"max-message":      "largest record (key+value+headers) in bytes",
	"auth-timeout":     "time a new connection has to authenticate",
	"event-loops":      "event loops (0 = one per CPU)",
	"read-buffer":      "bytes one read hands to the protocol at most",
	"high-water-mark":  "bytes queued per connection before sending to it pauses",
	"ring-bytes":       "memory of one transient partition",
	"ring-slots":       "batches one transient partition holds at most",
	"max-ring-memory":  "ring memory of all transient topics together",
	"hash-params":      "argon2id parameters for new credential hashes",
	"shutdown-drain":   "time to flush output on shutdown",
	"transfer-timeout": "close a connection whose FETCH response makes no progress for this long",

	// Connection limits.
	"read-timeout":             "close a connection that leaves a started frame incomplete for this long",
	"idle-timeout":             "close an authenticated connection with nothing outstanding after this long (0 = never)",
	"max-connections":          "open connections in all; more are refused",
	"max-connections-per-addr": "open connections from one client IP address; more are refused",

	// Idempotent produce.
	"producer-expiry":             "drop a producer id's state in a partition after this long without a batch (1s to 720h)",
	"max-producers-per-partition": "producer states one partition holds at most; a new producer past it is refused",
	"max-producers":               "producer states the whole broker holds at most; a new producer past it is refused",
	// Consumer groups.
	"group-session-timeout":     "session timeout of a group member that asks for none",
	"group-min-session-timeout": "shortest session timeout a group member may ask for",
	"group-max-session-timeout": "longest session timeout a group member may ask for",
	"max-members-per-group":     "members of one consumer group; more JOIN_GROUPs are refused",
	"max-groups":                "consumer groups with live members; more are refused",
	"max-group-members":         "members of all consumer groups together; more are refused",
	// Operations.
	"http-addr":          "serve /metrics, /healthz and /readyz on this address (empty: off; no authentication)",
	"metrics-max-groups": "consumer groups (topic, group pairs) whose committed offsets and lag /metrics shows at most",
	// TLS listener.
	"tls-addr":              "TLS listen address (host:port); empty: no TLS listener",
	"tls-cert":              "PEM server certificate (chain) of the TLS listener; reloaded on SIGHUP",
	"tls-key":               "PEM private key of tls-cert; reloaded on SIGHUP",
	"tls-client-ca":         "PEM CA certificates that verify client certificates; a verified certificate names its user (no password needed)",
	"tls-client-auth":       "with tls-client-ca: require (a client certificate) or optional (clients without one log in with a password)",
	"tls-min-version":       "lowest TLS version accepted: 1.3 or 1.2",
	"tls-handshake-timeout": "close a TLS connection whose handshake has not completed after this long",

	// Cluster.
	"node-id":                    "this broker's node id in its cluster (and in METADATA), from 1",
	"cluster-peers":              "every cluster member as node-id=host:port of its cluster port, this broker among them (empty: no cluster)",
	"cluster-listen":             "where this broker's cluster port listens, when not its cluster-peers address",
	"cluster-secret-file":        "file holding the cluster secret (or LIGHTQ_CLUSTER_SECRET), at least 16 bytes, the same on every member",
	"cluster-join":               "true: this broker joins a running cluster (an admin adds it: lqcat cluster add-broker) instead of founding one with cluster-peers; ignored once its data dir holds cluster metadata",
	"advertise-addr":             "client address METADATA gives for this broker (default: addr)",
	"advertise-tls-addr":         "TLS client address METADATA gives for this broker (default: tls-addr)",
	"cluster-offsets-partitions": "partitions of the cluster's offsets topic (each coordinates the consumer groups that hash to it) when this broker creates it",
	"cluster-scrub-rate":         "bytes per second this broker's replicas together read their sealed segments again to find damage and repair it from the other replicas (0: no scrub)",

	// Debugging.
	"pprof-addr": "serve net/http/pprof on this address (debugging; keep it on loopback; the same as http-addr: served there)",
	"fetch-copy": "send FETCH data with read+write instead of sendfile (for comparing the two)",
}

// boolSettings are the settings that are booleans ("true" or "false"): their flags are
// boolean flags, so --fetch-copy alone means true.
var boolSettings = map[string]bool{"fetch-copy": true, "cluster-join": true}

// layerSettings overlays settings, the embedded defaults, with the --config file (when
// configFile is not empty; a key the defaults lack is an error), then $LIGHTQ_<KEY>, then the
// flags set on fs (flagVals maps a setting to its flag's value).
func layerSettings(settings map[string]string, configFile string, getenv func(string) string, fs *flag.FlagSet, flagVals map[string]*string) error {
	if configFile != "" {
		data, err := os.ReadFile(configFile)
		if err != nil {
			return err
		}
		fileSettings, err := parseConf(string(data), configFile)
		if err != nil {
			return err
		}
		for k, v := range fileSettings {
			if _, ok := settings[k]; !ok {
				return fmt.Errorf("%s: unknown setting %q", configFile, k)
			}
			settings[k] = v
		}
	}
	for k := range settings {
		if v := getenv(envName(k)); v != "" {
			settings[k] = v
		}
	}
	fs.Visit(func(f *flag.Flag) {
		if p, ok := flagVals[f.Name]; ok {
			settings[f.Name] = *p
		}
	})
	return nil
}

// envName is the environment variable of a setting: LIGHTQ_ and the key in upper case,
// dashes as underscores.
func envName(key string) string {
	return "LIGHTQ_" + strings.ToUpper(strings.ReplaceAll(key, "-", "_"))
}

// parseConf reads key = value lines; # starts a comment.
func parseConf(text, name string) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		k, v, ok := strings.Cut(s, "=")
		if !ok {
			return nil, fmt.Errorf("%s:%d: want key = value, got %q", name, line, s)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, sc.Err()
}

// buildConfig turns the merged settings into a broker configuration.
func buildConfig(set map[string]string, getenv func(string) string, stderr io.Writer) (broker.Config, error) {
	cfg := broker.DefaultConfig()
	var errs []error
	num := func(key string) int {
		v, err := strconv.Atoi(set[key])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not an integer", key, set[key]))
		}
		return v
	}
	bytes := func(key string) int {
		v, err := size.ParseInt(set[key])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
		}
		return v
	}
	dur := func(key string) time.Duration {
		v, err := time.ParseDuration(set[key])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not a duration", key, set[key]))
		}
		return v
	}
	cfg.Addr = set["addr"]
	cfg.DataDir = set["data-dir"]
	cfg.AdminUser = set["admin-user"]
	cfg.AdminPassword = getenv("LIGHTQ_ADMIN_PASSWORD")
	cfg.Limits.MaxBatch = bytes("max-batch")
	cfg.Limits.MaxFrame = cfg.Limits.MaxBatch + 1024
	cfg.Limits.MaxMessage = bytes("max-message")
	cfg.Limits.AuthTimeout = dur("auth-timeout")
	cfg.EventLoops = num("event-loops")
	cfg.ReadBufferCap = bytes("read-buffer")
	cfg.HighWaterMark = bytes("high-water-mark")
	cfg.RingBytes = bytes("ring-bytes")
	cfg.RingSlots = num("ring-slots")
	if v, err := size.Parse(set["max-ring-memory"]); err != nil {
		errs = append(errs, fmt.Errorf("max-ring-memory: %w", err))
	} else {
		cfg.MaxRingMemory = v
	}
	cfg.ShutdownDrain = dur("shutdown-drain")
	cfg.TransferTimeout = dur("transfer-timeout")
	cfg.ReadTimeout = dur("read-timeout")
	cfg.IdleTimeout = dur("idle-timeout")
	cfg.MaxConnections = num("max-connections")
	cfg.MaxConnectionsPerAddr = num("max-connections-per-addr")
	cfg.ProducerExpiry = dur("producer-expiry")
	cfg.MaxProducersPerPartition = num("max-producers-per-partition")
	cfg.MaxProducers = num("max-producers")
	cfg.Groups.SessionTimeout = dur("group-session-timeout")
	cfg.Groups.MinSessionTimeout = dur("group-min-session-timeout")
	cfg.Groups.MaxSessionTimeout = dur("group-max-session-timeout")
	cfg.Groups.MaxMembersPerGroup = num("max-members-per-group")
	cfg.Groups.MaxGroups = num("max-groups")
	cfg.Groups.MaxMembers = num("max-group-members")
	if v, err := strconv.ParseBool(set["fetch-copy"]); err != nil {
		errs = append(errs, fmt.Errorf("fetch-copy: %q is not true or false", set["fetch-copy"]))
	} else {
		cfg.FetchCopy = v
	}
	cfg.TLS.Addr = set["tls-addr"]
	cfg.TLS.CertFile = set["tls-cert"]
	cfg.TLS.KeyFile = set["tls-key"]
	cfg.TLS.ClientCAFile = set["tls-client-ca"]
	switch set["tls-client-auth"] {
	case "require":
	case "optional":
		cfg.TLS.ClientCertOptional = true
	default:
		errs = append(errs, fmt.Errorf("tls-client-auth: %q is not require or optional", set["tls-client-auth"]))
	}
	switch set["tls-min-version"] {
	case "1.3":
		cfg.TLS.MinVersion = tls.VersionTLS13
	case "1.2":
		cfg.TLS.MinVersion = tls.VersionTLS12
	default:
		errs = append(errs, fmt.Errorf("tls-min-version: %q is not 1.3 or 1.2", set["tls-min-version"]))
	}
	cfg.TLS.HandshakeTimeout = dur("tls-handshake-timeout")
	for _, key := range []string{"pprof-addr", "http-addr", "tls-addr", "cluster-listen", "advertise-addr", "advertise-tls-addr"} {
		if addr := set[key]; addr != "" {
			if _, _, err := net.SplitHostPort(addr); err != nil {
				errs = append(errs, fmt.Errorf("%s: %q is not host:port", key, addr))
			}
		}
	}
	if v, err := strconv.ParseUint(set["node-id"], 10, 32); err != nil || v == 0 {
		errs = append(errs, fmt.Errorf("node-id: %q is out of range: want an integer from 1 to %d", set["node-id"], uint32(1<<32-1)))
	} else {
		cfg.NodeID = uint32(v)
	}
	if peers, err := broker.ParsePeers(set["cluster-peers"]); err != nil {
		errs = append(errs, fmt.Errorf("cluster-peers: %w", err))
	} else {
		cfg.Cluster.Peers = peers
	}
	if v, err := strconv.ParseBool(set["cluster-join"]); err != nil {
		errs = append(errs, fmt.Errorf("cluster-join: %q is not true or false", set["cluster-join"]))
	} else {
		cfg.Cluster.Join = v
	}
	cfg.Cluster.Listen = set["cluster-listen"]
	cfg.Cluster.AdvertiseAddr = set["advertise-addr"]
	cfg.Cluster.AdvertiseTLSAddr = set["advertise-tls-addr"]
	cfg.Cluster.OffsetsPartitions = num("cluster-offsets-partitions")
	if rate := bytes("cluster-scrub-rate"); rate > 0 {
		cfg.Cluster.ScrubBytesPerSecond = int64(rate)
	} else {
		cfg.Cluster.ScrubBytesPerSecond = -1 // 0 here is no scrub; in ClusterConfig, the default
	}
	if secret := getenv("LIGHTQ_CLUSTER_SECRET"); secret != "" {
		cfg.Cluster.Secret = []byte(secret)
	} else if f := set["cluster-secret-file"]; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("cluster-secret-file: %w", err))
		}
		cfg.Cluster.Secret = []byte(strings.TrimSpace(string(b)))
	}
	cfg.HTTPAddr = set["http-addr"]
	cfg.HTTPPprof = cfg.HTTPAddr != "" && set["pprof-addr"] == cfg.HTTPAddr
	cfg.MetricsMaxGroups = num("metrics-max-groups")
	p, err := parseHashParams(set["hash-params"])
	if err != nil {
		errs = append(errs, err)
	}
	cfg.HashParams = p
	level, err := zerolog.ParseLevel(set["log-level"])
	if err != nil || set["log-level"] == "" {
		errs = append(errs, fmt.Errorf("log-level: %q is not one of debug, info, warn, error", set["log-level"]))
	}
	var w io.Writer = stderr
	switch set["log-format"] {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: stderr, TimeFormat: time.RFC3339}
	case "auto":
		if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			w = zerolog.ConsoleWriter{Out: stderr, TimeFormat: time.RFC3339}
		}
	default:
		errs = append(errs, fmt.Errorf("log-format: %q is not json, console or auto", set["log-format"]))
	}
	cfg.Logger = zerolog.New(w).Level(level).With().Timestamp().Logger()
	return cfg, errors.Join(errs...)
}

// parseHashParams reads "m=19456,t=2,p=1".
func parseHashParams(s string) (auth.Params, error) {
	var p auth.Params
	var seen int
	for _, part := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return p, fmt.Errorf("hash-params: %q: %q is not a number", s, v)
		}
		switch k {
		case "m":
			p.MemoryKiB = uint32(n)
		case "t":
			p.Time = uint32(n)
		case "p":
			if n > 255 {
				return p, fmt.Errorf("hash-params: p=%d over 255", n)
			}
			p.Threads = uint8(n)
		default:
			return p, fmt.Errorf("hash-params: unknown key %q (want m, t, p)", k)
		}
		seen++
	}
	if seen != 3 {
		return p, fmt.Errorf("hash-params: %q needs m, t and p", s)
	}
	if err := p.Validate(); err != nil {
		return p, fmt.Errorf("hash-params: %q: %w", s, err)
	}
	return p, nil
}
