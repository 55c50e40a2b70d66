package client_test

// Durable-topic consumer tests, against the real broker (see integration_test.go).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// ckDurable creates a durable topic owned by itUser.
func ckDurable(t testing.TB, admin *client.Conn, name string, partitions int, opts ...wire.Option) {
	t.Helper()
	err := admin.CreateTopic(itCtx(t), client.TopicConfig{Name: name, Kind: wire.KindDurable, Partitions: partitions, User: itUser, Password: itPass, Options: opts})
	if err != nil {
		t.Fatalf("CreateTopic %s: %v", name, err)
	}
}

// ckSetup starts a broker (mutate may change its config) with one durable topic and returns
// the broker and a connection as the topic's user.
func ckSetup(t testing.TB, mutate func(*broker.Config), topic string, partitions int, opts ...wire.Option) (*broker.Server, *client.Conn) {
	t.Helper()
	srv := startBroker(t, mutate)
	admin := itDial(t, srv.Addr(), itAdminUser, itAdminPass)
	ckDurable(t, admin, topic, partitions, opts...)
	return srv, itDial(t, srv.Addr(), itUser, itPass)
}

// ckValue is the value of record i: its index and some padding that compresses.
func ckValue(i int) []byte {
	return fmt.Appendf(nil, "v-%07d-%s", i, strings.Repeat("payload ", 8))
}

func ckIndex(t testing.TB, v []byte) int {
	t.Helper()
	var i int
	if _, err := fmt.Sscanf(string(v), "v-%07d-", &i); err != nil {
		t.Fatalf("value %q: %v", v, err)
	}
	return i
}

// ckProduce produces records from..to-1 (keyed, every 7th with a header) and returns their
// acks by index into acks (grown as needed).
func ckProduce(t testing.TB, c *client.Conn, opts client.ProducerOptions, from, to int, acks *[]client.Ack, mod func(i int, m *client.Message)) {
	t.Helper()
	p := itProducer(t, c, opts)
	if len(*acks) < to {
		*acks = append(*acks, make([]client.Ack, to-len(*acks))...)
	}
	var mu sync.Mutex
	var firstErr error
	ctx := itCtx(t)
	for i := from; i < to; i++ {
		m := client.Message{Key: fmt.Appendf(nil, "k-%d", i), Value: ckValue(i)}
		if i%7 == 0 {
			m.Headers = []wire.RecordHeader{{Name: []byte("h"), Value: fmt.Appendf(nil, "%d", i)}}
		}
		if mod != nil {
			mod(i, &m)
		}
		err := p.Send(ctx, &m, func(a client.Ack, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			(*acks)[i] = a
		})
		if err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatalf("producer Close: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if firstErr != nil {
		t.Fatalf("produce: %v", firstErr)
	}
}

func ckConsumer(t testing.TB, c *client.Conn, opts client.ConsumerOptions) *client.Consumer {
	t.Helper()
	k, err := c.NewConsumer(itCtx(t), opts)
	if err != nil {
		t.Fatalf("NewConsumer %+v: %v", opts, err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

// ckCollect consumes until n records arrived.
func ckCollect(t testing.TB, k *client.Consumer, n int) []itRecord {
	t.Helper()
	var out []itRecord
	if n == 0 {
		return out
	}
	err := k.Each(itCtx(t), func(m *client.Received) error {
		out = append(out, copyReceived(m))
		if len(out) >= n {
			return errItDone
		}
		return nil
	})
	if !errors.Is(err, errItDone) {
		t.Fatalf("Each after %d of %d records: %v", len(out), n, err)
	}
	return out
}

// ckCollectFromAll consumes until at least n records arrived and every partition of k
// delivered one. Commit stores only the partitions that delivered, and on a loaded machine
// the first n records may all come from one partition.
func ckCollectFromAll(t testing.TB, k *client.Consumer, n int) []itRecord {
	t.Helper()
	var out []itRecord
	seen := map[int32]bool{}
	err := k.Each(itCtx(t), func(m *client.Received) error {
		out = append(out, copyReceived(m))
		seen[m.Partition] = true
		if len(out) >= n && len(seen) == len(k.Partitions()) {
			return errItDone
		}
		return nil
	})
	if !errors.Is(err, errItDone) {
		t.Fatalf("Each after %d records (at least %d wanted) from partitions %v: %v", len(out), n, seen, err)
	}
	return out
}

// ckNoMore checks that nothing else arrives for a while.
func ckNoMore(t testing.TB, k *client.Consumer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	err := k.Each(ctx, func(m *client.Received) error {
		return fmt.Errorf("unexpected record partition %d offset %d value %q", m.Partition, m.Offset, m.Value)
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
}

// ckVerify checks that got holds each record of want (indexes) exactly once, at the offset
// its ack gave, in offset order per partition, with the value, key and headers produced.
func ckVerify(t testing.TB, got []itRecord, acks []client.Ack, want []int) {
	t.Helper()
	seen := map[int]bool{}
	last := map[int32]int64{}
	for _, r := range got {
		i := ckIndex(t, r.Value)
		if seen[i] {
			t.Fatalf("record %d delivered twice (partition %d offset %d)", i, r.Partition, r.Offset)
		}
		seen[i] = true
		if a := acks[i]; a.Partition != r.Partition || a.Offset != r.Offset {
			t.Fatalf("record %d at partition %d offset %d, acked at %d/%d", i, r.Partition, r.Offset, a.Partition, a.Offset)
		}
		if l, ok := last[r.Partition]; ok && r.Offset <= l {
			t.Fatalf("partition %d: offset %d after %d", r.Partition, r.Offset, l)
		}
		last[r.Partition] = r.Offset
		if string(r.Key) != fmt.Sprintf("k-%d", i) {
			t.Fatalf("record %d key %q", i, r.Key)
		}
		if i%7 == 0 && (len(r.Headers) != 1 || string(r.Headers[0].Value) != fmt.Sprint(i)) {
			t.Fatalf("record %d headers %+v", i, r.Headers)
		}
	}
	for _, i := range want {
		if !seen[i] {
			t.Fatalf("record %d (partition %d offset %d) missing; got %d records, want %d", i, acks[i].Partition, acks[i].Offset, len(got), len(want))
		}
	}
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
}

func ckRange(from, to int) []int {
	out := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

func TestConsumerEarliest(t *testing.T) {
	t.Parallel()
	for _, fsync := range []string{"always", "interval=5ms"} {
		for _, codec := range []wire.Codec{wire.CodecNone, wire.CodecS2, wire.CodecZstd} {
			t.Run(fsync+"/"+codec.String(), func(t *testing.T) {
				t.Parallel()
				const n = 3000
				_, c := ckSetup(t, nil, "dur", 2, wire.Option{Key: "fsync", Value: fsync})
				var acks []client.Ack
				ckProduce(t, c, client.ProducerOptions{Topic: "dur", Compression: codec, BatchBytes: 8 << 10}, 0, n, &acks, nil)
				k := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur", MaxBytes: 32 << 10, Prefetch: 128 << 10})
				got := ckCollect(t, k, n)
				ckVerify(t, got, acks, ckRange(0, n))
				ckNoMore(t, k)
				var total int64
				for _, p := range k.Partitions() {
					total += k.Position(p)
					if hw := k.HighWatermark(p); hw != k.Position(p) {
						t.Errorf("partition %d: high watermark %d, position %d", p, hw, k.Position(p))
					}
				}
				if total != n {
					t.Errorf("positions sum to %d, want %d", total, n)
				}
			})
		}
	}
}

// ckBatches produces count batches of size records each to partition 0, one batch per flush.
func ckBatches(t testing.TB, c *client.Conn, topic string, from, count, size int, acks *[]client.Ack, ts func(batch int) time.Time) {
	t.Helper()
	p := itProducer(t, c, client.ProducerOptions{Topic: topic, Linger: time.Hour})
	if len(*acks) < from+count*size {
		*acks = append(*acks, make([]client.Ack, from+count*size-len(*acks))...)
	}
	for b := range count {
		for j := range size {
			i := from + b*size + j
			m := client.Message{Key: fmt.Appendf(nil, "k-%d", i), Value: ckValue(i), HasPartition: true}
			if i%7 == 0 {
				m.Headers = []wire.RecordHeader{{Name: []byte("h"), Value: fmt.Appendf(nil, "%d", i)}}
			}
			if ts != nil {
				m.Timestamp = ts(b)
			}
			if err := p.Send(itCtx(t), &m, func(a client.Ack, err error) {
				if err != nil {
					t.Errorf("record %d: %v", i, err)
				}
				(*acks)[i] = a
			}); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Flush(itCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestConsumerAtOffsetMidBatch(t *testing.T) {
	t.Parallel()
	_, c := ckSetup(t, nil, "dur", 1)
	var acks []client.Ack
	ckBatches(t, c, "dur", 0, 10, 10, &acks, nil)
	if acks[25].Offset != 25 || acks[20].Offset != 20 {
		t.Fatalf("acks %v", acks[20:26])
	}
	k := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur", Start: client.AtOffset(25), MaxBytes: 1})
	got := ckCollect(t, k, 75)
	if got[0].Offset != 25 {
		t.Fatalf("first record at %d", got[0].Offset)
	}
	ckVerify(t, got, acks, ckRange(25, 100))
	ckNoMore(t, k)
}

func TestConsumerLatest(t *testing.T) {
	t.Parallel()
	for _, iso := range []wire.Isolation{wire.IsolationDurable, wire.IsolationWritten} {
		t.Run(fmt.Sprint("isolation", iso), func(t *testing.T) {
			t.Parallel()
			_, c := ckSetup(t, nil, "dur", 2)
			var acks []client.Ack
			ckProduce(t, c, client.ProducerOptions{Topic: "dur"}, 0, 50, &acks, nil)
			k := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur", Start: client.Latest(), Isolation: iso})
			if p0, p1 := k.Position(0), k.Position(1); p0+p1 != 50 {
				t.Fatalf("latest positions %d + %d, want 50", p0, p1)
			}
			ckProduce(t, c, client.ProducerOptions{Topic: "dur"}, 50, 80, &acks, nil)
			got := ckCollect(t, k, 30)
			ckVerify(t, got, acks, ckRange(50, 80))
			ckNoMore(t, k)
		})
	}
}

func TestConsumerAtTime(t *testing.T) {
	t.Parallel()
	_, c := ckSetup(t, nil, "dur", 1)
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var acks []client.Ack
	ckBatches(t, c, "dur", 0, 4, 5, &acks, func(b int) time.Time { return base.Add(time.Duration(b) * time.Minute) })
	k := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur", Start: client.AtTime(base.Add(90 * time.Second))})
	if k.Position(0) != 10 {
		t.Fatalf("AtTime position %d, want 10", k.Position(0))
	}
	got := ckCollect(t, k, 10)
	ckVerify(t, got, acks, ckRange(10, 20))
	if !got[0].Timestamp.Equal(base.Add(2 * time.Minute)) {
		t.Errorf("timestamp %v, want %v", got[0].Timestamp, base.Add(2*time.Minute))
	}
	k2 := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur", Start: client.AtTime(time.Now().Add(time.Hour))})
	if k2.Position(0) != 20 {
		t.Fatalf("AtTime(future) position %d, want 20", k2.Position(0))
	}
}

// TestConsumerLongPoll: a record produced while the fetchers wait at the end of the log
// arrives at once, not when their long poll runs out. After the first record the wait is
// certain: a fetcher sends its next FETCH before it queues what it got, on the connection
// the next PRODUCE then goes out on. The bound on the delay is generous for a loaded machine
// but well under MaxWait, which a FETCH that new records do not wake would wait out.
func TestConsumerLongPoll(t *testing.T) {
	t.Parallel()
	_, c := ckSetup(t, nil, "dur", 2)
	const maxWait, bound = 20 * time.Second, 10 * time.Second
	k := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur", MaxWait: maxWait})
	type arrival struct {
		r  itRecord
		at time.Time
	}
	got := make(chan arrival, 10)
	go func() {
		_ = k.Each(itCtx(t), func(m *client.Received) error {
			got <- arrival{copyReceived(m), time.Now()}
			return nil
		})
	}()
	var acks []client.Ack
	for i := range 3 {
		start := time.Now()
		ckProduce(t, c, client.ProducerOptions{Topic: "dur"}, i, i+1, &acks, nil)
		select {
		case a := <-got:
			ckVerify(t, []itRecord{a.r}, acks, []int{i})
			d := a.at.Sub(start)
			t.Logf("record %d arrived %v after it was produced", i, d)
			if d > bound {
				t.Errorf("record %d arrived %v after it was produced (MaxWait %v)", i, d, maxWait)
			}
		case <-time.After(2 * maxWait):
			t.Fatalf("record %d not delivered", i)
		}
	}
}

func TestConsumerGroupCommit(t *testing.T) {
	t.Parallel()
	_, c := ckSetup(t, nil, "dur", 2)
	var acks []client.Ack
	ckProduce(t, c, client.ProducerOptions{Topic: "dur", BatchBytes: 2 << 10}, 0, 400, &acks, nil)

	opts := client.ConsumerOptions{Topic: "dur", Group: "g", AutoCommit: -1, MaxBytes: 4 << 10}
	k1 := ckConsumer(t, c, opts)
	first := ckCollectFromAll(t, k1, 150)
	if err := k1.Commit(itCtx(t)); err != nil {
		t.Fatal(err)
	}
	pos := map[int32]int64{0: k1.Position(0), 1: k1.Position(1)}
	for p, off := range pos {
		got, err := c.FetchCommitted(itCtx(t), wire.FetchCommitted{Group: "g", Topic: "dur", Partition: uint32(p)})
		if err != nil || got != off {
			t.Fatalf("partition %d committed %d (%v), position %d", p, got, err, off)
		}
	}
	if err := k1.Close(); err != nil {
		t.Fatal(err)
	}

	k2 := ckConsumer(t, c, opts)
	if k2.Position(0) != pos[0] || k2.Position(1) != pos[1] {
		t.Fatalf("resumed at %d/%d, committed %v", k2.Position(0), k2.Position(1), pos)
	}
	second := ckCollect(t, k2, 400-len(first))
	for _, r := range second {
		if r.Offset < pos[r.Partition] {
			t.Fatalf("partition %d offset %d below the committed %d", r.Partition, r.Offset, pos[r.Partition])
		}
	}
	ckVerify(t, append(first, second...), acks, ckRange(0, 400))
	ckNoMore(t, k2)

	// Another group starts from scratch; CommitOffsets stores explicit offsets.
	k3 := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur", Group: "other", OffsetsOnly: true, Partitions: []int32{1}})
	if k3.Position(1) != 0 || k3.Position(0) != -1 {
		t.Fatalf("new group at %d, partition 0 %d", k3.Position(1), k3.Position(0))
	}
	if err := k3.CommitOffsets(itCtx(t), map[int32]int64{1: 5}); err != nil {
		t.Fatal(err)
	}
	k3.Close()
	k4 := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur", Group: "other", OffsetsOnly: true, Partitions: []int32{1}})
	if k4.Position(1) != 5 {
		t.Fatalf("after CommitOffsets: position %d", k4.Position(1))
	}
	if err := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur"}).Commit(itCtx(t)); err == nil {
		t.Fatal("Commit without a group succeeded")
	}
}

func TestConsumerAutoCommit(t *testing.T) {
	t.Parallel()
	_, c := ckSetup(t, nil, "dur", 2)
	var acks []client.Ack
	ckProduce(t, c, client.ProducerOptions{Topic: "dur", BatchBytes: 2 << 10}, 0, 300, &acks, nil)
	committed := func(p int32) int64 {
		off, err := c.FetchCommitted(itCtx(t), wire.FetchCommitted{Group: "auto", Topic: "dur", Partition: uint32(p)})
		if err != nil {
			t.Fatal(err)
		}
		return off
	}
	opts := client.ConsumerOptions{Topic: "dur", Group: "auto", AutoCommit: 20 * time.Millisecond, MaxBytes: 4 << 10}
	k1 := ckConsumer(t, c, opts)
	first := ckCollectFromAll(t, k1, 100)
	itEventually(t, "auto commit", func() bool {
		return committed(0) == k1.Position(0) && committed(1) == k1.Position(1)
	})
	first = append(first, ckCollect(t, k1, 50)...)
	if err := k1.Close(); err != nil { // commits
		t.Fatal(err)
	}
	if committed(0)+committed(1) != int64(len(first)) {
		t.Fatalf("committed %d + %d after Close, want %d", committed(0), committed(1), len(first))
	}
	k2 := ckConsumer(t, c, opts)
	second := ckCollect(t, k2, 300-len(first))
	ckVerify(t, append(first, second...), acks, ckRange(0, 300))
}

func TestConsumerPrefetchBound(t *testing.T) {
	t.Parallel()
	_, c := ckSetup(t, nil, "dur", 2, wire.Option{Key: "fsync", Value: "never"})
	const n = 4000 // about 1 KiB each: 2 MiB per partition
	var acks []client.Ack
	big := func(i int, m *client.Message) { m.Value = append(m.Value, make([]byte, 900)...) }
	ckProduce(t, c, client.ProducerOptions{Topic: "dur", BatchBytes: 16 << 10}, 0, n, &acks, big)

	const prefetch, maxBytes = 128 << 10, 32 << 10
	k := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur", Prefetch: prefetch, MaxBytes: maxBytes})
	// A FETCH answer is at most maxBytes, or one batch (at most 16 KiB here) when larger.
	const bound = 2 * (prefetch + maxBytes + 20)
	itEventually(t, "prefetch", func() bool { return k.Buffered() >= prefetch })
	for range 20 {
		if b := k.Buffered(); b > bound {
			t.Fatalf("consumer holds %d bytes, bound %d", b, bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := ckCollect(t, k, n)
	ckVerify(t, got, acks, ckRange(0, n))
	if b := k.Buffered(); b > bound {
		t.Fatalf("consumer holds %d bytes at the end, bound %d", b, bound)
	}
}

func TestConsumerSegmentRoll(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, c := ckSetup(t, func(cfg *broker.Config) { cfg.DataDir = dir }, "dur", 1,
		wire.Option{Key: "fsync", Value: "interval=10ms"}, wire.Option{Key: "segment.bytes", Value: "2097152"})
	const n = 6000 // about 1 KiB each: 3 segments
	var acks []client.Ack
	big := func(i int, m *client.Message) {
		m.Value = append(m.Value, make([]byte, 1000)...)
		m.HasPartition = true
	}
	ckProduce(t, c, client.ProducerOptions{Topic: "dur", BatchBytes: 64 << 10}, 0, n, &acks, big)
	segs, _ := filepath.Glob(filepath.Join(dir, "topics", "dur", "0", "*.log"))
	if len(segs) < 3 {
		t.Fatalf("%d segments, want at least 3: %v", len(segs), segs)
	}
	k := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur", MaxBytes: 200 << 10})
	got := ckCollect(t, k, n)
	ckVerify(t, got, acks, ckRange(0, n))
	ckNoMore(t, k)
}

func TestConsumerCorruptBatch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, c := ckSetup(t, func(cfg *broker.Config) { cfg.DataDir = dir }, "dur", 1)
	var acks []client.Ack
	ckBatches(t, c, "dur", 0, 3, 10, &acks, nil)
	// Flip a byte in the records of the second batch, on disk: the broker sends it as it is.
	f, err := os.OpenFile(filepath.Join(dir, "topics", "dur", "0", fmt.Sprintf("%020d.log", 0)), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var hdr [wire.BatchHeaderSize]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil {
		t.Fatal(err)
	}
	second := int64(wire.BatchSize(hdr[:]))
	flip := second + wire.BatchHeaderSize + 16 // in the records
	var b [1]byte
	if _, err := f.ReadAt(b[:], flip); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b[:], flip); err != nil {
		t.Fatal(err)
	}
	f.Close()

	k := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur"})
	var got []itRecord
	err = k.Each(itCtx(t), func(m *client.Received) error {
		got = append(got, copyReceived(m))
		return nil
	})
	var bad *client.CorruptBatchError
	if !errors.Is(err, wire.ErrCorruptBatch) || !errors.As(err, &bad) || bad.Partition != 0 || bad.FirstOffset != 10 || bad.LastOffset != 19 ||
		!strings.Contains(err.Error(), "partition 0 offsets 10-19") {
		t.Fatalf("Each: %v", err)
	}
	ckVerify(t, got, acks, ckRange(0, 10))
	if err := k.Each(itCtx(t), func(*client.Received) error { return nil }); !errors.Is(err, wire.ErrCorruptBatch) {
		t.Fatalf("Each after the error: %v", err)
	}
	if !errors.Is(k.Err(), wire.ErrCorruptBatch) {
		t.Fatalf("Err: %v", k.Err())
	}
}

func TestConsumerErrors(t *testing.T) {
	t.Parallel()
	srv, c := ckSetup(t, nil, "dur", 2)
	admin := itDial(t, srv.Addr(), itAdminUser, itAdminPass)
	itTopic(t, admin, "tr", 1)
	ctx := itCtx(t)
	for _, tc := range []struct {
		opts client.ConsumerOptions
		code wire.Code
	}{
		{client.ConsumerOptions{Topic: "tr"}, wire.CodeNotSupported},
		{client.ConsumerOptions{Topic: "nope"}, wire.CodeNotAuthorized},
		{client.ConsumerOptions{Topic: "dur", Partitions: []int32{2}}, wire.CodeUnknownPartition},
	} {
		if _, err := c.NewConsumer(ctx, tc.opts); !errors.Is(err, &wire.Error{Code: tc.code}) {
			t.Errorf("NewConsumer %+v: %v, want %v", tc.opts, err, tc.code)
		}
	}
	if _, err := c.NewConsumer(ctx, client.ConsumerOptions{Topic: "dur", Start: client.AtOffset(-1)}); err == nil {
		t.Error("AtOffset(-1) accepted")
	}

	// A start beyond the end of the log fails the consumer.
	var acks []client.Ack
	ckProduce(t, c, client.ProducerOptions{Topic: "dur"}, 0, 10, &acks, nil)
	k := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur", Partitions: []int32{0}, Start: client.AtOffset(1000)})
	err := k.Each(ctx, func(*client.Received) error { return nil })
	if !errors.Is(err, &wire.Error{Code: wire.CodeOffsetOutOfRange}) || !strings.Contains(err.Error(), "partition 0") {
		t.Fatalf("Each beyond the end: %v", err)
	}

	// The consumer's connection closes: Each ends with its error.
	c2 := itDial(t, srv.Addr(), itUser, itPass)
	k2 := ckConsumer(t, c2, client.ConsumerOptions{Topic: "dur"})
	ckCollect(t, k2, 10)
	c2.Close()
	if err := k2.Each(ctx, func(*client.Received) error { return nil }); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Each after the connection closed: %v", err)
	}
}

// ckWatchedCtx is a context that closes asked when someone first asks for Done, as Each
// does when it starts: a test can wait for that instead of sleeping.
type ckWatchedCtx struct {
	context.Context
	once  sync.Once
	asked chan struct{}
}

func ckWatch(ctx context.Context) *ckWatchedCtx {
	return &ckWatchedCtx{Context: ctx, asked: make(chan struct{})}
}

func (c *ckWatchedCtx) Done() <-chan struct{} {
	c.once.Do(func() { close(c.asked) })
	return c.Context.Done()
}

// TestConsumerCloseAndContext: Each ends at its context's deadline, and Close ends a waiting
// Each at once although the fetchers' long polls (MaxWait, the broker's maximum) are pending.
// The bound on Close is generous for a loaded machine but well under MaxWait.
func TestConsumerCloseAndContext(t *testing.T) {
	t.Parallel()
	_, c := ckSetup(t, nil, "dur", 2)
	const maxWait, bound = 30 * time.Second, 10 * time.Second
	k := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur", MaxWait: maxWait})
	ctx, cancel := context.WithTimeout(itCtx(t), 50*time.Millisecond)
	defer cancel()
	if err := k.Each(ctx, func(*client.Received) error { return nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Each with a deadline: %v", err)
	}
	done := make(chan error, 1)
	eachCtx := ckWatch(itCtx(t))
	go func() { done <- k.Each(eachCtx, func(*client.Received) error { return nil }) }()
	<-eachCtx.asked // Each runs; the topic is empty, so it waits
	start := time.Now()
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	d := time.Since(start)
	t.Logf("Close took %v", d)
	if d > bound {
		t.Errorf("Close took %v with fetches waiting (MaxWait %v)", d, maxWait)
	}
	if err := <-done; !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Each after Close: %v", err)
	}
	if err := k.Close(); err != nil || !errors.Is(k.Err(), client.ErrClosed) {
		t.Fatalf("second Close %v, Err %v", err, k.Err())
	}

	// Messages: copies, then the channel closes at Close (called from the loop).
	var acks []client.Ack
	ckProduce(t, c, client.ProducerOptions{Topic: "dur"}, 0, 20, &acks, nil)
	k2 := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur", Group: "m"})
	var got []itRecord
	for m := range k2.Messages() {
		got = append(got, itRecord{Partition: m.Partition, Offset: m.Offset, Key: m.Key, Value: m.Value, Headers: m.Headers})
		if len(got) == 20 {
			if err := k2.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	ckVerify(t, got, acks, ckRange(0, 20))
	for _, p := range []int32{0, 1} {
		off, err := c.FetchCommitted(itCtx(t), wire.FetchCommitted{Group: "m", Topic: "dur", Partition: uint32(p)})
		if err != nil || off != k2.Position(p) {
			t.Errorf("partition %d committed %d (%v), position %d", p, off, err, k2.Position(p))
		}
	}
}

// ckLogBytes sums the sizes of partition 0's batches from offset from to the end of the log
// (as written: retention counts what is written).
func ckLogBytes(t testing.TB, c *client.Conn, topic string, from int64) (int, error) {
	t.Helper()
	total := 0
	for off := from; ; {
		res, err := c.Fetch(itCtx(t), wire.Fetch{Topic: topic, Offset: off, MaxBytes: 1 << 20, Isolation: wire.IsolationWritten})
		if err != nil {
			return 0, err
		}
		it := res.Iter()
		for it.Next() {
			total += it.Batch().Size()
			off = it.Batch().NextOffset()
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		if off >= res.HighWatermark {
			return total, nil
		}
	}
}

func TestConsumerRetentionReset(t *testing.T) {
	t.Parallel()
	const retention = 2 << 20
	_, c := ckSetup(t, nil, "dur", 1, wire.Option{Key: "fsync", Value: "never"},
		wire.Option{Key: "segment.bytes", Value: "2097152"}, wire.Option{Key: "retention.bytes", Value: fmt.Sprint(retention)})
	const n = 6000 // about 1 KiB each: 3 segments, of which retention keeps the last ones
	var acks []client.Ack
	big := func(i int, m *client.Message) {
		m.Value = append(m.Value, make([]byte, 1000)...)
		m.HasPartition = true
	}
	ckProduce(t, c, client.ProducerOptions{Topic: "dur", BatchBytes: 64 << 10}, 0, n, &acks, big)
	// Retention runs in the background (the broker checks every 500ms) and deletes the
	// oldest segments while the log holds more than retention.bytes. Nothing is produced any
	// more, so once the log from its start holds no more than that, the start stays put.
	var start int64
	itEventually(t, "retention to settle", func() bool {
		s, err := c.ListOffsets(itCtx(t), wire.ListOffsets{Topic: "dur", Mode: wire.OffsetEarliest})
		if err != nil {
			t.Fatal(err)
		}
		if s == 0 || s == start {
			return false // not moved yet, or moved to where the log still held too much
		}
		n, err := ckLogBytes(t, c, "dur", s)
		if errors.Is(err, &wire.Error{Code: wire.CodeOffsetOutOfRange}) {
			return false // retention moved the start meanwhile
		}
		if err != nil {
			t.Fatal(err)
		}
		start = s
		return n <= retention
	})
	resets := make(chan error, 10)
	k := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur", Start: client.AtOffset(0), OnError: func(err error) { resets <- err }})
	got := ckCollect(t, k, n-int(start))
	if got[0].Offset != start {
		t.Fatalf("first record at %d, log start %d", got[0].Offset, start)
	}
	ckVerify(t, got, acks, ckRange(int(start), n))
	select {
	case err := <-resets:
		if !errors.Is(err, client.ErrOffsetReset) {
			t.Fatalf("OnError: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the reset was not reported")
	}
	k2 := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur"})
	if k2.Position(0) != start {
		t.Fatalf("Earliest at %d, log start %d", k2.Position(0), start)
	}
}
