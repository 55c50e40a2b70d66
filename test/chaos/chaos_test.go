package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// runSpec is one run: a fresh three-broker cluster, a topic with replication.factor=3 under
// one fsync policy, the workload at one acks level, and fault cycles.
//
// What each promises (PROTOCOL.md section 16, "What an acknowledgement means"): an
// acknowledged batch is on a majority of the replicas' logs, fsynced with fsync=always (acks
// 1 and 2 alike), in the page cache with fsync=never, which survives the loss of a minority
// and a kill -9 of all three (the page cache outlives a process), but not a power loss of a
// majority before their next write-back. Every fault here is a process fault or the damage
// of one replica's files (a minority), and the harness cannot cut the power, so every run
// asserts the same: nothing acknowledged lost or duplicated, no replica divergent. (acks 2
// with fsync=never is refused with INVALID_REQUEST, so it is not a run.)
type runSpec struct {
	name      string
	fsync     string
	acks      client.AckLevel
	probeAcks wire.Acks
}

var runs = []runSpec{
	{"acks1-fsync-always", "always", client.AckWritten, wire.AcksWritten},
	{"acks2-fsync-always", "always", client.AckDurable, wire.AcksDurable},
	{"acks1-fsync-never", "never", client.AckWritten, wire.AcksWritten},
}

const (
	topicName  = "chaos"
	partitions = 3
	// segmentBytes is small enough that the logs roll during a run (2 MiB is the smallest
	// the broker allows with the default max-batch).
	segmentBytes = 2 << 20
	// maxFailoverP99 is the target: a new leader accepts produce within 2 s at p99
	// of the kill -9 cycles.
	maxFailoverP99 = 2 * time.Second
)

// summary adds up the runs.
type summary struct {
	cycles, acked, lost, duplicated, divergent int
	failover                                   []time.Duration
	failed                                     bool
}

func (s *summary) line() string {
	return fmt.Sprintf("chaos: cycles=%d acked=%d lost=%d duplicated=%d divergent=%d failover_p99_ms=%d",
		s.cycles, s.acked, s.lost, s.duplicated, s.divergent, Percentile(s.failover, 0.99).Milliseconds())
}

func chaosSeed(t *testing.T) uint64 {
	if v := os.Getenv("CHAOS_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: %v", v, err)
		}
		return s
	}
	return uint64(time.Now().UnixNano())
}

// createTopic creates the run's topic through any broker (the metadata group may still be
// electing its leader: refusals other than TOPIC_EXISTS are retried until a deadline).
func (c *cluster) createTopic(ctx context.Context, opts []wire.Option) error {
	var last error
	err := pollUntil(ctx, startTimeout, 100*time.Millisecond, func() bool {
		for _, n := range c.nodes {
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			conn, err := client.Dial(dctx, n.client.Addr(), clientOptions("chaos-admin"))
			if err == nil {
				err = conn.CreateTopic(dctx, client.TopicConfig{Name: c.topic, Kind: wire.KindDurable, Partitions: c.parts, Options: opts})
				conn.Close()
			}
			cancel()
			if err == nil || errors.Is(err, &wire.Error{Code: wire.CodeTopicExists}) {
				return true
			}
			last = err
			if errors.Is(err, &wire.Error{Code: wire.CodeInvalidRequest}) {
				return true // a bad option: retrying changes nothing
			}
		}
		return false
	})
	if err != nil || (last != nil && errors.Is(last, &wire.Error{Code: wire.CodeInvalidRequest})) {
		return fmt.Errorf("create topic %s: %v (%w)", c.topic, err, last)
	}
	return nil
}

// runConfig sizes one run.
type runConfig struct {
	cycles   int
	kinds    []faultKind // the faults to draw from; fixed gives them in this order instead
	fixed    bool
	seed     uint64
	workload workloadConfig
	timeout  time.Duration
}

// runChaos runs the cycles of spec on c, a started cluster, and checks the result.
func runChaos(t *testing.T, c *cluster, spec runSpec, cfg runConfig) summary {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	c.topic, c.parts = topicName, partitions
	opts := []wire.Option{{Key: "fsync", Value: spec.fsync}, {Key: "segment.bytes", Value: strconv.Itoa(segmentBytes)}}
	if c.clustered {
		opts = append(opts, wire.Option{Key: "replication.factor", Value: strconv.Itoa(len(c.nodes))})
	}
	if err := c.waitMembers(ctx); err != nil {
		t.Fatalf("%v\n%s", err, c.logs())
	}
	if err := c.createTopic(ctx, opts); err != nil {
		t.Fatalf("%v\n%s", err, c.logs())
	}
	if err := c.waitHealthy(ctx); err != nil {
		t.Fatalf("new topic: %v\n%s", err, c.logs())
	}
	cfg.workload.acks = spec.acks
	w, err := startWorkload(ctx, c, cfg.workload, cfg.seed)
	if err != nil {
		t.Fatalf("%v\n%s", err, c.logs())
	}
	if !w.waitProgress(ctx, 50, progressTimeout) {
		w.abort()
		t.Fatalf("no acknowledgement in %v on a healthy cluster (send errors %v)\n%s", progressTimeout, w.sendErrs, c.logs())
	}
	r := newChaosRun(c, w, cfg.seed, spec.probeAcks)
	started := time.Now()
	for i := 0; i < cfg.cycles && !t.Failed(); i++ {
		kind := cfg.kinds[r.rng.IntN(len(cfg.kinds))]
		if cfg.fixed {
			kind = cfg.kinds[i%len(cfg.kinds)]
		}
		cs := time.Now()
		note, err := r.cycle(ctx, kind)
		if err != nil {
			w.abort()
			t.Fatalf("cycle %d (%s): %v; %s\n%s", i, kind, err, note, c.logs())
		}
		t.Logf("cycle %2d %-18s %6.1fs acked %7d: %s", i, kind, time.Since(cs).Seconds(), w.acked(), note)
	}
	flushErrs := w.stop(producerDeliveryTimeout + 30*time.Second)
	if err := c.waitHealthy(ctx); err != nil {
		t.Fatalf("after the workload: %v\n%s", err, c.logs())
	}
	leader, hw, err := c.readAll(ctx)
	if err != nil {
		t.Fatalf("final read: %v\n%s", err, c.logs())
	}
	for _, n := range c.nodes {
		c.stop(n)
	}
	replicas, err := c.readReplicas()
	if err != nil {
		t.Fatal(err)
	}
	o := w.outcome()
	live, liveErr := w.liveReads()
	res := Check(Input{
		Acked:     append(o.acked, r.probes...),
		Sent:      func(id MsgID) bool { return o.sent[id] },
		NotStored: func(id MsgID) bool { return o.notStored[id] },
		Leader:    leader,
		HW:        hw,
		Replicas:  replicas,
		Live:      live,
		Failover:  r.failover,
	})
	t.Logf("%s: %d cycles in %v; attempted %d acked %d failed %d indeterminate %d unsent %d undecided %d; probes acked %d; consumed %d; hw %v; compared %v",
		spec.name, cfg.cycles, time.Since(started).Round(time.Second), o.attempted, len(o.acked), o.failed, o.indeterminate, o.unsent, o.undecided,
		len(r.probes), len(live), hw, res.Compared)
	t.Logf("%s: lost %d (misplaced %d, missing on a replica %d) duplicated %d divergent %d corrupt %d phantom %d failed-but-present %d inconsistent %d behind %d; failover %v (p99 %v); pause/partition elections %v",
		spec.name, res.Lost, res.Misplaced, res.LostOnReplica, res.Duplicated, res.Divergent, res.Corrupt, res.Phantom, res.FailedPresent, res.Inconsistent, res.Behind,
		roundAll(r.failover), res.FailoverP99, r.elected)
	if len(w.sendErrs) > 0 || len(flushErrs) > 0 || liveErr != nil {
		t.Logf("%s: send errors %v, flush errors %v, consumer %v", spec.name, w.sendErrs, flushErrs, liveErr)
	}
	for _, s := range r.stalls {
		t.Logf("%s: stall: %s", spec.name, s)
	}
	if res.Failed() {
		t.Errorf("%s: violations:\n  %s", spec.name, strings.Join(res.Problems, "\n  "))
	}
	if len(r.stale) > 0 {
		t.Errorf("%s: an old leader acknowledged after it was cut off:\n  %s", spec.name, strings.Join(r.stale, "\n  "))
	}
	if o.undecided > 0 {
		t.Errorf("%s: %d messages without an outcome after the producers' flush", spec.name, o.undecided)
	}
	return summary{cycles: cfg.cycles, acked: res.Acked, lost: res.Lost, duplicated: res.Duplicated, divergent: res.Divergent,
		failover: r.failover, failed: t.Failed()}
}

// report prints the one line and fails the test on the targets: maxP99 bounds the failover
// p99 (maxFailoverP99, the target, for make chaos).
func report(t *testing.T, total summary, maxP99 time.Duration) {
	line := total.line()
	fmt.Println(line)
	t.Log(line)
	if total.lost+total.duplicated+total.divergent > 0 {
		t.Errorf("lost, duplicated or divergent is not 0")
	}
	if p99 := Percentile(total.failover, 0.99); p99 > maxP99 {
		t.Errorf("failover p99 %v over %v (samples %v)", p99, maxP99, roundAll(total.failover))
	}
	if len(total.failover) == 0 {
		t.Log("no kill-leader cycle was drawn: failover_p99_ms=0 measures nothing")
	}
}

func defaultWorkload() workloadConfig {
	return workloadConfig{producers: 4, rate: 300, maxMessages: 1_000_000, maxPayload: 1024}
}

// TestChaos is make chaos: CHAOS_CYCLES fault cycles over the three runs (CHAOS_SEED repeats
// the choices), on a build with cluster support (it fails on one without).
func TestChaos(t *testing.T) {
	if os.Getenv("CHAOS_CYCLES") == "" {
		t.Skip("set CHAOS_CYCLES=N (make chaos) for the long version; TestChaosShort is the short one")
	}
	total := envInt(t, "CHAOS_CYCLES", 20)
	kinds, err := faultsFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	seed := chaosSeed(t)
	t.Logf("CHAOS_SEED=%d CHAOS_CYCLES=%d faults %v", seed, total, kinds)
	var sum summary
	complete := 0
	for i, spec := range runs {
		n := total / len(runs)
		if i < total%len(runs) {
			n++
		}
		if n == 0 {
			continue
		}
		noCluster := false
		t.Run(spec.name, func(t *testing.T) {
			c := newCluster(t, 3, true)
			if err := c.startAll(); errors.Is(err, errNoCluster) {
				noCluster = true
				t.Fatalf("make chaos needs a build with replication: %v", err)
			} else if err != nil {
				t.Fatalf("start: %v", err)
			}
			s := runChaos(t, c, spec, runConfig{cycles: n, kinds: kinds, seed: seed + uint64(i), workload: defaultWorkload(),
				timeout: envDuration(t, "CHAOS_RUN_TIMEOUT", time.Duration(n)*3*time.Minute+5*time.Minute)})
			sum.cycles += s.cycles
			sum.acked += s.acked
			sum.lost += s.lost
			sum.duplicated += s.duplicated
			sum.divergent += s.divergent
			sum.failover = append(sum.failover, s.failover...)
			complete++
		})
		if noCluster {
			return
		}
	}
	if complete < min(total, len(runs)) {
		t.Logf("no chaos line: %d of the runs completed", complete)
		return
	}
	report(t, sum, maxFailoverP99)
}

// shortFailoverBound is TestChaosShort's bound on its one failover sample: make test runs
// beside the other packages' tests (and make test-loaded under stress-ng), where one
// election may take longer than the 2 s p99 target that make chaos holds its many samples to.
const shortFailoverBound = 10 * time.Second

// shortFaults are TestChaosShort's cycles, in order: a leader kill (for the failover
// figure), a partition, a pause, and a damaged follower.
var shortFaults = []faultKind{killLeader, partitionLeader, pauseLeader, truncateFollower}

// TestChaosShort is the version make test runs: one run (acks 1, fsync=always) of four
// cycles. It skips, saying so, while the broker refuses cluster settings.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("three broker processes and fault cycles; skipped with -short")
	}
	if os.Getenv("CHAOS_CYCLES") != "" {
		t.Skip("TestChaos runs the long version")
	}
	c := newCluster(t, 3, true)
	if err := c.startAll(); errors.Is(err, errNoCluster) {
		t.Skipf("skipping: the broker refuses cluster settings (%v)", err)
	} else if err != nil {
		t.Fatalf("start: %v", err)
	}
	seed := chaosSeed(t)
	t.Logf("CHAOS_SEED=%d", seed)
	wl := defaultWorkload()
	wl.rate = 200
	s := runChaos(t, c, runs[0], runConfig{cycles: len(shortFaults), kinds: shortFaults, fixed: true, seed: seed,
		workload: wl, timeout: 10 * time.Minute})
	report(t, s, shortFailoverBound)
}
