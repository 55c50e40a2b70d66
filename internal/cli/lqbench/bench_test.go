package lqbench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/broker/brokertest"
	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/internal/version"
	"github.com/lightq/lightq/wire"
)

const (
	testAdminPass = "bench-admin-pw"
	testUser      = "bench"
	testPass      = "bench-user-pw"
)

// startTestBroker starts an in-process broker on a free loopback port.
func startTestBroker(t *testing.T) string {
	t.Helper()
	return brokertest.Start(t, func(cfg *broker.Config) { cfg.AdminPassword = testAdminPass }).Addr()
}

func testConfig(addr, mode, topic string, messages, size int) Config {
	return Config{
		Mode: mode, Broker: addr, Topic: topic, Messages: messages, Size: size,
		User: testUser, Password: testPass, AdminUser: "admin", AdminPassword: testAdminPass,
		// Short, because a consumer whose count is not a multiple of 256 only stops when
		// idle (see TestConsumerStopsAtExpectedCount).
		IdleTimeout: time.Second,
	}
}

func runCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// checkLatency asserts positive, ordered percentiles.
func checkLatency(t *testing.T, r *Result) {
	t.Helper()
	ps := []float64{r.P50Us, r.P90Us, r.P99Us, r.P999Us, r.MaxUs}
	for i, p := range ps {
		if p <= 0 {
			t.Errorf("percentile %d is %v, want > 0: %+v", i, p, r)
		}
		if i > 0 && ps[i-1] > p {
			t.Errorf("percentiles not ordered (p50 p90 p99 p99.9 max): %v", ps)
		}
	}
}

func TestRunE2E(t *testing.T) {
	addr := startTestBroker(t)
	for _, tc := range []struct{ messages, size int }{{20000, 100}, {2000, 1024}} {
		t.Run(fmt.Sprintf("%dx%dB", tc.messages, tc.size), func(t *testing.T) {
			// The second run reuses the topic the first created.
			r, err := Run(runCtx(t), testConfig(addr, "e2e", "e2e", tc.messages, tc.size))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", *r)
			if r.Mode != "e2e" || r.Size != tc.size {
				t.Errorf("mode %q size %d", r.Mode, r.Size)
			}
			if r.Messages != int64(tc.messages) || r.Produced != int64(tc.messages) {
				t.Errorf("received %d, produced %d, want %d", r.Messages, r.Produced, tc.messages)
			}
			if r.Dropped != 0 || r.Failed != 0 || r.FirstError != "" {
				t.Errorf("dropped %d, failed %d (%s)", r.Dropped, r.Failed, r.FirstError)
			}
			if r.MsgsPerSec <= 0 || r.MBPerSec <= 0 || r.Seconds <= 0 || r.ProduceSeconds <= 0 {
				t.Errorf("rates: %+v", *r)
			}
			checkLatency(t, r)
			var text bytes.Buffer
			r.WriteText(&text)
			for _, want := range []string{fmt.Sprintf("Total Messages: %d,", tc.messages), "messages per second", "p99.9", "Dropped (subscriber fell behind the ring): 0"} {
				if !strings.Contains(text.String(), want) {
					t.Errorf("text report lacks %q:\n%s", want, text.String())
				}
			}
		})
	}
}

// TestRunProduceThenConsume: a consume run started first receives what a produce run sends.
func TestRunProduceThenConsume(t *testing.T) {
	const n, size = 5000, 200
	addr := startTestBroker(t)
	ctx := runCtx(t)
	ccfg := testConfig(addr, "consume", "pc", n, size)
	type out struct {
		r   *Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		r, err := Run(ctx, ccfg)
		done <- out{r, err}
	}()

	// Wait until the consumer is subscribed (transient subscriptions start at the end).
	admin, err := client.Dial(ctx, addr, client.Options{User: "admin", Password: testAdminPass})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		st, err := admin.Stats(ctx, "pc")
		subscribed := false
		if err == nil {
			for _, c := range st[0].Counters {
				subscribed = subscribed || (c.Name == "subscribers" && c.Value == 1)
			}
		}
		if subscribed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer not subscribed after 10 s: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}

	pr, err := Run(ctx, testConfig(addr, "produce", "pc", n, size))
	if err != nil {
		t.Fatal(err)
	}
	if pr.Mode != "produce" || pr.Messages != n || pr.Failed != 0 || pr.MsgsPerSec <= 0 || pr.Seconds <= 0 {
		t.Errorf("produce result %+v", *pr)
	}
	if pr.P50Us != 0 {
		t.Errorf("a produce run measured latency: %+v", *pr)
	}
	checkWindow(t, pr)
	var o out
	select {
	case o = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("consume run did not finish")
	}
	if o.err != nil {
		t.Fatal(o.err)
	}
	cr := o.r
	t.Logf("produce %+v", *pr)
	t.Logf("consume %+v", *cr)
	if cr.Mode != "consume" || cr.Messages != n || cr.Dropped != 0 || cr.MsgsPerSec <= 0 {
		t.Errorf("consume result %+v", *cr)
	}
	checkLatency(t, cr)
	checkWindow(t, cr)
	if cr.EndUnixNs < pr.StartUnixNs || cr.StartUnixNs < pr.StartUnixNs {
		t.Errorf("consumer's interval [%d, %d] is not within the run that began at %d", cr.StartUnixNs, cr.EndUnixNs, pr.StartUnixNs)
	}
}

// checkWindow: the measured interval is on the wall clock, of Seconds' length, and recent.
func checkWindow(t *testing.T, r *Result) {
	t.Helper()
	d := time.Duration(r.EndUnixNs - r.StartUnixNs)
	if r.StartUnixNs <= 0 || d < 0 || math.Abs(d.Seconds()-r.Seconds) > 1e-6 ||
		time.Since(time.Unix(0, r.StartUnixNs)) > 5*time.Minute {
		t.Errorf("%s: interval [%d, %d] (%v) for %v s", r.Mode, r.StartUnixNs, r.EndUnixNs, d, r.Seconds)
	}
}

// TestConsumerStopsAtExpectedCount: a consumer stops as soon as it has accounted for every
// message, not after IdleTimeout. IdleTimeout is long (a run takes milliseconds) so that a
// loaded machine cannot make a run that stopped at its count look like one that waited.
func TestConsumerStopsAtExpectedCount(t *testing.T) {
	addr := startTestBroker(t)
	for _, n := range []int{1024, 1000} {
		cfg := testConfig(addr, "e2e", "stop", n, 32)
		cfg.IdleTimeout = 20 * time.Second // under runCtx's 30 s
		start := time.Now()
		r, err := Run(runCtx(t), cfg)
		took := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		if r.Messages != int64(n) {
			t.Errorf("%d messages: received %d", n, r.Messages)
		}
		t.Logf("%d messages: Run took %v", n, took.Round(time.Millisecond))
		if took >= cfg.IdleTimeout {
			t.Errorf("%d messages: Run took %v, at least IdleTimeout", n, took)
		}
	}
}

// TestMainJSON: --json prints one JSON object with the documented keys.
func TestMainJSON(t *testing.T) {
	addr := startTestBroker(t)
	var stdout, stderr bytes.Buffer
	args := []string{"e2e", "-b", addr, "-t", "json", "-m", "3000", "-s", "64", "--json", "-q",
		"--user", testUser, "--password", testPass, "--admin-password", testAdminPass, "--idle", "1s"}
	if code := Main(runCtx(t), args, func(string) string { return "" }, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	dec := json.NewDecoder(&stdout)
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, stdout.String())
	}
	if dec.More() {
		t.Error("more than one JSON value on stdout")
	}
	for _, k := range []string{"messages", "seconds", "msgs_per_sec", "mb_per_sec", "p50_us", "p99_us", "p999_us", "max_us", "start_unix_ns", "end_unix_ns"} {
		v, ok := obj[k].(float64)
		if !ok {
			t.Errorf("key %q missing or not a number: %v", k, obj)
			continue
		}
		if v <= 0 {
			t.Errorf("%s = %v, want > 0", k, v)
		}
	}
	if obj["messages"] != float64(3000) || obj["dropped"] != float64(0) {
		t.Errorf("messages %v dropped %v", obj["messages"], obj["dropped"])
	}
}

// TestMainEnvCredentials: credentials and broker come from the environment when no flag
// gives them.
func TestMainEnvCredentials(t *testing.T) {
	addr := startTestBroker(t)
	env := map[string]string{
		"LIGHTQ_BROKER":         addr,
		"LIGHTQ_USER":           "envuser",
		"LIGHTQ_PASSWORD":       "envuser-pw",
		"LIGHTQ_ADMIN_PASSWORD": testAdminPass,
	}
	var stdout, stderr bytes.Buffer
	code := Main(runCtx(t), []string{"produce", "-t", "envtopic", "-m", "500", "-q"}, func(k string) string { return env[k] }, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "Total Messages: 500,") {
		t.Errorf("text output:\n%s", stdout.String())
	}
	// The topic was created for the environment's user.
	c, err := client.Dial(runCtx(t), addr, client.Options{User: "envuser", Password: "envuser-pw"})
	if err != nil {
		t.Fatalf("the environment's user cannot log in: %v", err)
	}
	defer c.Close()
	if md, err := c.Metadata(runCtx(t), "envtopic"); err != nil || md[0].Partitions[0].EndOffset != 500 {
		t.Errorf("metadata %+v, %v", md, err)
	}
}

func TestMainBadUsage(t *testing.T) {
	noEnv := func(string) string { return "" }
	for _, args := range [][]string{
		nil,
		{"--bogus"},
		{"e2e", "--no-such-flag"},
		{"e2e", "-m", "many"},
		{"e2e", "--acks", "maybe"},
		{"e2e", "-z", "lz4"},
		{"e2e", "--kind", "eternal"},
		{"e2e", "stray-argument"},
	} {
		var stdout, stderr bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		// -b points at a closed port, so that a run that starts anyway fails fast.
		code := Main(ctx, append(args, "-b", "127.0.0.1:1"), noEnv, &stdout, &stderr)
		cancel()
		if code != 2 {
			t.Errorf("%q: exit %d, want 2; stderr:\n%s", args, code, stderr.String())
		}
		if stderr.Len() == 0 {
			t.Errorf("%q: nothing on stderr", args)
		}
	}
	var stderr bytes.Buffer
	if code := Main(context.Background(), []string{"--help"}, noEnv, &bytes.Buffer{}, &stderr); code != 0 || !strings.Contains(stderr.String(), "Usage: lqbench") {
		t.Errorf("--help: exit %d, stderr:\n%s", code, stderr.String())
	}

	// Values that parse but that Run refuses.
	for _, args := range [][]string{
		{"bogus-mode"},
		{"e2e", "-s", "8"},
		{"e2e", "--rate", "-5"},
	} {
		var stderr bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		code := Main(ctx, append(args, "-b", "127.0.0.1:1"), noEnv, &bytes.Buffer{}, &stderr)
		cancel()
		if code == 0 {
			t.Errorf("%q: exit 0; stderr:\n%s", args, stderr.String())
		} else if code != 2 {
			t.Logf("%q: exit %d (Run's validation counts as a failed run, not bad usage): %s", args, code, strings.TrimSpace(stderr.String()))
		}
	}
}

// TestRateLimit: with Rate 20000 a 10000-message produce run takes at least its 0.5 s schedule.
func TestRateLimit(t *testing.T) {
	addr := startTestBroker(t)
	cfg := testConfig(addr, "produce", "rate", 10000, 64)
	cfg.Rate = 20000
	start := time.Now()
	r, err := Run(runCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("produce phase %.3f s (Run %v), %.0f msg/s", r.Seconds, time.Since(start).Round(time.Millisecond), r.MsgsPerSec)
	if r.Messages != 10000 || r.Failed != 0 {
		t.Errorf("result %+v", *r)
	}
	checkPaced(t, cfg, r)
}

// checkPaced: a produce run at cfg.Rate cannot end before its last message's slot, since the
// pacer never sends early: (messages per producer - 1) intervals after the start. That bound
// holds however loaded the machine is, and an unpaced run (10,000 messages in tens of ms)
// fails it. How much later the run ends depends on the machine, so the upper bound is only
// a generous sanity limit, and the figure is logged.
func checkPaced(t *testing.T, cfg Config, r *Result) {
	t.Helper()
	producers := max(cfg.Producers, 1)                 // 0: Run's default, one
	interval := float64(producers) / float64(cfg.Rate) // seconds between one producer's slots
	schedule := float64(cfg.Messages-1) * interval
	t.Logf("%d producers x %d messages at a total of %d msg/s: %.3f s, schedule %.3f s", producers, cfg.Messages, cfg.Rate, r.Seconds, schedule)
	if r.Seconds < schedule-1e-6 {
		t.Errorf("produce phase took %.3f s, shorter than its schedule of %.3f s: the rate limit was not applied", r.Seconds, schedule)
	}
	if limit := 20 * schedule; r.Seconds > limit {
		t.Errorf("produce phase took %.3f s, over %.0fx its schedule of %.3f s", r.Seconds, limit/schedule, schedule)
	}
}

// TestRateLimitSpreadsProducers: the rate is the total over all producers.
func TestRateLimitSpreadsProducers(t *testing.T) {
	addr := startTestBroker(t)
	cfg := testConfig(addr, "produce", "rate2", 2500, 64)
	cfg.Rate, cfg.Producers = 20000, 4 // 10000 messages in total
	r, err := Run(runCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Messages != 10000 {
		t.Errorf("sent %d, want 10000", r.Messages)
	}
	checkPaced(t, cfg, r)
}

// TestE2ERateMeasuresFromTheActualSendToo: at a fixed rate, e2e reports latency both from
// the intended slot and from the moment Send was called; the second cannot be the larger.
func TestE2ERateMeasuresFromTheActualSendToo(t *testing.T) {
	addr := startTestBroker(t)
	cfg := testConfig(addr, "e2e", "sendlog", 4000, 100)
	cfg.Rate, cfg.Linger = 20000, -1
	r, err := Run(runCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Messages != 4000 {
		t.Fatalf("received %d of 4000", r.Messages)
	}
	if r.SendP50Us <= 0 || r.SendMaxUs <= 0 {
		t.Fatalf("no latency from the actual send: %+v", *r)
	}
	// Both histograms hold the same messages; the send time is at or after the slot.
	// (HDR buckets are 0.1% wide, hence the slack.)
	if r.SendP50Us > r.P50Us*1.002+1 || r.SendMaxUs > r.MaxUs*1.002+1 {
		t.Errorf("latency from the send exceeds latency from the slot: send p50 %v max %v, slot p50 %v max %v",
			r.SendP50Us, r.SendMaxUs, r.P50Us, r.MaxUs)
	}
}

// TestSendLog: slots round-trip through the stamp's id<<48|seq; out of range reads 0; a nil
// log and an oversized one record nothing.
func TestSendLog(t *testing.T) {
	l := newSendLog(2, 10)
	l.note(1, 7)
	if l.sentAt(1<<48|7) == 0 {
		t.Error("noted slot reads 0")
	}
	for _, idSeq := range []uint64{7, 1<<48 | 6, 2<<48 | 7, 1<<48 | 10, ^uint64(0)} {
		if v := l.sentAt(idSeq); v != 0 {
			t.Errorf("sentAt(%#x) = %d, want 0", idSeq, v)
		}
	}
	var nilLog *sendLog
	nilLog.note(0, 0)
	if nilLog.sentAt(0) != 0 || newSendLog(1, maxSendLog+1) != nil {
		t.Error("nil or oversized log records")
	}
}

// TestMainVersion: --version prints the build's version line and runs nothing.
func TestMainVersion(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"--version"}, func(string) string { return "" }, &out, &errb); code != 0 || out.String() != version.String("lqbench")+"\n" {
		t.Errorf("--version: exit %d, printed %q %q", code, out.String(), errb.String())
	}
}

// TestFlagsSizesAndAliases: sizes take units, and nats bench's --msgs, --size, --pub and --sub
// set the same things as -m, -s, --producers and --consumers.
func TestFlagsSizesAndAliases(t *testing.T) {
	for _, args := range [][]string{
		{"-m", "500", "-s", "1KiB", "--producers", "3", "--consumers", "2", "--batch", "1MiB", "--window", "32MiB"},
		{"--msgs", "500", "--size", "1KiB", "--pub", "3", "--sub", "2", "--batch", "1048576", "--window", "32MiB"},
	} {
		var cfg Config
		fs := newFlags(&cfg, new(options), io.Discard)
		if err := fs.Parse(args); err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if cfg.Messages != 500 || cfg.Size != 1024 || cfg.Producers != 3 || cfg.Consumers != 2 || cfg.BatchBytes != 1<<20 || cfg.Window != 32<<20 {
			t.Errorf("%q: %+v", args, cfg)
		}
	}
	var cfg Config
	if err := newFlags(&cfg, new(options), io.Discard).Parse(nil); err != nil || cfg.Size != 100 || cfg.BatchBytes != 512<<10 || cfg.Window != 16<<20 || cfg.Partitions != 1 {
		t.Errorf("defaults: %v %+v", err, cfg)
	}
	if err := newFlags(&cfg, new(options), io.Discard).Parse([]string{"-s", "1.5KB"}); err == nil {
		t.Error("-s 1.5KB parsed")
	}
}

// TestTextDropsTransientLinesOnDurable: the ring's "Dropped" line appears for transient runs
// only; a durable topic's consumers read the log and drop nothing.
func TestTextDropsTransientLinesOnDurable(t *testing.T) {
	for kind, want := range map[string]bool{"transient": true, "durable": false} {
		var out bytes.Buffer
		(&Result{Mode: "e2e", Kind: kind, Messages: 10, Produced: 10, ProduceSeconds: 1}).WriteText(&out)
		if got := strings.Contains(out.String(), "Dropped"); got != want {
			t.Errorf("%s: Dropped line %v, want %v:\n%s", kind, got, want, out.String())
		}
	}
}

// TestBrokerDefaultPort: -b with only a host gets the broker's default port.
func TestBrokerDefaultPort(t *testing.T) {
	cfg := Config{Broker: "localhost"}
	o := options{kind: "transient", acks: "written", codec: "none"}
	if err := o.apply(&cfg, func(string) string { return "" }); err != nil || cfg.Broker != "localhost:7450" {
		t.Errorf("-b localhost: %q, %v", cfg.Broker, err)
	}
	cfg = Config{Broker: "b1, b2:9000"}
	if err := o.apply(&cfg, func(string) string { return "" }); err != nil || cfg.Broker != "b1:7450,b2:9000" {
		t.Errorf("-b b1,b2:9000: %q, %v", cfg.Broker, err)
	}
}

// TestMainBrokerList: -b takes a list of a cluster's brokers; one that refuses is passed
// over, and a durable run's producers and consumers work through the first that answers.
func TestMainBrokerList(t *testing.T) {
	addr := startTestBroker(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	var stdout, stderr bytes.Buffer
	args := []string{"e2e", "-b", dead + "," + addr, "-t", "list", "--kind", "durable", "-n", "2", "-m", "2000", "-s", "64", "--json", "-q",
		"--user", testUser, "--password", testPass, "--admin-password", testAdminPass, "--idle", "1s"}
	if code := Main(runCtx(t), args, func(string) string { return "" }, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	var obj map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &obj); err != nil || obj["messages"] != float64(2000) {
		t.Fatalf("result %v (%v):\n%s", obj, err, stdout.String())
	}
}

// TestTopicOptionFlags: -X passes topic options for the topic lqbench creates, with sizes in
// units turned into plain bytes; a malformed one is bad usage.
func TestTopicOptionFlags(t *testing.T) {
	var cfg Config
	o := options{kind: "durable", acks: "written", codec: "none", fsync: "always", topicOptions: []string{"segment.bytes=4MiB", "retention.ms=60000"}}
	if err := o.apply(&cfg, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	want := []wire.Option{{Key: "fsync", Value: "always"}, {Key: "segment.bytes", Value: "4194304"}, {Key: "retention.ms", Value: "60000"}}
	if !slices.Equal(cfg.TopicOptions, want) {
		t.Errorf("options %v, want %v", cfg.TopicOptions, want)
	}
	for _, bad := range []string{"segment.bytes=4 MiB", "novalue", "=1"} {
		o := options{kind: "durable", acks: "written", codec: "none", topicOptions: []string{bad}}
		if err := o.apply(&Config{}, func(string) string { return "" }); err == nil {
			t.Errorf("-X %s accepted", bad)
		}
	}
}

// TestAckLatencyRecorder: the n-th acknowledgement is message n: measured from its slot
// (start + n x interval) and from its send time in the log; a failed message is counted but
// not recorded; values are clamped into the histogram's range.
func TestAckLatencyRecorder(t *testing.T) {
	const ms = int64(time.Millisecond)
	start := time.Unix(0, 1_000*ms)
	sends := newSendLog(2, 4)
	sends.slots[1][0].Store(1_000*ms + 100_000) // sent 100 us after its slot
	sends.slots[1][2].Store(1_002*ms + 250_000)
	a := newAckLatency(1, start, time.Millisecond, sends)
	a.acked(1_000*ms+500_000, true)  // message 0: 500 us from the slot, 400 from the send
	a.acked(1_001*ms+900_000, false) // message 1 failed
	a.acked(1_005*ms, true)          // message 2: slot 1002 ms: 3000 us, 2750 from the send
	a.acked(1_003*ms-5_000, true)    // message 3: 5 us before its slot (clock step): 1 us; not in the send log
	if got := a.fromSlot.TotalCount(); got != 3 {
		t.Fatalf("%d values from the slot, want 3", got)
	}
	// HDR buckets at 3 digits are 2 us wide around 3000: near allows that.
	near := func(got int64, want int64) bool { return got >= want-2 && got <= want+2 }
	if a.fromSlot.Min() != 1 || !near(a.fromSlot.Max(), 3000) || a.fromSlot.ValueAtQuantile(50) != 500 {
		t.Errorf("from the slot: min %d p50 %d max %d, want 1 500 3000", a.fromSlot.Min(), a.fromSlot.ValueAtQuantile(50), a.fromSlot.Max())
	}
	if got := a.fromSend.TotalCount(); got != 2 || a.fromSend.Min() != 400 || !near(a.fromSend.Max(), 2750) {
		t.Errorf("from the send: %d values, min %d max %d, want 2, 400, 2750", got, a.fromSend.Min(), a.fromSend.Max())
	}
	all := newAckLatencies()
	all.add(a)
	all.add(newAckLatency(0, start, time.Millisecond, nil)) // a producer with no send log, nothing acked
	var r Result
	all.setResult(&r)
	if r.AckCount != 3 || r.AckP50Us != 500 || !near(int64(r.AckMaxUs), 3000) || r.AckSendP50Us != 400 {
		t.Errorf("result %+v", r)
	}
	var none *ackLatencies
	none.add(a)
	none.setResult(&r) // a run without a rate: no-ops
	if clampUs(-5) != 1 || clampUs(200*int64(time.Second)) != 100_000_000 || clampUs(2_500) != 2 {
		t.Error("clampUs")
	}
}

// TestProduceAckLatency: produce and e2e at a fixed rate report the produce-to-ack latency of
// every message, from the slot and from the send (never the larger); without a rate, or with
// acks=none, there is none.
func TestProduceAckLatency(t *testing.T) {
	addr := startTestBroker(t)
	for _, mode := range []string{"produce", "e2e"} {
		cfg := testConfig(addr, mode, "acklat-"+mode, 3000, 100)
		cfg.Rate, cfg.Linger = 20000, -1
		r, err := Run(runCtx(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: ack p50 %v p99 %v max %v; from the send p50 %v max %v", mode, r.AckP50Us, r.AckP99Us, r.AckMaxUs, r.AckSendP50Us, r.AckSendMaxUs)
		if r.AckCount != 3000 {
			t.Errorf("%s: %d acknowledgements measured, want 3000", mode, r.AckCount)
		}
		ps := []float64{r.AckP50Us, r.AckP90Us, r.AckP99Us, r.AckP999Us, r.AckMaxUs}
		for i, p := range ps {
			if !(p > 0) || i > 0 && ps[i-1] > p {
				t.Errorf("%s: ack percentiles %v: want positive and ordered", mode, ps)
				break
			}
		}
		if !(r.AckSendP50Us > 0) || r.AckSendP50Us > r.AckP50Us*1.002+1 || r.AckSendMaxUs > r.AckMaxUs*1.002+1 {
			t.Errorf("%s: from the send p50 %v max %v against the slot's %v %v", mode, r.AckSendP50Us, r.AckSendMaxUs, r.AckP50Us, r.AckMaxUs)
		}
		var js bytes.Buffer
		if err := r.WriteJSON(&js); err != nil || !strings.Contains(js.String(), `"ack_p99_us":`) || !strings.Contains(js.String(), `"ack_send_p99_us":`) {
			t.Errorf("%s: JSON lacks the ack figures: %v %s", mode, err, js.String())
		}
		var text bytes.Buffer
		r.WriteText(&text)
		if !strings.Contains(text.String(), "Produce-to-ack latency (us, 3000 messages)") {
			t.Errorf("%s: text lacks the ack line:\n%s", mode, text.String())
		}
	}
	for name, cfg := range map[string]Config{
		"no rate": testConfig(addr, "produce", "acklat-norate", 3000, 100),
		"acks none": func() Config {
			c := testConfig(addr, "produce", "acklat-none", 3000, 100)
			c.Rate, c.Acks = 20000, client.AckNone
			return c
		}(),
	} {
		r, err := Run(runCtx(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if r.AckCount != 0 || r.AckP50Us != 0 {
			t.Errorf("%s: ack latency reported: %+v", name, *r)
		}
	}
}
