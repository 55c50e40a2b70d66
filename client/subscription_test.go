package client_test

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

// produce sends n messages with keys key-(i%keys) and returns, per partition, the values in
// offset order.
func produce(t *testing.T, c *client.Conn, opts client.ProducerOptions, n, keys int) map[int32][][]byte {
	t.Helper()
	p := newProducer(t, c, opts)
	ctx := testCtx(t)
	var mu sync.Mutex
	out := make(map[int32][][]byte)
	for i := range n {
		v := fmt.Appendf(nil, "value-%06d-%s", i, bytes.Repeat([]byte("abc"), 20))
		m := client.Message{Key: fmt.Appendf(nil, "key-%d", i%keys), Value: v}
		err := p.Send(ctx, &m, func(a client.Ack, err error) {
			if err != nil {
				t.Errorf("message %d: %v", i, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if int64(len(out[a.Partition])) != a.Offset {
				t.Errorf("partition %d: ack offset %d after %d messages", a.Partition, a.Offset, len(out[a.Partition]))
			}
			out[a.Partition] = append(out[a.Partition], v)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return out
}

// consume reads n messages and checks them against want, partition by partition.
func consume(t *testing.T, s *client.Subscription, want map[int32][][]byte, n int) {
	t.Helper()
	next := make(map[int32]int64)
	got := 0
	errDone := errors.New("done")
	err := s.Each(testCtx(t), func(m *client.Received) error {
		off := next[m.Partition]
		if m.Offset != off {
			return fmt.Errorf("partition %d: offset %d, want %d", m.Partition, m.Offset, off)
		}
		if w := want[m.Partition][off]; !bytes.Equal(m.Value, w) {
			return fmt.Errorf("partition %d offset %d: value %q, want %q", m.Partition, off, m.Value, w)
		}
		next[m.Partition]++
		got++
		if got == n {
			return errDone
		}
		return nil
	})
	if err != errDone {
		t.Fatalf("Each after %d messages: %v", got, err)
	}
}

func TestSubscribeReceivesAllInOrder(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("events", 3)
	c := dial(t, fb)
	const n = 3000
	want := produce(t, c, client.ProducerOptions{Topic: "events", BatchBytes: 4096}, n, 50)
	const window = 16 << 10
	s, err := c.Subscribe(testCtx(t), client.SubscribeOptions{Topic: "events", Window: window})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Partitions() != 3 {
		t.Fatalf("Partitions = %d", s.Partitions())
	}
	consume(t, s, want, n)
	var violation string
	var credits int
	fb.get(func(fb *fakeBroker) { violation, credits = fb.violation, fb.credits })
	if violation != "" {
		t.Fatalf("client exceeded its window: %s", violation)
	}
	// ~200 KiB through a 16 KiB window needs many grants, each of at least half the window.
	if credits < 10 {
		t.Fatalf("only %d CREDIT frames", credits)
	}
}

func TestSubscribeSinglePartition(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("events", 2)
	c := dial(t, fb)
	want := produce(t, c, client.ProducerOptions{Topic: "events"}, 100, 10)
	s, err := c.Subscribe(testCtx(t), client.SubscribeOptions{Topic: "events", Partition: 1, HasPartition: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Partitions() != 1 {
		t.Fatalf("Partitions = %d", s.Partitions())
	}
	consume(t, s, map[int32][][]byte{1: want[1]}, len(want[1]))
}

// TestSubscribeWindowBoundsMemory runs in a synctest bubble: synctest.Wait returns once the
// fake has pushed all the window lets it, not after a guessed sleep.
func TestSubscribeWindowBoundsMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := startPipeFake(t)
		fb.AddTopic("events", 1)
		c := dialPipe(t, fb)
		produce(t, c, client.ProducerOptions{Topic: "events", BatchBytes: 4096}, 2000, 1)
		const window = 8 << 10
		s, err := c.Subscribe(testCtx(t), client.SubscribeOptions{Topic: "events", Window: window})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		synctest.Wait() // nobody consumes; the fake is out of credit
		var delivered int64
		fb.get(func(fb *fakeBroker) { delivered = fb.delivered })
		if delivered == 0 || delivered > window+4096 {
			t.Fatalf("%d bytes pushed to a consumer that read nothing, window %d", delivered, window)
		}
	})
}

func TestSubscribeCompression(t *testing.T) {
	for _, codec := range []wire.Codec{wire.CodecS2, wire.CodecZstd} {
		t.Run(codec.String(), func(t *testing.T) {
			fb := startFake(t)
			fb.AddTopic("events", 1)
			c := dial(t, fb)
			want := produce(t, c, client.ProducerOptions{Topic: "events", Compression: codec}, 500, 1)
			for _, raw := range fb.Batches("events", 0) {
				bt, err := wire.ParseBatch(raw, c.Limits().MaxBatch)
				if err != nil {
					t.Fatal(err)
				}
				if bt.Codec() != codec || len(bt.Records) >= int(bt.RecordsSize) {
					t.Fatalf("stored batch codec %v, %d bytes for %d", bt.Codec(), len(bt.Records), bt.RecordsSize)
				}
			}
			s, err := c.Subscribe(testCtx(t), client.SubscribeOptions{Topic: "events"})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			consume(t, s, want, 500)
		})
	}
}

func TestSubscribeDropped(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("events", 1)
	c := dial(t, fb)
	want := produce(t, c, client.ProducerOptions{Topic: "events"}, 10, 1)
	fb.set(func(fb *fakeBroker) { fb.nextDropped = 7 })
	s, err := c.Subscribe(testCtx(t), client.SubscribeOptions{Topic: "events"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var dropped []uint64
	n := 0
	stop := errors.New("stop")
	err = s.Each(testCtx(t), func(m *client.Received) error {
		dropped = append(dropped, m.Dropped)
		if n++; n == len(want[0]) {
			return stop
		}
		return nil
	})
	if err != stop {
		t.Fatal(err)
	}
	if dropped[0] != 7 || s.Dropped() != 7 {
		t.Fatalf("Dropped per message %v, total %d; want 7 on the first", dropped, s.Dropped())
	}
	for _, d := range dropped[1:] {
		if d != 0 {
			t.Fatalf("Dropped per message %v", dropped)
		}
	}
}

func TestSubscribeMessagesChannel(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("events", 1)
	c := dial(t, fb)
	want := produce(t, c, client.ProducerOptions{Topic: "events", BatchBytes: 4096}, 300, 1)
	s, err := c.Subscribe(testCtx(t), client.SubscribeOptions{Topic: "events", Buffer: 4})
	if err != nil {
		t.Fatal(err)
	}
	var got []client.Received
	for m := range s.Messages() {
		got = append(got, m)
		if len(got) == 300 {
			break
		}
	}
	for i, m := range got { // copies stay valid after later batches reuse the buffers
		if m.Offset != int64(i) || !bytes.Equal(m.Value, want[0][i]) || m.Topic != "events" {
			t.Fatalf("message %d = %+v", i, m)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range s.Messages() { // drains and ends
	}
	if !errors.Is(s.Err(), client.ErrClosed) {
		t.Fatalf("Err = %v", s.Err())
	}
}

func TestEachResumesAfterHandlerError(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("events", 1)
	c := dial(t, fb)
	want := produce(t, c, client.ProducerOptions{Topic: "events"}, 20, 1)
	s, err := c.Subscribe(testCtx(t), client.SubscribeOptions{Topic: "events"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stop := errors.New("stop")
	var offsets []int64
	for range 2 {
		n := 0
		err := s.Each(testCtx(t), func(m *client.Received) error {
			offsets = append(offsets, m.Offset)
			if n++; n == 10 {
				return stop
			}
			return nil
		})
		if err != stop {
			t.Fatal(err)
		}
	}
	for i, o := range offsets {
		if o != int64(i) {
			t.Fatalf("offsets %v", offsets)
		}
	}
	_ = want
}

// TestSubscriptionCloseUnblocks runs in a synctest bubble, where synctest.Wait tells when
// both Each calls are blocked.
func TestSubscriptionCloseUnblocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := startPipeFake(t)
		fb.AddTopic("events", 1)
		c := dialPipe(t, fb)
		s1, err := c.Subscribe(testCtx(t), client.SubscribeOptions{Topic: "events"})
		if err != nil {
			t.Fatal(err)
		}
		s2, err := c.Subscribe(testCtx(t), client.SubscribeOptions{Topic: "events"})
		if err != nil {
			t.Fatal(err)
		}
		each := func(s *client.Subscription) chan error {
			ch := make(chan error, 1)
			go func() { ch <- s.Each(context.Background(), func(*client.Received) error { return nil }) }()
			return ch
		}
		e1, e2 := each(s1), each(s2)
		synctest.Wait() // both Each calls wait for a batch
		if err := s1.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := s1.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if err := <-e1; !errors.Is(err, client.ErrClosed) {
			t.Fatalf("Each after Close = %v", err)
		}
		var unsubs int
		fb.get(func(fb *fakeBroker) { unsubs = fb.unsubscribes })
		if unsubs != 1 {
			t.Fatalf("%d UNSUBSCRIBE frames", unsubs)
		}
		c.Close()
		if err := <-e2; !errors.Is(err, client.ErrClosed) {
			t.Fatalf("Each after Conn.Close = %v", err)
		}
		if err := s2.Close(); err != nil {
			t.Fatalf("Close after Conn.Close: %v", err)
		}
		if _, err := c.Subscribe(context.Background(), client.SubscribeOptions{Topic: "events"}); !errors.Is(err, client.ErrClosed) {
			t.Fatalf("Subscribe on a closed Conn: %v", err)
		}
	})
}

func TestSubscribeContextAndErrors(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("events", 1)
	c := dial(t, fb)
	if _, err := c.Subscribe(testCtx(t), client.SubscribeOptions{Topic: "missing"}); !errors.Is(err, &wire.Error{Code: wire.CodeUnknownTopic}) {
		t.Fatalf("Subscribe to a missing topic: %v", err)
	}
	s, err := c.Subscribe(testCtx(t), client.SubscribeOptions{Topic: "events"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := s.Each(ctx, func(*client.Received) error { return nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Each = %v, want deadline exceeded", err)
	}
	fb.DropConns()
	if err := s.Each(testCtx(t), func(*client.Received) error { return nil }); !errors.Is(err, client.ErrConnectionLost) {
		t.Fatalf("Each after connection loss = %v", err)
	}
}

func TestSubscribeFunc(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("events", 1)
	c := dial(t, fb)
	produce(t, c, client.ProducerOptions{Topic: "events"}, 5, 1)
	stop := errors.New("stop")
	n := 0
	err := c.SubscribeFunc(testCtx(t), client.SubscribeOptions{Topic: "events"}, func(m *client.Received) error {
		if n++; n == 5 {
			return stop
		}
		return nil
	})
	if err != stop {
		t.Fatalf("SubscribeFunc = %v", err)
	}
	var unsubs int
	fb.get(func(fb *fakeBroker) { unsubs = fb.unsubscribes })
	if unsubs != 1 {
		t.Fatalf("%d UNSUBSCRIBE frames", unsubs)
	}
}
