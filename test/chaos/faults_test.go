package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lightq/lightq/wire"
)

// The fault cycles. Each picks its victim from the cluster as it is, injects the fault,
// measures what it promises to measure, repairs what it broke, and ends with waitHealthy, so
// that every cycle starts from a fully replicated cluster.

type faultKind string

const (
	killLeader       faultKind = "kill-leader"        // kill -9 a partition's leader; failover timed
	killFollower     faultKind = "kill-follower"      // kill -9 a follower (one leading nothing when there is one)
	killAll          faultKind = "kill-all"           // kill -9 all three at once, then start them
	pauseLeader      faultKind = "pause-leader"       // SIGSTOP a leader until the others elect another, SIGCONT
	partitionLeader  faultKind = "partition-leader"   // cut a leader off at the cluster proxies, heal
	flipFollower     faultKind = "bitflip-follower"   // flip a bit in a follower's segment while it is down
	flipEpoch        faultKind = "epochflip-follower" // flip a bit in the leader epoch field of a follower's batch while it is down
	truncateFollower faultKind = "truncate-follower"  // cut a follower's newest segment short while it is down
	rollingRestart   faultKind = "rolling-restart"    // SIGTERM and start each broker in turn
)

var allFaults = []faultKind{killLeader, killFollower, killAll, pauseLeader, partitionLeader, flipFollower, flipEpoch, truncateFollower, rollingRestart}

// faultsFromEnv is CHAOS_FAULTS (a comma-separated subset of allFaults), or allFaults.
func faultsFromEnv() ([]faultKind, error) {
	v := os.Getenv("CHAOS_FAULTS")
	if v == "" {
		return allFaults, nil
	}
	var out []faultKind
	for _, s := range strings.Split(v, ",") {
		k := faultKind(strings.TrimSpace(s))
		if !slices.Contains(allFaults, k) {
			return nil, fmt.Errorf("CHAOS_FAULTS: unknown fault %q (known: %v)", k, allFaults)
		}
		out = append(out, k)
	}
	return out, nil
}

// failoverTimeout bounds the wait for a new leader to accept a produce.
const failoverTimeout = 30 * time.Second

// progressTimeout bounds the wait for the workload to get acknowledgements during a fault
// (that the clients follow the new leaders): a stall is reported, not fatal.
const progressTimeout = 20 * time.Second

// chaosRun is the state of one run's fault cycles.
type chaosRun struct {
	c         *cluster
	w         *workload
	rng       *rand.Rand
	probeAcks wire.Acks

	mu       sync.Mutex
	failover []time.Duration               // kill-leader: kill to a produce accepted by the new leader
	elected  map[faultKind][]time.Duration // pause and partition: the same, reported only
	probes   []Acked                       // acknowledged probes: the checker wants them present
	probeSeq uint64
	stale    []string // acknowledgements from a paused or partitioned old leader: must be none
	stalls   []string // faults during which the workload got no acknowledgement
}

func newChaosRun(c *cluster, w *workload, seed uint64, probeAcks wire.Acks) *chaosRun {
	return &chaosRun{c: c, w: w, rng: rand.New(rand.NewPCG(seed, 0x63686173)), probeAcks: probeAcks,
		elected: map[faultKind][]time.Duration{}}
}

// nextProbe makes a probe payload with a fresh id.
func (r *chaosRun) nextProbe() ([]byte, MsgID) {
	r.mu.Lock()
	r.probeSeq++
	id := MsgID{Producer: 1, Seq: r.probeSeq}
	r.mu.Unlock()
	v := make([]byte, 64)
	FillPayload(v, true, id, rand.Uint64)
	return v, id
}

func (r *chaosRun) ackedProbe(id MsgID, p int32, off int64) {
	r.mu.Lock()
	r.probes = append(r.probes, Acked{ID: id, Probe: true, Partition: p, Offset: off})
	r.mu.Unlock()
}

// cycle runs one fault and returns what it did, for the log.
func (r *chaosRun) cycle(ctx context.Context, kind faultKind) (string, error) {
	c := r.c
	leaders, err := c.waitLeaders(ctx, c.replicationWait(), true)
	if err != nil {
		return "", err
	}
	part := int32(r.rng.IntN(c.parts))
	leader := c.node(leaders[part])
	var note string
	switch kind {
	case killLeader:
		led := ledBy(leaders, leader.id)
		start := time.Now()
		c.kill(leader)
		ds, err := r.probeFailover(ctx, led, leader.id, start)
		if err != nil {
			return "", err
		}
		r.mu.Lock()
		r.failover = append(r.failover, ds...)
		r.mu.Unlock()
		note = fmt.Sprintf("node %d (led %v); new leaders accepted a produce after %v", leader.id, led, roundAll(ds))
		r.progress(kind, "node down")
		c.start(leader)
	case killFollower:
		f := r.follower(leaders, part)
		c.kill(f)
		note = fmt.Sprintf("node %d (follower of partition %d, leads %v)", f.id, part, ledBy(leaders, f.id))
		r.progress(kind, "follower down")
		c.start(f)
	case killAll:
		for _, i := range r.rng.Perm(len(c.nodes)) {
			c.kill(c.nodes[i])
		}
		for _, n := range c.nodes {
			if err := c.spawn(n); err != nil {
				return "", err
			}
		}
		for _, n := range c.nodes {
			if err := c.awaitUp(n, startTimeout); err != nil {
				return "", err
			}
		}
		note = "all killed and started again"
	case pauseLeader, partitionLeader:
		note, err = r.isolate(ctx, kind, leaders, leader)
		if err != nil {
			return "", err
		}
	case flipFollower, flipEpoch, truncateFollower:
		f := r.follower(leaders, part)
		c.kill(f)
		dir := PartitionDir(f.dir, c.topic, part)
		var d string
		switch kind {
		case flipFollower:
			d, err = flipBit(dir, r.rng, false)
		case flipEpoch:
			d, err = flipBit(dir, r.rng, true)
		default:
			d, err = truncateSegment(dir, r.rng)
		}
		if err != nil {
			return "", fmt.Errorf("node %d partition %d: %w", f.id, part, err)
		}
		note = fmt.Sprintf("node %d partition %d: %s", f.id, part, d)
		c.start(f)
	case rollingRestart:
		for _, i := range r.rng.Perm(len(c.nodes)) {
			c.stop(c.nodes[i])
			c.start(c.nodes[i])
			if err := c.waitHealthy(ctx); err != nil {
				return "", fmt.Errorf("after restarting node %d: %w", i+1, err)
			}
		}
		note = "each broker stopped (SIGTERM) and started in turn"
	default:
		return "", fmt.Errorf("unknown fault %q", kind)
	}
	if err := c.waitHealthy(ctx); err != nil {
		return note, err
	}
	return note, nil
}

// progress waits for the workload to be acknowledged during a fault, and notes a stall.
func (r *chaosRun) progress(kind faultKind, what string) {
	if !r.w.waitProgress(context.Background(), 20, progressTimeout) {
		r.mu.Lock()
		r.stalls = append(r.stalls, fmt.Sprintf("%s: no acknowledgement within %v while %s", kind, progressTimeout, what))
		r.mu.Unlock()
	}
}

// isolate pauses (SIGSTOP) or partitions the leader away until the others have elected new
// leaders for what it led and one accepted a produce; meanwhile a produce sent to the old
// leader must not be acknowledged, then or after it comes back.
func (r *chaosRun) isolate(ctx context.Context, kind faultKind, leaders map[int32]uint32, old *node) (string, error) {
	c := r.c
	led := ledBy(leaders, old.id)
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	stale, err := DialRaw(dctx, old.client.Addr(), "admin", adminPass) // dialed first: a paused broker answers no login
	cancel()
	if err != nil {
		return "", fmt.Errorf("node %d: %w", old.id, err)
	}
	mode := CutMode(r.rng.IntN(2))
	start := time.Now()
	what := "paused (SIGSTOP)"
	if kind == pauseLeader {
		c.pause(old)
	} else {
		c.faults.Isolate(mode, uint64(old.id))
		what = fmt.Sprintf("partitioned (%v)", mode)
	}
	ds, err := r.probeFailover(ctx, led, old.id, start)
	if err != nil {
		stale.Close()
		return "", err
	}
	r.mu.Lock()
	r.elected[kind] = append(r.elected[kind], ds...)
	r.mu.Unlock()

	// The produce to the old leader: sent now that the others lead, answered (if ever)
	// after it is back. Any success is an acknowledgement no quorum gave.
	v, id := r.nextProbe()
	staleDone := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		off, err := stale.Produce(sctx, c.topic, led[0], r.probeAcks, v)
		stale.Close()
		if err == nil {
			r.ackedProbe(id, led[0], off)
			r.mu.Lock()
			r.stale = append(r.stale, fmt.Sprintf("%s: node %d, %s, acknowledged a produce to partition %d at offset %d", kind, old.id, what, led[0], off))
			r.mu.Unlock()
		}
		staleDone <- err
	}()
	r.progress(kind, "the old leader is "+what)
	if kind == pauseLeader {
		c.resume(old)
	} else {
		c.faults.Heal()
	}
	staleErr := <-staleDone
	return fmt.Sprintf("node %d (led %v) %s; new leaders accepted a produce after %v; the old leader answered a produce with %v",
		old.id, led, what, roundAll(ds), errClassOrOK(staleErr)), nil
}

func errClassOrOK(err error) string {
	if err == nil {
		return "SUCCESS (a violation)"
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "no answer in 30s"
	}
	return errClass(err)
}

// follower picks a follower of partition part: one that leads no partition when there is
// one, else any replica that is not part's leader.
func (r *chaosRun) follower(leaders map[int32]uint32, part int32) *node {
	var idle, others []*node
	for _, n := range r.c.nodes {
		if n.id == leaders[part] {
			continue
		}
		if len(ledBy(leaders, n.id)) == 0 {
			idle = append(idle, n)
		} else {
			others = append(others, n)
		}
	}
	if len(idle) > 0 {
		return idle[r.rng.IntN(len(idle))]
	}
	return others[r.rng.IntN(len(others))]
}

// ledBy lists the partitions node id leads.
func ledBy(leaders map[int32]uint32, id uint32) []int32 {
	var out []int32
	for p, l := range leaders {
		if l == id {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// probeFailover times, for each partition in parts (led by victim until start), the moment
// a new leader accepts a produce: it asks the brokers that are up (victim aside) who leads,
// and sends a probe there, every 10 ms, each request bounded, with its own connections.
func (r *chaosRun) probeFailover(ctx context.Context, parts []int32, victim uint32, start time.Time) ([]time.Duration, error) {
	type cand struct {
		id   uint32
		addr string
	}
	var cands []cand
	for _, n := range r.c.nodes {
		if n.id != victim && n.up() {
			cands = append(cands, cand{n.id, n.client.Addr()})
		}
	}
	out := make([]time.Duration, len(parts))
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Go(func() {
			conns := map[string]*RawConn{}
			defer func() {
				for _, rc := range conns {
					rc.Close()
				}
			}()
			get := func(addr string) (*RawConn, error) {
				if rc := conns[addr]; rc != nil {
					return rc, nil
				}
				dctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				rc, err := DialRaw(dctx, addr, "admin", adminPass)
				if err == nil {
					conns[addr] = rc
				}
				return rc, err
			}
			drop := func(addr string) {
				if rc := conns[addr]; rc != nil {
					rc.Close()
					delete(conns, addr)
				}
			}
			var last error
			err := pollUntil(ctx, failoverTimeout, 10*time.Millisecond, func() bool {
				for _, cd := range cands {
					rc, err := get(cd.addr)
					if err != nil {
						last = err
						continue
					}
					rctx, cancel := context.WithTimeout(ctx, time.Second)
					md, err := rc.ClusterMetadata(rctx, r.c.topic)
					cancel()
					if err != nil {
						last = err
						drop(cd.addr)
						continue
					}
					lead := Leaders(md, r.c.topic)[p]
					var addr string
					for _, x := range cands {
						if x.id == lead {
							addr = x.addr
						}
					}
					if addr == "" {
						continue // none yet, or still the victim
					}
					lc, err := get(addr)
					if err != nil {
						last = err
						continue
					}
					v, id := r.nextProbe()
					rctx, cancel = context.WithTimeout(ctx, time.Second)
					off, err := lc.Produce(rctx, r.c.topic, p, r.probeAcks, v)
					cancel()
					if err == nil {
						out[i] = time.Since(start)
						r.ackedProbe(id, p, off)
						return true
					}
					last = err
					if _, refused := err.(*wire.Error); !refused {
						drop(addr)
					}
				}
				return false
			})
			if err != nil {
				errs[i] = fmt.Errorf("partition %d: no new leader accepted a produce within %v of node %d's fault (last: %v)", p, failoverTimeout, victim, last)
			}
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// flipBit flips one bit of a random batch in a random segment of dir (a stopped replica),
// and says where: with epoch, in its leader epoch (bytes 20-23, outside the CRC: the replica
// checks it against its leader-epochs file); else anywhere in the batch but there (which
// epochflip-follower covers; CHAOS_FLIP_ANY=1 allows it too).
func flipBit(dir string, rng *rand.Rand, epoch bool) (string, error) {
	segs, err := Segments(dir)
	if err != nil {
		return "", err
	}
	type spot struct {
		seg      string
		pos, len int
		base     int64
	}
	var spots []spot
	for _, seg := range segs {
		data, err := os.ReadFile(seg)
		if err != nil {
			return "", err
		}
		base, _ := strconv.ParseInt(seg[len(seg)-24:len(seg)-4], 10, 64)
		_, _ = WalkSegment(seg, data, base, func(pos int, raw []byte, bt *wire.Batch) {
			spots = append(spots, spot{seg, pos, len(raw), bt.BaseOffset})
		})
	}
	if len(spots) == 0 {
		return "", errors.New("no batch to flip a bit in")
	}
	s := spots[rng.IntN(len(spots))]
	at := rng.IntN(s.len)
	for !epoch && os.Getenv("CHAOS_FLIP_ANY") == "" && at >= 20 && at < 24 {
		at = rng.IntN(s.len)
	}
	if epoch {
		at = 20 + rng.IntN(4)
	}
	bit := byte(1) << rng.IntN(8)
	f, err := os.OpenFile(s.seg, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], int64(s.pos+at)); err != nil {
		return "", err
	}
	b[0] ^= bit
	if _, err := f.WriteAt(b[:], int64(s.pos+at)); err != nil {
		return "", err
	}
	return fmt.Sprintf("bit %#02x flipped at byte %d of the batch at offset %d (%s byte %d, %d of %d batches)",
		bit, at, s.base, s.seg[len(s.seg)-24:], s.pos+at, slices.IndexFunc(spots, func(x spot) bool { return x == s })+1, len(spots)), nil
}

// truncateSegment cuts the newest non-empty segment of dir (a stopped replica) at a random
// byte, as a lost tail of unsynced writes would, and says where.
func truncateSegment(dir string, rng *rand.Rand) (string, error) {
	segs, err := Segments(dir)
	if err != nil {
		return "", err
	}
	for i := len(segs) - 1; i >= 0; i-- {
		fi, err := os.Stat(segs[i])
		if err != nil {
			return "", err
		}
		if fi.Size() == 0 {
			continue
		}
		at := rng.Int64N(fi.Size())
		if err := os.Truncate(segs[i], at); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s cut from %d to %d bytes", segs[i][len(segs[i])-24:], fi.Size(), at), nil
	}
	return "", errors.New("no segment with data to truncate")
}
