package lqcat

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// jsonPartition is one partition in -L -J output.
type jsonPartition struct {
	Partition uint32 `json:"partition"`
	Earliest  int64  `json:"earliest"`
	Latest    int64  `json:"latest"`
	Committed *int64 `json:"committed,omitempty"` // with -G: -1 when the group has none
	Lag       *int64 `json:"lag,omitempty"`
}

type jsonTopic struct {
	Topic      string            `json:"topic"`
	Kind       string            `json:"kind"`
	User       string            `json:"user"`
	Options    map[string]string `json:"options"`
	Partitions any               `json:"partitions"` // a count in topic list, a list in -L
}

func optionMap(opts []wire.Option) map[string]string {
	m := make(map[string]string, len(opts))
	for _, o := range opts {
		m[o.Key] = o.Value
	}
	return m
}

func optionText(opts []wire.Option) string {
	var b strings.Builder
	for i, o := range opts {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(o.Key + "=" + o.Value)
	}
	return b.String()
}

func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// metadataList is -L: every topic the credentials may see (or -t's), its partitions and
// offsets, and with -G the group's committed offsets and lag on durable topics.
func (r *runner) metadataList(ctx context.Context, topic, group string) error {
	if topic != "" {
		if err := wire.ValidTopicName(topic); err != nil {
			return usageErr("-t: %v", err)
		}
	}
	conn, ctx, done, err := r.request(ctx, false)
	if err != nil {
		return err
	}
	defer done()
	var names []string
	if topic != "" {
		names = []string{topic}
	}
	mds, err := conn.Metadata(ctx, names...)
	if err != nil {
		if topic != "" {
			return fmt.Errorf("topic %q: %w", topic, err)
		}
		return err
	}
	committed := make(map[string][]int64)
	if group != "" {
		for _, md := range mds {
			if md.Kind != wire.KindDurable {
				continue
			}
			offs, err := fetchCommitted(ctx, conn, group, md)
			if err != nil {
				return err
			}
			committed[md.Name] = offs
		}
	}
	if r.c.json {
		var topics []jsonTopic
		for _, md := range mds {
			var parts []jsonPartition
			for i, p := range md.Partitions {
				jp := jsonPartition{Partition: p.ID, Earliest: p.StartOffset, Latest: p.EndOffset}
				if offs, ok := committed[md.Name]; ok {
					c := offs[i]
					jp.Committed = &c
					if c >= 0 {
						lag := max(p.EndOffset-c, 0)
						jp.Lag = &lag
					}
				}
				parts = append(parts, jp)
			}
			topics = append(topics, jsonTopic{Topic: md.Name, Kind: md.Kind.String(), User: md.User, Options: optionMap(md.Options), Partitions: parts})
		}
		if topics == nil {
			topics = []jsonTopic{}
		}
		return writeJSONLine(r.stdout, map[string]any{"broker": r.c.broker, "broker_version": conn.BrokerVersion(), "topics": topics})
	}
	var b strings.Builder
	if topic != "" {
		fmt.Fprintf(&b, "Metadata for topic %q (from broker %s, version %s):\n", topic, r.c.broker, conn.BrokerVersion())
	} else {
		fmt.Fprintf(&b, "Metadata for all topics (from broker %s, version %s):\n", r.c.broker, conn.BrokerVersion())
	}
	fmt.Fprintf(&b, " %d %s:\n", len(mds), plural(len(mds), "topic", "topics"))
	for _, md := range mds {
		fmt.Fprintf(&b, "  topic %q: %s, user %q, %d %s", md.Name, md.Kind, md.User, len(md.Partitions), plural(len(md.Partitions), "partition", "partitions"))
		if len(md.Options) > 0 {
			fmt.Fprintf(&b, ", options %s", optionText(md.Options))
		}
		b.WriteString(":\n")
		offs, hasGroup := committed[md.Name]
		for i, p := range md.Partitions {
			n := p.EndOffset - p.StartOffset
			fmt.Fprintf(&b, "    partition %d: offsets %d..%d (%d %s)", p.ID, p.StartOffset, p.EndOffset, n, plural(int(n), "message", "messages"))
			if hasGroup {
				if c := offs[i]; c >= 0 {
					fmt.Fprintf(&b, ", group %q at %d, lag %d", group, c, max(p.EndOffset-c, 0))
				} else {
					fmt.Fprintf(&b, ", group %q: nothing committed", group)
				}
			}
			b.WriteByte('\n')
		}
	}
	_, err = io.WriteString(r.stdout, b.String())
	return err
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// fetchCommitted returns a group's committed offset of every partition of md, -1 for none.
func fetchCommitted(ctx context.Context, conn *client.Conn, group string, md wire.TopicMetadata) ([]int64, error) {
	offs := make([]int64, len(md.Partitions))
	for i, p := range md.Partitions {
		off, err := conn.FetchCommitted(ctx, wire.FetchCommitted{Group: group, Topic: md.Name, Partition: p.ID})
		if err != nil {
			return nil, fmt.Errorf("group %q, topic %q partition %d: %w", group, md.Name, p.ID, err)
		}
		offs[i] = off
	}
	return offs, nil
}

const topicHelp = `Usage:
  lqcat topic create NAME --partitions N --kind transient|durable --user U --password P
        [--retention DURATION|SIZE] [--fsync always|interval=DURATION|never]
        [--segment-bytes SIZE] [--segment-ms DURATION] [--ring-bytes SIZE] [--ring-slots N]
        [-X key=value ...]
  lqcat topic delete NAME
  lqcat topic list [-J]

create and delete need the admin's credentials (--admin-password or $LIGHTQ_ADMIN_PASSWORD).
--user and --password name the topic's user (default $LIGHTQ_USER, $LIGHTQ_PASSWORD): it is
created when new; an existing user must be given its password.

--retention takes a duration (90m, 24h, 7d: retention.ms) or a size (500MiB, 10GB:
retention.bytes); give it twice for both. Sizes take B, KB, MB, GB, TB (powers of 1000) or
KiB, MiB, GiB, TiB. -X passes any topic option the broker knows (PROTOCOL.md, CREATE_TOPIC).
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
		partitions                 int
		kind, fsync                string
		retention, extra           listFlag
		segBytes, segMs, ringBytes string
		ringSlots                  int
	)
	if sub == "create" {
		fs.IntVar(&partitions, "partitions", 1, "partitions")
		fs.IntVar(&partitions, "n", 1, "partitions")
		fs.StringVar(&kind, "kind", "transient", "kind")
		fs.StringVar(&fsync, "fsync", "", "fsync policy")
		fs.Var(&retention, "retention", "retention")
		fs.StringVar(&segBytes, "segment-bytes", "", "segment size")
		fs.StringVar(&segMs, "segment-ms", "", "segment age")
		fs.StringVar(&ringBytes, "ring-bytes", "", "ring size")
		fs.IntVar(&ringSlots, "ring-slots", 0, "ring slots")
		fs.Var(&extra, "X", "key=value")
	}
	pos, err := r.parse(fs, topicHelp, args[1:])
	if err != nil {
		return err
	}
	if err := r.c.resolve(r.getenv); err != nil {
		return err
	}
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
		if cfg.User == "" || cfg.Password == "" {
			return usageErr("topic create needs the topic's user and password: --user and --password (or $LIGHTQ_USER, $LIGHTQ_PASSWORD)")
		}
		if cfg.Options, err = topicOptions(cfg.Kind, fsync, retention, segBytes, segMs, ringBytes, ringSlots, extra); err != nil {
			return err
		}
		conn, ctx, done, err := r.request(ctx, true)
		if err != nil {
			return err
		}
		defer done()
		if err := conn.CreateTopic(ctx, cfg); err != nil {
			return fmt.Errorf("topic create %q: %w", cfg.Name, err)
		}
		if !r.c.quiet {
			fmt.Fprintf(r.stdout, "created %s topic %q with %d %s, user %q\n", cfg.Kind, cfg.Name, partitions, plural(partitions, "partition", "partitions"), cfg.User)
		}
		return nil
	case "delete":
		if len(pos) != 1 {
			return usageErr("topic delete takes one NAME")
		}
		if err := wire.ValidTopicName(pos[0]); err != nil {
			return usageErr("%v", err)
		}
		conn, ctx, done, err := r.request(ctx, true)
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
	conn, ctx, done, err := r.request(ctx, false)
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

// topicOptions turns the create flags into broker options, checked against the kind.
func topicOptions(kind wire.Kind, fsync string, retention []string, segBytes, segMs, ringBytes string, ringSlots int, extra []string) ([]wire.Option, error) {
	var opts []wire.Option
	durableOnly := func(flag string) error {
		if kind != wire.KindDurable {
			return usageErr("%s applies to durable topics only (--kind durable)", flag)
		}
		return nil
	}
	if fsync != "" {
		if err := durableOnly("--fsync"); err != nil {
			return nil, err
		}
		opts = append(opts, wire.Option{Key: "fsync", Value: fsync})
	}
	for _, v := range retention {
		if err := durableOnly("--retention"); err != nil {
			return nil, err
		}
		if n, ok := parseSize(v); ok {
			opts = append(opts, wire.Option{Key: "retention.bytes", Value: strconv.FormatInt(n, 10)})
			continue
		}
		ms, err := parseDurationMs(v)
		if err != nil {
			return nil, usageErr("--retention %q: want a duration (24h, 7d) or a size (10GiB)", v)
		}
		opts = append(opts, wire.Option{Key: "retention.ms", Value: strconv.FormatInt(ms, 10)})
	}
	if segBytes != "" {
		if err := durableOnly("--segment-bytes"); err != nil {
			return nil, err
		}
		n, ok := parseSize(segBytes)
		if !ok {
			return nil, usageErr("--segment-bytes %q: want a size", segBytes)
		}
		opts = append(opts, wire.Option{Key: "segment.bytes", Value: strconv.FormatInt(n, 10)})
	}
	if segMs != "" {
		if err := durableOnly("--segment-ms"); err != nil {
			return nil, err
		}
		ms, err := parseDurationMs(segMs)
		if err != nil {
			return nil, usageErr("--segment-ms %q: want a duration", segMs)
		}
		opts = append(opts, wire.Option{Key: "segment.ms", Value: strconv.FormatInt(ms, 10)})
	}
	if ringBytes != "" {
		if kind != wire.KindTransient {
			return nil, usageErr("--ring-bytes applies to transient topics only")
		}
		n, ok := parseSize(ringBytes)
		if !ok {
			return nil, usageErr("--ring-bytes %q: want a size", ringBytes)
		}
		opts = append(opts, wire.Option{Key: "ring.bytes", Value: strconv.FormatInt(n, 10)})
	}
	if ringSlots != 0 {
		if kind != wire.KindTransient {
			return nil, usageErr("--ring-slots applies to transient topics only")
		}
		opts = append(opts, wire.Option{Key: "ring.slots", Value: strconv.Itoa(ringSlots)})
	}
	for _, kv := range extra {
		k, v, ok := splitHeader(kv)
		if !ok {
			return nil, usageErr("-X %q: want key=value", kv)
		}
		opts = append(opts, wire.Option{Key: k, Value: v})
	}
	return opts, nil
}

// parseSize reads "1024", "64KiB", "10GB"; ok is false unless it is a size.
func parseSize(s string) (int64, bool) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	mult := int64(1)
	num := s
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, false
	}
	return n * mult, true
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

const statsHelp = `Usage: lqcat stats [TOPIC] [-J]

Prints the broker's counters of TOPIC, or of every topic the credentials may see: messages and
bytes in and out, batches in, publishers, subscribers, queue size, dropped messages, rejected
batches (the set is the broker's). -J prints one JSON object per topic:
  {"topic":"events","counters":{"messages_in":10,...}}
`

func (r *runner) statsCmd(ctx context.Context, args []string) error {
	fs := newFlagSet("stats")
	r.c.register(fs)
	pos, err := r.parse(fs, statsHelp, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usageErr("stats takes at most one TOPIC")
	}
	topic := ""
	if len(pos) == 1 {
		topic = pos[0]
		if err := wire.ValidTopicName(topic); err != nil {
			return usageErr("%v", err)
		}
	}
	if err := r.c.resolve(r.getenv); err != nil {
		return err
	}
	conn, ctx, done, err := r.request(ctx, false)
	if err != nil {
		return err
	}
	defer done()
	stats, err := conn.Stats(ctx, topic)
	if err != nil {
		if topic != "" {
			return fmt.Errorf("topic %q: %w", topic, err)
		}
		return err
	}
	if topic != "" && len(stats) == 0 {
		return withCode(ExitUnknown, fmt.Errorf("topic %q: no such topic", topic))
	}
	if r.c.json {
		for _, ts := range stats {
			// Built by hand to keep the broker's counter order.
			name, _ := json.Marshal(ts.Name)
			b := append([]byte(`{"topic":`), name...)
			b = append(b, `,"counters":{`...)
			for i, c := range ts.Counters {
				if i > 0 {
					b = append(b, ',')
				}
				cn, _ := json.Marshal(c.Name)
				b = append(b, cn...)
				b = append(b, ':')
				b = strconv.AppendUint(b, c.Value, 10)
			}
			b = append(b, "}}\n"...)
			if _, err := r.stdout.Write(b); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(r.stdout, 0, 4, 2, ' ', 0)
	for _, ts := range stats {
		fmt.Fprintf(tw, "topic %q:\n", ts.Name)
		for _, c := range ts.Counters {
			fmt.Fprintf(tw, "  %s\t%d\n", c.Name, c.Value)
		}
	}
	return tw.Flush()
}
