package crash

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lightq/lightq/broker/brokertest"
	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/internal/proxytest"
	"github.com/lightq/lightq/wire"
)

const (
	topicName    = "crash"
	partitions   = 2
	producers    = 4
	window       = 16 // producer MaxInFlight
	minPayload   = 64
	maxPayload   = 4 << 10
	segmentBytes = 2 << 20 // the smallest the broker allows with the default MaxBatch: rolls happen
	adminPass    = "crash-admin-pw"
	hashParams   = "m=64,t=1,p=1"

	minKill = 300 * time.Millisecond
	maxKill = 2 * time.Second

	// fdSlack is how many more descriptors than at the fresh start (segments aside) a
	// restarted broker may hold.
	fdSlack = 8
	// maxRestartP99 bounds restart-to-serving. The plan's target is 1 s for a log of up to
	// 1 GiB, and these logs are far smaller: idle, a restart takes tens of milliseconds, and
	// the summary logs the figure. The bound only catches a recovery that is stuck or grossly
	// slow, with room for a loaded 2-core machine, where exec and start-up alone can take
	// seconds.
	maxRestartP99 = 10 * time.Second
)

type mode struct{ name, fsync string }

var modes = []mode{
	{"always", "always"},
	{"interval", "interval=50ms"},
	{"never", "never"},
}

// ---- test setup -------------------------------------------------------------------------

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// brokerBinary builds cmd/lightq once per test process.
func brokerBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			if root := os.Getenv("GOROOT"); root != "" {
				goTool = filepath.Join(root, "bin", "go")
			}
		}
		if goTool == "" {
			buildErr = errors.New("no go tool to build the broker with")
			return
		}
		if buildDir, err = os.MkdirTemp("", "lightq-crash-bin-*"); err != nil {
			buildErr = err
			return
		}
		bin := filepath.Join(buildDir, "lightq")
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		start := time.Now()
		out, err := exec.CommandContext(ctx, goTool, "build", "-o", bin, "github.com/lightq/lightq/cmd/lightq").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		buildBin = bin
		t.Logf("built %s in %v", bin, time.Since(start).Round(time.Millisecond))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

const (
	tmpfsMagic = 0x01021994
	ramfsMagic = 0x858458f6
)

// onRAM reports whether dir is on tmpfs or ramfs, where fsync does nothing.
func onRAM(dir string) (bool, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return false, err
	}
	return int64(st.Type) == tmpfsMagic || int64(st.Type) == ramfsMagic, nil
}

// dataBase returns a directory on a real disk for the test's data directories, removed at
// the end unless the test failed (then it is kept for inspection and named in the log).
func dataBase(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "lightq-crash-*")
	if err != nil {
		t.Fatal(err)
	}
	ram, err := onRAM(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ram {
		os.RemoveAll(dir)
		// The repository root is two levels up from this package; .crash-tmp is gitignored.
		root, err := filepath.Abs(filepath.Join("..", "..", ".crash-tmp"))
		if err == nil {
			err = os.MkdirAll(root, 0o755)
		}
		if err == nil {
			dir, err = os.MkdirTemp(root, "run-*")
		}
		if err == nil {
			ram, err = onRAM(dir)
		}
		if err != nil || ram {
			t.Skipf("the temp dir is on tmpfs (fsync is a no-op there) and ../../.crash-tmp is not usable on a real disk (%v): skipping", err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("data kept for inspection in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return dir
}

func envInt(t *testing.T, key string, def int) int {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", key, v)
	}
	return n
}

func testSeed(t *testing.T) uint64 {
	t.Helper()
	if v := os.Getenv("LIGHTQ_CRASH_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("LIGHTQ_CRASH_SEED=%q: %v", v, err)
		}
		return s
	}
	return uint64(time.Now().UnixNano())
}

// ---- the broker process -----------------------------------------------------------------

// tailBuffer keeps the last 2-4 MiB written to it; safe for concurrent use.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (w *tailBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if len(w.b) > 4<<20 {
		w.b = append(w.b[:0:0], w.b[len(w.b)-2<<20:]...)
	}
	return len(p), nil
}

func (w *tailBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}

// tail is the last n bytes of the log, for failure messages.
func (w *tailBuffer) tail(n int) string {
	s := w.String()
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

type brokerProc struct {
	cmd     *exec.Cmd
	pid     int
	addr    string
	log     *tailBuffer
	exited  chan struct{}
	waitErr error
}

func (b *brokerProc) alive() bool {
	select {
	case <-b.exited:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (b *brokerProc) kill(t *testing.T) {
	t.Helper()
	if !b.alive() {
		t.Fatalf("broker %d died before it was killed: %v; log:\n%s", b.pid, b.waitErr, b.log.tail(4000))
	}
	if err := syscall.Kill(b.pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %d: %v", b.pid, err)
	}
	select {
	case <-b.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("broker %d still running 10 s after SIGKILL", b.pid)
	}
}

func adminOptions(name string) client.Options {
	return client.Options{User: "admin", Password: adminPass, ClientName: name,
		DialTimeout: 5 * time.Second, RequestTimeout: 10 * time.Second}
}

// startBroker starts the broker on dataDir and 127.0.0.1:0 (it logs the port it got), and
// returns it with an admin connection and the time from exec to the first successful
// HELLO+AUTH (recovery runs before the broker listens, so this is restart-to-serving).
func startBroker(t *testing.T, bin, dataDir string) (*brokerProc, *client.Conn, time.Duration) {
	t.Helper()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LIGHTQ_") {
			env = append(env, kv)
		}
	}
	env = append(env, "LIGHTQ_ADMIN_PASSWORD="+adminPass)
	b := &brokerProc{log: &tailBuffer{}, exited: make(chan struct{})}
	b.cmd = exec.Command(bin, "--addr", "127.0.0.1:0", "--data-dir", dataDir, "--hash-params", hashParams,
		"--log-level", "info", "--log-format", "json", "--shutdown-drain", "200ms")
	b.cmd.Env = env
	b.cmd.Stdout = io.Discard
	b.cmd.Stderr = b.log
	start := time.Now()
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b.pid = b.cmd.Process.Pid
	go func() {
		b.waitErr = b.cmd.Wait()
		close(b.exited)
	}()
	t.Cleanup(func() {
		if b.alive() {
			_ = syscall.Kill(b.pid, syscall.SIGKILL)
			<-b.exited
		}
	})
	deadline := start.Add(30 * time.Second)
	for {
		addr, ok := brokertest.ListenAddr(b.log.String())
		if ok {
			b.addr = addr
			break
		}
		select {
		case <-b.exited:
			t.Fatalf("broker exited while starting: %v; log:\n%s", b.waitErr, b.log.tail(8000))
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("broker logged no listening address 30 s after start; log:\n%s", b.log.tail(8000))
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	c, err := client.Dial(ctx, b.addr, adminOptions("crash-admin"))
	if err != nil {
		t.Fatalf("broker listening on %s, but HELLO+AUTH failed: %v; log:\n%s", b.addr, err, b.log.tail(8000))
	}
	return b, c, time.Since(start)
}

// countFDs counts the open file descriptors of a process.
func countFDs(pid int) (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents), err
}

// vmRSS is a process's resident set size in bytes (0 when unknown).
func vmRSS(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			if fs := strings.Fields(rest); len(fs) == 2 && fs[1] == "kB" {
				kb, _ := strconv.ParseInt(fs[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

var segmentRE = regexp.MustCompile(`^[0-9]{20}\.log$`)

func partitionDir(dataDir string, part int) string {
	return filepath.Join(dataDir, "topics", topicName, strconv.Itoa(part))
}

// segments lists a partition's segment files, oldest first.
func segments(dataDir string, part int) ([]string, error) {
	ents, err := os.ReadDir(partitionDir(dataDir, part))
	if err != nil {
		return nil, err
	}
	var segs []string
	for _, e := range ents {
		if segmentRE.MatchString(e.Name()) {
			segs = append(segs, e.Name())
		}
	}
	slices.Sort(segs)
	return segs, nil
}

// ---- one cycle's load -------------------------------------------------------------------

// loadResult is what the clients of one cycle saw.
type loadResult struct {
	live        []liveRead
	liveCorrupt int
	liveErr     error
	sendErrs    map[string]int
}

// producer is one of a data directory's producers: it lives through all of the directory's
// cycles on one reconnecting Conn, through the proxy, and never dials again by hand.
type producer struct {
	c *client.Conn
	p *client.Producer
	h *prodHist
}

// producerDeliveryTimeout is how long a message may wait for its acknowledgement, across the
// kill and the restart (restarts take well under a second; maxRestartP99 bounds them).
const producerDeliveryTimeout = time.Minute

// startProducers dials the producers of a data directory whose first cycle is cycle.
func startProducers(t *testing.T, addr string, st *history, cycle int) []producer {
	t.Helper()
	var pcs []producer
	for i := 0; i < producers; i++ {
		pid := uint32(cycle*producers + i + 1)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := client.Dial(ctx, addr, adminOptions(fmt.Sprintf("crash-p%d", pid)))
		cancel()
		if err != nil {
			t.Fatalf("producer %d: dial: %v", pid, err)
		}
		p, err := c.NewProducer(client.ProducerOptions{Topic: topicName, Acks: client.AckWritten, MaxInFlight: window,
			DeliveryTimeout: producerDeliveryTimeout})
		if err != nil {
			t.Fatalf("producer %d: %v", pid, err)
		}
		pcs = append(pcs, producer{c, p, st.newProducer(pid, cycle)})
	}
	return pcs
}

// flushProducers waits until every message sent so far has its outcome.
func flushProducers(t *testing.T, pcs []producer) map[string]int {
	errs := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, pc := range pcs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), producerDeliveryTimeout+30*time.Second)
			defer cancel()
			if err := pc.p.Flush(ctx); err != nil {
				mu.Lock()
				errs[errClass(err)]++ // each message's outcome is in the history
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errs
}

func closeProducers(pcs []producer) {
	for _, pc := range pcs {
		_ = pc.p.Close()
		pc.c.Close()
	}
}

// runLoad runs the producers, the live consumer and the committer against b, kills b after
// killAfter and waits for the producers' loops and the consumer to stop. The producers are
// not flushed: their unacknowledged batches wait for the restart.
func runLoad(t *testing.T, b *brokerProc, pcs []producer, st *history, cycle int, seed uint64, rate int, killAfter time.Duration) loadResult {
	t.Helper()
	var res loadResult
	res.sendErrs = map[string]int{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	cc, err := client.Dial(dctx, b.addr, adminOptions("crash-consumer"))
	dcancel()
	if err != nil {
		t.Fatalf("consumer: dial: %v", err)
	}
	dctx, dcancel = context.WithTimeout(ctx, 10*time.Second)
	committer, err := client.Dial(dctx, b.addr, adminOptions("crash-committer"))
	dcancel()
	if err != nil {
		t.Fatalf("committer: dial: %v", err)
	}

	var wg sync.WaitGroup
	var errMu sync.Mutex
	for _, pc := range pcs {
		pc.h.setCycle(cycle)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := produce(ctx, pc.p, pc.h, st.seed, rand.New(rand.NewPCG(seed, uint64(pc.h.id)<<8|uint64(cycle&0xff))), rate)
			if err != nil {
				errMu.Lock()
				res.sendErrs[errClass(err)]++
				errMu.Unlock()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		st.commits.run(ctx, committer)
	}()
	wg.Add(1)
	start := st.hw
	go func() {
		defer wg.Done()
		res.live, res.liveCorrupt, res.liveErr = consume(ctx, cc, start, st.seed)
	}()

	time.Sleep(killAfter)
	b.kill(t)
	cancel()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("producers or consumer still running 30 s after the broker was killed")
	}
	cc.Close()
	committer.Close()
	return res
}

func errClass(err error) string {
	var we *wire.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, client.ErrDeliveryTimeout):
		return "delivery timeout"
	case errors.Is(err, client.ErrConnectionLost):
		return "connection lost"
	case errors.As(err, &we):
		return we.Code.String()
	}
	return err.Error()
}

// produce sends paced messages of random size to random partitions until ctx ends or Send
// fails; it returns Send's error (nil when ctx ended first). Only this goroutine adds to h
// while it runs.
func produce(ctx context.Context, p *client.Producer, h *prodHist, hseed maphash.Seed, rng *rand.Rand, rate int) error {
	buf := make([]byte, maxPayload)
	start := time.Now()
	h.mu.Lock()
	first := uint64(len(h.msgs)) // the producer lives through cycles: seq goes on
	h.mu.Unlock()
	for seq := first; ; seq++ {
		// Pace at rate messages a second, in bursts of up to 5 ms worth (so batches hold a
		// few messages rather than one).
		due := start.Add(time.Duration(float64(seq-first) / float64(rate) * float64(time.Second)))
		if d := time.Until(due); d > 5*time.Millisecond {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		size := minPayload + rng.IntN(maxPayload-minPayload+1)
		v := buf[:size]
		fillPayload(v, h.id, seq, rng.Uint64)
		part := int8(rng.IntN(partitions))
		h.add(msgRec{hash: maphash.Bytes(hseed, v), size: int32(size), part: part, ackPart: -1, off: -1})
		err := p.Send(ctx, &client.Message{Value: v, Partition: int32(part), HasPartition: true}, func(a client.Ack, err error) {
			h.resolve(seq, a, err)
		})
		if err != nil {
			h.unsent(seq) // not taken: a Send blocked on a full producer when the cycle ended
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// consume is the live consumer: it follows both partitions from start with FETCH (isolation
// written) until ctx ends or the connection breaks, checking each payload's CRC.
func consume(ctx context.Context, c *client.Conn, start [partitions]int64, seed maphash.Seed) ([]liveRead, int, error) {
	var reads []liveRead
	corrupt := 0
	next := start
	for {
		for part := 0; part < partitions; part++ {
			res, err := c.Fetch(ctx, wire.Fetch{Topic: topicName, Partition: uint32(part), Offset: next[part],
				MaxBytes: 256 << 10, MaxWaitMs: 20, Isolation: wire.IsolationWritten})
			if err != nil {
				if ctx.Err() != nil || errors.Is(err, client.ErrConnectionLost) || errors.Is(err, client.ErrClosed) {
					return reads, corrupt, nil
				}
				return reads, corrupt, fmt.Errorf("partition %d: fetch at %d: %w", part, next[part], err)
			}
			it := res.Iter()
			for it.Next() {
				bt := it.Batch()
				if bt.Codec() != wire.CodecNone {
					return reads, corrupt, fmt.Errorf("partition %d: compressed batch at %d, but nothing was compressed", part, bt.BaseOffset)
				}
				ri := wire.NewRecordIter(bt.Records, bt.RecordCount, bt.BaseOffset, bt.FirstTimestamp)
				var rec wire.Record
				for ri.Next(&rec) {
					if rec.Offset < next[part] {
						continue
					}
					if rec.Offset != next[part] {
						return reads, corrupt, fmt.Errorf("partition %d: record %d after %d", part, rec.Offset, next[part]-1)
					}
					if _, _, ok := payloadOK(rec.Value); !ok {
						corrupt++
					}
					reads = append(reads, liveRead{part: part, off: rec.Offset, hash: maphash.Bytes(seed, rec.Value)})
					next[part]++
				}
				if err := ri.Err(); err != nil {
					return reads, corrupt, fmt.Errorf("partition %d: records of batch %d: %w", part, bt.BaseOffset, err)
				}
			}
			if err := it.Err(); err != nil {
				return reads, corrupt, fmt.Errorf("partition %d: batch after %d: %w", part, next[part], err)
			}
		}
	}
}

// checkDurableHW checks that after recovery everything is durable: the high watermark with
// isolation durable equals the one with isolation written, which verify found.
func checkDurableHW(ctx context.Context, c *client.Conn, hw [partitions]int64, r *report) error {
	for part := 0; part < partitions; part++ {
		res, err := c.Fetch(ctx, wire.Fetch{Topic: topicName, Partition: uint32(part), Offset: hw[part],
			MaxBytes: 1 << 10, Isolation: wire.IsolationDurable})
		if err != nil {
			return fmt.Errorf("partition %d: fetch at %d with isolation durable: %w", part, hw[part], err)
		}
		if res.HighWatermark != hw[part] {
			r.vanished++
			r.problem("durable-hw", "partition %d: high watermark %d with isolation durable, %d with isolation written, after recovery", part, res.HighWatermark, hw[part])
		}
	}
	return nil
}

// ---- torn tails -------------------------------------------------------------------------

// garbage is bytes appended to a partition's active segment between kill and restart.
type garbage struct {
	part         int
	seg          string // path of the active segment
	sizeBefore   int64
	bytes        []byte
	kind         string
	brokenBefore map[string]bool
}

// appendGarbage appends a torn-write imitation to the active segment of part: random
// bytes, zeros, 0xFF, a truncated copy of a real batch, a header announcing a huge batch, or
// a whole batch with a bad CRC. Never a valid batch.
func appendGarbage(dataDir string, part int, rng *rand.Rand) (garbage, error) {
	segs, err := segments(dataDir, part)
	if err != nil || len(segs) == 0 {
		return garbage{}, fmt.Errorf("partition %d: no segment: %v", part, err)
	}
	dir := partitionDir(dataDir, part)
	g := garbage{part: part, seg: filepath.Join(dir, segs[len(segs)-1]), brokenBefore: map[string]bool{}}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return g, err
	}
	for _, e := range ents {
		if strings.Contains(e.Name(), ".broken.") {
			g.brokenBefore[e.Name()] = true
		}
	}
	data, err := os.ReadFile(g.seg)
	if err != nil {
		return g, err
	}
	g.sizeBefore = int64(len(data))
	// The last whole, valid batch, to imitate.
	var last []byte
	var next int64
	for pos := 0; pos+12 <= len(data); {
		n := wire.BatchSize(data[pos:])
		if n < wire.BatchHeaderSize || pos+n > len(data) {
			break
		}
		bt, err := wire.ParseBatch(data[pos:pos+n], 16<<20)
		if err != nil {
			break
		}
		last, next = data[pos:pos+n], bt.BaseOffset+int64(bt.RecordCount)
		pos += n
	}
	n := 1 + rng.IntN(64<<10)
	kinds := []string{"random", "zeros", "0xff", "truncated-batch", "huge-length", "bad-crc"}
	g.kind = kinds[rng.IntN(len(kinds))]
	if last == nil && (g.kind == "truncated-batch" || g.kind == "bad-crc") {
		g.kind = "random"
	}
	switch g.kind {
	case "random":
		g.bytes = make([]byte, n)
		for i := range g.bytes {
			g.bytes[i] = byte(rng.Uint32())
		}
	case "zeros":
		g.bytes = make([]byte, n)
	case "0xff":
		g.bytes = bytes.Repeat([]byte{0xff}, n)
	case "truncated-batch":
		g.bytes = slices.Clone(last[:1+rng.IntN(len(last)-1)])
		if len(g.bytes) >= 8 {
			binary.BigEndian.PutUint64(g.bytes, uint64(next))
		}
	case "huge-length":
		g.bytes = make([]byte, wire.BatchHeaderSize+rng.IntN(4096))
		for i := range g.bytes {
			g.bytes[i] = byte(rng.Uint32())
		}
		binary.BigEndian.PutUint64(g.bytes, uint64(next))
		binary.BigEndian.PutUint32(g.bytes[8:], math.MaxInt32-uint32(rng.IntN(1024)))
	case "bad-crc":
		g.bytes = slices.Clone(last)
		binary.BigEndian.PutUint64(g.bytes, uint64(next))
		g.bytes[16+rng.IntN(len(g.bytes)-16)] ^= byte(1 + rng.IntN(255))
	}
	f, err := os.OpenFile(g.seg, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return g, err
	}
	_, err = f.Write(g.bytes)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return g, err
}

// checkGarbageCut checks, after the restart, that the broker cut the garbage: the segment is
// no longer than before it, and a new <segment>.broken.<nanos> ends with the garbage.
func checkGarbageCut(g garbage) error {
	fi, err := os.Stat(g.seg)
	if err != nil {
		return err
	}
	if fi.Size() > g.sizeBefore {
		return fmt.Errorf("%s is %d bytes after recovery, %d before %d bytes of %s garbage were appended",
			g.seg, fi.Size(), g.sizeBefore, len(g.bytes), g.kind)
	}
	ents, err := os.ReadDir(filepath.Dir(g.seg))
	if err != nil {
		return err
	}
	prefix := filepath.Base(g.seg) + ".broken."
	var fresh []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) && !g.brokenBefore[e.Name()] {
			fresh = append(fresh, e.Name())
		}
	}
	if len(fresh) == 0 {
		return fmt.Errorf("no new %s* after recovery from %d bytes of %s garbage", prefix, len(g.bytes), g.kind)
	}
	for _, name := range fresh {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(g.seg), name))
		if err != nil {
			return err
		}
		if bytes.HasSuffix(b, g.bytes) {
			return nil
		}
	}
	return fmt.Errorf("%v: none ends with the %d bytes of %s garbage", fresh, len(g.bytes), g.kind)
}

// ---- a mode's run -----------------------------------------------------------------------

type modeSummary struct {
	counts
	dupMsgs        int // messages stored more than once (at the last pass of their data directory)
	cycles         int
	restarts       []time.Duration
	fdMax          int
	overheadFresh  int // fds minus segment files at the fresh start
	overheadMax    int // the same after restarts, at most
	rssFresh       int64
	rssMax         int64
	tornLogged     int // torn tails the broker reported cutting
	garbageApplied int
	garbageCut     int
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(i, 0)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// runMode runs cycles kill -9 cycles of one fsync mode. With torn, every other cycle appends
// garbage to the active segment of one or both partitions between kill and restart.
func runMode(t *testing.T, m mode, cycles int, seed uint64, torn bool) modeSummary {
	bin := brokerBinary(t)
	base := dataBase(t)
	rate := envInt(t, "LIGHTQ_CRASH_RATE", 1000)
	gen := envInt(t, "LIGHTQ_CRASH_GEN", 10)
	rng := rand.New(rand.NewPCG(seed, 0x6c69676874))
	t.Logf("mode %s: %d cycles, seed %d, %d msg/s per producer, data under %s", m.name, cycles, seed, rate, base)
	var sum modeSummary
	sum.overheadFresh = -1
	hseed := maphash.MakeSeed()
	// The producers dial the proxy, which forwards to whichever broker runs now: restarted
	// brokers listen on new ports (127.0.0.1:0), and the producers only reconnect.
	proxy := proxytest.Start(t)

	for done := 0; done < cycles && !t.Failed(); {
		n := min(gen, cycles-done)
		dataDir, err := os.MkdirTemp(base, m.name+"-*")
		if err != nil {
			t.Fatal(err)
		}
		b, admin, _ := startBroker(t, bin, dataDir)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = admin.CreateTopic(ctx, client.TopicConfig{Name: topicName, Kind: wire.KindDurable, Partitions: partitions,
			User: "crash", Password: "crash-user-pw", Options: []wire.Option{
				{Key: "fsync", Value: m.fsync}, {Key: "segment.bytes", Value: strconv.Itoa(segmentBytes)}}})
		cancel()
		if err != nil {
			t.Fatalf("create topic: %v; log:\n%s", err, b.log.tail(4000))
		}
		st := newHistory(hseed)
		proxy.SetBackend(b.addr)
		pcs := startProducers(t, proxy.Addr(), st, done)
		if fds, err := countFDs(b.pid); err == nil && sum.overheadFresh < 0 {
			sum.overheadFresh = fds - 2*partitions // one segment and one checkpoint file each
			sum.rssFresh = vmRSS(b.pid)
			t.Logf("fresh start: %d fds, RSS %.1f MiB", fds, float64(sum.rssFresh)/(1<<20))
		}
		for i := 0; i < n && !t.Failed(); i++ {
			cycle := done + i
			sum.cycles++
			killAfter := minKill + time.Duration(rng.Int64N(int64(maxKill-minKill)+1))
			lr := runLoad(t, b, pcs, st, cycle, seed, rate, killAfter)
			admin.Close()

			var gs []garbage
			if torn && cycle%2 == 1 {
				first := rng.IntN(partitions)
				for part := 0; part < partitions; part++ {
					if part != first && rng.IntN(2) == 0 {
						continue
					}
					g, err := appendGarbage(dataDir, part, rng)
					if err != nil {
						t.Fatalf("cycle %d: append garbage: %v", cycle, err)
					}
					gs = append(gs, g)
				}
			}

			var restart time.Duration
			b, admin, restart = startBroker(t, bin, dataDir)
			sum.restarts = append(sum.restarts, restart)
			// Check the cut before the producers come back and append again.
			garbageNote := ""
			for _, g := range gs {
				sum.garbageApplied++
				if err := checkGarbageCut(g); err != nil {
					t.Errorf("cycle %d partition %d: %v; log:\n%s", cycle, g.part, err, b.log.tail(4000))
				} else {
					sum.garbageCut++
				}
				garbageNote += fmt.Sprintf(" p%d+%dB(%s)", g.part, len(g.bytes), g.kind)
			}
			if garbageNote != "" {
				garbageNote = "; garbage" + garbageNote
			}
			proxy.SetBackend(b.addr)
			fds, ferr := countFDs(b.pid)
			nsegs := 0
			for part := 0; part < partitions; part++ {
				s, err := segments(dataDir, part)
				if err != nil {
					t.Fatal(err)
				}
				nsegs += len(s)
			}
			if ferr == nil {
				sum.fdMax = max(sum.fdMax, fds)
				overhead := fds - nsegs - partitions
				sum.overheadMax = max(sum.overheadMax, overhead)
				if sum.overheadFresh >= 0 && overhead > sum.overheadFresh+fdSlack {
					t.Errorf("cycle %d: broker holds %d fds after restart: %d besides its %d segment and %d checkpoint files, fresh start had %d (slack %d)",
						cycle, fds, overhead, nsegs, partitions, sum.overheadFresh, fdSlack)
				}
			}
			sum.rssMax = max(sum.rssMax, vmRSS(b.pid))
			sum.tornLogged += strings.Count(b.log.String(), "torn tail")

			// The producers reconnect by themselves and send again what was not acknowledged;
			// once flushed, every message sent in the cycle has its outcome.
			flushErrs := flushProducers(t, pcs)
			var r report
			st.settleCycle(cycle, &r)
			r.liveRead, r.liveCorrupt = len(lr.live), lr.liveCorrupt
			if lr.liveCorrupt > 0 {
				r.problem("live-corrupt", "the live consumer read %d payloads failing their CRC", lr.liveCorrupt)
			}
			if lr.liveErr != nil {
				t.Errorf("cycle %d: live consumer: %v", cycle, lr.liveErr)
			}
			st.mergeLive(lr.live, &r)
			vctx, vcancel := context.WithTimeout(context.Background(), 60*time.Second)
			verr := st.verify(vctx, connFetcher(admin), &r)
			if verr == nil {
				verr = checkDurableHW(vctx, admin, st.hw, &r)
			}
			if verr == nil {
				verr = st.commits.verify(vctx, connCommitted(admin), &r)
			}
			vcancel()
			r.indetPresent = st.indeterminatePresent(cycle)
			sum.add(r.counts)

			t.Logf("cycle %2d: killed after %4dms; attempted %5d acked %5d failed %d unsent %d indeterminate %3d (present %3d); live read %5d; commits sent %d acked %d; restart %6.1fms, %d fds, %d segments; hw %v%s",
				cycle, killAfter.Milliseconds(), r.attempted, r.acked, r.failed, r.unsent, r.indeterminate, r.indetPresent,
				r.liveRead, r.commitsSent, r.commitsAcked, ms(restart), fds, nsegs, st.hw, garbageNote)
			if len(lr.sendErrs) > 0 || len(flushErrs) > 0 {
				t.Logf("          Send errors: %v; Flush errors: %v", lr.sendErrs, flushErrs)
			}
			if verr != nil {
				t.Errorf("cycle %d: verification read failed: %v", cycle, verr)
			}
			if r.violations() > 0 || len(r.problems) > 0 {
				t.Errorf("cycle %d: %d violations:\n  %s\nbroker log:\n%s", cycle, r.violations(), strings.Join(r.problems, "\n  "), b.log.tail(6000))
			}
		}
		closeProducers(pcs)
		sum.dupMsgs += st.duplicatedMessages()
		admin.Close()
		b.kill(t)
		if !t.Failed() {
			os.RemoveAll(dataDir)
		}
		done += n
	}
	return sum
}

// ---- the tests ----------------------------------------------------------------------------

// cyclesPerMode splits LIGHTQ_CRASH_CYCLES (total over the three modes) per mode.
func cyclesPerMode(t *testing.T, def int, frac int) int {
	total := envInt(t, "LIGHTQ_CRASH_CYCLES", def)
	return max(1, (total/frac+len(modes)-1)/len(modes))
}

func logSummary(t *testing.T, name string, s modeSummary) {
	t.Helper()
	t.Logf("SUMMARY %s: cycles=%d attempted=%d acked=%d failed=%d unsent=%d indeterminate=%d (present after restart %d) "+
		"lost-acked=%d corrupt=%d phantom=%d failed-but-present=%d inconsistent-offsets=%d read-then-vanished=%d "+
		"order-violations=%d duplicates=%d (illegal %d) live-read=%d commits sent=%d acked=%d failed=%d indeterminate=%d lost=%d phantom=%d restart-ms max=%.1f p99=%.1f fds max=%d (non-segment %d, fresh %d) RSS max %.1f MiB (fresh %.1f)",
		name, s.cycles, s.attempted, s.acked, s.failed, s.unsent, s.indeterminate, s.indetPresent,
		s.lostAcked+s.misplaced, s.corrupt+s.liveCorrupt, s.phantom, s.failedPresent, s.inconsistent, s.vanished,
		s.order, s.duplicates, s.illegalDup, s.liveRead,
		s.commitsSent, s.commitsAcked, s.commitsFailed, s.commitsIndeterminate, s.commitLost, s.commitPhantom,
		ms(percentile(s.restarts, 1)), ms(percentile(s.restarts, 0.99)), s.fdMax, s.overheadMax, s.overheadFresh,
		float64(s.rssMax)/(1<<20), float64(s.rssFresh)/(1<<20))
	logCrashLine(t, name, s)
	if p99 := percentile(s.restarts, 0.99); p99 > maxRestartP99 {
		t.Errorf("%s: restart-to-serving p99 %v, over %v (plan D1 target: 1 s for a log up to 1 GiB)", name, p99, maxRestartP99)
	}
	if s.garbageApplied > 0 || s.tornLogged > 0 {
		t.Logf("SUMMARY %s: torn tails: garbage appended to %d active segments, %d cut and saved to .broken files; broker logged %d torn-tail cuts",
			name, s.garbageApplied, s.garbageCut, s.tornLogged)
	}
}

// logCrashLine prints the summary that make crash reports: lost counts acknowledged messages
// not found at their acknowledged offset; duplicated, messages stored more than once;
// unknown, messages whose failure the client reported as maybe stored.
func logCrashLine(t *testing.T, name string, s modeSummary) {
	t.Helper()
	t.Logf("crash: cycles=%d acked=%d lost=%d duplicated=%d unknown=%d (%s)",
		s.cycles, s.acked, s.lostAcked+s.misplaced, s.dupMsgs, s.indeterminate, name)
	if s.dupMsgs > 0 && !requireNoDuplicates {
		t.Logf("%s: %d messages stored twice are allowed until the broker deduplicates re-sent batches (requireNoDuplicates)", name, s.dupMsgs)
	}
}

// runModes runs every fsync mode as a subtest and logs the summary over all of them.
func runModes(t *testing.T, seed uint64, per int, torn bool) {
	var total modeSummary
	for i, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s := runMode(t, m, per, seed+uint64(i), torn)
			logSummary(t, m.name, s)
			total.counts.add(s.counts)
			total.cycles += s.cycles
			total.dupMsgs += s.dupMsgs
		})
	}
	logCrashLine(t, "all fsync modes", total)
}

// TestCrashKill9 is reliability plan D1: kill -9 cycles of the real broker on a real disk,
// for each fsync mode, with a history verifier after every restart.
func TestCrashKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("kill -9 crash cycles of the real binary; skipped with -short")
	}
	seed := testSeed(t)
	per := cyclesPerMode(t, 24, 1)
	t.Logf("LIGHTQ_CRASH_SEED=%d repeats the random choices; %d cycles per mode", seed, per)
	runModes(t, seed, per, false)
}

// TestCrashTornTail is TestCrashKill9 with a torn write imitated in about half the cycles:
// between kill and restart, garbage is appended to the active segment of one or both
// partitions. The broker must cut it (saving it to a .broken file) and lose nothing acked.
func TestCrashTornTail(t *testing.T) {
	if testing.Short() {
		t.Skip("kill -9 crash cycles of the real binary; skipped with -short")
	}
	envSeed := testSeed(t)
	seed := envSeed ^ 0x746f726e
	per := cyclesPerMode(t, 24, 2)
	t.Logf("LIGHTQ_CRASH_SEED=%d repeats the random choices; %d cycles per mode", envSeed, per)
	runModes(t, seed, per, true)
}
