package lqcat

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

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
	conn, ctx, done, err := r.request(ctx, topicUserOrAdmin)
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
