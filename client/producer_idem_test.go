package client_test

// The idempotent producer against the fake broker, which deduplicates as PROTOCOL.md section
// 15 says: one INIT_PRODUCER, batches numbered per partition, re-sends after a reconnect
// answered with the original offsets, the window capping MaxInFlightPerPartition, and the
// epoch bump after UNKNOWN_PRODUCER or a gap.

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// batchHeaders returns the headers of the batches the fake stored in a partition.
func batchHeaders(t *testing.T, fb *fakeBroker, topic string, part int) []wire.BatchHeader {
	t.Helper()
	var out []wire.BatchHeader
	for _, raw := range fb.Batches(topic, part) {
		bt, err := wire.ParseBatch(raw, wire.DefaultLimits().MaxBatch)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, bt.BatchHeader)
	}
	return out
}

// checkNumbering fails unless the stored batches of a partition are format 2 with producer id
// and epochs as given, each epoch's batches numbered from 0 without a gap.
func checkNumbering(t *testing.T, hs []wire.BatchHeader, id int64) {
	t.Helper()
	seq, epoch := int32(0), int16(-1)
	for i, h := range hs {
		if h.Magic != wire.BatchMagic2 || h.ProducerID != id {
			t.Fatalf("batch %d: magic %d producer %d, want magic 2 producer %d", i, h.Magic, h.ProducerID, id)
		}
		if h.ProducerEpoch != epoch {
			if h.ProducerEpoch < epoch {
				t.Fatalf("batch %d: epoch %d after %d", i, h.ProducerEpoch, epoch)
			}
			epoch, seq = h.ProducerEpoch, 0
		}
		if h.BaseSequence != seq {
			t.Fatalf("batch %d (epoch %d): base sequence %d, want %d", i, epoch, h.BaseSequence, seq)
		}
		seq = wire.NextSequence(seq, h.RecordCount)
	}
}

// The connection drops while batches of two partitions wait for their acks: the re-sends are
// answered with the original offsets, so every message is stored once, and the producer kept
// its id and epoch (one INIT_PRODUCER).
func TestProducerIdempotentReconnect(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("events", 2)
	c := dial(t, fb)
	fb.set(func(fb *fakeBroker) { fb.holdAcks = true })
	p := newProducer(t, c, client.ProducerOptions{Topic: "events", BatchBytes: 2048, MaxInFlight: 8,
		MaxInFlightPerPartition: 3, Linger: -1})
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
	if len(fb.Batches("events", 0))+len(fb.Batches("events", 1)) == 0 {
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
	var inits []wire.InitProducer
	fb.get(func(fb *fakeBroker) { inits = fb.inits })
	if len(inits) != 1 || inits[0].PreviousID != wire.NoProducer {
		t.Fatalf("INIT_PRODUCERs %v, want one for a new producer", inits)
	}
	for part := range 2 {
		recs := records(t, fb, "events", part)
		order, copies := firstOccurrences(t, fb, "events", part)
		if copies != n/2 || len(order) != n/2 {
			t.Fatalf("partition %d: %d copies of %d messages, want %d once each", part, copies, len(order), n/2)
		}
		for j := 1; j < len(order); j++ {
			if order[j] <= order[j-1] {
				t.Fatalf("partition %d: message %d stored after %d", part, order[j], order[j-1])
			}
		}
		for i := part; i < n; i += 2 {
			a := log.acks[i]
			if len(a) != 1 || a[0].Partition != int32(part) || a[0].Offset < 0 || a[0].Offset >= int64(len(recs)) ||
				!bytes.HasPrefix(recs[a[0].Offset].Value, value(i)) {
				t.Fatalf("message %d: ack %v, errs %v", i, a, log.errs[i])
			}
		}
		hs := batchHeaders(t, fb, "events", part)
		checkNumbering(t, hs, 1)
		if hs[len(hs)-1].ProducerEpoch != 0 {
			t.Fatalf("partition %d: epoch %d, want 0 (a reconnect keeps it)", part, hs[len(hs)-1].ProducerEpoch)
		}
	}
}

// The broker's window caps MaxInFlightPerPartition: no more than window batches of a
// partition are ever unanswered.
func TestProducerWindowCapsInFlight(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("events", 1)
	c := dial(t, fb)
	var plog produceLog
	fb.set(func(fb *fakeBroker) { fb.window, fb.holdAcks, fb.produceHook = 3, true, plog.hook })
	p := newProducer(t, c, client.ProducerOptions{Topic: "events", BatchBytes: 1024, MaxInFlight: 16,
		MaxInFlightPerPartition: 8, Linger: -1})
	val := bytes.Repeat([]byte("w"), 1100) // one message fills a batch
	sendCtx, cancel := context.WithTimeout(testCtx(t), 200*time.Millisecond)
	defer cancel()
	taken := 0
	for ; taken < 16; taken++ {
		if err := p.Send(sendCtx, &client.Message{Value: val}, nil); err != nil {
			break
		}
	}
	fb.waitUntil(func(fb *fakeBroker) bool { return len(fb.heldAcks) == 3 })
	plog.mu.Lock()
	got := plog.parts[0]
	plog.mu.Unlock()
	if got != 3 || taken > 4 { // 3 sealed in flight, and one open batch
		t.Fatalf("%d PRODUCEs unanswered, %d messages taken; want 3 (the window) and at most 4", got, taken)
	}
	fb.ReleaseAcks()
	if err := p.Flush(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// The broker forgets the producer (a transient topic's restart): the next batch is answered
// UNKNOWN_PRODUCER, and the producer bumps its epoch and stores it from sequence 0.
func TestProducerUnknownProducerBumpsEpoch(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("events", 1)
	c := dial(t, fb)
	p := newProducer(t, c, client.ProducerOptions{Topic: "events", Linger: -1})
	log := newAckLog()
	ctx := testCtx(t)
	for i := range 3 {
		if err := p.Send(ctx, &client.Message{Value: value(i)}, log.cb(i)); err != nil {
			t.Fatal(err)
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			fb.ForgetProducers()
		}
	}
	log.exactlyOnce(t, 3)
	for i := range 3 {
		if a := log.acks[i]; len(a) != 1 || a[0].Offset != int64(i) {
			t.Fatalf("message %d: %v %v", i, a, log.errs[i])
		}
	}
	hs := batchHeaders(t, fb, "events", 0)
	checkNumbering(t, hs, 1)
	if len(hs) != 3 || hs[2].ProducerEpoch != 1 || hs[2].BaseSequence != 0 {
		t.Fatalf("stored batches %+v, want the third at epoch 1, sequence 0", hs)
	}
	var inits []wire.InitProducer
	fb.get(func(fb *fakeBroker) { inits = fb.inits })
	if len(inits) != 2 || inits[1] != (wire.InitProducer{PreviousID: 1, PreviousEpoch: 0}) {
		t.Fatalf("INIT_PRODUCERs %v, want a new producer, then a bump of 1/0", inits)
	}
}

// A batch refused for good leaves a gap: the batch behind it, already in flight, is refused
// too, renumbered under a new epoch and stored; the refused one fails as not stored.
func TestProducerGapRenumbers(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("events", 1)
	c := dial(t, fb)
	fb.set(func(fb *fakeBroker) {
		fb.holdAcks = true
		fb.produceHook = func(n int, _ *wire.Produce) *wire.Error {
			if n == 1 {
				return &wire.Error{Code: wire.CodeMessageTooLarge, Message: "refused"}
			}
			return nil
		}
	})
	p := newProducer(t, c, client.ProducerOptions{Topic: "events", BatchBytes: 1024, Linger: -1})
	log := newAckLog()
	ctx := testCtx(t)
	val := bytes.Repeat([]byte("g"), 1100) // one message fills a batch
	for i := range 3 {
		if err := p.Send(ctx, &client.Message{Value: append(value(i), val...)}, log.cb(i)); err != nil {
			t.Fatal(err)
		}
	}
	fb.waitUntil(func(fb *fakeBroker) bool { return len(fb.heldAcks) == 3 })
	fb.set(func(fb *fakeBroker) { fb.holdAcks = false })
	fb.ReleaseAcks()
	err := p.Flush(ctx)
	if !errors.Is(err, client.ErrNotStored) || !errors.Is(err, &wire.Error{Code: wire.CodeMessageTooLarge}) {
		t.Fatalf("Flush = %v, want the refusal, not stored", err)
	}
	log.exactlyOnce(t, 3)
	for i := 1; i < 3; i++ {
		if a := log.acks[i]; len(a) != 1 || a[0].Offset != int64(i-1) {
			t.Fatalf("message %d: %v %v", i, a, log.errs[i])
		}
	}
	hs := batchHeaders(t, fb, "events", 0)
	checkNumbering(t, hs, 1)
	if len(hs) != 2 || hs[0].ProducerEpoch != 1 {
		t.Fatalf("stored %+v, want 2 batches at epoch 1", hs)
	}
}

// PRODUCER_FENCED stops the producer: the batch fails as not stored, and Send refuses.
func TestProducerFenced(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("events", 1)
	c := dial(t, fb)
	fb.set(func(fb *fakeBroker) {
		fb.produceHook = func(int, *wire.Produce) *wire.Error { return &wire.Error{Code: wire.CodeProducerFenced} }
	})
	p := newProducer(t, c, client.ProducerOptions{Topic: "events", Linger: -1})
	log := newAckLog()
	ctx := testCtx(t)
	if err := p.Send(ctx, &client.Message{Value: value(0)}, log.cb(0)); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); !errors.Is(err, client.ErrNotStored) || !errors.Is(err, &wire.Error{Code: wire.CodeProducerFenced}) {
		t.Fatalf("Flush = %v", err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		err := p.Send(ctx, &client.Message{Value: value(1)}, nil)
		if errors.Is(err, &wire.Error{Code: wire.CodeProducerFenced}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Send after the fence: %v", err)
		}
		if err == nil {
			_ = p.Flush(ctx) // taken before the flusher stopped the producer: fails fenced
		}
	}
}

// AckNone and DisableIdempotence send format-1 batches and ask no INIT_PRODUCER; a broker
// without INIT_PRODUCER gets the same.
func TestProducerNotIdempotent(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   client.ProducerOptions
		noIdem bool
	}{
		{"acks none", client.ProducerOptions{Acks: client.AckNone}, false},
		{"disabled", client.ProducerOptions{DisableIdempotence: true}, false},
		{"old broker", client.ProducerOptions{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fb := startFake(t)
			fb.AddTopic("events", 1)
			fb.set(func(fb *fakeBroker) { fb.noIdem = tc.noIdem })
			c := dial(t, fb)
			tc.opts.Topic = "events"
			p := newProducer(t, c, tc.opts)
			ctx := testCtx(t)
			if err := p.Send(ctx, &client.Message{Value: value(0)}, nil); err != nil {
				t.Fatal(err)
			}
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			fb.waitUntil(func(fb *fakeBroker) bool { return len(fb.topics["events"].batches[0]) == 1 })
			hs := batchHeaders(t, fb, "events", 0)
			var inits int
			fb.get(func(fb *fakeBroker) { inits = len(fb.inits) })
			if hs[0].Magic != wire.BatchMagic || inits != 0 {
				t.Fatalf("magic %d, %d INIT_PRODUCERs; want magic 1 and none", hs[0].Magic, inits)
			}
		})
	}
}
