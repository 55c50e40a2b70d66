package lqcat

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

const groupHelp = `Usage:
  lqcat group describe -G GROUP [-t TOPIC] [-p N] [-J]
  lqcat group reset -G GROUP -t TOPIC [-p N] --to-earliest|--to-latest|--to-offset N|--to-time MS [--dry-run]
  lqcat group list --groups G1,G2,... [-t TOPIC] [-J]

Consumer groups of durable topics are client-side: the broker stores a committed offset (the
next offset the group reads) per group, topic and partition, and has no request that lists
groups.

  describe  per partition: the committed offset, the latest offset and the lag (latest -
            committed), for TOPIC or every durable topic the credentials may see
  reset     commits new offsets for the group; --dry-run only prints them. --to-time MS is
            the first offset whose timestamp is at or after unix ms MS
  list      the broker cannot list groups: lqcat exits with code 7 unless --groups names the
            candidates, which it then checks, listing those with committed offsets

Example:
  lqcat group reset -G billing -t orders --to-offset 1200 -p 0
`

func (r *runner) groupCmd(ctx context.Context, args []string) error {
	if err := r.subcommandHelp(args, groupHelp, "group: say describe, reset or list"); err != nil {
		return err
	}
	sub := args[0]
	fs := newFlagSet("group " + sub)
	r.c.register(fs)
	var (
		group, topic, groups         string
		part                         partFlag
		toEarliest, toLatest, dryRun bool
		toOffset, toTime             int64
	)
	onceVar(fs, &group, "G", "group")
	onceVar(fs, &topic, "t", "topic")
	fs.Var(&part, "p", "partition")
	onceVar(fs, &groups, "groups", "candidate groups")
	fs.BoolVar(&toEarliest, "to-earliest", false, "")
	fs.BoolVar(&toLatest, "to-latest", false, "")
	toOffset, toTime = -1, -1
	onceIntVar(fs, &toOffset, new(bool), "to-offset", "")
	onceIntVar(fs, &toTime, new(bool), "to-time", "")
	fs.BoolVar(&dryRun, "dry-run", false, "")
	pos, err := r.parse(fs, groupHelp, args[1:])
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("group %s: unexpected argument %q", sub, pos[0])
	}
	if part.set && part.v < 0 {
		return usageErr("-p %d: give a partition", part.v)
	}
	if topic != "" {
		if err := wire.ValidTopicName(topic); err != nil {
			return usageErr("-t: %v", err)
		}
	}
	if err := r.c.resolve(r.getenv); err != nil {
		return err
	}
	switch sub {
	case "list":
		if groups == "" {
			return withCode(ExitUnsupported, errors.New("group list: the broker has no request that lists groups (offsets are committed per group, topic and partition); name the candidates with --groups G1,G2"))
		}
		return r.groupList(ctx, strings.Split(groups, ","), topic)
	case "describe":
		if group == "" {
			return usageErr("group describe needs -G GROUP")
		}
		return r.groupDescribe(ctx, group, topic, part)
	case "reset":
		if group == "" || topic == "" {
			return usageErr("group reset needs -G GROUP and -t TOPIC")
		}
		n := 0
		for _, b := range []bool{toEarliest, toLatest, toOffset >= 0, toTime >= 0} {
			if b {
				n++
			}
		}
		if n != 1 {
			return usageErr("group reset needs exactly one of --to-earliest, --to-latest, --to-offset N, --to-time MS")
		}
		tgt := resetTarget{earliest: toEarliest, latest: toLatest, offset: toOffset, time: toTime}
		return r.groupReset(ctx, group, topic, part, tgt, dryRun)
	}
	return usageErr("group %q: want describe, reset or list", sub)
}

// durableTopics returns the metadata of topic, or of every durable topic visible.
func durableTopics(ctx context.Context, conn *client.Conn, topic string) ([]wire.TopicMetadata, error) {
	if topic != "" {
		md, err := topicMetadata(ctx, conn, topic)
		if err != nil {
			return nil, err
		}
		if md.Kind != wire.KindDurable {
			return nil, withCode(ExitUnsupported, fmt.Errorf("topic %q is transient: groups of transient topics are queue groups, without offsets", topic))
		}
		return []wire.TopicMetadata{md}, nil
	}
	mds, err := conn.Metadata(ctx)
	if err != nil {
		return nil, err
	}
	var out []wire.TopicMetadata
	for _, md := range mds {
		if md.Kind == wire.KindDurable {
			out = append(out, md)
		}
	}
	return out, nil
}

// groupRow is one partition in group output.
type groupRow struct {
	Group     string `json:"group"`
	Topic     string `json:"topic"`
	Partition uint32 `json:"partition"`
	Committed int64  `json:"committed"` // -1: nothing committed
	Latest    int64  `json:"latest"`
	Lag       *int64 `json:"lag"` // null when nothing is committed
	Previous  *int64 `json:"previous,omitempty"`
}

func (r *runner) groupDescribe(ctx context.Context, group, topic string, part partFlag) error {
	conn, ctx, done, err := r.request(ctx, topicUserOrAdmin)
	if err != nil {
		return err
	}
	defer done()
	mds, err := durableTopics(ctx, conn, topic)
	if err != nil {
		return err
	}
	var rows []groupRow
	for _, md := range mds {
		if err := part.within(md.Name, len(md.Partitions)); err != nil {
			return err
		}
		offs, err := fetchCommitted(ctx, conn, group, md)
		if err != nil {
			return err
		}
		for i, p := range md.Partitions {
			if part.set && p.ID != uint32(part.v) {
				continue
			}
			rows = append(rows, newGroupRow(group, md.Name, p, offs[i]))
		}
	}
	return r.printGroupRows(rows, describeTable)
}

func newGroupRow(group, topic string, p wire.PartitionMetadata, committed int64) groupRow {
	row := groupRow{Group: group, Topic: topic, Partition: p.ID, Committed: committed, Latest: p.EndOffset}
	if committed >= 0 {
		lag := max(p.EndOffset-committed, 0)
		row.Lag = &lag
	}
	return row
}

// groupTable is which table printGroupRows prints: reset's has the PREVIOUS column.
type groupTable int

const (
	describeTable groupTable = iota // group describe: committed offsets and lag
	resetTable                      // group reset: the offsets before and after
	dryRunTable                     // group reset --dry-run: the offsets now and those a reset would commit
)

func (r *runner) printGroupRows(rows []groupRow, table groupTable) error {
	if r.c.json {
		for _, row := range rows {
			if err := writeJSONLine(r.stdout, row); err != nil {
				return err
			}
		}
		return nil
	}
	num := func(v int64) string {
		if v < 0 {
			return "-"
		}
		return strconv.FormatInt(v, 10)
	}
	tw := tabwriter.NewWriter(r.stdout, 0, 4, 2, ' ', 0)
	switch table {
	case resetTable:
		fmt.Fprintln(tw, "GROUP\tTOPIC\tPARTITION\tPREVIOUS\tCOMMITTED\tLATEST\tLAG")
	case dryRunTable:
		fmt.Fprintln(tw, "GROUP\tTOPIC\tPARTITION\tCOMMITTED\tWOULD COMMIT\tLATEST\tLAG")
	default:
		fmt.Fprintln(tw, "GROUP\tTOPIC\tPARTITION\tCOMMITTED\tLATEST\tLAG")
	}
	for _, row := range rows {
		lag := "-"
		if row.Lag != nil {
			lag = num(*row.Lag)
		}
		if table != describeTable {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s\n", row.Group, row.Topic, row.Partition, num(*row.Previous), num(row.Committed), row.Latest, lag)
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\n", row.Group, row.Topic, row.Partition, num(row.Committed), row.Latest, lag)
		}
	}
	return tw.Flush()
}

type resetTarget struct {
	earliest, latest bool
	offset, time     int64 // -1 when not given
}

func (r *runner) groupReset(ctx context.Context, group, topic string, part partFlag, tgt resetTarget, dryRun bool) error {
	conn, ctx, done, err := r.request(ctx, topicUserOrAdmin)
	if err != nil {
		return err
	}
	defer done()
	mds, err := durableTopics(ctx, conn, topic)
	if err != nil {
		return err
	}
	md := mds[0]
	if err := part.within(topic, len(md.Partitions)); err != nil {
		return err
	}
	offs, err := fetchCommitted(ctx, conn, group, md)
	if err != nil {
		return err
	}
	var rows []groupRow
	for i, p := range md.Partitions {
		if part.set && p.ID != uint32(part.v) {
			continue
		}
		var next int64
		switch {
		case tgt.earliest:
			next = p.StartOffset
		case tgt.latest:
			next = p.EndOffset
		case tgt.offset >= 0:
			if tgt.offset < p.StartOffset || tgt.offset > p.EndOffset {
				return withCode(ExitOutOfRange, fmt.Errorf("topic %q partition %d: offset %d is outside the log %d..%d", topic, p.ID, tgt.offset, p.StartOffset, p.EndOffset))
			}
			next = tgt.offset
		default:
			if next, err = offsetForTime(ctx, conn, topic, p.ID, tgt.time); err != nil {
				return fmt.Errorf("topic %q partition %d: %w", topic, p.ID, err)
			}
		}
		if !dryRun {
			if err := conn.CommitOffset(ctx, wire.CommitOffset{Group: group, Topic: topic, Partition: p.ID, Offset: next}); err != nil {
				return fmt.Errorf("group %q, topic %q partition %d: commit %d: %w", group, topic, p.ID, next, err)
			}
		}
		row := newGroupRow(group, topic, p, next)
		prev := offs[i]
		row.Previous = &prev
		rows = append(rows, row)
	}
	if dryRun {
		return r.printGroupRows(rows, dryRunTable)
	}
	return r.printGroupRows(rows, resetTable)
}

// groupList checks candidate groups against every durable topic (or -t's) and lists those
// with committed offsets: GROUP, TOPIC, partitions with commits, total lag.
func (r *runner) groupList(ctx context.Context, groups []string, topic string) error {
	for _, g := range groups {
		if g == "" || len(g) > wire.MaxGroupName {
			return usageErr("--groups: group names must be 1-%d bytes", wire.MaxGroupName)
		}
	}
	conn, ctx, done, err := r.request(ctx, topicUserOrAdmin)
	if err != nil {
		return err
	}
	defer done()
	mds, err := durableTopics(ctx, conn, topic)
	if err != nil {
		return err
	}
	type listRow struct {
		Group      string `json:"group"`
		Topic      string `json:"topic"`
		Partitions int    `json:"partitions"` // with a committed offset
		Lag        int64  `json:"lag"`
	}
	var rows []listRow
	for _, g := range groups {
		for _, md := range mds {
			offs, err := fetchCommitted(ctx, conn, g, md)
			if err != nil {
				return err
			}
			row := listRow{Group: g, Topic: md.Name}
			for i, off := range offs {
				if off >= 0 {
					row.Partitions++
					row.Lag += max(md.Partitions[i].EndOffset-off, 0)
				}
			}
			if row.Partitions > 0 {
				rows = append(rows, row)
			}
		}
	}
	if r.c.json {
		for _, row := range rows {
			if err := writeJSONLine(r.stdout, row); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(r.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tTOPIC\tPARTITIONS\tLAG")
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", row.Group, row.Topic, row.Partitions, row.Lag)
	}
	return tw.Flush()
}
