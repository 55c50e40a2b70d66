package lightq

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lightq/lightq/broker/brokertest"
	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// TestBinary builds the lightq binary once and runs it as a separate process.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := buildBinary(t)
	t.Run("SIGTERM", func(t *testing.T) { testBinarySIGTERM(t, bin) })
	t.Run("SlowSubscriberRSS", func(t *testing.T) { testBinarySlowSubscriberRSS(t, bin) })
	t.Run("TLSReloadOnSIGHUP", func(t *testing.T) { testBinaryTLSReload(t, bin) })
}

func buildBinary(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		if root := os.Getenv("GOROOT"); root != "" {
			goTool = filepath.Join(root, "bin", "go")
		}
	}
	if goTool == "" {
		t.Skip("no go tool to build the binary with")
	}
	bin := filepath.Join(t.TempDir(), "lightq")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, goTool, "build", "-o", bin, "github.com/lightq/lightq/cmd/lightq").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Logf("built %s in %v", bin, time.Since(start).Round(time.Millisecond))
	return bin
}

// proc is a lightq process.
type proc struct {
	cmd     *exec.Cmd
	addr    string
	dataDir string
	log     *syncBuffer
	exited  chan struct{}
	waitErr error
}

// startBinary starts bin on 127.0.0.1:0 (the kernel picks a free port, which no other
// process can take first) with a temp data dir and cheap hashing, and waits until it logs
// where it listens.
func startBinary(t *testing.T, bin, adminPass string, extra ...string) *proc {
	t.Helper()
	p := &proc{dataDir: t.TempDir(), log: &syncBuffer{}, exited: make(chan struct{})}
	args := append([]string{"--addr", "127.0.0.1:0", "--data-dir", p.dataDir, "--hash-params", testHashParams,
		"--log-level", "info", "--log-format", "json"}, extra...)
	p.cmd = exec.Command(bin, args...)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LIGHTQ_") {
			env = append(env, kv)
		}
	}
	p.cmd.Env = append(env, "LIGHTQ_ADMIN_PASSWORD="+adminPass)
	p.cmd.Stdout = io.Discard
	p.cmd.Stderr = p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if addr, ok := brokertest.ListenAddr(p.log.String()); ok {
			p.addr = addr
			return p
		}
		select {
		case <-p.exited:
			t.Fatalf("lightq exited before listening: %v; log:\n%s", p.waitErr, p.log.String())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("lightq logged no listening address after 30 s; log:\n%s", p.log.String())
		}
	}
}

// terminate sends SIGTERM and returns how long the process took to exit with status 0.
func (p *proc) terminate(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("lightq still running 15 s after SIGTERM; log:\n%s", p.log.String())
	}
	took := time.Since(start)
	if p.waitErr != nil {
		t.Errorf("lightq exit after SIGTERM: %v, want status 0; log:\n%s", p.waitErr, p.log.String())
	}
	return took
}

func testBinarySIGTERM(t *testing.T, bin string) {
	const pass = "binary-admin-pw"
	p := startBinary(t, bin, pass)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, p.addr, client.Options{User: "admin", Password: pass})
	if err != nil {
		t.Fatalf("dial: %v; log:\n%s", err, p.log.String())
	}
	defer c.Close()
	if err := c.CreateTopic(ctx, client.TopicConfig{Name: "t", User: "u", Password: "u-pw"}); err != nil {
		t.Fatal(err)
	}

	took := p.terminate(t)
	t.Logf("exited %v after SIGTERM", took.Round(time.Millisecond))
	// Idle connections close at once, so the exit takes milliseconds; the bound is for a
	// shutdown that waits out the drain period (2 s) or worse, with slack for a loaded machine.
	if took > 10*time.Second {
		t.Errorf("exit took %v after SIGTERM, want under 10 s", took)
	}
	log := p.log.String()
	for _, want := range []string{"lightq listening", "signal received", "stopped"} {
		if !logHas(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	// The open client learns the broker is gone (and tries to reconnect).
	poll := time.NewTicker(5 * time.Millisecond) // a condition polled until the deadline
	defer poll.Stop()
	for deadline := time.Now().Add(5 * time.Second); ; {
		ok, last := c.Connected()
		if !ok {
			if !errors.Is(last, client.ErrConnectionLost) && !strings.Contains(fmt.Sprint(last), "refused") {
				t.Errorf("client lost its connection with %v, want ErrConnectionLost or a refused reconnect", last)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Error("client connection still open after the broker exited")
			break
		}
		<-poll.C
	}
	if _, err := os.Stat(filepath.Join(p.dataDir, "meta.json")); err != nil {
		t.Errorf("metadata not written: %v", err)
	}
}

// vmRSS reads a process's resident set size in bytes from /proc.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			fields := strings.Fields(rest)
			kb, err := strconv.ParseInt(fields[0], 10, 64)
			if err != nil || len(fields) < 2 || fields[1] != "kB" {
				t.Fatalf("cannot parse VmRSS line %q", sc.Text())
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// rawFrame reads one frame from a raw connection.
func rawFrame(t *testing.T, r io.Reader) (wire.Header, []byte) {
	t.Helper()
	head := make([]byte, wire.HeaderSize)
	if _, err := io.ReadFull(r, head); err != nil {
		t.Fatalf("read header: %v", err)
	}
	n, err := wire.FrameSize(head, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, n)
	copy(buf, head)
	if _, err := io.ReadFull(r, buf[wire.HeaderSize:]); err != nil {
		t.Fatalf("read body: %v", err)
	}
	h, body, err := wire.ParseFrame(buf)
	if err != nil {
		t.Fatal(err)
	}
	return h, body
}

// rawRequest writes one request and reads its response, failing on an ERROR.
func rawRequest(t *testing.T, nc net.Conn, op wire.Op, corr uint32, body []byte) []byte {
	t.Helper()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(wire.AppendFrame(nil, op, 0, corr, body)); err != nil {
		t.Fatal(err)
	}
	h, resp := rawFrame(t, nc)
	if h.Op == wire.OpError {
		var eb wire.ErrorBody
		_ = eb.Decode(resp)
		t.Fatalf("%v: ERROR %v %s", op, eb.Code, eb.Message)
	}
	if h.Op != op || h.Corr != corr || h.Flags&wire.FlagResponse == 0 {
		t.Fatalf("%v: got %v corr %d flags %x", op, h.Op, h.Corr, h.Flags)
	}
	return resp
}

// testBinarySlowSubscriberRSS: one subscriber that never reads its socket must not make the
// broker's memory grow while ~200 MiB flow to another subscriber that keeps up.
func testBinarySlowSubscriberRSS(t *testing.T, bin string) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc: VmRSS cannot be measured on this system")
	}
	const (
		pass       = "rss-admin-pw"
		user, upw  = "rss", "rss-user-pw"
		topic      = "rss"
		valueSize  = 4000
		batchBytes = 60 << 10
		totalBytes = 200 << 20
		n          = totalBytes / valueSize
		perBatch   = batchBytes / (valueSize + 16)
		maxAhead   = 16 * perBatch // messages the producer may be ahead of the fast reader
		ringBytes  = 4 << 20
		maxGrowth  = 64 << 20
	)
	p := startBinary(t, bin, pass, "--ring-bytes", strconv.Itoa(ringBytes), "--shutdown-drain", "200ms")
	pid := p.cmd.Process.Pid
	rssStart := vmRSS(t, pid)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	admin, err := client.Dial(ctx, p.addr, client.Options{User: "admin", Password: pass})
	if err != nil {
		t.Fatalf("dial: %v; log:\n%s", err, p.log.String())
	}
	defer admin.Close()
	if err := admin.CreateTopic(ctx, client.TopicConfig{Name: topic, User: user, Password: upw}); err != nil {
		t.Fatal(err)
	}

	// The slow subscriber: HELLO, AUTH, SUBSCRIBE with a huge credit, then it never reads.
	slow, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	hello := wire.Hello{ClientName: "never-reads", ClientVersion: "test"}
	rawRequest(t, slow, wire.OpHello, 1, hello.AppendTo(nil))
	authm := wire.Auth{User: user, Password: upw}
	rawRequest(t, slow, wire.OpAuth, 2, authm.AppendTo(nil))
	sub := wire.Subscribe{Topic: topic, Partition: wire.PartitionAny, Credit: 1<<32 - 1}
	rawRequest(t, slow, wire.OpSubscribe, 3, sub.AppendTo(nil))
	_ = slow.SetDeadline(time.Time{})

	// The fast subscriber reads everything.
	fc, err := client.Dial(ctx, p.addr, client.Options{User: user, Password: upw, ClientName: "fast"})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	fs, err := fc.Subscribe(ctx, client.SubscribeOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	var received, dropped, badValue atomic.Int64
	errDone := errors.New("done")
	eachErr := make(chan error, 1)
	go func() {
		err := fs.Each(ctx, func(m *client.Received) error {
			dropped.Add(int64(m.Dropped))
			if len(m.Value) != valueSize {
				badValue.Add(1)
			}
			if received.Add(1) >= n {
				return errDone
			}
			return nil
		})
		eachErr <- err
	}()

	pc, err := client.Dial(ctx, p.addr, client.Options{User: user, Password: upw, ClientName: "producer"})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	prod, err := pc.NewProducer(client.ProducerOptions{Topic: topic, BatchBytes: batchBytes})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()

	rssBefore := vmRSS(t, pid)
	rssPeak := rssBefore
	value := make([]byte, valueSize)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	var waits int
	start := time.Now()
	for i := 0; i < n; i++ {
		if int64(i)-received.Load() > maxAhead {
			waits++
			deadline := time.Now().Add(10 * time.Second)
			poll := time.NewTicker(100 * time.Microsecond) // a condition polled until the deadline
			for int64(i)-received.Load() > maxAhead {
				if time.Now().After(deadline) {
					t.Fatalf("fast subscriber stuck at %d of %d sent", received.Load(), i)
				}
				<-poll.C
			}
			poll.Stop()
		}
		if err := prod.Send(ctx, &client.Message{Value: value}, nil); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if i%(64*perBatch) == 0 {
			rssPeak = max(rssPeak, vmRSS(t, pid))
		}
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	select {
	case err := <-eachErr:
		if !errors.Is(err, errDone) {
			t.Fatalf("fast subscriber: %v after %d messages", err, received.Load())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("fast subscriber has %d of %d messages 30 s after the last send", received.Load(), n)
	}
	elapsed := time.Since(start)
	rssAfter := vmRSS(t, pid)
	rssPeak = max(rssPeak, rssAfter)

	st, err := admin.Stats(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	counters := map[string]uint64{}
	for _, c := range st[0].Counters {
		counters[c.Name] = c.Value
	}
	const mib = 1 << 20
	t.Logf("produced %d messages of %d B (%.0f MiB) in %v (%.0f MiB/s), producer waited %d times",
		n, valueSize, float64(n*valueSize)/mib, elapsed.Round(time.Millisecond), float64(n*valueSize)/mib/elapsed.Seconds(), waits)
	t.Logf("broker VmRSS: at start %.1f MiB, before producing %.1f MiB, peak %.1f MiB, after %.1f MiB; growth %.1f MiB (peak %.1f MiB), bound %d MiB",
		float64(rssStart)/mib, float64(rssBefore)/mib, float64(rssPeak)/mib, float64(rssAfter)/mib,
		float64(rssAfter-rssBefore)/mib, float64(rssPeak-rssBefore)/mib, maxGrowth/mib)
	t.Logf("fast subscriber: %d received, %d dropped; broker counters: %v", received.Load(), dropped.Load(), counters)

	if got := received.Load(); got != n {
		t.Errorf("fast subscriber received %d, want %d", got, n)
	}
	if d := dropped.Load(); d != 0 || fs.Dropped() != 0 {
		t.Errorf("fast subscriber dropped %d (Dropped() %d), want 0", d, fs.Dropped())
	}
	if badValue.Load() != 0 {
		t.Errorf("%d messages with a wrong value size", badValue.Load())
	}
	if counters["messages_in"] != n {
		t.Errorf("messages_in %d, want %d", counters["messages_in"], n)
	}
	if g := rssPeak - rssBefore; g >= maxGrowth {
		t.Errorf("broker RSS grew by %.1f MiB with a subscriber that never reads (bound %d MiB)", float64(g)/mib, maxGrowth/mib)
	}

	slow.Close()
	fs.Close()
	took := p.terminate(t)
	if !logHas(p.log.String(), "stopped") {
		t.Errorf("log lacks \"stopped\":\n%s", p.log.String())
	}
	t.Logf("exited %v after SIGTERM", took.Round(time.Millisecond))
}
