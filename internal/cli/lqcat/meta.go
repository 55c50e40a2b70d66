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
	Partition uint32   `json:"partition"`
	Leader    *uint32  `json:"leader,omitempty"` // 0: no leader now (an election)
	Replicas  []uint32 `json:"replicas,omitempty"`
	Earliest  int64    `json:"earliest"`
	Latest    int64    `json:"latest"`
	Committed *int64   `json:"committed,omitempty"` // with -G: -1 when the group has none
	Lag       *int64   `json:"lag,omitempty"`
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

// jsonBroker is one broker in -L -J output.
type jsonBroker struct {
	NodeID  uint32 `json:"node_id"`
	Addr    string `json:"addr"`
	TLSAddr string `json:"tls_addr,omitempty"`
}

// metadataList is -L: the cluster's brokers, every topic the credentials may see (or -t's),
// its partitions with their leader, replicas and offsets, and with -G the group's committed
// offsets and lag on durable topics. A broker from before replication tells no leaders.
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
	cmd, err := conn.ClusterMetadata(ctx, names...)
	if err != nil {
		if topic != "" {
			return fmt.Errorf("topic %q: %w", topic, err)
		}
		return err
	}
	mds := cmd.Topics
	from := r.c.broker // the answering broker: its node id and address, when it says
	for _, b := range cmd.Brokers {
		if b.NodeID == cmd.NodeID && !cmd.Legacy {
			from = fmt.Sprintf("%d at %s", b.NodeID, b.Addr)
		}
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
				if !cmd.Legacy {
					leader := p.Leader
					jp.Leader, jp.Replicas = &leader, p.Replicas
				}
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
		out := map[string]any{"broker": r.c.broker, "broker_version": conn.BrokerVersion(), "topics": topics}
		if !cmd.Legacy {
			brokers := []jsonBroker{}
			for _, b := range cmd.Brokers {
				brokers = append(brokers, jsonBroker{NodeID: b.NodeID, Addr: b.Addr, TLSAddr: b.TLSAddr})
			}
			out["node_id"], out["brokers"] = cmd.NodeID, brokers
		}
		return writeJSONLine(r.stdout, out)
	}
	var b strings.Builder
	if topic != "" {
		fmt.Fprintf(&b, "Metadata for topic %q (from broker %s, version %s):\n", topic, from, conn.BrokerVersion())
	} else {
		fmt.Fprintf(&b, "Metadata for all topics (from broker %s, version %s):\n", from, conn.BrokerVersion())
	}
	if !cmd.Legacy {
		fmt.Fprintf(&b, " %d %s:\n", len(cmd.Brokers), plural(len(cmd.Brokers), "broker", "brokers"))
		for _, br := range cmd.Brokers {
			addr := br.Addr
			if addr == "" {
				addr = "(no plaintext listener)"
			}
			fmt.Fprintf(&b, "  broker %d at %s", br.NodeID, addr)
			if br.TLSAddr != "" {
				fmt.Fprintf(&b, ", TLS at %s", br.TLSAddr)
			}
			b.WriteByte('\n')
		}
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
			fmt.Fprintf(&b, "    partition %d: ", p.ID)
			if !cmd.Legacy {
				if p.Leader == 0 {
					b.WriteString("no leader (an election), ")
				} else {
					fmt.Fprintf(&b, "leader %d, ", p.Leader)
				}
				fmt.Fprintf(&b, "replicas %s, ", nodeList(p.Replicas))
			}
			fmt.Fprintf(&b, "offsets %d..%d (%d %s)", p.StartOffset, p.EndOffset, n, plural(int(n), "message", "messages"))
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

// nodeList is "2,3,1".
func nodeList(ids []uint32) string {
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, id)
	}
	return b.String()
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
