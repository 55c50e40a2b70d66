package lqcat

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

const groupHelp = `Usage:
  lqcat group list [-t TOPIC] [--groups G1,G2,...] [-J]
  lqcat group describe -G GROUP [-t TOPIC] [-p N] [-J]
  lqcat group reset -G GROUP -t TOPIC [-p N] --to-earliest|--to-latest|--to-offset N|--to-time MS [--dry-run]

A consumer group of a durable topic has members (lqcat -C -G GROUP, or the Go client's
Consumer with a Group), among which the broker shares the topic's partitions, and a committed
offset (the next offset the group reads) per partition. The same name on another topic is
another group.

  list      the groups with live members or committed offsets, of TOPIC or of every durable
            topic the credentials may see (--groups keeps only those named): members,
            partitions with a committed offset, and their total lag
  describe  the group's live members (member id, client, address, partitions) and, per
            partition, the committed offset, the latest offset, the lag (latest - committed)
            and the member that holds it
  reset     commits new offsets for the group; --dry-run only prints them. --to-time MS is
            the first offset whose timestamp is at or after unix ms MS. The broker refuses
            it while the group has live members: stop them first

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
		var only []string
		if groups != "" {
			only = strings.Split(groups, ",")
		}
		return r.groupList(ctx, only, topic)
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
	Member    string `json:"member,omitempty"`    // the member holding it (describe)
	ClientID  string `json:"client_id,omitempty"` // that member's client id
}

// holders maps each partition of a description to the member holding it.
func holders(d *wire.DescribeGroupResponse) map[uint32]*wire.GroupMember {
	out := map[uint32]*wire.GroupMember{}
	for i := range d.Members {
		m := &d.Members[i]
		for _, p := range m.Assigned {
			out[p] = m
		}
		for _, p := range m.Revoking {
			out[p] = m
		}
	}
	return out
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
	type memberRow struct {
		topic string
		m     wire.GroupMember
	}
	var members []memberRow
	for _, md := range mds {
		if err := part.within(md.Name, len(md.Partitions)); err != nil {
			return err
		}
		d, err := conn.DescribeGroup(ctx, group, md.Name)
		if err != nil {
			return fmt.Errorf("group %q of topic %q: %w", group, md.Name, err)
		}
		for _, m := range d.Members {
			members = append(members, memberRow{md.Name, m})
		}
		held := holders(d)
		for _, p := range d.Partitions {
			if part.set && p.Partition != uint32(part.v) {
				continue
			}
			row := newGroupRow(group, md.Name, wire.PartitionMetadata{ID: p.Partition, EndOffset: p.EndOffset}, p.Committed)
			if m := held[p.Partition]; m != nil {
				row.Member, row.ClientID = m.Member.String(), m.ClientID
			}
			rows = append(rows, row)
		}
	}
	if !r.c.json && len(members) > 0 {
		list := func(ps []uint32) string {
			if len(ps) == 0 {
				return "-"
			}
			var sb strings.Builder
			for i, p := range ps {
				if i > 0 {
					sb.WriteByte(',')
				}
				sb.WriteString(strconv.FormatUint(uint64(p), 10))
			}
			return sb.String()
		}
		tw := tabwriter.NewWriter(r.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TOPIC\tMEMBER\tCLIENT\tADDRESS\tPARTITIONS\tREVOKING")
		for _, m := range members {
			client := m.m.ClientID
			if client == "" {
				client = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.topic, m.m.Member, client, m.m.Address, list(m.m.Assigned), list(m.m.Revoking))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(r.stdout)
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
	describeTable groupTable = iota // group describe: committed offsets, lag and holder
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
		fmt.Fprintln(tw, "GROUP\tTOPIC\tPARTITION\tCOMMITTED\tLATEST\tLAG\tMEMBER")
	}
	for _, row := range rows {
		lag := "-"
		if row.Lag != nil {
			lag = num(*row.Lag)
		}
		if table != describeTable {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s\n", row.Group, row.Topic, row.Partition, num(*row.Previous), num(row.Committed), row.Latest, lag)
			continue
		}
		member := "-"
		if row.Member != "" {
			member = row.Member
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%s\n", row.Group, row.Topic, row.Partition, num(row.Committed), row.Latest, lag, member)
	}
	return tw.Flush()
}

type resetTarget struct {
	earliest, latest bool
	offset, time     int64 // -1 when not given
}

// errGroupHasMembers is reset's refusal for a group with live members.
func errGroupHasMembers(group, topic string, d *wire.DescribeGroupResponse) error {
	return fmt.Errorf("group %q of topic %q has %d live %s: stop %s before resetting its offsets (lqcat group describe lists them)",
		group, topic, len(d.Members), plural(len(d.Members), "member", "members"), plural(len(d.Members), "it", "them"))
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
	d, err := conn.DescribeGroup(ctx, group, topic)
	if err != nil {
		return fmt.Errorf("group %q of topic %q: %w", group, topic, err)
	}
	if len(d.Members) > 0 && !dryRun {
		return errGroupHasMembers(group, topic, d)
	}
	offs := make([]int64, len(md.Partitions))
	for i := range offs {
		offs[i] = -1
	}
	for _, p := range d.Partitions {
		if int(p.Partition) < len(offs) {
			offs[p.Partition] = p.Committed
		}
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
				if errors.Is(err, &wire.Error{Code: wire.CodeGroupNotEmpty}) {
					err = fmt.Errorf("a member joined meanwhile; stop the members and reset again: %w", err)
				}
				return fmt.Errorf("group %q, topic %q partition %d: commit %d: %w", group, topic, p.ID, next, err)
			}
		}
		row := newGroupRow(group, topic, p, next)
		prev := offs[i]
		row.Previous = &prev
		rows = append(rows, row)
	}
	if dryRun {
		if len(d.Members) > 0 {
			r.warn("%v", errGroupHasMembers(group, topic, d))
		}
		return r.printGroupRows(rows, dryRunTable)
	}
	return r.printGroupRows(rows, resetTable)
}

// groupList lists the groups LIST_GROUPS reports (only those named in only, when given): GROUP,
// TOPIC, MEMBERS, partitions with commits, total lag.
func (r *runner) groupList(ctx context.Context, only []string, topic string) error {
	for _, g := range only {
		if err := wire.ValidGroupName(g); err != nil {
			return usageErr("--groups: %v", err)
		}
	}
	conn, ctx, done, err := r.request(ctx, topicUserOrAdmin)
	if err != nil {
		return err
	}
	defer done()
	if topic != "" {
		if _, err := durableTopics(ctx, conn, topic); err != nil {
			return err
		}
	}
	groups, err := conn.ListGroups(ctx, topic)
	if err != nil {
		return err
	}
	type listRow struct {
		Group      string `json:"group"`
		Topic      string `json:"topic"`
		Members    uint32 `json:"members"`
		Generation uint32 `json:"generation"`
		Partitions uint32 `json:"partitions"` // with a committed offset
		Lag        uint64 `json:"lag"`
	}
	var rows []listRow
	for _, g := range groups {
		if len(only) > 0 && !slices.Contains(only, g.Group) {
			continue
		}
		rows = append(rows, listRow{Group: g.Group, Topic: g.Topic, Members: g.Members, Generation: g.Generation, Partitions: g.Committed, Lag: g.Lag})
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
	fmt.Fprintln(tw, "GROUP\tTOPIC\tMEMBERS\tPARTITIONS\tLAG")
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", row.Group, row.Topic, row.Members, row.Partitions, row.Lag)
	}
	return tw.Flush()
}
