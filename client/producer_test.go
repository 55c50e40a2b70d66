package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// ackLog records callback outcomes and checks that each message gets exactly one.
type ackLog struct {
	mu    sync.Mutex
	acks  map[int][]client.Ack
	errs  map[int][]error
	order []int
}

func newAckLog() *ackLog {
	return &ackLog{acks: make(map[int][]client.Ack), errs: make(map[int][]error)}
}

func (l *ackLog) cb(i int) func(client.Ack, error) {
	return func(a client.Ack, err error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.order = append(l.order, i)
		if err != nil {
			l.errs[i] = append(l.errs[i], err)
		} else {
			l.acks[i] = append(l.acks[i], a)
		}
	}
}

// exactlyOnce fails unless messages 0..n-1 each had exactly one outcome.
func (l *ackLog) exactlyOnce(t *testing.T, n int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range n {
		if got := len(l.acks[i]) + len(l.errs[i]); got != 1 {
			t.Fatalf("message %d: %d outcomes (acks %v, errs %v)", i, got, l.acks[i], l.errs[i])
		}
	}
	if len(l.order) != n {
		t.Fatalf("%d callbacks for %d messages", len(l.order), n)
	}
}

func newProducer(t *testing.T, c *client.Conn, opts client.ProducerOptions) *client.Producer {
	t.Helper()
	p, err := c.NewProducer(opts)
	if err != nil {
		t.Fatalf("NewProducer: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func value(i int) []byte { return fmt.Appendf(nil, "message-%06d", i) }

// records decodes every record the fake stored for a partition.
func records(t *testing.T, fb *fakeBroker, topic string, part int) []wire.Record {
	t.Helper()
	var comp wire.Compressor
	defer comp.Close()
	var out []wire.Record
	for _, raw := range fb.Batches(topic, part) {
		bt, err := wire.ParseBatch(raw, wire.DefaultLimits().MaxBatch)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := comp.Decompress(nil, &bt)
		if err != nil {
			t.Fatal(err)
		}
		it := wire.NewRecordIter(recs, bt.RecordCount, bt.BaseOffset, bt.FirstTimestamp)
		var r wire.Record
		for it.Next(&r) {
			r.Key = append([]byte(nil), r.Key...)
			r.Value = append([]byte(nil), r.Value...)
			r.Headers = append([]wire.RecordHeader(nil), r.Headers...)
			out = append(out, r)
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestProducerAcksInOrder(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("events", 1)
	c := dial(t, fb)
	p := newProducer(t, c, client.ProducerOptions{Topic: "events", BatchBytes: 4096})
	ctx := testCtx(t)
	const n = 2000
	log := newAckLog()
	m := client.Message{Headers: []wire.RecordHeader{{Name: []byte("h"), Value: []byte("v")}}}
	for i := range n {
		m.Value = value(i) // the buffer is the caller's again once Send returns
		if err := p.Send(ctx, &m, log.cb(i)); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	log.exactlyOnce(t, n)
	for i := range n {
		if a := log.acks[i][0]; a.Partition != 0 || a.Offset != int64(i) {
			t.Fatalf("message %d acked as %+v", i, a)
		}
		if log.order[i] != i {
			t.Fatalf("callback %d was for message %d", i, log.order[i])
		}
	}
	recs := records(t, fb, "events", 0)
	if len(recs) != n {
		t.Fatalf("fake stored %d records", len(recs))
	}
	for i, r := range recs {
		if r.Offset != int64(i) || !bytes.Equal(r.Value, value(i)) || len(r.Headers) != 1 || string(r.Headers[0].Name) != "h" {
			t.Fatalf("record %d = %+v", i, r)
		}
	}
	if got := len(fb.Batches("events", 0)); got < 2 || got > n/10 {
		t.Fatalf("%d messages in %d batches: batching is off", n, got)
	}
}

func TestProducerBatchBytesTrigger(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("events", 1)
	c := dial(t, fb)
	p := newProducer(t, c, client.ProducerOptions{Topic: "events", BatchBytes: 4096, Linger: time.Hour})
	ctx := testCtx(t)
	var acked atomic.Int64
	val := bytes.Repeat([]byte("x"), 1000)
	for i := range 10 {
		if err := p.Send(ctx, &client.Message{Value: val}, func(client.Ack, error) { acked.Add(1) }); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
	}
	// With an hour of linger, only full batches can have gone out.
	waitFor(t, func() bool { return acked.Load() >= 4 })
	for _, raw := range fb.Batches("events", 0) {
		if len(raw) > 4096 {
			t.Fatalf("batch of %d bytes over BatchBytes", len(raw))
		}
	}
	if acked.Load() == 10 {
		t.Fatal("the last, partial batch went out before its linger")
	}
}

// TestProducerLingerTrigger runs in a synctest bubble: the fake clock makes the three Sends
// fall inside one linger however slow the machine, and the linger exact.
func TestProducerLingerTrigger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := startPipeFake(t)
		fb.AddTopic("events", 1)
		c := dialPipe(t, fb)
		const linger = 30 * time.Millisecond
		p := newProducer(t, c, client.ProducerOptions{Topic: "events", Linger: linger})
		ctx := testCtx(t)
		var acked atomic.Int64
		start := time.Now()
		for i := range 3 {
			if err := p.Send(ctx, &client.Message{Value: value(i)}, func(client.Ack, error) { acked.Add(1) }); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(linger - time.Millisecond)
		synctest.Wait()
		if n := acked.Load(); n != 0 {
			t.Fatalf("%d messages acked by %v after Send, before their %v linger", n, time.Since(start), linger)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if n := acked.Load(); n != 3 {
			t.Fatalf("%d of 3 messages acked once their linger is over", n)
		}
		if got := len(fb.Batches("events", 0)); got != 1 {
			t.Fatalf("3 lingering messages went out in %d batches", got)
		}
	})
}

// TestProducerFullBatchLeavesAtOnce: a batch that reaches BatchBytes goes out without
// another Send, Flush or the linger (an hour here).
func TestProducerFullBatchLeavesAtOnce(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("events", 1)
	c := dial(t, fb)
	p := newProducer(t, c, client.ProducerOptions{Topic: "events", BatchBytes: 1024, Linger: time.Hour})
	var acked atomic.Int64
	if err := p.Send(testCtx(t), &client.Message{Value: bytes.Repeat([]byte("y"), 2000)}, func(client.Ack, error) { acked.Add(1) }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return acked.Load() == 1 })
}

// TestProducerLingerAfterFullBatches: the linger timer armed for a batch that then left
// full still sends the partial batch opened after it, once that one's linger is over. It runs
// in a synctest bubble, so that the linger is measured on the fake clock.
func TestProducerLingerAfterFullBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := startPipeFake(t)
		fb.AddTopic("events", 1)
		c := dialPipe(t, fb)
		const linger = 50 * time.Millisecond
		p := newProducer(t, c, client.ProducerOptions{Topic: "events", BatchBytes: 4096, Linger: linger})
		ctx := testCtx(t)
		var acked atomic.Int64
		var lastAck atomic.Int64 // unix ns
		val := bytes.Repeat([]byte("x"), 1000)
		for i := range 10 {
			if err := p.Send(ctx, &client.Message{Value: val}, func(client.Ack, error) {
				if acked.Add(1) == 10 {
					lastAck.Store(time.Now().UnixNano())
				}
			}); err != nil {
				t.Fatalf("Send %d: %v", i, err)
			}
		}
		sent := time.Now()
		synctest.Wait()
		if n := acked.Load(); n == 10 {
			t.Fatal("the partial batch left at once, before its linger")
		}
		time.Sleep(linger)
		synctest.Wait()
		if n := acked.Load(); n != 10 {
			t.Fatalf("%d of 10 messages acked once the linger of the last batch is over", n)
		}
		if d := time.Unix(0, lastAck.Load()).Sub(sent); d < linger/2 {
			t.Errorf("the partial batch left after %v, before its linger (%v)", d, linger)
		}
		if n := len(fb.Batches("events", 0)); n < 3 {
			t.Errorf("10 x 1000 B in %d batches of at most 4096 B", n)
		}
	})
}

func TestProducerBackpressure(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("events", 1)
	c := dial(t, fb)
	fb.set(func(fb *fakeBroker) { fb.holdAcks = true })
	p := newProducer(t, c, client.ProducerOptions{Topic: "events", BatchBytes: 4096, MaxInFlight: 2, Linger: -1})
	log := newAckLog()
	val := bytes.Repeat([]byte("y"), 1500)
	sent := 0
	for ; sent < 100; sent++ {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := p.Send(ctx, &client.Message{Value: val}, log.cb(sent))
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatalf("Send %d: %v", sent, err)
		}
	}
	// Two batches in flight of two messages each, plus a full open batch.
	if sent == 100 || sent > 8 {
		t.Fatalf("Send never blocked (%d sent with 2 batches in flight)", sent)
	}
	fb.ReleaseAcks()
	ctx := testCtx(t)
	for i := sent; i < sent+20; i++ {
		if err := p.Send(ctx, &client.Message{Value: val}, log.cb(i)); err != nil {
			t.Fatalf("Send %d after release: %v", i, err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	log.exactlyOnce(t, sent+20)
	for i := range sent + 20 {
		if a := log.acks[i][0]; a.Offset != int64(i) {
			t.Fatalf("message %d acked at %d", i, a.Offset)
		}
	}
}

func TestProducerBatchErrorFailsThatBatch(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("events", 1)
	c := dial(t, fb)
	fb.set(func(fb *fakeBroker) {
		fb.produceHook = func(n int, _ *wire.Produce) *wire.Error {
			if n == 2 {
				return &wire.Error{Code: wire.CodeCorruptBatch, Message: "bad batch"}
			}
			return nil
		}
	})
	p := newProducer(t, c, client.ProducerOptions{Topic: "events", Linger: time.Hour})
	ctx := testCtx(t)
	log := newAckLog()
	for batch := range 3 {
		for j := range 5 {
			i := batch*5 + j
			if err := p.Send(ctx, &client.Message{Value: value(i)}, log.cb(i)); err != nil {
				t.Fatal(err)
			}
		}
		err := p.Flush(ctx)
		if wantErr := batch == 1; wantErr != errors.Is(err, &wire.Error{Code: wire.CodeCorruptBatch}) {
			t.Fatalf("Flush after batch %d: %v", batch, err)
		}
		if batch == 1 && (!errors.Is(err, client.ErrNotStored) || errors.Is(err, client.ErrMaybeStored)) {
			t.Fatalf("Flush after the refused batch: %v, want ErrNotStored", err)
		}
	}
	log.exactlyOnce(t, 15)
	for i := range 15 {
		failed := len(log.errs[i]) == 1
		if failed != (i >= 5 && i < 10) {
			t.Fatalf("message %d: acks %v errs %v", i, log.acks[i], log.errs[i])
		}
	}
	// Offsets continue after the refused batch: nothing of it was stored.
	if a := log.acks[10][0]; a.Offset != 5 {
		t.Fatalf("first message after the refusal at offset %d, want 5", a.Offset)
	}
}

// TestProducerCloseUnblocksSend runs in a synctest bubble, where synctest.Wait tells when the
// Send loop is blocked.
func TestProducerCloseUnblocksSend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := startPipeFake(t)
		fb.AddTopic("events", 1)
		c := dialPipe(t, fb)
		fb.set(func(fb *fakeBroker) { fb.holdAcks = true })
		p := newProducer(t, c, client.ProducerOptions{Topic: "events", BatchBytes: 4096, MaxInFlight: 1, Linger: -1})
		log := newAckLog()
		val := bytes.Repeat([]byte("y"), 3000)
		errc := make(chan error, 1)
		go func() {
			for i := 0; ; i++ {
				if err := p.Send(context.Background(), &client.Message{Value: val}, log.cb(i)); err != nil {
					errc <- err
					return
				}
			}
		}()
		synctest.Wait() // Send blocks: the one in-flight slot waits for a held ack
		select {
		case err := <-errc:
			t.Fatalf("Send returned %v with no slot free", err)
		default:
		}
		c.Close()
		if err := <-errc; !errors.Is(err, client.ErrClosed) {
			t.Fatalf("blocked Send returned %v, want ErrClosed", err)
		}
		p.Close()
		p.Close()
		log.mu.Lock()
		n := len(log.order)
		log.mu.Unlock()
		log.exactlyOnce(t, n)
	})
}

func TestProducerKeyPartitioning(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("keyed", 4)
	c := dial(t, fb)
	p := newProducer(t, c, client.ProducerOptions{Topic: "keyed"})
	if p.Partitions() != 4 {
		t.Fatalf("Partitions = %d", p.Partitions())
	}
	ctx := testCtx(t)
	log := newAckLog()
	const n = 200
	for i := range n {
		key := fmt.Appendf(nil, "user-%d", i%17)
		if err := p.Send(ctx, &client.Message{Key: key, Value: value(i)}, log.cb(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	log.exactlyOnce(t, n)
	for i := range n {
		key := fmt.Appendf(nil, "user-%d", i%17)
		if got, want := log.acks[i][0].Partition, int32(wire.PartitionForKey(key, 4)); got != want {
			t.Fatalf("key %s went to partition %d, want %d", key, got, want)
		}
	}
	for part := range 4 {
		for _, r := range records(t, fb, "keyed", part) {
			if wire.PartitionForKey(r.Key, 4) != part {
				t.Fatalf("key %s stored in partition %d", r.Key, part)
			}
		}
	}
}

func TestProducerUnkeyedSpreads(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("spread", 3)
	c := dial(t, fb)
	p := newProducer(t, c, client.ProducerOptions{Topic: "spread", BatchBytes: 4096, Linger: -1})
	ctx := testCtx(t)
	val := bytes.Repeat([]byte("s"), 1000)
	for range 60 {
		if err := p.Send(ctx, &client.Message{Value: val}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for part := range 3 {
		if len(fb.Batches("spread", part)) == 0 {
			t.Fatalf("partition %d got nothing", part)
		}
	}
}

func TestProducerMessageTooLarge(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("events", 1)
	c := dial(t, fb)
	p := newProducer(t, c, client.ProducerOptions{Topic: "events"})
	big := make([]byte, c.Limits().MaxMessage+1)
	err := p.Send(testCtx(t), &client.Message{Value: big}, nil)
	if !errors.Is(err, &wire.Error{Code: wire.CodeMessageTooLarge}) {
		t.Fatalf("Send = %v, want MESSAGE_TOO_LARGE", err)
	}
	// The largest allowed message goes through, alone in its batch.
	ok := make([]byte, c.Limits().MaxMessage-64)
	if err := p.Send(testCtx(t), &client.Message{Value: ok}, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := p.Send(testCtx(t), &client.Message{Partition: 3, HasPartition: true}, nil); !errors.Is(err, &wire.Error{Code: wire.CodeUnknownPartition}) {
		t.Fatalf("Send to partition 3 of 1: %v", err)
	}
	if _, err := c.NewProducer(client.ProducerOptions{Topic: "missing"}); !errors.Is(err, &wire.Error{Code: wire.CodeUnknownTopic}) {
		t.Fatalf("NewProducer for a missing topic: %v", err)
	}
}

func TestProducerAckNone(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("events", 1)
	c := dial(t, fb)
	fb.set(func(fb *fakeBroker) {
		fb.produceHook = func(n int, _ *wire.Produce) *wire.Error {
			if n == 2 {
				return &wire.Error{Code: wire.CodeStorageFull}
			}
			return nil
		}
	})
	asyncErrs := make(chan error, 10)
	p := newProducer(t, c, client.ProducerOptions{Topic: "events", Acks: client.AckNone, Linger: time.Hour,
		OnError: func(err error) { asyncErrs <- err }})
	ctx := testCtx(t)
	log := newAckLog()
	var flushErrs []error
	for i := range 2 {
		if err := p.Send(ctx, &client.Message{Value: value(i)}, log.cb(i)); err != nil {
			t.Fatal(err)
		}
		flushErrs = append(flushErrs, p.Flush(ctx))
	}
	log.exactlyOnce(t, 2)
	if a := log.acks[1][0]; a.Offset != -1 {
		t.Fatalf("AckNone ack = %+v", a)
	}
	select {
	case err := <-asyncErrs:
		if !errors.Is(err, &wire.Error{Code: wire.CodeStorageFull}) {
			t.Fatalf("OnError got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("refusal of an AckNone batch not reported")
	}
	flushErrs = append(flushErrs, p.Flush(ctx))
	// The refusal is reported by exactly one Flush: the second or the third, depending on
	// whether it arrived before the second Flush returned.
	if flushErrs[0] != nil || (flushErrs[1] == nil) == (flushErrs[2] == nil) {
		t.Fatalf("Flush errors %v", flushErrs)
	}
	for _, err := range flushErrs {
		if err != nil && !errors.Is(err, &wire.Error{Code: wire.CodeStorageFull}) {
			t.Fatalf("Flush errors %v", flushErrs)
		}
	}
	if got := len(records(t, fb, "events", 0)); got != 1 {
		t.Fatalf("fake stored %d records", got)
	}
}

func TestProducerConcurrentSend(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("events", 3)
	c := dial(t, fb)
	p := newProducer(t, c, client.ProducerOptions{Topic: "events", BatchBytes: 8192, MaxInFlight: 3})
	ctx := testCtx(t)
	var wg sync.WaitGroup
	var acked, failed atomic.Int64
	for g := range 4 {
		wg.Go(func() {
			for i := range 500 {
				key := fmt.Appendf(nil, "%d-%d", g, i)
				err := p.Send(ctx, &client.Message{Key: key, Value: value(i)}, func(_ client.Ack, err error) {
					if err != nil {
						failed.Add(1)
					} else {
						acked.Add(1)
					}
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if acked.Load() != 2000 || failed.Load() != 0 {
		t.Fatalf("acked %d failed %d", acked.Load(), failed.Load())
	}
	total := 0
	for part := range 3 {
		total += len(records(t, fb, "events", part))
	}
	if total != 2000 {
		t.Fatalf("stored %d", total)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}
