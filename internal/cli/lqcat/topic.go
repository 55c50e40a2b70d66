package lqcat

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/internal/size"
	"github.com/lightq/lightq/wire"
)

const topicHelp = `Usage:
  lqcat topic create NAME --partitions N --kind transient|durable [--user U --password P]
        [--retention DURATION|SIZE] [--fsync always|interval=DURATION|never]
        [--segment-bytes SIZE] [--segment-ms DURATION] [--ring-bytes SIZE] [--ring-slots N]
        [-X key=value ...]
  lqcat topic delete NAME
  lqcat topic list [-J]

create and delete need the admin's credentials (--admin-password or $LIGHTQ_ADMIN_PASSWORD).
--user and --password (default $LIGHTQ_USER, $LIGHTQ_PASSWORD) name a user that gets both
roles, produce and consume, on the new topic: it is created when new; an existing user must
be given its password. Without them the topic has no users yet: lqcat acl grant gives roles
on it. delete takes every role on the topic with it; its users stay (lqcat user delete).

--retention takes a duration (90m, 24h, 7d: retention.ms) or a size (500MiB, 10GB:
retention.bytes); give it twice for both. Sizes take B, KB, MB, GB, TB (powers of 1000) or
KiB, MiB, GiB, TiB. -X passes any topic option the broker knows (PROTOCOL.md, CREATE_TOPIC);
the size options (segment.bytes, retention.bytes, ring.bytes) take units there too.
Exit code 8 when the topic exists.

Example:
  lqcat topic create orders --partitions 3 --kind durable --fsync interval=100ms \
      --retention 7d --retention 10GiB --user shop --password "$SHOP_PASSWORD"
`

func (r *runner) topicCmd(ctx context.Context, args []string) error {
	if err := r.subcommandHelp(args, topicHelp, "topic: say create, delete or list"); err != nil {
		return err
	}
	sub := args[0]
	fs := newFlagSet("topic " + sub)
	r.c.register(fs)
	var (
		partitions int
		kind       string
		optFlags   topicFlags
	)
	if sub == "create" {
		partitions = 1
		partitionsSet := new(bool)
		onceIntVar(fs, &partitions, partitionsSet, "partitions", "partitions")
		onceIntVar(fs, &partitions, partitionsSet, "n", "partitions")
		kind = "transient"
		onceVar(fs, &kind, "kind", "kind")
		optFlags.register(fs)
	}
	pos, err := r.parse(fs, topicHelp, args[1:])
	if err != nil {
		return err
	}
	r.c.creatingTopic = sub == "create"
	if err := r.c.resolve(r.getenv); err != nil {
		return err
	}
	optFlags.extra = r.c.topicOptions
	switch sub {
	case "create":
		if len(pos) != 1 {
			return usageErr("topic create takes one NAME")
		}
		cfg := client.TopicConfig{Name: pos[0], Partitions: partitions, User: r.c.user, Password: r.c.password}
		if err := wire.ValidTopicName(cfg.Name); err != nil {
			return usageErr("%v", err)
		}
		if partitions < 1 || partitions > wire.MaxPartitions {
			return usageErr("--partitions %d: want 1-%d", partitions, wire.MaxPartitions)
		}
		if cfg.Kind, err = wire.ParseKind(kind); err != nil {
			return usageErr("--kind: %v", err)
		}
		if (cfg.User == "") != (cfg.Password == "") {
			return usageErr("topic create: give the topic's user and its password (--user and --password, or $LIGHTQ_USER and $LIGHTQ_PASSWORD), or neither")
		}
		if cfg.Options, err = optFlags.options(cfg.Kind); err != nil {
			return err
		}
		conn, ctx, done, err := r.request(ctx, adminOnly)
		if err != nil {
			return err
		}
		defer done()
		if err := conn.CreateTopic(ctx, cfg); err != nil {
			return fmt.Errorf("topic create %q: %w", cfg.Name, err)
		}
		if !r.c.quiet {
			user := fmt.Sprintf("user %q", cfg.User)
			if cfg.User == "" {
				user = "no users yet"
			}
			fmt.Fprintf(r.stdout, "created %s topic %q with %d %s, %s\n", cfg.Kind, cfg.Name, partitions, plural(partitions, "partition", "partitions"), user)
		}
		return nil
	case "delete":
		if len(pos) != 1 {
			return usageErr("topic delete takes one NAME")
		}
		if err := wire.ValidTopicName(pos[0]); err != nil {
			return usageErr("%v", err)
		}
		conn, ctx, done, err := r.request(ctx, adminOnly)
		if err != nil {
			return err
		}
		defer done()
		if err := conn.DeleteTopic(ctx, pos[0]); err != nil {
			return fmt.Errorf("topic delete %q: %w", pos[0], err)
		}
		if !r.c.quiet {
			fmt.Fprintf(r.stdout, "deleted topic %q\n", pos[0])
		}
		return nil
	case "list":
		if len(pos) != 0 {
			return usageErr("topic list takes no arguments")
		}
		return r.topicList(ctx)
	}
	return usageErr("topic %q: want create, delete or list", sub)
}

func (r *runner) topicList(ctx context.Context) error {
	conn, ctx, done, err := r.request(ctx, topicUserOrAdmin)
	if err != nil {
		return err
	}
	defer done()
	mds, err := conn.Metadata(ctx)
	if err != nil {
		return err
	}
	if r.c.json {
		for _, md := range mds {
			jt := jsonTopic{Topic: md.Name, Kind: md.Kind.String(), User: md.User, Options: optionMap(md.Options), Partitions: len(md.Partitions)}
			if err := writeJSONLine(r.stdout, jt); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(r.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tKIND\tPARTITIONS\tUSER\tOPTIONS")
	for _, md := range mds {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", md.Name, md.Kind, len(md.Partitions), md.User, optionText(md.Options))
	}
	return tw.Flush()
}

// topicFlags are topic create's option flags as given; options turns them into the broker's
// topic options.
type topicFlags struct {
	fsync        string   // --fsync: the fsync option's value
	retention    listFlag // --retention, each a duration (retention.ms) or a size (retention.bytes)
	segmentBytes string   // --segment-bytes: a size
	segmentAge   string   // --segment-ms: a duration or days
	ringBytes    string   // --ring-bytes: a size
	ringSlots    int      // --ring-slots; 0: the broker's default
	extra        []string // the -X key=value that are not client options (common.topicOptions)
}

// register adds the flags to fs.
func (f *topicFlags) register(fs *flag.FlagSet) {
	onceVar(fs, &f.fsync, "fsync", "fsync policy")
	fs.Var(&f.retention, "retention", "retention")
	onceVar(fs, &f.segmentBytes, "segment-bytes", "segment size")
	onceVar(fs, &f.segmentAge, "segment-ms", "segment age")
	onceVar(fs, &f.ringBytes, "ring-bytes", "ring size")
	onceIntVar(fs, &f.ringSlots, new(bool), "ring-slots", "ring slots")
}

// options turns the flags into broker options, checked against the kind.
func (f *topicFlags) options(kind wire.Kind) ([]wire.Option, error) {
	var opts []wire.Option
	durableOnly := func(flag string) error {
		if kind != wire.KindDurable {
			return usageErr("%s applies to durable topics only (--kind durable)", flag)
		}
		return nil
	}
	if f.fsync != "" {
		if err := durableOnly("--fsync"); err != nil {
			return nil, err
		}
		opts = append(opts, wire.Option{Key: wire.OptionFsync, Value: f.fsync})
	}
	for _, v := range f.retention {
		if err := durableOnly("--retention"); err != nil {
			return nil, err
		}
		if n, ok := parseSize(v); ok {
			opts = append(opts, wire.Option{Key: wire.OptionRetentionBytes, Value: strconv.FormatInt(n, 10)})
			continue
		}
		ms, err := parseDurationMs(v)
		if err != nil {
			return nil, usageErr("--retention %q: want a duration (24h, 7d) or a size (10GiB)", v)
		}
		opts = append(opts, wire.Option{Key: wire.OptionRetentionMs, Value: strconv.FormatInt(ms, 10)})
	}
	if f.segmentBytes != "" {
		if err := durableOnly("--segment-bytes"); err != nil {
			return nil, err
		}
		n, ok := parseSize(f.segmentBytes)
		if !ok {
			return nil, usageErr("--segment-bytes %q: want a size", f.segmentBytes)
		}
		opts = append(opts, wire.Option{Key: wire.OptionSegmentBytes, Value: strconv.FormatInt(n, 10)})
	}
	if f.segmentAge != "" {
		if err := durableOnly("--segment-ms"); err != nil {
			return nil, err
		}
		ms, err := parseDurationMs(f.segmentAge)
		if err != nil {
			return nil, usageErr("--segment-ms %q: want a duration", f.segmentAge)
		}
		opts = append(opts, wire.Option{Key: wire.OptionSegmentMs, Value: strconv.FormatInt(ms, 10)})
	}
	if f.ringBytes != "" {
		if kind != wire.KindTransient {
			return nil, usageErr("--ring-bytes applies to transient topics only")
		}
		n, ok := parseSize(f.ringBytes)
		if !ok {
			return nil, usageErr("--ring-bytes %q: want a size", f.ringBytes)
		}
		opts = append(opts, wire.Option{Key: wire.OptionRingBytes, Value: strconv.FormatInt(n, 10)})
	}
	if f.ringSlots != 0 {
		if kind != wire.KindTransient {
			return nil, usageErr("--ring-slots applies to transient topics only")
		}
		opts = append(opts, wire.Option{Key: wire.OptionRingSlots, Value: strconv.Itoa(f.ringSlots)})
	}
	for _, kv := range f.extra {
		k, v, ok := splitHeader(kv)
		if !ok {
			return nil, usageErr("-X %q: want key=value", kv)
		}
		v, err := size.TopicOption(k, v)
		if err != nil {
			return nil, usageErr("-X %v", err)
		}
		opts = append(opts, wire.Option{Key: k, Value: v})
	}
	return opts, nil
}

// parseSize reads "1024", "64KiB", "10GB" (see package size); ok is false unless it is a size.
func parseSize(s string) (int64, bool) {
	n, err := size.Parse(s)
	return n, err == nil
}

// parseDurationMs reads a Go duration, or whole days as "7d", in milliseconds.
func parseDurationMs(s string) (int64, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(d, 10, 64)
		if err != nil || n < 0 || n > 1e6 {
			return 0, fmt.Errorf("bad days %q", s)
		}
		return n * 86_400_000, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("bad duration %q", s)
	}
	return d.Milliseconds(), nil
}
