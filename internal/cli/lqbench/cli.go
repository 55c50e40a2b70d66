package lqbench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/internal/brokeraddr"
	"github.com/lightq/lightq/internal/size"
	"github.com/lightq/lightq/internal/version"
	"github.com/lightq/lightq/wire"
)

// DefaultBroker is the broker address when neither -b nor $LIGHTQ_BROKER says otherwise.
const DefaultBroker = "127.0.0.1:7450"

const usage = `Usage: lqbench produce|consume|e2e [flags]
       lqbench --version

Measures LightQ throughput and latency, as the original lightq-producer and lightq-consumer
did, plus end-to-end latency percentiles.

  produce   send -m messages of -s bytes and report the send rate (with --rate, also the
            produce-to-ack latency: from each message's slot to its acknowledgement)
  consume   subscribe and report the receive rate and latency of what arrives
  e2e       consumers and producers in this process: rate and end-to-end latency

Credentials: --user/--password or $LIGHTQ_USER/$LIGHTQ_PASSWORD for the topic; with admin
credentials (--admin-user/--admin-password or $LIGHTQ_ADMIN_USER/$LIGHTQ_ADMIN_PASSWORD) the
topic is created first.

nats bench's --msgs, --size, --pub and --sub work as -m, -s, --producers and --consumers;
-n is the topic's partitions here, not a message count.

-b takes one broker or a comma-separated list of a cluster's brokers: the client connects to
the first that answers, learns from it which broker leads each partition, and sends each
partition's batches and fetches to its leader (following the leader when it moves).

TLS: --tls-ca FILE (or --tls alone, for the system's CAs) connects to the broker's TLS port
(its tls-addr); --tls-cert/--tls-key add a client certificate.

Examples:
  LIGHTQ_ADMIN_PASSWORD=$(cat data/admin-password) lqbench e2e -m 1000000 -s 100
  lqbench e2e -s 1024 --rate 50000 --json
  lqbench produce -t events -n 4 --acks none -z s2
  lqbench e2e --kind durable --fsync always -X segment.bytes=64MiB --size 1KiB
  lqbench e2e -b broker.example.com:7451 --tls-ca ca.crt -s 1KiB
  lqbench e2e -b b1:7450,b2:7450,b3:7450 --kind durable --fsync always -X replication.factor=3 -n 3

Flags:
`

// Main runs lqbench with args (without the program name) and returns the exit code: 0 done,
// 1 the run failed, 2 bad usage.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version" || args[0] == "-V") {
		fmt.Fprintln(stdout, version.String("lqbench"))
		return 0
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprint(stderr, usage)
			newFlags(&Config{}, new(options), stderr).PrintDefaults()
			return 0
		}
		fmt.Fprint(stderr, usage)
		return 2
	}
	cfg := Config{Mode: args[0]}
	var o options
	fs := newFlags(&cfg, &o, stderr)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "lqbench: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if err := o.apply(&cfg, getenv); err != nil {
		fmt.Fprintln(stderr, "lqbench:", err)
		return 2
	}
	cfg.Defaults()
	if err := cfg.validate(); err != nil {
		fmt.Fprintln(stderr, "lqbench:", err)
		return 2
	}
	if !o.json && !o.quiet {
		if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			cfg.Progress = stderr
		}
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "lqbench:", err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "lqbench:", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	r, err := Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "lqbench:", err)
		return 1
	}
	if o.json {
		if err := r.WriteJSON(stdout); err != nil {
			return 1
		}
	} else {
		r.WriteText(stdout)
	}
	if r.Failed > 0 {
		return 1
	}
	return 0
}

// options are flags that need converting before they land in a Config.
type options struct {
	kind, acks, codec string
	fsync             string
	topicOptions      []string // -X key=value
	json, quiet       bool
	cpuProfile        string
	tls               client.TLSOptions
	useTLS            bool
}

func newFlags(cfg *Config, o *options, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("lqbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	fs.StringVar(&cfg.Broker, "b", "", "broker host[:port], or a comma-separated list of a cluster's brokers (default $LIGHTQ_BROKER or "+DefaultBroker+"; the port defaults to "+brokeraddr.DefaultPort+")")
	fs.StringVar(&cfg.Topic, "t", "lqbench", "topic")
	fs.IntVar(&cfg.Messages, "m", 1_000_000, "messages per producer")
	fs.IntVar(&cfg.Messages, "msgs", 1_000_000, "the same as -m (nats bench's name)")
	cfg.Size = 100
	fs.Var((*size.IntValue)(&cfg.Size), "s", "message size: bytes or with a unit, 1KiB (at least 16: the timestamp stamp)")
	fs.Var((*size.IntValue)(&cfg.Size), "size", "the same as -s (nats bench's name)")
	fs.IntVar(&cfg.Partitions, "n", 1, "partitions of the topic when lqbench creates it (not nats bench's message count: that is -m or --msgs)")
	fs.IntVar(&cfg.Producers, "producers", 1, "producer connections")
	fs.IntVar(&cfg.Producers, "pub", 1, "the same as --producers (nats bench's name)")
	fs.IntVar(&cfg.Consumers, "consumers", 1, "consumer connections")
	fs.IntVar(&cfg.Consumers, "sub", 1, "the same as --consumers (nats bench's name)")
	fs.StringVar(&cfg.Group, "group", "", "group the consumers share: a queue group (transient topic) or a consumer group, whose members share the partitions (durable); default: each gets every message")
	cfg.BatchBytes = 512 << 10
	fs.Var((*size.IntValue)(&cfg.BatchBytes), "batch", "producer batch size: bytes or with a unit, 512KiB")
	fs.DurationVar(&cfg.Linger, "linger", time.Millisecond, "producer linger time")
	fs.IntVar(&cfg.MaxInFlight, "inflight", 16, "batches in flight per producer")
	fs.IntVar(&cfg.Rate, "rate", 0, "total messages per second, open loop (0 = as fast as possible)")
	cfg.Window = 16 << 20
	fs.Var((*size.IntValue)(&cfg.Window), "window", "subscription credit window: bytes or with a unit, 16MiB")
	fs.DurationVar(&cfg.IdleTimeout, "idle", 5*time.Second, "consumers stop after this long without a message")
	fs.StringVar(&o.kind, "kind", "transient", "topic kind: transient or durable")
	fs.StringVar(&o.acks, "acks", "written", "acknowledgements: none, written or durable")
	fs.BoolVar(&cfg.NoIdempotence, "no-idempotence", false, "producers send no producer id (at least once; the client is idempotent by default with acks written or durable)")
	fs.Func("X", "topic option key=value for a topic lqbench creates (repeatable; sizes take units: -X segment.bytes=64MiB)", func(s string) error {
		o.topicOptions = append(o.topicOptions, s)
		return nil
	})
	fs.StringVar(&o.fsync, "fsync", "", "fsync policy of a durable topic lqbench creates: always, never or interval=<duration>")
	fs.StringVar(&o.codec, "z", "none", "compression: none, s2 or zstd")
	fs.BoolVar(&o.json, "json", false, "print one JSON object")
	fs.BoolVar(&o.quiet, "q", false, "no progress bar")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of lqbench to this file")
	fs.StringVar(&cfg.User, "user", "", "topic user (default $LIGHTQ_USER or lqbench)")
	fs.StringVar(&cfg.Password, "password", "", "topic password (default $LIGHTQ_PASSWORD or lqbench-password)")
	fs.StringVar(&cfg.AdminUser, "admin-user", "", "admin user, to create the topic (default $LIGHTQ_ADMIN_USER, or admin when an admin password is set)")
	fs.StringVar(&cfg.AdminPassword, "admin-password", "", "admin password (default $LIGHTQ_ADMIN_PASSWORD)")
	fs.BoolVar(&o.useTLS, "tls", false, "connect with TLS (to the broker's tls-addr); implied by the other --tls-* flags")
	fs.StringVar(&o.tls.CAFile, "tls-ca", "", "PEM CA certificates that verify the broker (default: the system roots)")
	fs.StringVar(&o.tls.CertFile, "tls-cert", "", "PEM client certificate (with --tls-key); it may stand for --user/--password")
	fs.StringVar(&o.tls.KeyFile, "tls-key", "", "PEM key of --tls-cert")
	fs.StringVar(&o.tls.ServerName, "tls-server-name", "", "name the broker's certificate must carry (default: the host of -b)")
	fs.BoolVar(&o.tls.InsecureSkipVerify, "tls-insecure-skip-verify", false, "accept any broker certificate (tests only: the traffic is then open to anyone on the path)")
	return fs
}

func (o *options) apply(cfg *Config, getenv func(string) string) error {
	orEnv := func(v *string, env, def string) {
		if *v == "" {
			*v = getenv(env)
		}
		if *v == "" {
			*v = def
		}
	}
	if t := o.tls; o.useTLS || t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != "" || t.InsecureSkipVerify {
		cfg.TLS = &t
	}
	orEnv(&cfg.Broker, "LIGHTQ_BROKER", DefaultBroker)
	cfg.Broker = brokeraddr.ListWithDefaultPort(cfg.Broker)
	orEnv(&cfg.User, "LIGHTQ_USER", "lqbench")
	orEnv(&cfg.Password, "LIGHTQ_PASSWORD", "lqbench-password")
	orEnv(&cfg.AdminPassword, "LIGHTQ_ADMIN_PASSWORD", "")
	adminDefault := ""
	if cfg.AdminPassword != "" {
		adminDefault = "admin"
	}
	orEnv(&cfg.AdminUser, "LIGHTQ_ADMIN_USER", adminDefault)
	kind, err := wire.ParseKind(o.kind)
	if err != nil {
		return err
	}
	cfg.Kind = kind
	if o.fsync != "" {
		if kind != wire.KindDurable {
			return fmt.Errorf("--fsync needs --kind durable")
		}
		cfg.TopicOptions = append(cfg.TopicOptions, wire.Option{Key: wire.OptionFsync, Value: o.fsync})
	}
	for _, kv := range o.topicOptions {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("-X %q: want key=value", kv)
		}
		v, err := size.TopicOption(k, v)
		if err != nil {
			return fmt.Errorf("-X %w", err)
		}
		cfg.TopicOptions = append(cfg.TopicOptions, wire.Option{Key: k, Value: v})
	}
	switch o.acks {
	case "none":
		cfg.Acks = client.AckNone
	case "written":
		cfg.Acks = client.AckWritten
	case "durable":
		cfg.Acks = client.AckDurable
	default:
		return fmt.Errorf("acks %q: want none, written or durable", o.acks)
	}
	codec, err := wire.ParseCodec(o.codec)
	if err != nil {
		return err
	}
	cfg.Compression = codec
	return nil
}
