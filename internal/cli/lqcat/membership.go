package lqcat

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

const membershipHelp = `Usage:
  lqcat cluster membership [-t TOPIC] [--moving] [-J]
  lqcat cluster add-broker ID --addr HOST:PORT --cluster-addr HOST:PORT [--tls-addr HOST:PORT]
  lqcat cluster move -t TOPIC -p N --replicas ID,ID,... [--wait] [--wait-timeout D]
  lqcat cluster drain ID [--wait] [--wait-timeout D]
  lqcat cluster remove-broker ID [--no-drain] [--wait-timeout D]

The brokers of a cluster and where the replicas of its partitions are (PROTOCOL.md section
16.2). Every one of these commands needs the admin's credentials and may go to any broker of
the cluster (-b); remove-broker to another broker than the one removed.

  membership     the brokers (state, membership of the metadata group, addresses, how many
                 partitions each is a replica of, and leaving in a move not finished), then
                 every partition of the replicated topics (-t: of TOPIC; --moving: only those
                 moving) with its replicas, the replicas a move under way started from, and
                 what the broker asked sees of it: the leader, the group's voters and
                 learners. -J prints one JSON object
  add-broker     adds a broker started with cluster-join = true: its node id ID, where clients
                 reach it (--addr, --tls-addr) and where brokers do (--cluster-addr, its
                 cluster port). It then receives the cluster's metadata; it holds no replica
                 until a topic or a move places one on it. Sent again with new addresses, it
                 tells the cluster where a broker that moved is
  move           gives partition N of TOPIC the replicas listed (node ids, the preferred leader
                 first): the partition's leader adds the new ones, lets them catch up, then
                 removes the old ones, while producers and consumers go on. --wait waits
                 until the move finished
  drain          stops placing replicas on broker ID and moves every partition it holds to
                 the other brokers; --wait waits until it holds none
  remove-broker  drains broker ID (unless --no-drain), waits until its moves finished, then
                 takes it out of the cluster; stop it afterwards. With --no-drain the broker
                 must hold no replica already (else exit 1, BROKER_IN_USE)

--wait-timeout bounds the waiting (default 10m); a move goes on in the cluster when lqcat
stops waiting. Exit code 5 for an unknown broker, topic or partition.

Examples:
  lqcat cluster add-broker 4 --addr 10.0.0.4:7450 --cluster-addr 10.0.0.4:7460
  lqcat cluster move -t orders -p 0 --replicas 2,3,4 --wait
  lqcat cluster remove-broker 1 -b 10.0.0.2:7450
`

// membershipSubs are the subcommands of lqcat cluster that membershipCmd runs (clusterCmd,
// cluster.go, hands them over; it runs cluster status itself).
var membershipSubs = []string{"membership", "add-broker", "move", "drain", "remove-broker"}

// membershipCmd runs one membership subcommand of lqcat cluster with its arguments.
func (r *runner) membershipCmd(ctx context.Context, sub string, args []string) error {
	var (
		topic, replicas, addr, tlsAddr, clusterAddr string
		part                                        partFlag
		moving, wait, noDrain                       bool
		waitTimeout                                 = 10 * time.Minute
	)
	pos, err := r.adminFamily("cluster "+sub, membershipHelp, args, func(fs *flag.FlagSet) {
		switch sub {
		case "membership":
			onceVar(fs, &topic, "t", "topic")
			fs.BoolVar(&moving, "moving", false, "only partitions whose move is under way")
		case "add-broker":
			onceVar(fs, &addr, "addr", "client address")
			onceVar(fs, &tlsAddr, "tls-addr", "TLS client address")
			onceVar(fs, &clusterAddr, "cluster-addr", "cluster address")
		case "move":
			onceVar(fs, &topic, "t", "topic")
			fs.Var(&part, "p", "partition")
			onceVar(fs, &replicas, "replicas", "node ids")
			fs.BoolVar(&wait, "wait", false, "wait until the move finished")
		case "drain":
			fs.BoolVar(&wait, "wait", false, "wait until the broker holds no replica")
		case "remove-broker":
			fs.BoolVar(&noDrain, "no-drain", false, "do not drain first")
		}
		fs.DurationVar(&waitTimeout, "wait-timeout", waitTimeout, "how long to wait for moves")
	})
	if err != nil {
		return err
	}
	if waitTimeout <= 0 {
		return usageErr("--wait-timeout must be positive")
	}
	switch sub {
	case "membership":
		if len(pos) > 0 {
			return usageErr("cluster membership: unexpected argument %q", pos[0])
		}
		if topic != "" {
			if err := wire.ValidTopicName(topic); err != nil {
				return usageErr("-t: %v", err)
			}
		}
		return r.membershipView(ctx, topic, moving)
	case "add-broker":
		id, err := nodeArg(sub, pos)
		if err != nil {
			return err
		}
		if addr == "" || clusterAddr == "" {
			return usageErr("cluster add-broker needs --addr and --cluster-addr")
		}
		return r.clusterDo(ctx, func(ctx context.Context, conn *client.Conn) error {
			rctx, cancel := r.reqCtx(ctx)
			defer cancel()
			if err := conn.AddBroker(rctx, id, client.BrokerAddrs{Addr: addr, TLSAddr: tlsAddr, ClusterAddr: clusterAddr}); err != nil {
				return brokerErr(fmt.Errorf("cluster add-broker %d: %w", id, err))
			}
			r.say("added broker %d (clients at %s, brokers at %s)", id, addr, clusterAddr)
			return nil
		})
	case "move":
		if len(pos) > 0 {
			return usageErr("cluster move: unexpected argument %q", pos[0])
		}
		if topic == "" || !part.set || part.v < 0 || replicas == "" {
			return usageErr("cluster move needs -t TOPIC, -p N and --replicas ID,ID,...")
		}
		if err := wire.ValidTopicName(topic); err != nil {
			return usageErr("-t: %v", err)
		}
		ids, err := parseNodeList(replicas)
		if err != nil {
			return usageErr("--replicas: %v", err)
		}
		return r.clusterDo(ctx, func(ctx context.Context, conn *client.Conn) error {
			rctx, cancel := r.reqCtx(ctx)
			defer cancel()
			if err := conn.MoveReplicas(rctx, topic, uint32(part.v), ids); err != nil {
				return brokerErr(fmt.Errorf("cluster move %s/%d: %w", topic, part.v, err))
			}
			r.say("partition %d of %s is moving to brokers %s", part.v, topic, replicas)
			if !wait {
				return nil
			}
			return r.waitFor(ctx, conn, waitTimeout, fmt.Sprintf("partition %d of %s to finish moving", part.v, topic), func(st *wire.MembershipResponse) bool {
				for _, p := range st.Partitions {
					if p.Topic == topic && p.Partition == uint32(part.v) {
						return false
					}
				}
				return true
			}, topic)
		})
	case "drain":
		id, err := nodeArg(sub, pos)
		if err != nil {
			return err
		}
		return r.clusterDo(ctx, func(ctx context.Context, conn *client.Conn) error {
			if err := r.drain(ctx, conn, id); err != nil {
				return err
			}
			if !wait {
				return nil
			}
			return r.waitDrained(ctx, conn, id, waitTimeout)
		})
	case "remove-broker":
		id, err := nodeArg(sub, pos)
		if err != nil {
			return err
		}
		return r.clusterDo(ctx, func(ctx context.Context, conn *client.Conn) error {
			if !noDrain {
				if err := r.drain(ctx, conn, id); err != nil {
					return err
				}
				if err := r.waitDrained(ctx, conn, id, waitTimeout); err != nil {
					return err
				}
			}
			rctx, cancel := r.reqCtx(ctx)
			defer cancel()
			if err := conn.RemoveBroker(rctx, id); err != nil {
				return brokerErr(fmt.Errorf("cluster remove-broker %d: %w", id, err))
			}
			r.say("removed broker %d from the cluster: stop it now", id)
			return nil
		})
	}
	return usageErr("cluster %q: want status, %s", sub, strings.Join(membershipSubs, ", "))
}

// clusterDo connects as the admin and runs f; f bounds each request (reqCtx) and each wait
// (--wait-timeout) itself.
func (r *runner) clusterDo(ctx context.Context, f func(context.Context, *client.Conn) error) error {
	conn, err := r.connect(ctx, adminOnly)
	if err != nil {
		return err
	}
	defer conn.Close()
	return f(ctx, conn)
}

func (r *runner) drain(ctx context.Context, conn *client.Conn, id uint32) error {
	rctx, cancel := r.reqCtx(ctx)
	defer cancel()
	n, err := conn.DrainBroker(rctx, id)
	if err != nil {
		return brokerErr(fmt.Errorf("cluster drain %d: %w", id, err))
	}
	r.say("broker %d is draining: %d partitions moving off it", id, n)
	return nil
}

// waitDrained waits until broker id holds no replica, moves under way included.
func (r *runner) waitDrained(ctx context.Context, conn *client.Conn, id uint32, timeout time.Duration) error {
	return r.waitFor(ctx, conn, timeout, fmt.Sprintf("broker %d to hold no replica", id), func(st *wire.MembershipResponse) bool {
		for _, b := range st.Brokers {
			if b.NodeID == id {
				return b.Replicas == 0 && b.Leaving == 0
			}
		}
		return true // not in the cluster (any more)
	}, "")
}

// waitFor asks MEMBERSHIP (the moving partitions, of topic when not empty) until done
// holds or timeout passes, saying with -v what is still moving.
func (r *runner) waitFor(ctx context.Context, conn *client.Conn, timeout time.Duration, what string, done func(*wire.MembershipResponse) bool, topic string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	last := -1
	for {
		st, err := conn.Membership(ctx, topic, true)
		switch {
		case err != nil && ctx.Err() != nil:
			return fmt.Errorf("still waiting for %s after %v (the moves go on in the cluster: lqcat cluster membership --moving)", what, timeout)
		case err != nil:
			return brokerErr(fmt.Errorf("cluster membership: %w", err))
		case done(st):
			r.info("done waiting for %s", what)
			return nil
		}
		if n := len(st.Partitions); n != last {
			r.info("waiting for %s: %d partitions moving", what, n)
			last = n
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("still waiting for %s after %v (the moves go on in the cluster: lqcat cluster membership --moving)", what, timeout)
		case <-tick.C:
		}
	}
}

// brokerErr gives an unknown broker the exit code of other unknown names.
func brokerErr(err error) error {
	var we *wire.Error
	if errors.As(err, &we) && we.Code == wire.CodeUnknownBroker {
		return withCode(ExitUnknown, err)
	}
	return err
}

// nodeArg is the one ID argument of a cluster subcommand.
func nodeArg(sub string, pos []string) (uint32, error) {
	if len(pos) != 1 {
		return 0, usageErr("cluster %s takes one broker ID", sub)
	}
	id, err := parseNode(pos[0])
	if err != nil {
		return 0, usageErr("cluster %s: %v", sub, err)
	}
	return id, nil
}

func parseNode(s string) (uint32, error) {
	v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("broker id %q: want an integer from 1 to %d", s, uint32(1<<32-1))
	}
	return uint32(v), nil
}

// parseNodeList reads "2,3,4": distinct broker ids.
func parseNodeList(s string) ([]uint32, error) {
	var ids []uint32
	for _, part := range strings.Split(s, ",") {
		id, err := parseNode(part)
		if err != nil {
			return nil, err
		}
		for _, seen := range ids {
			if seen == id {
				return nil, fmt.Errorf("broker %d is listed twice", id)
			}
		}
		ids = append(ids, id)
	}
	if len(ids) > wire.MaxReplicas {
		return nil, fmt.Errorf("%d replicas, at most %d", len(ids), wire.MaxReplicas)
	}
	return ids, nil
}

type jsonMemberBroker struct {
	Node        uint32 `json:"node"`
	State       string `json:"state"`
	Metadata    string `json:"metadata"`
	Addr        string `json:"addr"`
	TLSAddr     string `json:"tls_addr,omitempty"`
	ClusterAddr string `json:"cluster_addr"`
	Replicas    uint32 `json:"replicas"`
	Leaving     uint32 `json:"leaving"`
}

type jsonMemberPartition struct {
	Topic     string           `json:"topic"`
	Partition uint32           `json:"partition"`
	Group     uint64           `json:"group"`
	Replicas  []uint32         `json:"replicas"`
	Previous  []uint32         `json:"previous"` // the replicas a move under way started from; [] when none
	Moving    bool             `json:"moving"`
	Held      bool             `json:"held"` // the broker asked holds a replica: the fields below are its view
	Leader    uint32           `json:"leader,omitempty"`
	Voters    []uint32         `json:"voters,omitempty"`
	Learners  []uint32         `json:"learners,omitempty"`
	Lag       map[string]int64 `json:"lag,omitempty"` // by node id, on the leader; -1 unknown
}

type jsonMembership struct {
	Node           uint32                `json:"node"`
	MetadataLeader uint32                `json:"metadata_leader"`
	Brokers        []jsonMemberBroker    `json:"brokers"`
	Partitions     []jsonMemberPartition `json:"partitions"`
}

func (r *runner) membershipView(ctx context.Context, topic string, moving bool) error {
	conn, rctx, done, err := r.request(ctx, adminOnly)
	if err != nil {
		return err
	}
	defer done()
	st, err := conn.Membership(rctx, topic, moving)
	if err != nil {
		return brokerErr(fmt.Errorf("cluster membership: %w", err))
	}
	if r.c.json {
		out := jsonMembership{Node: st.NodeID, MetadataLeader: st.MetaLeader, Brokers: []jsonMemberBroker{}, Partitions: []jsonMemberPartition{}}
		for _, b := range st.Brokers {
			out.Brokers = append(out.Brokers, jsonMemberBroker{Node: b.NodeID, State: b.State.String(), Metadata: b.Meta.String(),
				Addr: b.Addr, TLSAddr: b.TLSAddr, ClusterAddr: b.ClusterAddr, Replicas: b.Replicas, Leaving: b.Leaving})
		}
		for _, p := range st.Partitions {
			jp := jsonMemberPartition{Topic: p.Topic, Partition: p.Partition, Group: p.Group, Replicas: orEmpty(p.Replicas), Previous: orEmpty(p.Previous),
				Moving: len(p.Previous) > 0, Held: p.Held, Leader: p.Leader, Voters: p.Voters, Learners: p.Learners}
			out.Partitions = append(out.Partitions, jp)
		}
		return writeJSONLine(r.stdout, out)
	}
	fmt.Fprintf(r.stdout, "cluster as broker %d sees it; metadata leader: %s\n", st.NodeID, nodeOrNone(st.MetaLeader))
	tw := tabwriter.NewWriter(r.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BROKER\tSTATE\tMETADATA\tREPLICAS\tLEAVING\tADDRESS\tTLS ADDRESS\tCLUSTER ADDRESS")
	for _, b := range st.Brokers {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", b.NodeID, b.State, b.Meta, b.Replicas, b.Leaving, b.Addr, dash(b.TLSAddr), b.ClusterAddr)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.Partitions) == 0 {
		if moving {
			fmt.Fprintln(r.stdout, "\nno partition is moving")
		}
		return nil
	}
	fmt.Fprintln(r.stdout)
	tw = tabwriter.NewWriter(r.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tREPLICAS\tMOVING FROM\tLEADER\tVOTERS\tLEARNERS")
	for _, p := range st.Partitions {
		leader, voters, learners := "-", "-", "-"
		if p.Held {
			leader, voters, learners = nodeOrNone(p.Leader), memberNodes(p.Voters), memberNodes(p.Learners)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", p.Topic, p.Partition, memberNodes(p.Replicas), memberNodes(p.Previous), leader, voters, learners)
	}
	return tw.Flush()
}

func orEmpty(ids []uint32) []uint32 {
	if ids == nil {
		return []uint32{}
	}
	return ids
}

func memberNodes(ids []uint32) string {
	if len(ids) == 0 {
		return "-"
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatUint(uint64(id), 10)
	}
	return strings.Join(parts, ",")
}

func nodeOrNone(id uint32) string {
	if id == 0 {
		return "none"
	}
	return strconv.FormatUint(uint64(id), 10)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
