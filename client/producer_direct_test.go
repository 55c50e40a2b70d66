package client_test

import (
	"bytes"
	"context"
	"net"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// goid is the calling goroutine's id, read from its stack header ("goroutine 12 [running]:").
// Tests only: it tells which goroutine wrote a frame.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, _ := strconv.ParseUint(string(b), 10, 64)
	return id
}

// writerConn notes the goroutine that writes each PRODUCE frame (a write starting with a
// PRODUCE header: the client flushes whole frames from an empty buffer, or writes one frame
// with writev).
type writerConn struct {
	net.Conn
	mu      sync.Mutex
	writers []uint64
}

func (w *writerConn) Write(b []byte) (int, error) {
	if h, ok := wire.PeekHeader(b); ok && h.Op == wire.OpProduce {
		w.mu.Lock()
		w.writers = append(w.writers, goid())
		w.mu.Unlock()
	}
	return w.Conn.Write(b)
}

func (w *writerConn) produceWriters() []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]uint64(nil), w.writers...)
}

// TestProducerLingerOffWritesOnSendersGoroutine: with linger off and an in-flight slot free,
// Send writes the batch itself, on the caller's goroutine, instead of waking the flusher to
// write it (a hand-off on every message's path to the broker). Every message is acknowledged.
func TestProducerLingerOffWritesOnSendersGoroutine(t *testing.T) {
	fb := startPipeFake(t)
	fb.AddTopic("events", 1)
	wc := &writerConn{Conn: fb.Pipe()}
	c, err := client.DialOver(testCtx(t), wc, client.Options{User: fakeUser, Password: fakePass, ClientName: t.Name()})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	p := newProducer(t, c, client.ProducerOptions{Topic: "events", Linger: -1, MaxInFlight: 4})
	ctx := testCtx(t)
	me := goid()
	const n = 20
	acked := make(chan error, 1)
	for i := 0; i < n; i++ {
		// One message in flight at a time: each Send finds a slot free. (Not Flush to
		// wait: Flush seals and writes on its caller's goroutine too.)
		if err := p.Send(ctx, &client.Message{Value: value(i)}, func(_ client.Ack, err error) { acked <- err }); err != nil {
			t.Fatal(err)
		}
		if err := <-acked; err != nil {
			t.Fatalf("ack %d: %v", i, err)
		}
	}
	w := wc.produceWriters()
	if len(w) != n {
		t.Fatalf("%d PRODUCE frames written, want %d", len(w), n)
	}
	for i, id := range w {
		if id != me {
			t.Fatalf("PRODUCE %d written by goroutine %d, not by the one calling Send (%d)", i, id, me)
		}
	}
	if got := len(records(t, fb, "events", 0)); got != n {
		t.Fatalf("%d records stored, want %d", got, n)
	}
}

// TestProducerLingerOffWaitsForSlot: with linger off and every in-flight slot taken, Send
// does not block: the messages wait in the open batch and leave together, in one batch, as
// soon as the slot frees, in order.
func TestProducerLingerOffWaitsForSlot(t *testing.T) {
	fb := startPipeFake(t)
	fb.AddTopic("events", 1)
	c := dialPipe(t, fb)
	p := newProducer(t, c, client.ProducerOptions{Topic: "events", Linger: -1, MaxInFlight: 1})
	ctx := testCtx(t)
	fb.set(func(fb *fakeBroker) { fb.holdAcks = true })
	send := func(i int) {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := p.Send(sctx, &client.Message{Value: value(i)}, nil); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
	}
	send(0) // written at once; takes the only slot, its ack held
	fb.waitUntil(func(fb *fakeBroker) bool { return len(fb.heldAcks) == 1 })
	for i := 1; i < 5; i++ {
		send(i) // no slot: they join the open batch
	}
	fb.set(func(fb *fakeBroker) { fb.holdAcks = false })
	fb.ReleaseAcks()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(fb.Batches("events", 0)); got != 2 {
		t.Fatalf("%d batches stored, want 2 (the first message, then the four that waited)", got)
	}
	recs := records(t, fb, "events", 0)
	if len(recs) != 5 {
		t.Fatalf("%d records stored, want 5", len(recs))
	}
	for i, r := range recs {
		if !bytes.Equal(r.Value, value(i)) {
			t.Fatalf("record %d is %q, want %q", i, r.Value, value(i))
		}
	}
}

// TestProducerLingerOffBatchesABacklog: with linger off and acknowledgements slow to come,
// Send writes a batch per message only while a few are in flight; after that the messages
// gather in one batch, which the flusher seals when it runs, rather than each becoming a
// batch of its own. In a synctest bubble the flusher runs only once the test goroutine waits.
func TestProducerLingerOffBatchesABacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := startPipeFake(t)
		fb.AddTopic("events", 1)
		c := dialPipe(t, fb)
		p := newProducer(t, c, client.ProducerOptions{Topic: "events", Linger: -1, MaxInFlight: 16})
		ctx := testCtx(t)
		fb.set(func(fb *fakeBroker) { fb.holdAcks = true })
		const n = 20
		for i := 0; i < n; i++ {
			if err := p.Send(ctx, &client.Message{Value: value(i)}, nil); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait() // the flusher has sealed and written what was left
		var held int
		fb.get(func(fb *fakeBroker) { held = len(fb.heldAcks) })
		if held >= n || held < 2 {
			t.Fatalf("%d PRODUCE frames for %d messages sent with acks held: want a few written at once, then the rest in one batch", held, n)
		}
		fb.ReleaseAcks()
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		recs := records(t, fb, "events", 0)
		if len(recs) != n {
			t.Fatalf("%d records stored, want %d", len(recs), n)
		}
		for i, r := range recs {
			if !bytes.Equal(r.Value, value(i)) {
				t.Fatalf("record %d is %q, want %q", i, r.Value, value(i))
			}
		}
		t.Logf("%d messages in %d batches", n, held)
	})
}
