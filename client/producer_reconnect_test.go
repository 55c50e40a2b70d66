package client_test

// The producer across connection losses and refusals, against the fake broker: re-sends in
// order and byte for byte, the in-flight bound per partition, retries, the delivery timeout,
// and what each failure says about whether the message may have been stored.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// produceLog records, per partition, how many PRODUCE requests the fake received.
type produceLog struct {
	mu    sync.Mutex
	parts map[int32]int
}

func (l *produceLog) hook(_ int, m *wire.Produce) *wire.Error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.parts == nil {
		l.parts = map[int32]int{}
	}
	l.parts[m.Partition]++
	return nil
}

// firstOccurrences returns, for the records stored in a partition, the message numbers in
// the order their first copy was stored, and how many copies were stored in all.
func firstOccurrences(t *testing.T, fb *fakeBroker, topic string, part int) (order []int, copies int) {
	t.Helper()
	seen := map[string]bool{}
	for _, r := range records(t, fb, topic, part) {
		copies++
		if seen[string(r.Value)] {
			continue
		}
		seen[string(r.Value)] = true
		var i int
		if _, err := fmt.Sscanf(string(r.Value), "message-%06d", &i); err != nil {
			t.Fatalf("stored value %q", r.Value)
		}
		order = append(order, i)
	}
	return order, copies
}

// The connection drops while batches of two partitions wait for their acks: the producer
// re-sends them, in order per partition and byte for byte, on the new connection. Every
// message is acknowledged once, at an offset that holds it; no more than
// MaxInFlightPerPartition batches of a partition were ever unanswered.
func TestProducerReconnectResends(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("events", 2)
	c := dial(t, fb)
	var plog produceLog
	fb.set(func(fb *fakeBroker) { fb.holdAcks, fb.produceHook = true, plog.hook })
	const perPart = 3
	// Without deduplication: every unanswered batch is stored twice, byte for byte
	// (TestProducerIdempotentReconnect has the same with it).
	p := newProducer(t, c, client.ProducerOptions{Topic: "events", BatchBytes: 2048, MaxInFlight: 8,
		MaxInFlightPerPartition: perPart, Linger: -1, DisableIdempotence: true})
	log := newAckLog()
	const n = 60
	val := bytes.Repeat([]byte("z"), 900)
	sendCtx, cancel := context.WithTimeout(testCtx(t), 200*time.Millisecond)
	sent := 0
	for ; sent < n; sent++ {
		m := client.Message{Value: append(value(sent), val...), Partition: int32(sent % 2), HasPartition: true}
		if err := p.Send(sendCtx, &m, log.cb(sent)); err != nil {
			break // all slots taken: the acks are held
		}
	}
	cancel()
	plog.mu.Lock()
	for part, k := range plog.parts {
		if k > perPart {
			t.Errorf("partition %d: %d PRODUCEs unanswered at once, bound %d", part, k, perPart)
		}
	}
	plog.mu.Unlock()
	before := [2][][]byte{fb.Batches("events", 0), fb.Batches("events", 1)}
	if len(before[0])+len(before[1]) == 0 {
		t.Fatal("nothing reached the fake before the drop")
	}
	fb.set(func(fb *fakeBroker) { fb.holdAcks, fb.heldAcks = false, nil }) // those answers are lost
	fb.DropConns()
	ctx := testCtx(t)
	for i := sent; i < n; i++ {
		m := client.Message{Value: append(value(i), val...), Partition: int32(i % 2), HasPartition: true}
		if err := p.Send(ctx, &m, log.cb(i)); err != nil {
			t.Fatalf("Send %d after the drop: %v", i, err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	log.exactlyOnce(t, n)
	for part := range 2 {
		recs := records(t, fb, "events", part)
		for i := range n {
			if i%2 != part {
				continue
			}
			a := log.acks[i]
			if len(a) != 1 || a[0].Partition != int32(part) || a[0].Offset < 0 || a[0].Offset >= int64(len(recs)) ||
				!bytes.HasPrefix(recs[a[0].Offset].Value, value(i)) {
				t.Fatalf("message %d: ack %v, errs %v", i, a, log.errs[i])
			}
		}
		order, copies := firstOccurrences(t, fb, "events", part)
		for j := 1; j < len(order); j++ {
			if order[j] <= order[j-1] {
				t.Fatalf("partition %d: message %d stored after %d", part, order[j], order[j-1])
			}
		}
		if len(order) != n/2 || copies <= len(order) {
			t.Errorf("partition %d: %d messages in %d copies; want %d, and the unanswered ones twice", part, len(order), copies, n/2)
		}
		// Every batch of the first connection was sent again with the same bytes.
		after := fb.Batches("events", part)[len(before[part]):]
		for _, b := range before[part] {
			found := false
			for _, a := range after {
				found = found || bytes.Equal(a[8:], b[8:]) // the base offset aside
			}
			if !found {
				t.Errorf("partition %d: a batch of the first connection was not re-sent byte for byte", part)
			}
		}
	}
}

// A batch refused with a code that passes (STORAGE_FULL) goes again after a backoff, with
// the batches after it, in order, once the refusals stop: every message is stored once, in
// order. It runs in a synctest bubble: the backoff is on the fake clock.
func TestProducerRetriesInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := startPipeFake(t)
		fb.AddTopic("events", 1)
		c := dialPipe(t, fb)
		full := true
		refused := 0
		fb.set(func(fb *fakeBroker) {
			fb.produceHook = func(int, *wire.Produce) *wire.Error {
				if full {
					refused++
					return &wire.Error{Code: wire.CodeStorageFull, Message: "disk full"}
				}
				return nil
			}
		})
		p := newProducer(t, c, client.ProducerOptions{Topic: "events", BatchBytes: 1024, Linger: -1})
		log := newAckLog()
		const n = 40
		val := bytes.Repeat([]byte("r"), 300)
		go func() {
			time.Sleep(3 * time.Second) // a few retries, all refused; Send blocks meanwhile
			fb.set(func(*fakeBroker) { full = false })
		}()
		for i := range n {
			if err := p.Send(testCtx(t), &client.Message{Value: append(value(i), val...)}, log.cb(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Flush(testCtx(t)); err != nil {
			t.Fatalf("Flush: %v", err)
		}
		log.exactlyOnce(t, n)
		if len(log.errs) != 0 {
			t.Fatalf("errors: %v", log.errs)
		}
		order, copies := firstOccurrences(t, fb, "events", 0)
		if len(order) != n || copies != n {
			t.Fatalf("%d messages in %d copies, want %d once each", len(order), copies, n)
		}
		for i, m := range order {
			if m != i || log.acks[i][0].Offset != int64(i) {
				t.Fatalf("stored order %v, acks %v", order, log.acks)
			}
		}
		if refused < 3 {
			t.Errorf("%d refusals: the retries did not happen while the disk was full", refused)
		}
	})
}

// A refused batch that a later batch of its partition overtook (stored while the refused one
// waited) fails instead of being retried out of order: not stored, with its code.
func TestProducerRefusedBatchOvertakenFails(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("events", 1)
	c := dial(t, fb)
	fb.set(func(fb *fakeBroker) {
		fb.holdAcks = true
		fb.produceHook = func(n int, _ *wire.Produce) *wire.Error {
			if n == 1 {
				return &wire.Error{Code: wire.CodeStorageFull}
			}
			return nil
		}
	})
	// Without deduplication (with it, the broker stores nothing after a refused batch).
	p := newProducer(t, c, client.ProducerOptions{Topic: "events", BatchBytes: 1024, Linger: -1, DisableIdempotence: true})
	log := newAckLog()
	ctx := testCtx(t)
	val := bytes.Repeat([]byte("o"), 1100) // one message fills a batch
	for i := range 2 {
		if err := p.Send(ctx, &client.Message{Value: val}, log.cb(i)); err != nil {
			t.Fatal(err)
		}
	}
	fb.waitUntil(func(fb *fakeBroker) bool { return len(fb.heldAcks) == 2 }) // both in flight
	fb.ReleaseAcks()
	err := p.Flush(ctx)
	log.exactlyOnce(t, 2)
	var pe *client.ProduceError
	if e := log.errs[0]; len(e) != 1 || !errors.As(e[0], &pe) || pe.MaybeStored() || !errors.Is(e[0], &wire.Error{Code: wire.CodeStorageFull}) {
		t.Fatalf("overtaken batch: %v, want a not-stored STORAGE_FULL", e)
	}
	if a := log.acks[1]; len(a) != 1 || a[0].Offset != 0 {
		t.Fatalf("the later batch: %v %v", a, log.errs[1])
	}
	if !errors.Is(err, client.ErrNotStored) {
		t.Fatalf("Flush = %v", err)
	}
	if got := len(fb.Batches("events", 0)); got != 1 {
		t.Fatalf("%d batches stored, want 1 (no retry)", got)
	}
}

// TestProducerRefusalCodes is the table of what each broker code does to a batch: retried
// (and then acknowledged), or failed at once, saying whether it may have been stored. Codes
// that close the connection are re-sent after the reconnect.
func TestProducerRefusalCodes(t *testing.T) {
	type outcome uint8
	const (
		retried   outcome = iota // acknowledged after a re-send
		notStored                // failed: not stored
		maybe                    // failed: may have been stored
	)
	want := map[wire.Code]outcome{
		wire.CodeStorageFull: retried, wire.CodeResourceLimit: retried, wire.CodeStorageError: retried,
		wire.CodeInternal: maybe, wire.Code(999): maybe,
		// The idempotent producer bumps its epoch and renumbers the batch (PROTOCOL.md 15).
		wire.CodeUnknownProducer: retried,
		// The partition's leader is looked up again and the batch goes there (PROTOCOL.md
		// 16): nothing was done, or (idempotent) a stored batch is answered as such.
		wire.CodeNotLeader: retried, wire.CodeReplicationTimeout: retried,
	}
	codes := append(wire.Codes(), 999)
	for _, code := range codes {
		if _, ok := want[code]; !ok {
			want[code] = notStored
			if code.Fatal() {
				want[code] = retried // the connection closes: re-sent after the reconnect
			}
		}
	}
	for _, code := range codes {
		t.Run(code.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fb := startPipeFake(t)
				fb.AddTopic("events", 1)
				c := dialPipe(t, fb)
				fb.set(func(fb *fakeBroker) {
					fb.produceHook = func(n int, _ *wire.Produce) *wire.Error {
						if n == 1 {
							return &wire.Error{Code: code, Message: "refused"}
						}
						return nil
					}
				})
				p := newProducer(t, c, client.ProducerOptions{Topic: "events"})
				var got error
				var ack client.Ack
				if err := p.Send(testCtx(t), &client.Message{Value: []byte("v")}, func(a client.Ack, err error) { ack, got = a, err }); err != nil {
					t.Fatal(err)
				}
				flushErr := p.Flush(testCtx(t))
				var produces int
				fb.get(func(fb *fakeBroker) { produces = fb.produces })
				var pe *client.ProduceError
				switch want[code] {
				case retried:
					if got != nil || flushErr != nil || ack.Offset != 0 || produces != 2 {
						t.Fatalf("ack %+v, err %v, Flush %v, %d PRODUCEs; want acknowledged after one re-send", ack, got, flushErr, produces)
					}
				case notStored, maybe:
					if !errors.As(got, &pe) || !errors.Is(got, &wire.Error{Code: code}) || produces != 1 {
						t.Fatalf("err %v after %d PRODUCEs, want a *ProduceError with %v and no re-send", got, produces, code)
					}
					if pe.MaybeStored() != (want[code] == maybe) || errors.Is(got, client.ErrMaybeStored) != pe.MaybeStored() ||
						errors.Is(got, client.ErrNotStored) == pe.MaybeStored() {
						t.Fatalf("%v: MaybeStored %v, want %v", got, pe.MaybeStored(), want[code] == maybe)
					}
				}
			})
		})
	}
}

// TestProducerFailureSaysWhetherStored runs in synctest bubbles: a message fails with the
// delivery timeout while the broker is unreachable, and the error says whether it may have
// been stored, by what became of its batch: never sent, sent without an answer, or cut off
// by a broker shutdown (which answers everything it stored first).
func TestProducerFailureSaysWhetherStored(t *testing.T) {
	cases := []struct {
		name  string
		setup func(fb *fakeBroker, send func())
		maybe bool
	}{
		{"never sent", func(fb *fakeBroker, send func()) {
			fb.set(func(fb *fakeBroker) { fb.refuse = true })
			fb.DropConns()
			synctest.Wait()
			send()
		}, false},
		{"sent, no answer", func(fb *fakeBroker, send func()) {
			fb.set(func(fb *fakeBroker) { fb.holdAcks = true })
			send()
			fb.waitUntil(func(fb *fakeBroker) bool { return len(fb.heldAcks) == 1 })
			fb.set(func(fb *fakeBroker) { fb.refuse, fb.heldAcks = true, nil })
			fb.DropConns()
		}, true},
		{"shutting down", func(fb *fakeBroker, send func()) {
			fb.set(func(fb *fakeBroker) {
				fb.produceHook = func(int, *wire.Produce) *wire.Error {
					fb.refuse = true // the hook runs under fb.mu
					return &wire.Error{Code: wire.CodeShuttingDown, Message: "batch not stored"}
				}
			})
			send()
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fb := startPipeFake(t)
				fb.AddTopic("events", 1)
				c := dialPipe(t, fb)
				p := newProducer(t, c, client.ProducerOptions{Topic: "events", DeliveryTimeout: 10 * time.Second})
				errc := make(chan error, 1)
				start := time.Now()
				tc.setup(fb, func() {
					if err := p.Send(testCtx(t), &client.Message{Value: []byte("v")}, func(_ client.Ack, err error) { errc <- err }); err != nil {
						t.Fatal(err)
					}
				})
				err := <-errc
				var pe *client.ProduceError
				if !errors.As(err, &pe) || !errors.Is(err, client.ErrDeliveryTimeout) || pe.MaybeStored() != tc.maybe {
					t.Fatalf("callback: %v, want a delivery timeout with MaybeStored %v", err, tc.maybe)
				}
				if d := time.Since(start); d < 10*time.Second || d > 11*time.Second {
					t.Errorf("failed after %v, DeliveryTimeout 10s", d)
				}
				if err := p.Flush(testCtx(t)); !errors.Is(err, client.ErrDeliveryTimeout) {
					t.Errorf("Flush = %v", err)
				}
				var stored int
				fb.get(func(fb *fakeBroker) { stored = int(fb.topics["events"].next[0]) })
				if !tc.maybe && stored != 0 {
					t.Errorf("said not stored, but the fake stored %d", stored)
				}
			})
		})
	}
}

// A batch in flight on a working connection that gets no answer times out too, with the
// later batches of its partition; the other partition is not held back.
func TestProducerDeliveryTimeoutInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := startPipeFake(t)
		fb.AddTopic("events", 2)
		c := dialPipe(t, fb)
		fb.set(func(fb *fakeBroker) {
			fb.produceHook = func(_ int, m *wire.Produce) *wire.Error {
				fb.holdAcks = m.Partition == 0 // the hook runs under fb.mu: partition 0 is never answered
				return nil
			}
		})
		p := newProducer(t, c, client.ProducerOptions{Topic: "events", DeliveryTimeout: 10 * time.Second, Linger: -1, BatchBytes: 1024})
		log := newAckLog()
		val := bytes.Repeat([]byte("t"), 1100)
		for i := range 4 {
			if err := p.Send(testCtx(t), &client.Message{Value: val, Partition: int32(i / 2), HasPartition: true}, log.cb(i)); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		if err := p.Flush(testCtx(t)); !errors.Is(err, client.ErrDeliveryTimeout) || !errors.Is(err, client.ErrMaybeStored) {
			t.Fatalf("Flush = %v, want a delivery timeout of a message that may be stored", err)
		}
		log.exactlyOnce(t, 4)
		if len(log.errs[0]) != 1 || len(log.errs[1]) != 1 || len(log.acks[2]) != 1 || len(log.acks[3]) != 1 {
			t.Fatalf("acks %v errs %v: want partition 0 timed out, partition 1 acknowledged", log.acks, log.errs)
		}
	})
}

// Close while the producer waits for a reconnect: Send keeps taking messages up to the
// in-flight bound and then blocks; Close returns after its RequestTimeout-bounded flush, and
// every message fails with ErrClosed, saying whether it may have been stored.
func TestProducerCloseDuringReconnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := startPipeFake(t)
		fb.AddTopic("events", 1)
		c, err := client.DialFunc(testCtx(t), fb.DialPipe, client.Options{User: fakeUser, Password: fakePass, RequestTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fb.set(func(fb *fakeBroker) { fb.holdAcks = true })
		p, err := c.NewProducer(client.ProducerOptions{Topic: "events", MaxInFlight: 3, BatchBytes: 1024, Linger: -1})
		if err != nil {
			t.Fatal(err)
		}
		log := newAckLog()
		val := bytes.Repeat([]byte("c"), 1100)
		if err := p.Send(testCtx(t), &client.Message{Value: val}, log.cb(0)); err != nil {
			t.Fatal(err)
		}
		fb.waitUntil(func(fb *fakeBroker) bool { return len(fb.heldAcks) == 1 }) // in flight
		fb.set(func(fb *fakeBroker) { fb.refuse, fb.heldAcks = true, nil })
		fb.DropConns()
		synctest.Wait()
		sent := 1
		for ; sent < 10; sent++ {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := p.Send(ctx, &client.Message{Value: val}, log.cb(sent))
			cancel()
			if errors.Is(err, context.DeadlineExceeded) {
				break
			}
			if err != nil {
				t.Fatalf("Send %d while reconnecting: %v", sent, err)
			}
		}
		if sent != 4 { // 3 sealed batches, plus one open batch
			t.Fatalf("Send took %d messages while reconnecting, want 4 (MaxInFlight 3 + one open batch)", sent)
		}
		start := time.Now()
		if err := p.Close(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close = %v, want the flush's deadline", err)
		}
		if d := time.Since(start); d != 5*time.Second {
			t.Errorf("Close took %v, want RequestTimeout", d)
		}
		log.exactlyOnce(t, sent)
		for i := range sent {
			var pe *client.ProduceError
			if len(log.errs[i]) != 1 || !errors.As(log.errs[i][0], &pe) || !errors.Is(pe, client.ErrClosed) || pe.MaybeStored() != (i == 0) {
				t.Fatalf("message %d: %v, want ErrClosed, maybe stored only for the one in flight", i, log.errs[i])
			}
		}
		if err := p.Send(testCtx(t), &client.Message{Value: val}, nil); !errors.Is(err, client.ErrClosed) {
			t.Fatalf("Send after Close: %v", err)
		}
	})
}
