package lqcat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

const clusterHelp = `Usage: lqcat cluster status [-t TOPIC] [-J]

The replicated partitions of the cluster of -b (every one, or TOPIC's), as their leaders see
them: each partition's leader, Raft term, commit index and high watermark, and per replica
the Raft index known stored there (match), how many offsets it is behind the leader's log end
(lag; -1 while a snapshot brings it up), Raft's replication state (probe, replicate,
snapshot) and whether the leader heard from it within an election timeout (active).

Only a partition's leader knows how far the other replicas are, so lqcat asks the broker of
-b for the cluster's brokers (METADATA) and then every one of them (CLUSTER_STATUS), and shows
each partition as its leader answered. A broker it cannot reach is listed; the partitions it
leads are shown as the other brokers' replicas know them ("leader's view missing"), and lqcat
exits 1. It needs the admin (--admin-password or $LIGHTQ_ADMIN_PASSWORD). With -X
security.protocol=ssl it asks every broker on its TLS address.

-J prints one JSON object:
  {"broker":"127.0.0.1:7450","node":1,
   "meta":{"leader":1,"term":2,"commit":9,"applied":9},
   "brokers":[{"node":1,"addr":"127.0.0.1:7450","reached":true},...],
   "partitions":[{"topic":"orders","partition":0,"view":"leader","from_node":2,"leader":2,
     "term":4,"commit":31,"applied":31,"high_watermark":120,"log_start":0,"log_end":120,
     "replicas":[{"node":1,"match":31,"lag":0,"state":"replicate","active":true},...]},...]}
  "view" is whose answer a partition shows: "leader", "follower" (the leader did not answer)
  or "none" (no broker holding a replica answered).
`

func (r *runner) clusterCmd(ctx context.Context, args []string) error {
	if err := r.subcommandHelp(args, clusterHelp+"\n"+membershipHelp, "cluster: say status, "+strings.Join(membershipSubs, ", ")); err != nil {
		return err
	}
	if slices.Contains(membershipSubs, args[0]) {
		return r.membershipCmd(ctx, args[0], args[1:]) // membership.go
	}
	if args[0] != "status" {
		return usageErr("cluster %s: want status, %s (lqcat cluster --help)", args[0], strings.Join(membershipSubs, ", "))
	}
	fs := newFlagSet("cluster status")
	r.c.register(fs)
	var topic string
	onceVar(fs, &topic, "t", "topic")
	pos, err := r.parse(fs, clusterHelp, args[1:])
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("cluster status takes no arguments (-t TOPIC names a topic)")
	}
	if topic != "" {
		if err := wire.ValidTopicName(topic); err != nil {
			return usageErr("-t: %v", err)
		}
	}
	if err := r.c.resolve(r.getenv); err != nil {
		return err
	}
	conn, rctx, done, err := r.request(ctx, adminOnly)
	if err != nil {
		return err
	}
	defer done()
	v, err := r.clusterStatus(rctx, conn, topic)
	if err != nil {
		return err
	}
	if r.c.json {
		err = writeJSONLine(r.stdout, v.json())
	} else {
		err = v.render(r.stdout)
	}
	if err != nil {
		return err
	}
	var missed []string
	for _, b := range v.brokers {
		if b.err != "" {
			missed = append(missed, fmt.Sprintf("node %d (%s)", b.node, b.err))
		}
	}
	if len(missed) > 0 {
		return withCode(ExitFailed, fmt.Errorf("%d of %d brokers could not be asked: %s", len(missed), len(v.brokers), strings.Join(missed, "; ")))
	}
	return nil
}

// clusterView is what cluster status shows: the seed broker's answer about the cluster,
// whether each broker answered, and the partitions merged from every answer.
type clusterView struct {
	seed       string // -b
	node       uint32 // its node id
	meta       client.ClusterStatus
	brokers    []brokerAnswer
	partitions []client.PartitionStatus
}

type brokerAnswer struct {
	node uint32
	addr string
	err  string // why it was not asked; "" when it answered
}

// clusterStatus asks the seed for the brokers, then every broker (the others in parallel)
// for CLUSTER_STATUS, and merges the answers.
func (r *runner) clusterStatus(ctx context.Context, seed *client.Conn, topic string) (*clusterView, error) {
	self, brokers, err := seed.ClusterBrokers(ctx)
	if err != nil {
		return nil, err
	}
	mine, err := seed.ClusterStatus(ctx, topic)
	if err != nil {
		if topic != "" {
			return nil, fmt.Errorf("topic %q: %w", topic, err)
		}
		return nil, err
	}
	if !mine.Member {
		return nil, withCode(ExitUnsupported, fmt.Errorf("the broker at %s has no cluster settings: it has no replicated partitions (lqcat -L shows its topics)", r.c.broker))
	}
	v := &clusterView{seed: r.c.broker, node: self, meta: *mine}
	answers := make([]*client.ClusterStatus, len(brokers))
	v.brokers = make([]brokerAnswer, len(brokers))
	var wg sync.WaitGroup
	for i, b := range brokers {
		v.brokers[i] = brokerAnswer{node: b.NodeID, addr: b.Addr}
		if r.c.tls.ssl() {
			v.brokers[i].addr = b.TLSAddr
		}
		if b.NodeID == self {
			answers[i] = mine
			if v.brokers[i].addr == "" {
				v.brokers[i].addr = r.c.broker
			}
			continue
		}
		if v.brokers[i].addr == "" {
			v.brokers[i].err = "no address in the cluster's metadata"
			if r.c.tls.ssl() {
				v.brokers[i].err = "no TLS address in the cluster's metadata"
			}
			continue
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			st, err := r.askBroker(ctx, v.brokers[i].addr, topic)
			if err != nil {
				v.brokers[i].err = err.Error()
				return
			}
			answers[i] = st
		}(i)
	}
	wg.Wait()
	v.partitions = client.MergeClusterStatus(answers...)
	return v, nil
}

// askBroker dials another broker of the cluster as the admin and asks it CLUSTER_STATUS.
func (r *runner) askBroker(ctx context.Context, addr, topic string) (*client.ClusterStatus, error) {
	conn, err := r.connectTo(ctx, addr, adminOnly)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	st, err := conn.ClusterStatus(ctx, topic)
	var we *wire.Error
	if errors.As(err, &we) && we.Code == wire.CodeUnknownTopic {
		// Created meanwhile, or this broker has not applied the metadata yet: it has no
		// view of the topic.
		return &client.ClusterStatus{Member: true}, nil
	}
	return st, err
}

// render writes the text form.
func (v *clusterView) render(w io.Writer) error {
	var b strings.Builder
	m := &v.meta
	fmt.Fprintf(&b, "Cluster status (from broker %s, node %d):\n", v.seed, v.node)
	fmt.Fprintf(&b, " metadata group: leader %s, term %d, commit %d, applied %d\n", nodeName(m.MetaLeader), m.MetaTerm, m.MetaCommit, m.MetaApplied)
	fmt.Fprintf(&b, " %d %s:\n", len(v.brokers), plural(len(v.brokers), "broker", "brokers"))
	for _, ba := range v.brokers {
		addr := ba.addr
		if addr == "" {
			addr = "(no address)"
		}
		if ba.err != "" {
			fmt.Fprintf(&b, "  node %d at %s: not asked: %s\n", ba.node, addr, ba.err)
		} else {
			fmt.Fprintf(&b, "  node %d at %s\n", ba.node, addr)
		}
	}
	fmt.Fprintf(&b, " %d replicated %s:\n", len(v.partitions), plural(len(v.partitions), "partition", "partitions"))
	topic := ""
	for _, p := range v.partitions {
		if p.Topic != topic {
			topic = p.Topic
			fmt.Fprintf(&b, "  topic %q:\n", topic)
		}
		fmt.Fprintf(&b, "    partition %d: ", p.ID)
		switch p.View {
		case wire.ViewNone:
			b.WriteString("no broker holding a replica answered\n")
			continue
		case wire.ViewLeader:
			fmt.Fprintf(&b, "leader node %d", p.Leader)
		default:
			if p.Leader == 0 {
				fmt.Fprintf(&b, "no leader known, an election is under way (as node %d's replica knows it)", p.NodeID)
			} else {
				fmt.Fprintf(&b, "leader node %d (leader's view missing: as node %d's replica knows it)", p.Leader, p.NodeID)
			}
		}
		fmt.Fprintf(&b, ", term %d, commit %d, high watermark %d, log %d..%d\n", p.Term, p.Commit, p.HighWatermark, p.LogStart, p.LogEnd)
		for _, rs := range p.Replicas {
			active := "active"
			if !rs.Active {
				active = "inactive"
			}
			lag := fmt.Sprintf("lag %d", rs.Lag)
			if rs.Lag < 0 {
				lag = "lag unknown (a snapshot brings it up)"
			}
			fmt.Fprintf(&b, "      replica %d: match %d, %s, %s, %s", rs.NodeID, rs.Match, lag, rs.State, active)
			if rs.NodeID == p.Leader {
				b.WriteString(" (leader)")
			}
			b.WriteByte('\n')
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func nodeName(id uint32) string {
	if id == 0 {
		return "unknown (an election is under way)"
	}
	return fmt.Sprintf("node %d", id)
}

type jsonClusterReplica struct {
	Node   uint32 `json:"node"`
	Match  uint64 `json:"match"`
	Lag    int64  `json:"lag"`
	State  string `json:"state"`
	Active bool   `json:"active"`
}

type jsonClusterPartition struct {
	Topic         string               `json:"topic"`
	Partition     uint32               `json:"partition"`
	View          string               `json:"view"`
	FromNode      uint32               `json:"from_node"`
	Leader        uint32               `json:"leader"`
	Term          uint64               `json:"term"`
	Commit        uint64               `json:"commit"`
	Applied       uint64               `json:"applied"`
	HighWatermark int64                `json:"high_watermark"`
	LogStart      int64                `json:"log_start"`
	LogEnd        int64                `json:"log_end"`
	Replicas      []jsonClusterReplica `json:"replicas"`
}

type jsonClusterBroker struct {
	Node    uint32 `json:"node"`
	Addr    string `json:"addr"`
	Reached bool   `json:"reached"`
	Error   string `json:"error,omitempty"`
}

// json is the -J form.
func (v *clusterView) json() map[string]any {
	brokers := make([]jsonClusterBroker, 0, len(v.brokers))
	for _, b := range v.brokers {
		brokers = append(brokers, jsonClusterBroker{Node: b.node, Addr: b.addr, Reached: b.err == "", Error: b.err})
	}
	parts := make([]jsonClusterPartition, 0, len(v.partitions))
	for _, p := range v.partitions {
		jp := jsonClusterPartition{Topic: p.Topic, Partition: p.ID, View: p.View.String(), FromNode: p.NodeID, Leader: p.Leader,
			Term: p.Term, Commit: p.Commit, Applied: p.Applied, HighWatermark: p.HighWatermark, LogStart: p.LogStart, LogEnd: p.LogEnd,
			Replicas: []jsonClusterReplica{}}
		for _, rs := range p.Replicas {
			jp.Replicas = append(jp.Replicas, jsonClusterReplica{Node: rs.NodeID, Match: rs.Match, Lag: rs.Lag, State: rs.State.String(), Active: rs.Active})
		}
		parts = append(parts, jp)
	}
	m := &v.meta
	return map[string]any{
		"broker": v.seed, "node": v.node,
		"meta":    map[string]any{"leader": m.MetaLeader, "term": m.MetaTerm, "commit": m.MetaCommit, "applied": m.MetaApplied},
		"brokers": brokers, "partitions": parts,
	}
}
