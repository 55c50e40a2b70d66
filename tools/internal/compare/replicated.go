package compare

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/lightq/lightq/wire"
)

// The replicated cases (family replicated): durable topics with replication factor 3, the
// three brokers on this machine (cluster.go), against JetStream streams with 3 replicas on
// three nats-server processes with routes between them; and produce-to-ack latency at a fixed
// rate. In every round each case first measures single-node LightQ under the same fsync policy
// and acks (its "ref" side: a reference measured in the same minutes), then replicated LightQ,
// then NATS, so the table has replicated LightQ both against JetStream R3 and as a share of
// one broker.
//
// Policies: acks 1 (written) with fsync=interval=2m, as JetStream R3's default: a publish is
// acknowledged once the stream's Raft group has it on a majority, written to their files,
// fsynced every 2 minutes (sync_interval's default); acks 2 (durable) with fsync=always, as
// JetStream with sync_interval: always (a replicated topic takes acks 2 only with fsync=always).
// Each LightQ measurement produces -repl-bytes (default -sustain-bytes) to the partition's
// leader, then one consumer reads it back from the leader; each NATS one publishes for at
// least -sustain-time, clients connected to the stream's leader, then reads back with an
// ordered consumer.

// replPolicy is one of the two acknowledgement policies of the replicated cases.
type replPolicy struct {
	id, fsync, acks, natsSync, text, natsText string
}

var replPolicies = []replPolicy{
	{id: "acks1", fsync: "interval=2m", acks: "written", natsSync: "",
		text: "acks 1, fsync=interval=2m", natsText: "JetStream R3, default sync"},
	{id: "acks2", fsync: "always", acks: "durable", natsSync: "always",
		text: "acks 2, fsync=always", natsText: "JetStream R3, sync_interval always"},
}

// replBytes is the payload each replicated LightQ measurement (and its single-node reference)
// produces.
func (r *runner) replBytes() int64 {
	if r.cfg.ReplBytes > 0 {
		return r.cfg.ReplBytes
	}
	return r.cfg.SustainBytes
}

// replTopicOptions are the topic options of a replicated case's topic besides the factor.
func replTopicOptions(fsync string) []wire.Option {
	return []wire.Option{{Key: wire.OptionFsync, Value: fsync}}
}

func (r *runner) replicatedCases() []caseDef {
	if !contains(r.cfg.Cases, "replicated") {
		return nil
	}
	var out []caseDef
	for _, pol := range replPolicies {
		for _, size := range []int{100, 1024} {
			out = append(out, r.replicatedDurableCase(pol, size))
		}
	}
	for _, pol := range replPolicies {
		out = append(out, r.replicatedLatencyCase(pol))
	}
	return out
}

// shareAtLeast is a share row's target: the median share at least q.
func shareAtLeast(q float64, of string) *target {
	return &target{text: fmt.Sprintf(">= %.0f%% of %s", 100*q, of), check: func(share, _ float64) bool { return share >= q }}
}

func (r *runner) replicatedDurableCase(pol replPolicy, size int) caseDef {
	id := fmt.Sprintf("replicated-%d-%s", size, pol.id)
	vsNATS := ratioAtLeast(10)
	if size == 1024 {
		vsNATS = ratioAtLeast(3)
	}
	single := &shareDef{denSide: "ref", denKey: "pub", of: "single-node", pct: true}
	cpuShare := &shareDef{denSide: "ref", denKey: "cpu_gb_total", of: "single-node's"}
	busiestShare := &shareDef{denSide: "ref", denKey: "cpu_gb_busiest", of: "single-node's"}
	gb := " per GB produced"
	rows := []rowDef{
		{key: "pub", label: "msgs/s produce (to the leader)", target: vsNATS},
		{key: "sub", label: "msgs/s read-back (from the leader)"},
		{key: "pub", label: "replicated produce msgs/s / single-node LightQ's", share: single, target: shareAtLeast(0.4, "single-node")},
		{key: "pub", label: "single-node LightQ msgs/s produce (same policy, same rounds)", ref: true},
		{key: "cpu_gb_leader", label: "CPU s" + gb + ", leader (NATS: the stream's leader)", lowerBetter: true},
		{key: "cpu_gb_followers", label: "CPU s" + gb + ", the two followers together", lowerBetter: true},
		{key: "cpu_gb_pub", label: "CPU s" + gb + ", producer", lowerBetter: true},
		{key: "cpu_gb_total", label: "CPU s" + gb + ", all processes", lowerBetter: true},
		{key: "cpu_gb_total", label: "CPU s" + gb + ", all: replicated / single-node", share: cpuShare},
		{key: "cpu_gb_busiest", label: "CPU s" + gb + ", the busiest process", lowerBetter: true},
		{key: "cpu_gb_busiest", label: "CPU s" + gb + ", the busiest process: replicated / single-node", share: busiestShare},
		{key: "cpu_gb_broker", label: "single-node CPU s" + gb + ", broker", ref: true},
		{key: "cpu_gb_pub", label: "single-node CPU s" + gb + ", producer", ref: true},
		{key: "cpu_gb_total", label: "single-node CPU s" + gb + ", all", ref: true},
		{key: "cpu_gb_busiest", label: "single-node CPU s" + gb + ", the busiest process", ref: true},
		{key: "cpu_cores", label: "cores busy while producing (the machine has 2)", noRatio: true},
		{key: "cpu_cores", label: "single-node: cores busy while producing", ref: true},
		{key: "pub_s", label: "seconds producing", noRatio: true},
	}
	return caseDef{id: id, family: "replicated", size: size, rows: rows,
		title: fmt.Sprintf("replicated x3, durable %d B, %s, then read back (%s, async pub)", size, pol.text, pol.natsText),
		ref:   r.sustainedCheck(id, "ref", func(ctx context.Context) (sample, error) { return r.lqSingleRef(ctx, size, pol) }),
		lightq: r.sustainedCheck(id, "lightq", func(ctx context.Context) (sample, error) {
			return r.lqReplicated(ctx, size, pol)
		}),
		nats: r.sustainedCheck(id, "nats", func(ctx context.Context) (sample, error) { return r.natsReplicated(ctx, size, pol) })}
}

// sustainedCheck marks a replicated measurement that moved less than -repl-bytes in less
// than -sustain-time as not sustained (listed under the table).
func (r *runner) sustainedCheck(id, side string, fn func(context.Context) (sample, error)) func(context.Context) (sample, error) {
	return func(ctx context.Context) (sample, error) {
		s, err := fn(ctx)
		if err == nil && s["pub_s"] < r.cfg.SustainTime.Seconds() && s["pub_gb"]*1e9 < float64(r.replBytes()) {
			s["short"] = 1
			r.logf("%s %s: not sustained: %.3f GB in %.2f s, below both -repl-bytes and -sustain-time", id, side, s["pub_gb"], s["pub_s"])
		}
		return s, err
	}
}

// lqSingleRef: the replicated case's reference, one lightq broker, the same topic policy,
// acks, bytes and clients.
func (r *runner) lqSingleRef(ctx context.Context, size int, pol replPolicy) (sample, error) {
	if err := r.checkDiskFor(r.replBytes(), 1); err != nil {
		return nil, err
	}
	b, err := r.startLightQ(ctx, plain)
	if err != nil {
		return nil, err
	}
	return r.measure(ctx, b, func(m *meas) error {
		if err := m.lqDurableRun(ctx, r.replBytes(), size, pol.fsync, pol.acks, thenReadBack, true); err != nil {
			return err
		}
		m.s.deriveCPU()
		return nil
	})
}

// lqReplicated: three lightq brokers, the topic replicated on all three, the clients on the
// partition's leader.
func (r *runner) lqReplicated(ctx context.Context, size int, pol replPolicy) (sample, error) {
	if err := r.checkDiskFor(r.replBytes(), clusterSize); err != nil {
		return nil, err
	}
	b, err := r.startLightQCluster(ctx, replTopicOptions(pol.fsync))
	if err != nil {
		return nil, err
	}
	return r.measure(ctx, b, func(m *meas) error {
		if err := m.lqDurableRun(ctx, r.replBytes(), size, pol.fsync, pol.acks, thenReadBack, true); err != nil {
			return err
		}
		m.s.deriveCPU()
		return nil
	})
}

// natsReplicated: three nats-server processes, a stream with three replicas, the clients on
// its leader.
func (r *runner) natsReplicated(ctx context.Context, size int, pol replPolicy) (sample, error) {
	if err := r.checkDiskFor(r.natsMaxBytes(), clusterSize); err != nil {
		return nil, err
	}
	b, err := r.startNATSCluster(ctx, pol.natsSync)
	if err != nil {
		return nil, err
	}
	if err := r.setupNATSStream(ctx, b, size); err != nil {
		_ = b.stop()
		return nil, err
	}
	return r.measure(ctx, b, func(m *meas) error {
		if err := m.natsJSRun(ctx, size, thenReadBack, clusterSize, true); err != nil {
			return err
		}
		m.s.deriveCPU()
		return nil
	})
}

// deriveCPU adds the figures derived from the per-process CPU per GB of a measurement:
// cpu_gb_followers, the two followers' together (each one's stays in the sample), and
// cpu_gb_busiest, the busiest process's. Nothing without CPU figures; recomputing is
// harmless (loadRaw derives them for -raw files written before they existed).
func (s sample) deriveCPU() {
	if _, ok := s["cpu_gb_total"]; !ok {
		return
	}
	if _, ok := s["cpu_gb_follower1"]; ok {
		s["cpu_gb_followers"] = s["cpu_gb_follower1"] + s["cpu_gb_follower2"]
	}
	busiest := 0.0
	for k, v := range s {
		switch k {
		case "cpu_gb_total", "cpu_gb_followers", "cpu_gb_busiest":
		default:
			if strings.HasPrefix(k, "cpu_gb_") {
				busiest = max(busiest, v)
			}
		}
	}
	s["cpu_gb_busiest"] = busiest
}

// replicatedLatencyCase: produce-to-ack latency at -latency-rate msg/s of 100 B for
// -latency-duration, replicated (three brokers, to the leader) against one broker with the
// same policy. lqbench produce reports it (ack_* in its JSON); NATS has no fixed-rate
// JetStream publish latency tool, so there is no NATS side.
func (r *runner) replicatedLatencyCase(pol replPolicy) caseDef {
	cfg := r.cfg
	id := "replicated-latency-" + pol.id
	var t *target
	if pol.id == "acks1" {
		t = &target{text: "< 5000 us", check: func(l, _ float64) bool { return l < 5000 }}
	}
	const send = " from the actual send"
	rows := []rowDef{
		{key: "ack_p50", label: "produce-to-ack p50 us", lowerBetter: true},
		{key: "ack_p99", label: "produce-to-ack p99 us", lowerBetter: true, target: t},
		{key: "ack_p999", label: "produce-to-ack p99.9 us", lowerBetter: true},
		{key: "ack_send_p50", label: "p50 us" + send, lowerBetter: true, lightqOnly: true},
		{key: "ack_send_p99", label: "p99 us" + send, lowerBetter: true, lightqOnly: true},
		{key: "ack_p50", label: "single-node p50 us (same policy, same rounds)", ref: true},
		{key: "ack_p99", label: "single-node p99 us", ref: true},
		{key: "ack_p999", label: "single-node p99.9 us", ref: true},
		{key: "ack_p99", label: "replicated p99 / single-node p99", share: &shareDef{denSide: "ref", denKey: "ack_p99", of: "single-node's"}},
	}
	return caseDef{id: id, family: "replicated", size: 100, rows: rows,
		title: fmt.Sprintf("replicated x3, produce-to-ack latency, 100 B at %dK msg/s x %v, %s, linger %s (no NATS tool)",
			cfg.LatencyRate/1000, cfg.LatencyDuration, pol.text, cfg.LatencyLinger),
		ref:    func(ctx context.Context) (sample, error) { return r.lqAckLatency(ctx, false, pol) },
		lightq: func(ctx context.Context) (sample, error) { return r.lqAckLatency(ctx, true, pol) }}
}

// lqAckLatency: lqbench produce at the fixed rate, its produce-to-ack latency, on one broker
// or (replicated) on the leader of a topic replicated on three.
func (r *runner) lqAckLatency(ctx context.Context, replicated bool, pol replPolicy) (sample, error) {
	var b *brokerRun
	var err error
	if replicated {
		b, err = r.startLightQCluster(ctx, replTopicOptions(pol.fsync))
	} else {
		b, err = r.startLightQ(ctx, plain)
	}
	if err != nil {
		return nil, err
	}
	return r.measure(ctx, b, func(m *meas) error {
		n := int(float64(r.cfg.LatencyRate) * r.cfg.LatencyDuration.Seconds())
		c := m.lqbench(ctx, "pub", "produce", "-t", "bench", "--kind", "durable", "--fsync", pol.fsync, "--acks", pol.acks,
			"-s", "100", "-m", strconv.Itoa(n), "--rate", strconv.Itoa(r.cfg.LatencyRate), "--linger="+r.cfg.LatencyLinger)
		if err := c.run(); err != nil {
			return err
		}
		res, err := parseLQ(c)
		if err != nil {
			return err
		}
		if res.AckCount != int64(n) {
			return fmt.Errorf("produce-to-ack latency of %d of %d messages", res.AckCount, n)
		}
		m.s["ack_p50"], m.s["ack_p99"], m.s["ack_p999"], m.s["ack_max"] = res.AckP50, res.AckP99, res.AckP999, res.AckMax
		m.s["ack_send_p50"], m.s["ack_send_p99"], m.s["ack_send_p999"] = res.AckSendP50, res.AckSendP99, res.AckSendP999
		m.s["rate"] = res.MsgsPerSec
		return nil
	})
}
