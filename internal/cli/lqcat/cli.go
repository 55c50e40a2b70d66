package lqcat

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/internal/brokeraddr"
	"github.com/lightq/lightq/internal/version"
	"github.com/lightq/lightq/wire"
)

// DefaultBroker is the broker address when neither -b nor $LIGHTQ_BROKER says otherwise.
const DefaultBroker = "127.0.0.1:7450"

const usage = `Usage:
  lqcat -P -t TOPIC [flags] [FILE ...]     produce: one message per line of stdin or FILEs
  lqcat -C -t TOPIC [flags]                consume: print messages
  lqcat -L [-t TOPIC] [-G GROUP] [flags]   metadata: topics, partitions, offsets, group lag
  lqcat topic create|delete|list ...       administer topics (lqcat topic --help)
  lqcat user create|delete|passwd|list ... users of the broker (lqcat user --help)
  lqcat acl grant|revoke|list ...          users' roles on topics (lqcat acl --help)
  lqcat stats [TOPIC] [-J]                 the broker's counters of a topic
  lqcat group list|describe|reset ...      consumer groups: members, committed offsets, lag (lqcat group --help)
  lqcat cluster status [-t TOPIC] [-J]     replicated partitions: leaders, replicas, replica lag (lqcat cluster --help)
  lqcat cluster membership|add-broker|move|drain|remove-broker ...
                                           a cluster's brokers, moves of replicas (lqcat cluster --help)

netcat for LightQ, with kcat's flags: where kcat has a flag for a thing, lqcat uses the same
letter and meaning.

Connection and credentials:
  -b HOST[:PORT][,...]    broker, or a comma-separated list of a cluster's brokers (the first
                          that answers is used, and tells where each partition's leader is;
                          default $LIGHTQ_BROKER or ` + DefaultBroker + `; the port defaults
                          to ` + brokeraddr.DefaultPort + `)
  -X KEY=VALUE            kcat's client options: bootstrap.servers (or metadata.broker.list),
                          sasl.username, sasl.password, client.id, session.timeout.ms (a
                          group member's), socket.connection.setup.timeout.ms,
                          delivery.timeout.ms (or message.timeout.ms); topic create takes
                          topic options too. An unknown key is an error.
  TLS (the broker's TLS port, its tls-addr), with kcat's -X names:
    -X security.protocol=ssl          connect with TLS (plaintext: the default)
    -X ssl.ca.location=FILE           CA certificates that verify the broker (PEM; default:
                                      the system's)
    -X ssl.certificate.location=FILE -X ssl.key.location=FILE
                                      a client certificate; when the broker verifies it, it
                                      stands for the user and password
    -X ssl.endpoint.identification.name=NAME
                                      the name the broker's certificate must carry (default:
                                      the host of -b)
    -X enable.ssl.certificate.verification=false
                                      accept any broker certificate: tests only, the traffic
                                      is then open to whoever sits in between
  --user U --password P   a user with roles on topics (default $LIGHTQ_USER, $LIGHTQ_PASSWORD)
  --admin-user U --admin-password P
                          an admin (default $LIGHTQ_ADMIN_USER or "admin", $LIGHTQ_ADMIN_PASSWORD)
  Produce, consume, -L, stats and group use the user when a password is given for it, else
  the admin; topic create and delete, user, acl and cluster need an admin. Credentials on the
  command line win over the environment: with --admin-user/--admin-password and no
  --user/--password, $LIGHTQ_USER and $LIGHTQ_PASSWORD are ignored. Prefer the environment to flags
  for passwords (flags show in ps). lqcat never prints a password. These flags, -J, -q, -v
  and -X may come before a subcommand too: lqcat -b HOST:PORT topic list.

Produce (-P):
  -D DELIM   message delimiter (default \n); escapes \n \r \t \0 \\ \xNN
  -K DELIM   key delimiter: the bytes before its first occurrence are the key
  -k KEY     a fixed key for every message (a -K key takes precedence)
  -p N       partition; it overrides a JSON partition (default, and -1: the key's hash,
             else round robin)
  -H N=V     add a header to every message (repeatable)
  -z CODEC   compression: none, s2 or zstd (snappy is taken as s2)
  -l         one message per FILE (whole files), instead of one per line
  -J         input lines are JSON objects as -C -J prints them
  -c N       stop after N messages
  --acks L   none, written (default) or durable
  Lines stream: stdin is never read whole. A line longer than the broker's MaxMessage fails
  alone. lqcat ends by flushing; failures are reported on stderr and the exit code is
  non-zero when any message was not acknowledged. When the broker restarts (or the
  connection breaks), lqcat reconnects by itself and sends again what was not acknowledged,
  in order per partition; a message not acknowledged within the delivery timeout (default
  2 minutes, -X delivery.timeout.ms=MS) fails, saying whether it may have been stored. Until
  the broker deduplicates, a message whose acknowledgement was lost may be stored twice.
  Unlike kcat, FILE arguments are read line by line like stdin, and -l sends each FILE as one
  message (kcat does the reverse).

Consume (-C):
  -o OFFSET  beginning | end | stored | N (absolute) | -N (N before the end, per
             partition) | s@MS (first message at or after unix ms MS) | e@MS (stop before
             the first message at or after MS; with MS in the past, also at the end of the log)
             stored (needs -G): the group's committed offsets, and the beginning where
             it has none; -G alone does the same.
             Default: beginning on durable topics; transient topics are live only (end).
  -p N       only partition N
  -c N       exit after N messages
  -e         exit at the end of the log (as it was when lqcat started). An -o N beyond
             the end is an error (exit 9) with -e as without it.
  -G GROUP   durable topic: be a member of the consumer group, like kcat's balanced
             consumer: the broker shares the partitions among the group's members (other
             lqcat -G, Go client consumers) and moves them as members come and go. Each
             partition starts at the group's committed offset (-o applies where it has none);
             lqcat commits the offset after the last message printed every second, when a
             partition is taken away, and at exit (SIGINT included: it flushes, commits and
             leaves the group). With -e a member exits once the partitions it holds are read.
             With -p N it reads partition N itself and only stores its offsets (refused while
             the group has members). Transient topic: a queue group, whose members share the
             messages. kcat's "lqcat -G GROUP TOPIC" works too (-C implied; one topic).
  -f FMT     output format: %t topic, %p partition, %o offset, %k key, %K key size,
             %s value, %S value size, %T timestamp (unix ms), %h headers (n=v,...), %%,
             and the escapes of -D
  -J         one JSON object per message (see below)
  -D, -K     without -f or -J, print KEY, -K, VALUE, -D (default: VALUE then \n)
  -u         flush stdout after every message
  --on-corrupt skip|stop
             a batch that cannot be decoded (damaged on disk, or stored before the broker
             checked records): skip it, saying so on stderr ("topic T partition P offsets
             A-B: cannot decode batch: REASON; skipped"), and exit 1 at the end (default);
             or stop there with an error. Records of a batch before its damage are printed.
  Transient topics stream live from now: only -o end is meaningful, and -e has no end.

JSON (-J): one object per line, the same for -C (output) and -P (input):
  {"topic":"t","partition":0,"offset":7,"timestamp":1700000000000,"key":"k","value":"v",
   "headers":[{"name":"h","value":"x"}]}
  Bytes that are not UTF-8 are base64 with "key_encoding", "value_encoding",
  "name_encoding" or "value_encoding" (in a header) set to "base64". "key" is null without a
  key. -P -J keeps partition and timestamp (-p overrides the partition) and ignores topic and
  offset, so -C -J | -P -J copies keys, values, headers, partitions and timestamps exactly.

Other flags:
  -J           JSON output for -L, topic list, stats, group, user list, acl list and
               cluster status
  -q           no warnings
  -v           say what was done (on stderr)
  -V           print the version (module, VCS revision and time, Go) and exit
  --timeout D  connect timeout (default 10s)

Exit codes:
  0 ok                          5 unknown topic, partition or user
  1 failure, or some messages   6 message too large
    not acknowledged (-P) or    7 not supported (topic kind, or a missing broker feature)
    skipped as undecodable (-C)
  2 usage                       8 topic or user already exists
  3 cannot connect / lost       9 offset out of range
  4 authentication failed or not authorized

Examples:
  export LIGHTQ_USER=app LIGHTQ_PASSWORD=secret
  seq 10 | lqcat -P -t events
  lqcat -P -t events -K : <<< 'user-7:logged in'
  lqcat -C -t events -o beginning -e -f '%p/%o %k=%s\n'
  lqcat -C -t events -o -10 -e -J > events.json
  lqcat -P -t events-copy -J events.json
  lqcat -C -t live -c 1            # transient: wait for the next message
  lqcat -L -G billing
  LIGHTQ_ADMIN_PASSWORD=$(cat data/admin-password) lqcat topic create events \
      --partitions 3 --kind durable --fsync always --retention 7d --user app --password secret
  lqcat user create billing < billing-password.txt
  lqcat acl grant billing -t events --role consume
`

// common are the flags every mode has.
type common struct {
	broker                   string
	user, password           string
	adminUser, adminPassword string
	json, quiet, verbose     bool
	timeout                  time.Duration
	clientName               string        // -X client.id; "lqcat" when empty
	sessionTimeout           time.Duration // -X session.timeout.ms: a group member's; 0: the broker's
	deliveryTimeout          time.Duration // -X delivery.timeout.ms; the client's default when 0
	x                        listFlag      // -X key=value: client options (see clientOptions), else topic options
	topicOptions             []string      // the -X values that are not client options, after resolve
	// creatingTopic is set by topic create, where -X may be a topic option too and
	// --user/--password (or the environment's) name the new topic's user rather than a login.
	creatingTopic bool
	// adminCommand is set by the user and acl commands, which connect as the admin: the
	// environment's topic user is not read, and --password (never $LIGHTQ_PASSWORD) is the
	// new password of user create and passwd.
	adminCommand bool

	// Credentials given on the command line (flags or -X), which win over the environment.
	userGiven, adminGiven bool

	tls tlsSettings // -X security.protocol, ssl.* (tls.go)
}

func (c *common) register(fs *flag.FlagSet) {
	onceVar(fs, &c.broker, "b", "broker host:port, or a comma-separated list (default $LIGHTQ_BROKER or "+DefaultBroker+")")
	onceVar(fs, &c.user, "user", "topic user (default $LIGHTQ_USER)")
	onceVar(fs, &c.password, "password", "topic user's password (default $LIGHTQ_PASSWORD)")
	onceVar(fs, &c.adminUser, "admin-user", "admin user (default $LIGHTQ_ADMIN_USER or admin)")
	onceVar(fs, &c.adminPassword, "admin-password", "admin password (default $LIGHTQ_ADMIN_PASSWORD)")
	fs.Var(&c.x, "X", "key=value client option")
	fs.BoolVar(&c.json, "J", false, "JSON")
	fs.BoolVar(&c.quiet, "q", false, "no warnings")
	fs.BoolVar(&c.verbose, "v", false, "say what was done")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "connect timeout")
}

// resolve applies the -X client options and fills what the command line left empty from the
// environment. Credentials on the command line win: given the admin's (--admin-user or
// --admin-password) and no topic user's, $LIGHTQ_USER and $LIGHTQ_PASSWORD are not used, so
// "lqcat topic list --admin-password P" logs in as the admin even with a topic user in the
// environment.
func (c *common) resolve(getenv func(string) string) error {
	rest, err := c.applyClientOptions()
	if err != nil {
		return err
	}
	if err := c.tls.check(); err != nil {
		return err
	}
	if !c.creatingTopic {
		if err := noTopicOptions(rest); err != nil {
			return err
		}
	}
	c.topicOptions = rest
	c.userGiven = c.user != "" || c.password != ""
	c.adminGiven = c.adminUser != "" || c.adminPassword != ""
	if c.adminCommand || c.adminGiven && !c.userGiven && !c.creatingTopic {
		getenv = withoutTopicUser(getenv)
	}
	orEnv := func(v *string, env, def string) {
		if *v == "" {
			*v = getenv(env)
		}
		if *v == "" {
			*v = def
		}
	}
	orEnv(&c.broker, "LIGHTQ_BROKER", DefaultBroker)
	c.broker = brokeraddr.ListWithDefaultPort(c.broker)
	orEnv(&c.user, "LIGHTQ_USER", "")
	orEnv(&c.password, "LIGHTQ_PASSWORD", "")
	orEnv(&c.adminPassword, "LIGHTQ_ADMIN_PASSWORD", "")
	orEnv(&c.adminUser, "LIGHTQ_ADMIN_USER", "admin")
	if c.password != "" && c.user == "" && !c.adminCommand {
		return usageErr("a topic password needs a user: --user or $LIGHTQ_USER")
	}
	if c.timeout <= 0 {
		return usageErr("--timeout must be positive")
	}
	return nil
}

// withoutTopicUser is getenv without $LIGHTQ_USER and $LIGHTQ_PASSWORD.
func withoutTopicUser(getenv func(string) string) func(string) string {
	return func(k string) string {
		if k == "LIGHTQ_USER" || k == "LIGHTQ_PASSWORD" {
			return ""
		}
		return getenv(k)
	}
}

// runner holds what one Main call works with.
type runner struct {
	getenv  func(string) string
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
	secrets []string
	c       common
}

// Main runs lqcat with args (without the program name) and returns the exit code (see the
// Exit constants). stdin feeds -P; getenv is os.Getenv in the binary.
func Main(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	r := &runner{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr}
	err := r.run(ctx, args)
	if err == nil || errors.Is(err, errHelp) {
		return ExitOK
	}
	r.secrets = append(r.secrets, r.c.password, r.c.adminPassword)
	fmt.Fprintln(stderr, redact("lqcat: "+err.Error()+hint(err), r.secrets))
	return exitCode(err)
}

func (r *runner) run(ctx context.Context, args []string) error {
	args = commonFlagsFirst(args)
	if len(args) > 0 {
		switch args[0] {
		case "topic":
			return r.topicCmd(ctx, args[1:])
		case "stats":
			return r.statsCmd(ctx, args[1:])
		case "group":
			return r.groupCmd(ctx, args[1:])
		case "user":
			return r.userCmd(ctx, args[1:])
		case "acl":
			return r.aclCmd(ctx, args[1:])
		case "cluster":
			return r.clusterCmd(ctx, args[1:])
		case "help", "-h", "-help", "--help":
			io.WriteString(r.stdout, usage)
			return errHelp
		case "-V", "--version", "-version":
			fmt.Fprintln(r.stdout, version.String("lqcat"))
			return errHelp
		}
	}
	return r.kcatMode(ctx, args)
}

// commonFlagsFirst turns "lqcat -b HOST topic create ..." (the common flags before a
// subcommand, the way kcat users put -b first) into "lqcat topic create ... -b HOST", which
// the subcommands parse. Anything else is returned as it is: only common flags (see
// common.register) may come before the subcommand's name, so "-C -t topic" stays kcat mode.
func commonFlagsFirst(args []string) []string {
	takesValue := map[string]bool{"b": true, "user": true, "password": true, "admin-user": true, "admin-password": true, "timeout": true, "X": true}
	isBool := map[string]bool{"J": true, "q": true, "v": true}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
			switch a {
			case "topic", "stats", "group", "user", "acl", "cluster":
				if i == 0 {
					return args
				}
				out := append([]string{a}, args[i+1:]...)
				return append(out, args[:i]...)
			}
			return args
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case isBool[name]:
		case takesValue[name] && hasValue:
		case takesValue[name]:
			i++ // its value
		default:
			return args
		}
	}
	return args
}

// warn prints a warning unless -q.
func (r *runner) warn(format string, args ...any) {
	if !r.c.quiet {
		fmt.Fprintln(r.stderr, redact("lqcat: warning: "+fmt.Sprintf(format, args...), r.secrets))
	}
}

// info prints with -v.
func (r *runner) info(format string, args ...any) {
	if r.c.verbose {
		fmt.Fprintln(r.stderr, "lqcat: "+fmt.Sprintf(format, args...))
	}
}

// newFlagSet returns a flag set that reports errors on stderr with a pointer to --help.
// The caller prints help itself (see parse).
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parse parses args with flags and positional arguments mixed (as getopt does), and
// accepts kcat's glued short values ("-c1", "-obeginning"). Help goes to stdout.
func (r *runner) parse(fs *flag.FlagSet, help string, args []string) ([]string, error) {
	args = unglue(fs, args)
	var pos []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			io.WriteString(r.stdout, help)
			return nil, errHelp
		}
		if err != nil {
			return nil, usageErr("%v (lqcat --help explains the flags)", err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// unglue splits "-c1" into "-c", "1" when -c is a one-letter flag that takes a value and
// "c1" is not itself a flag, as kcat (getopt) allows.
func unglue(fs *flag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' && !strings.Contains(a, "=") && fs.Lookup(a[1:]) == nil {
			if f := fs.Lookup(a[1:2]); f != nil && !isBool(f) {
				out = append(out, a[:2], a[2:])
				continue
			}
		}
		out = append(out, a)
	}
	return out
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// credentials says whose credentials a connection logs in with.
type credentials int

const (
	// topicUserOrAdmin: the topic user's when their password is given, else the admin's.
	topicUserOrAdmin credentials = iota
	// adminOnly: the admin's (topic create and delete).
	adminOnly
)

// connect dials the broker and logs in with the credentials who names.
func (r *runner) connect(ctx context.Context, who credentials) (*client.Conn, error) {
	return r.connectTo(ctx, r.c.broker, who)
}

// connectTo is connect to the broker at addr (another broker of -b's cluster).
func (r *runner) connectTo(ctx context.Context, addr string, who credentials) (*client.Conn, error) {
	c := &r.c
	admin := who == adminOnly
	user, pass := c.user, c.password
	if admin || pass == "" {
		user, pass = c.adminUser, c.adminPassword
	}
	if pass == "" && c.tls.certAuth() {
		user = "" // the client certificate names the user (the broker's tls-client-ca)
	} else if pass == "" {
		if admin {
			return nil, usageErr("this needs the admin's credentials: --admin-password or $LIGHTQ_ADMIN_PASSWORD")
		}
		return nil, usageErr("no credentials: give a topic user (--user/--password or $LIGHTQ_USER/$LIGHTQ_PASSWORD) or the admin ($LIGHTQ_ADMIN_PASSWORD)")
	}
	name := c.clientName
	if name == "" {
		name = "lqcat"
	}
	conn, err := client.Dial(ctx, addr, client.Options{User: user, Password: pass, ClientName: name, DialTimeout: c.timeout, TLS: c.tls.options()})
	if err == nil {
		return conn, nil
	}
	var we *wire.Error
	if errors.As(err, &we) && !errors.Is(err, client.ErrConnectionLost) {
		switch we.Code {
		case wire.CodeAuthFailed:
			return nil, withCode(ExitAuth, fmt.Errorf("authentication failed for user %q at %s: wrong user or password", user, addr))
		case wire.CodeTooManyAttempts:
			return nil, withCode(ExitAuth, fmt.Errorf("%s refuses this login for a while (too many failed attempts): %s", addr, we.Message))
		}
		return nil, withCode(ExitConnect, fmt.Errorf("cannot connect to %s: %w", addr, err))
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, withCode(ExitConnect, fmt.Errorf("cannot connect to %s: %s", addr, dialCause(err)))
}

// reqCtx bounds one administrative request.
func (r *runner) reqCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, 30*time.Second)
}

// request connects for a short administrative exchange: it returns the connection, a context
// bounded by the request timeout, and done, which releases both.
func (r *runner) request(ctx context.Context, who credentials) (*client.Conn, context.Context, func(), error) {
	conn, err := r.connect(ctx, who)
	if err != nil {
		return nil, nil, nil, err
	}
	rctx, cancel := r.reqCtx(ctx)
	return conn, rctx, func() { cancel(); conn.Close() }, nil
}

// topicMetadata describes one topic, with exit-code-carrying errors.
func topicMetadata(ctx context.Context, conn *client.Conn, topic string) (wire.TopicMetadata, error) {
	if err := wire.ValidTopicName(topic); err != nil {
		return wire.TopicMetadata{}, usageErr("-t: %v", err)
	}
	mds, err := conn.Metadata(ctx, topic)
	if err != nil {
		return wire.TopicMetadata{}, fmt.Errorf("topic %q: %w", topic, err)
	}
	if len(mds) != 1 || mds[0].Name != topic {
		return wire.TopicMetadata{}, withCode(ExitUnknown, fmt.Errorf("topic %q: no such topic", topic))
	}
	return mds[0], nil
}

// partFlag is -p: a partition, or -1, and whether it was given. Repeating it with another
// partition is an error.
type partFlag struct {
	v   int32
	set bool
}

// within reports (as an UNKNOWN exit) a partition given that topic, of n partitions, lacks.
func (p partFlag) within(topic string, n int) error {
	if p.set && int(p.v) >= n {
		return withCode(ExitUnknown, fmt.Errorf("topic %q has partitions 0-%d, not %d", topic, n-1, p.v))
	}
	return nil
}

func (p *partFlag) String() string {
	if !p.set {
		return ""
	}
	return strconv.Itoa(int(p.v))
}

func (p *partFlag) Set(s string) error {
	v, err := strconv.ParseInt(s, 10, 32)
	if err != nil || v < -1 || v >= wire.MaxPartitions {
		return fmt.Errorf("partition %q: want 0-%d, or -1", s, wire.MaxPartitions-1)
	}
	if p.set && p.v != int32(v) {
		return fmt.Errorf("given twice with different values (%d, then %d): give it once", p.v, v)
	}
	p.v, p.set = int32(v), true
	return nil
}

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }
