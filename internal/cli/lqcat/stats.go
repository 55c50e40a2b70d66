package lqcat

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/lightq/lightq/wire"
)

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
	conn, ctx, done, err := r.request(ctx, topicUserOrAdmin)
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
