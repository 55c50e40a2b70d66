package broker

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/lightq/lightq/wire"
)

// scrape GETs /metrics and parses the text format.
func scrape(t testing.TB, httpAddr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := httpClient.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return mfs
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

// getStatus GETs path and returns the status code and body.
func getStatus(t testing.TB, httpAddr, path string) (int, string) {
	t.Helper()
	resp, err := httpClient.Get("http://" + httpAddr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// lbl is a metric's label set, written "k=v,k=v".
type lbl string

// sample finds the series of family name whose labels are exactly ls and returns its value:
// a counter's or gauge's value, a histogram's sample count.
func sample(mfs map[string]*dto.MetricFamily, name string, ls lbl) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
	for _, m := range mf.GetMetric() {
		var parts []string
		for _, lp := range m.GetLabel() {
			parts = append(parts, lp.GetName()+"="+lp.GetValue())
		}
		sort.Strings(parts)
		want := strings.Split(string(ls), ",")
		if ls == "" {
			want = nil
		}
		sort.Strings(want)
		if strings.Join(parts, ",") != strings.Join(want, ",") {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// expectation is one series' expected value; absent: the series must not exist.
type expectation struct {
	name   string
	labels lbl
	value  float64
	absent bool
}

// mismatches lists the expectations mfs does not meet.
func mismatches(mfs map[string]*dto.MetricFamily, want []expectation) []string {
	var out []string
	for _, e := range want {
		v, ok := sample(mfs, e.name, e.labels)
		switch {
		case e.absent && ok:
			out = append(out, fmt.Sprintf("%s{%s} = %v, want no such series", e.name, e.labels, v))
		case !e.absent && !ok:
			out = append(out, fmt.Sprintf("%s{%s} missing, want %v", e.name, e.labels, e.value))
		case !e.absent && v != e.value:
			out = append(out, fmt.Sprintf("%s{%s} = %v, want %v", e.name, e.labels, v, e.value))
		}
	}
	return out
}

// waitForMetrics scrapes until every expectation holds (a counter is added right after the
// write that the client may already have read, so the last one can lag by a moment), and
// fails listing what does not hold after the deadline. It returns the last scrape.
func waitForMetrics(t testing.TB, httpAddr string, want []expectation) map[string]*dto.MetricFamily {
	t.Helper()
	var mfs map[string]*dto.MetricFamily
	var bad []string
	deadline := time.Now().Add(20 * time.Second)
	poll := time.NewTicker(10 * time.Millisecond) // a condition polled until the deadline
	defer poll.Stop()
	for {
		mfs = scrape(t, httpAddr)
		if bad = mismatches(mfs, want); len(bad) == 0 {
			return mfs
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s, /metrics still shows:\n  %s", strings.Join(bad, "\n  "))
		}
		<-poll.C
	}
}

// partFigures is what a test sent into or got out of one partition.
type partFigures struct{ msgs, bytes int }

func (f *partFigures) add(msgs, bytes int) { f.msgs += msgs; f.bytes += bytes }

// TestMetricsScrape runs a bounded load against a real broker with the operations listener
// on, then checks /metrics against exactly what the test produced and consumed: per
// partition messages and bytes in and out, offsets, log sizes and dropped messages; consumer
// groups' committed offsets and lag; connections by state; auth failures, throttled logins
// and refused connections; the sample counts of the latency histograms. After a restart on
// the same data, the stored state (offsets, sizes, groups) is shown again and the counters
// start from zero.
func TestMetricsScrape(t *testing.T) {
	cfg := testConfig(t)
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.MaxConnections = 7
	cfg.Limits.AuthTimeout = 5 * time.Minute // the unauthenticated connection below must stay
	cfg.LoginThrottle.MaxFailures = 2
	cfg.LoginThrottle.BaseDelay, cfg.LoginThrottle.MaxDelay = time.Millisecond, time.Millisecond
	srv := startWith(t, cfg)
	httpAddr := srv.HTTPAddr()
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := getStatus(t, httpAddr, path); code != http.StatusOK {
			t.Fatalf("GET %s after Start: %d %s", path, code, body)
		}
	}

	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	create := func(name string, kind wire.Kind, partitions uint32, opts ...wire.Option) {
		m := wire.CreateTopic{Name: name, Kind: kind, Partitions: partitions, User: "app", Password: "app-pw", Options: opts}
		admin.expectResponse(wire.OpCreateTopic, admin.send(wire.OpCreateTopic, m.AppendTo(nil)))
	}
	create("tr", wire.KindTransient, 2)
	create("drops", wire.KindTransient, 1, wire.Option{Key: wire.OptionRingSlots, Value: "4"})
	create("du", wire.KindDurable, 2, wire.Option{Key: wire.OptionFsync, Value: "always"})
	app := login(t, srv.Addr(), "app", "app-pw")
	sub := login(t, srv.Addr(), "app", "app-pw")
	sub.subscribe("tr", wire.PartitionAny, "", 1<<30)

	// The load: 200 batches of 1-5 records to each of tr and du, alternating partitions,
	// pipelined on one connection; then 3 batches with acks 0 (counted in, not in the ack
	// histogram), fenced by a PING.
	const batches = 200
	var in [2][2]partFigures // [tr, du][partition]
	var stream []byte
	corrs := map[uint32]bool{}
	for i := 0; i < batches; i++ {
		for ti, topic := range []string{"tr", "du"} {
			var values []string
			for r := 0; r <= i%5; r++ {
				values = append(values, fmt.Sprintf("%s-%d-%d", topic, i, r))
			}
			b := testBatch(t, values...)
			part := int32(i % 2)
			in[ti][part].add(len(values), len(b))
			corr := app.nextCorr()
			corrs[corr] = true
			stream = wire.AppendFrame(stream, wire.OpProduce, 0, corr, produceBody(topic, part, wire.AcksWritten, b))
		}
	}
	app.write(stream)
	for len(corrs) > 0 {
		f := app.mustRead()
		if f.h.Op != wire.OpProduce || !corrs[f.h.Corr] {
			t.Fatalf("want PRODUCE acks, got %s corr %d", f.h.Op, f.h.Corr)
		}
		delete(corrs, f.h.Corr)
	}
	for i := 0; i < 3; i++ {
		b := testBatch(t, "unacked", "unacked")
		in[0][0].add(2, len(b))
		app.send(wire.OpProduce, produceBody("tr", 0, wire.AcksNone, b))
	}
	app.ping()

	// The subscriber gets every message of tr once.
	var out [2][2]partFigures
	for got := 0; got < in[0][0].msgs+in[0][1].msgs; {
		d := sub.readDeliver()
		out[0][d.partition].add(len(d.values), int(d.batch.Size()))
		got += len(d.values)
	}

	// drops: a subscriber without credit while 10 batches of 3 go into a ring of 4 slots;
	// given credit, it gets the last 4 batches and is told it lost 18 messages.
	slow := login(t, srv.Addr(), "app", "app-pw")
	slowSub := slow.subscribe("drops", 0, "", 0)
	var dropsIn, dropsOut partFigures
	for i := 0; i < 10; i++ {
		b := testBatch(t, "a", "b", "c")
		dropsIn.add(3, len(b))
		app.produce("drops", 0, b)
	}
	credit := wire.Credit{SubscriptionID: slowSub, Bytes: 1 << 20}
	slow.send(wire.OpCredit, credit.AppendTo(nil))
	var dropped uint64
	for dropsOut.msgs < 12 {
		d := slow.readDeliver()
		dropsOut.add(len(d.values), int(d.batch.Size()))
		dropped += d.dropped
	}
	if dropped != 18 {
		t.Fatalf("the slow subscriber was told it lost %d messages, want 18", dropped)
	}

	// du: three FETCHes of partition 0 (from the page cache), then a long poll at the end
	// of partition 1 that times out; commits of two groups.
	var next int64
	for i := 0; i < 3; i++ {
		m := wire.Fetch{Topic: "du", Partition: 0, Offset: next, MaxBytes: 600}
		var resp wire.FetchResponse
		if err := resp.Decode(app.expectResponse(wire.OpFetch, app.send(wire.OpFetch, m.AppendTo(nil)))); err != nil {
			t.Fatal(err)
		}
		for rest := resp.Batches; len(rest) > 0; {
			n := wire.BatchSize(rest)
			bt, err := wire.ParseBatch(rest[:n], 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			out[1][0].add(int(bt.RecordCount), n)
			next = bt.BaseOffset + int64(bt.RecordCount)
			rest = rest[n:]
		}
	}
	poll := wire.Fetch{Topic: "du", Partition: 1, Offset: int64(in[1][1].msgs), MaxBytes: 1 << 20, MaxWaitMs: 20}
	app.expectResponse(wire.OpFetch, app.send(wire.OpFetch, poll.AppendTo(nil)))
	app.expectResponse(wire.OpCommitOffset, app.commit("g1", "du", 0, next))
	app.expectResponse(wire.OpCommitOffset, app.commit("g2", "du", 1, 5))

	// Logins: a wrong password; a second, which blocks the (address, user) pair; a third,
	// refused unchecked. Then the connection cap: 5 open, 2 more fit, the next is refused.
	for i, code := range []wire.Code{wire.CodeAuthFailed, wire.CodeTooManyAttempts, wire.CodeTooManyAttempts} {
		bad := dialRaw(t, srv.Addr())
		bad.hello()
		m := wire.Auth{User: "nobody", Password: fmt.Sprint("guess", i)}
		bad.expectError(bad.send(wire.OpAuth, m.AppendTo(nil)), code)
		bad.conn.Close()
		waitUntil(t, "the failed login's connection closed", func() bool { return openConns(srv) == 4 })
	}
	pre := dialRaw(t, srv.Addr()) // stays unauthenticated
	pre.hello()
	var extra []*rawClient
	for i := 0; i < 2; i++ {
		x := dialRaw(t, srv.Addr())
		x.hello()
		extra = append(extra, x)
	}
	dialRaw(t, srv.Addr()).expectRefused("connection limit")
	for _, x := range extra {
		x.conn.Close()
	}
	waitUntil(t, "the extra connections closed", func() bool { return openConns(srv) == 5 })

	p := func(topic string, part int) lbl { return lbl(fmt.Sprintf("partition=%d,topic=%s", part, topic)) }
	var want []expectation
	for part := 0; part < 2; part++ {
		tr, du := p("tr", part), p("du", part)
		want = append(want,
			expectation{name: "lightq_partition_messages_in_total", labels: tr, value: float64(in[0][part].msgs)},
			expectation{name: "lightq_partition_bytes_in_total", labels: tr, value: float64(in[0][part].bytes)},
			expectation{name: "lightq_partition_messages_out_total", labels: tr, value: float64(out[0][part].msgs)},
			expectation{name: "lightq_partition_bytes_out_total", labels: tr, value: float64(out[0][part].bytes)},
			expectation{name: "lightq_partition_start_offset", labels: tr, value: 0},
			expectation{name: "lightq_partition_end_offset", labels: tr, value: float64(in[0][part].msgs)},
			expectation{name: "lightq_partition_dropped_messages_total", labels: tr, value: 0},
			expectation{name: "lightq_partition_log_size_bytes", labels: tr, absent: true},
			expectation{name: "lightq_partition_messages_in_total", labels: du, value: float64(in[1][part].msgs)},
			expectation{name: "lightq_partition_bytes_in_total", labels: du, value: float64(in[1][part].bytes)},
			expectation{name: "lightq_partition_messages_out_total", labels: du, value: float64(out[1][part].msgs)},
			expectation{name: "lightq_partition_bytes_out_total", labels: du, value: float64(out[1][part].bytes)},
			expectation{name: "lightq_partition_start_offset", labels: du, value: 0},
			expectation{name: "lightq_partition_end_offset", labels: du, value: float64(in[1][part].msgs)},
			expectation{name: "lightq_partition_log_size_bytes", labels: du, value: float64(in[1][part].bytes)},
			expectation{name: "lightq_partition_dropped_messages_total", labels: du, absent: true},
		)
	}
	if out[0][0].msgs != in[0][0].msgs || out[0][1].msgs != in[0][1].msgs || out[1][0].msgs == 0 || out[1][0].msgs >= in[1][0].msgs {
		t.Fatalf("the load went wrong: in %v, out %v", in, out)
	}
	drops := p("drops", 0)
	want = append(want,
		expectation{name: "lightq_partition_messages_in_total", labels: drops, value: float64(dropsIn.msgs)},
		expectation{name: "lightq_partition_bytes_in_total", labels: drops, value: float64(dropsIn.bytes)},
		expectation{name: "lightq_partition_messages_out_total", labels: drops, value: float64(dropsOut.msgs)},
		expectation{name: "lightq_partition_bytes_out_total", labels: drops, value: float64(dropsOut.bytes)},
		expectation{name: "lightq_partition_start_offset", labels: drops, value: 18},
		expectation{name: "lightq_partition_end_offset", labels: drops, value: 30},
		expectation{name: "lightq_partition_dropped_messages_total", labels: drops, value: 18},

		expectation{name: "lightq_consumer_group_committed_offset", labels: "group=g1,partition=0,topic=du", value: float64(next)},
		expectation{name: "lightq_consumer_group_lag", labels: "group=g1,partition=0,topic=du", value: float64(int64(in[1][0].msgs) - next)},
		expectation{name: "lightq_consumer_group_committed_offset", labels: "group=g2,partition=1,topic=du", value: 5},
		expectation{name: "lightq_consumer_group_lag", labels: "group=g2,partition=1,topic=du", value: float64(in[1][1].msgs - 5)},
		expectation{name: "lightq_consumer_group_committed_offset", labels: "group=g1,partition=1,topic=du", absent: true},
		expectation{name: "lightq_consumer_groups_tracked", value: 2},
		expectation{name: "lightq_consumer_groups_untracked_commits_total", value: 0},

		expectation{name: "lightq_topic_publishers", labels: "topic=tr", value: 1},
		expectation{name: "lightq_topic_publishers", labels: "topic=du", value: 1},
		expectation{name: "lightq_topic_subscribers", labels: "topic=tr", value: 1},
		expectation{name: "lightq_topic_subscribers", labels: "topic=drops", value: 1},
		expectation{name: "lightq_topic_rejected_batches_total", labels: "topic=tr", value: 0},

		expectation{name: "lightq_connections", labels: "state=unauthenticated", value: 1},
		expectation{name: "lightq_connections", labels: "state=authenticated", value: 4},
		expectation{name: "lightq_connections_stalled", value: 0},
		expectation{name: "lightq_connections_refused_total", value: 1},
		expectation{name: "lightq_auth_failures_total", value: 2},
		expectation{name: "lightq_logins_throttled_total", labels: "reason=blocked", value: 2},
		expectation{name: "lightq_logins_throttled_total", labels: "reason=busy", value: 0},
		expectation{name: "lightq_subscriber_stalls_total", value: 0},

		// Histograms: the sample count. Every acknowledged batch once; acks 0 never.
		expectation{name: "lightq_produce_ack_duration_seconds", labels: "durability=transient", value: batches + 10},
		expectation{name: "lightq_produce_ack_duration_seconds", labels: "durability=fsynced", value: batches},
		expectation{name: "lightq_produce_ack_duration_seconds", labels: "durability=written", value: 0},
		expectation{name: "lightq_fetch_duration_seconds", labels: "path=hot", value: 3},
		expectation{name: "lightq_fetch_duration_seconds", labels: "path=cold", value: 0},
		expectation{name: "lightq_fetch_duration_seconds", labels: "path=long_poll", value: 1},
		expectation{name: "lightq_build_info", labels: lbl("version=" + Version), value: 1},
	)
	mfs := waitForMetrics(t, httpAddr, want)

	// Group commit: one fsync covers many batches, and there was at least one.
	if n, _ := sample(mfs, "lightq_fsync_duration_seconds", ""); n < 1 || n > 2*batches {
		t.Errorf("lightq_fsync_duration_seconds counts %v fsyncs for %d batches", n, batches)
	}
	for _, m := range mfs["lightq_produce_ack_duration_seconds"].GetMetric() {
		if h := m.GetHistogram(); h.GetSampleCount() > 0 && h.GetSampleSum() <= 0 {
			t.Errorf("produce ack histogram %v: %d samples sum to %v", m.GetLabel(), h.GetSampleCount(), h.GetSampleSum())
		}
	}
	checkNames(t, mfs)

	// A restart: what is stored is shown again, groups included; counters start at zero.
	shutCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		t.Fatal(err)
	}
	srv2 := startWith(t, cfg)
	waitForMetrics(t, srv2.HTTPAddr(), []expectation{
		{name: "lightq_partition_end_offset", labels: p("du", 0), value: float64(in[1][0].msgs)},
		{name: "lightq_partition_log_size_bytes", labels: p("du", 1), value: float64(in[1][1].bytes)},
		{name: "lightq_partition_messages_in_total", labels: p("du", 0), value: 0},
		{name: "lightq_partition_end_offset", labels: p("tr", 0), value: 0},
		{name: "lightq_consumer_group_committed_offset", labels: "group=g1,partition=0,topic=du", value: float64(next)},
		{name: "lightq_consumer_group_lag", labels: "group=g2,partition=1,topic=du", value: float64(in[1][1].msgs - 5)},
		{name: "lightq_consumer_groups_tracked", value: 2},
		{name: "lightq_connections", labels: "state=authenticated", value: 0},
	})
}

// checkNames holds every lightq_ family to the naming conventions (HELP text, _total on
// counters and only on them, _seconds on histograms) and to docs/OPERATIONS.md, whose table
// must list exactly the families the broker exposes. The lightq_cluster_ families are a
// cluster member's only: checkNames leaves them out, checkClusterNames checks only them.
func checkNames(t *testing.T, mfs map[string]*dto.MetricFamily) {
	t.Helper()
	checkFamilies(t, mfs, func(name string) bool { return !strings.HasPrefix(name, clusterFamilies) }, 20)
}

// clusterFamilies starts the name of every family a cluster member alone has.
const clusterFamilies = "lightq_cluster_"

// checkClusterNames is checkNames for a cluster member's own families.
func checkClusterNames(t *testing.T, mfs map[string]*dto.MetricFamily) {
	t.Helper()
	checkFamilies(t, mfs, func(name string) bool { return strings.HasPrefix(name, clusterFamilies) }, 15)
}

// checkFamilies checks the lightq_ families that in selects, and that at least least of them
// are exposed.
func checkFamilies(t *testing.T, mfs map[string]*dto.MetricFamily, in func(string) bool, least int) {
	t.Helper()
	doc, err := os.ReadFile("../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(lightq_[a-z_]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = true
	}
	for name := range documented {
		if in(name) && mfs[name] == nil {
			t.Errorf("docs/OPERATIONS.md lists %s, which /metrics does not have", name)
		}
	}
	seen := 0
	for name, mf := range mfs {
		if !strings.HasPrefix(name, "lightq_") || !in(name) {
			continue
		}
		seen++
		if !documented[name] {
			t.Errorf("%s is not in docs/OPERATIONS.md's table", name)
		}
		if strings.TrimSpace(mf.GetHelp()) == "" {
			t.Errorf("%s has no HELP text", name)
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			if !strings.HasSuffix(name, "_total") {
				t.Errorf("counter %s does not end in _total", name)
			}
		case dto.MetricType_HISTOGRAM:
			if !strings.HasSuffix(name, "_seconds") {
				t.Errorf("histogram %s does not end in _seconds", name)
			}
		case dto.MetricType_GAUGE:
			if strings.HasSuffix(name, "_total") {
				t.Errorf("gauge %s ends in _total", name)
			}
		default:
			t.Errorf("%s has type %s", name, mf.GetType())
		}
	}
	if seen < least {
		t.Errorf("only %d lightq_ families", seen)
	}
}

// TestMetricsSlowSubscriber: a subscriber that does not read stalls at the high-water mark
// (counted once per stall, shown as a stalled connection), loses what the ring evicts, and
// once it reads again the counters agree exactly with what it was sent and told it lost.
func TestMetricsSlowSubscriber(t *testing.T) {
	srv := startBroker(t, func(c *Config) {
		c.HTTPAddr = "127.0.0.1:0"
		c.HighWaterMark = 64 << 10
	})
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createTopic("fast", 1, "app", "app-pw")
	sub := login(t, srv.Addr(), "app", "app-pw")
	sub.subscribe("fast", 0, "", 1<<30)
	prod := login(t, srv.Addr(), "app", "app-pw")

	// Produce 60 KB batches until the subscriber, which reads nothing, has stalled (its
	// socket buffers hold a few MB first); at most 400 batches (24 MB).
	var produced int
	stalled := false
	for i := 0; i < 400 && !stalled; i++ {
		prod.produce("fast", 0, testBatch(t, strings.Repeat("x", 60000)))
		produced++
		if i%20 == 19 {
			mfs := scrape(t, srv.HTTPAddr())
			n, _ := sample(mfs, "lightq_subscriber_stalls_total", "")
			c, _ := sample(mfs, "lightq_connections_stalled", "")
			stalled = n >= 1 && c == 1
		}
	}
	if !stalled {
		t.Fatalf("no stall shown after %d batches of 60 KB to a subscriber that reads nothing", produced)
	}
	for i := 0; i < 100; i++ { // the ring (4 MiB) moves on: the subscriber loses messages
		prod.produce("fast", 0, testBatch(t, strings.Repeat("y", 60000)))
		produced++
	}

	// Read everything now: the last DELIVER ends at the last message produced.
	var got partFigures
	var dropped uint64
	for end := int64(0); end < int64(produced); {
		d := sub.readDeliver()
		got.add(len(d.values), int(d.batch.Size()))
		dropped += d.dropped
		end = d.batch.BaseOffset + int64(d.batch.RecordCount)
	}
	if dropped == 0 || got.msgs+int(dropped) != produced {
		t.Fatalf("delivered %d and told of %d lost, of %d produced", got.msgs, dropped, produced)
	}
	mfs := waitForMetrics(t, srv.HTTPAddr(), []expectation{
		{name: "lightq_connections_stalled", value: 0},
		{name: "lightq_partition_messages_out_total", labels: "partition=0,topic=fast", value: float64(got.msgs)},
		{name: "lightq_partition_bytes_out_total", labels: "partition=0,topic=fast", value: float64(got.bytes)},
		{name: "lightq_partition_dropped_messages_total", labels: "partition=0,topic=fast", value: float64(dropped)},
		{name: "lightq_partition_messages_in_total", labels: "partition=0,topic=fast", value: float64(produced)},
	})
	if n, _ := sample(mfs, "lightq_subscriber_stalls_total", ""); n < 1 {
		t.Fatalf("lightq_subscriber_stalls_total = %v", n)
	}
}

// TestMetricsGroupCap: at most MetricsMaxGroups (topic, group) pairs are shown: the first to
// commit, then at a restart the first stored by name; commits of the others are counted. A
// deleted topic's groups leave the set.
func TestMetricsGroupCap(t *testing.T) {
	cfg := testConfig(t)
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.MetricsMaxGroups = 2
	srv := startWith(t, cfg)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createDurable("du", 1)
	c := login(t, srv.Addr(), "d-user", "d-pw")
	c.produceAcks("du", 0, wire.AcksWritten, testBatch(t, "a", "b", "c"))
	for _, g := range []string{"gc", "ga", "gb", "gb"} {
		c.expectResponse(wire.OpCommitOffset, c.commit(g, "du", 0, 1))
	}
	committed := func(g string) lbl { return lbl("group=" + g + ",partition=0,topic=du") }
	waitForMetrics(t, srv.HTTPAddr(), []expectation{
		{name: "lightq_consumer_groups_tracked", value: 2},
		{name: "lightq_consumer_groups_untracked_commits_total", value: 2},
		{name: "lightq_consumer_group_committed_offset", labels: committed("gc"), value: 1},
		{name: "lightq_consumer_group_lag", labels: committed("ga"), value: 2},
		{name: "lightq_consumer_group_committed_offset", labels: committed("gb"), absent: true},
	})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	srv = startWith(t, cfg)
	waitForMetrics(t, srv.HTTPAddr(), []expectation{
		{name: "lightq_consumer_groups_tracked", value: 2},
		{name: "lightq_consumer_group_committed_offset", labels: committed("ga"), value: 1},
		{name: "lightq_consumer_group_committed_offset", labels: committed("gb"), value: 1},
		{name: "lightq_consumer_group_committed_offset", labels: committed("gc"), absent: true},
	})

	admin = login(t, srv.Addr(), testAdminUser, testAdminPass)
	del := wire.TopicName{Name: "du"}
	admin.expectResponse(wire.OpDeleteTopic, admin.send(wire.OpDeleteTopic, del.AppendTo(nil)))
	waitForMetrics(t, srv.HTTPAddr(), []expectation{
		{name: "lightq_consumer_groups_tracked", value: 0},
		{name: "lightq_consumer_group_committed_offset", labels: committed("ga"), absent: true},
		{name: "lightq_partition_end_offset", labels: "partition=0,topic=du", absent: true},
	})
}

// TestMetricsReadiness: the operations listener is up once New returns: /healthz 200,
// /readyz 503 until Start has the broker's listener up, /metrics already showing the
// recovered topics; then 200. A broker without http-addr has no listener and counts nothing.
func TestMetricsReadiness(t *testing.T) {
	cfg := testConfig(t)
	first := startWith(t, cfg)
	if first.HTTPAddr() != "" || first.metrics != nil {
		t.Fatalf("without HTTPAddr: listener %q, metrics %v", first.HTTPAddr(), first.metrics != nil)
	}
	admin := login(t, first.Addr(), testAdminUser, testAdminPass)
	admin.createDurable("kept", 3)
	c := login(t, first.Addr(), "d-user", "d-pw")
	c.produceAcks("kept", 2, wire.AcksWritten, testBatch(t, "a", "b"))
	if err := first.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	cfg.HTTPAddr = "127.0.0.1:0"
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	if code, _ := getStatus(t, srv.HTTPAddr(), "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz before Start: %d", code)
	}
	if code, body := getStatus(t, srv.HTTPAddr(), "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "starting") {
		t.Fatalf("/readyz before Start: %d %q", code, body)
	}
	waitForMetrics(t, srv.HTTPAddr(), []expectation{{name: "lightq_partition_end_offset", labels: "partition=2,topic=kept", value: 2}})
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if code, body := getStatus(t, srv.HTTPAddr(), "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz after Start: %d %q", code, body)
	}
	addr := srv.HTTPAddr()
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if resp, err := httpClient.Get("http://" + addr + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatalf("/healthz after Shutdown: %s", resp.Status)
	}

	// The address taken (by another broker's operations listener): New fails naming the
	// setting, before it touches the data directory.
	blocker := startBroker(t, func(c *Config) { c.HTTPAddr = "127.0.0.1:0" })
	cfg.HTTPAddr = blocker.HTTPAddr()
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "http-addr") {
		t.Fatalf("New with http-addr in use: %v", err)
	}
}
