package broker

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lightq/lightq/wire"
)

// TestQueueGroupSharesMessages: members of a queue group together get every message exactly
// once, while a fan-out subscriber on the same topic still gets all of them.
func TestQueueGroupSharesMessages(t *testing.T) {
	srv := startBroker(t, nil)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createTopic("jobs", 1, "jobs-user", "pw")
	members := []*rawClient{login(t, srv.Addr(), "jobs-user", "pw"), login(t, srv.Addr(), "jobs-user", "pw")}
	for _, m := range members {
		m.subscribe("jobs", wire.PartitionAny, "workers", 1<<20)
	}
	fan := login(t, srv.Addr(), "jobs-user", "pw")
	fan.subscribe("jobs", 0, "", 1<<20)

	prod := login(t, srv.Addr(), "jobs-user", "pw")
	const batches = 200
	for i := 0; i < batches; i++ {
		prod.produce("jobs", 0, testBatch(t, fmt.Sprint(i)))
	}
	for i := 0; i < batches; i++ {
		if d := fan.readDeliver(); d.values[0] != fmt.Sprint(i) {
			t.Fatalf("fan-out got %q at %d", d.values[0], i)
		}
	}
	// The members read until the group has all the messages between them (or nothing comes
	// for 10 s), then for 300 ms more, so that a duplicate shows up as an extra delivery.
	seen := map[string]int{}
	done := make(chan []string, len(members))
	var total atomic.Int64
	allIn := make(chan struct{})
	const linger = 300 * time.Millisecond
	for _, m := range members {
		go func(m *rawClient) {
			var got []string
			for {
				timeout := 10 * time.Second
				select {
				case <-allIn:
					timeout = linger
				default:
				}
				f, err := m.readFrame(timeout)
				if err != nil {
					done <- got
					return
				}
				var d wire.Deliver
				_ = d.Decode(f.body)
				bt, _ := wire.ParseBatch(d.Batch, 1<<20)
				it := wire.NewRecordIter(bt.Records, bt.RecordCount, 0, 0)
				var rec wire.Record
				for it.Next(&rec) {
					got = append(got, string(rec.Value))
				}
				if total.Add(int64(bt.RecordCount)) == batches {
					close(allIn)
				}
			}
		}(m)
	}
	select {
	case <-allIn:
		for _, m := range members { // cut short the 10 s reads of the members that have all theirs
			_ = m.conn.SetReadDeadline(time.Now().Add(linger))
		}
	case <-time.After(20 * time.Second):
	}
	for range members {
		for _, v := range <-done {
			seen[v]++
		}
	}
	for i := 0; i < batches; i++ {
		if seen[fmt.Sprint(i)] != 1 {
			t.Fatalf("message %d delivered %d times to the group", i, seen[fmt.Sprint(i)])
		}
	}
}

// TestCreditLimitsDelivery: a subscriber gets nothing beyond its credit (plus at most one
// batch) until it grants more.
func TestCreditLimitsDelivery(t *testing.T) {
	srv := startBroker(t, nil)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createTopic("credit", 1, "u", "pw")
	sub := login(t, srv.Addr(), "u", "pw")
	id := sub.subscribe("credit", 0, "", 1) // one byte: exactly one batch goes out
	prod := login(t, srv.Addr(), "u", "pw")
	for i := 0; i < 3; i++ {
		prod.produce("credit", 0, testBatch(t, fmt.Sprint(i)))
	}
	if d := sub.readDeliver(); d.values[0] != "0" {
		t.Fatalf("first delivery %v", d.values)
	}
	if f, err := sub.readFrame(200 * time.Millisecond); err == nil {
		t.Fatalf("got %s beyond credit", f.h.Op)
	}
	cr := wire.Credit{SubscriptionID: id, Bytes: 1 << 20}
	sub.send(wire.OpCredit, cr.AppendTo(nil))
	for i := 1; i < 3; i++ {
		if d := sub.readDeliver(); d.values[0] != fmt.Sprint(i) || d.dropped != 0 {
			t.Fatalf("after credit got %v dropped %d", d.values, d.dropped)
		}
	}
}

// TestSlowSubscriberIsBoundedAndToldOfDrops: one subscriber never reads while another reads
// everything. The fast one gets every message, the broker's memory stays bounded, and the
// slow one, when it finally reads, learns how many messages it lost.
func TestSlowSubscriberIsBoundedAndToldOfDrops(t *testing.T) {
	srv := startBroker(t, func(c *Config) {
		c.RingBytes = 2 << 20
		c.HighWaterMark = 256 << 10
	})
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createTopic("firehose", 1, "u", "pw")
	slow := login(t, srv.Addr(), "u", "pw")
	slow.subscribe("firehose", 0, "", 1<<31-1)
	fast := login(t, srv.Addr(), "u", "pw")
	fast.subscribe("firehose", 0, "", 1<<31-1)
	// The fast subscriber keeps granting credit as it reads.
	prod := login(t, srv.Addr(), "u", "pw")
	value := strings.Repeat("x", 1000)
	values := make([]string, 60)
	for i := range values {
		values[i] = value
	}
	batch := testBatch(t, values...) // ~60 KB
	const batches = 1000             // ~60 MB through a 2 MiB ring
	fastDone := make(chan error, 1)
	var fastBatches atomic.Int64 // the producer stays within a few batches of the fast reader
	go func() {
		var next int64
		for next < batches*60 {
			f, err := fast.readFrame(10 * time.Second)
			if err != nil {
				fastDone <- err
				return
			}
			var d wire.Deliver
			_ = d.Decode(f.body)
			bt, err := wire.ParseBatch(d.Batch, 1<<20)
			if err != nil || d.Dropped != 0 || bt.BaseOffset != next {
				fastDone <- fmt.Errorf("fast subscriber: offset %d want %d, dropped %d, err %v", bt.BaseOffset, next, d.Dropped, err)
				return
			}
			next += int64(bt.RecordCount)
			fastBatches.Add(1)
		}
		fastDone <- nil
	}()
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	body := produceBody("firehose", 0, wire.AcksNone, batch)
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; i < batches; i++ {
		for int64(i)-fastBatches.Load() > 8 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Microsecond)
		}
		prod.send(wire.OpProduce, body)
	}
	prod.ping() // every batch before it has been handled
	if err := <-fastDone; err != nil {
		t.Fatal(err)
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	growth := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("heap in use grew by %d KiB while %d MB went past a subscriber that never read", growth>>10, batches*len(batch)>>20)
	if growth > 16<<20 {
		t.Fatalf("heap grew by %d MiB: the slow subscriber is buffered without bound", growth>>20)
	}
	// The slow subscriber now reads: what it gets is in order, and the gaps are reported.
	var got, dropped uint64
	var next int64
	for got+dropped < batches*60 {
		d := slow.readDeliver()
		if int64(d.dropped)+next != d.batch.BaseOffset {
			t.Fatalf("slow: offset %d after %d with %d dropped", d.batch.BaseOffset, next, d.dropped)
		}
		dropped += d.dropped
		got += uint64(len(d.values))
		next = d.batch.BaseOffset + int64(len(d.values))
	}
	if dropped == 0 {
		t.Fatal("slow subscriber lost nothing: the test did not overrun it")
	}
	t.Logf("slow subscriber: %d delivered, %d dropped and reported", got, dropped)
	st := statsOf(t, admin, "firehose")
	if v, _ := st.Get("dropped_messages"); v != dropped {
		t.Fatalf("stats dropped_messages %d, subscriber was told %d", v, dropped)
	}
}

func statsOf(t testing.TB, c *rawClient, topic string) wire.TopicStats {
	t.Helper()
	m := wire.TopicName{Name: topic}
	corr := c.send(wire.OpStats, m.AppendTo(nil))
	var resp wire.StatsResponse
	if err := resp.Decode(c.expectResponse(wire.OpStats, corr)); err != nil {
		t.Fatal(err)
	}
	if len(resp.Topics) != 1 {
		t.Fatalf("stats for %d topics", len(resp.Topics))
	}
	return resp.Topics[0]
}

func TestDeleteTopicEndsSubscriptions(t *testing.T) {
	srv := startBroker(t, nil)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createTopic("gone", 1, "gone-user", "pw")
	sub := login(t, srv.Addr(), "gone-user", "pw")
	id := sub.subscribe("gone", 0, "", 1<<20)
	m := wire.TopicName{Name: "gone"}
	corr := admin.send(wire.OpDeleteTopic, m.AppendTo(nil))
	admin.expectResponse(wire.OpDeleteTopic, corr)
	sub.expectError(id, wire.CodeUnknownTopic)
	sub.ping()
	// The topic's grants went with it; its user stays, with no roles, until DELETE_USER.
	c := login(t, srv.Addr(), "gone-user", "pw")
	if names := metadataNames(t, c, nil); len(names) != 0 {
		t.Fatalf("the user of a deleted topic sees %v", names)
	}
	if got := listUsers(t, admin, wire.ListUsers{User: "gone-user"}); len(got) != 1 || got[0] != (wire.UserRoles{User: "gone-user"}) {
		t.Fatalf("LIST_USERS after the delete: %+v", got)
	}
}
