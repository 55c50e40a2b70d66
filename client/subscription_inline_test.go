package client_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lightq/lightq/client"
)

// inlineSetup subscribes with InlineHandler on a pipe connection inside a synctest bubble
// and returns a function that sends one message and waits until everything is idle again
// (so each batch reaches the subscription while Each waits).
func inlineSetup(t *testing.T) (*client.Subscription, func(i int)) {
	t.Helper()
	fb := startPipeFake(t)
	fb.AddTopic("events", 1)
	c := dialPipe(t, fb)
	s, err := c.Subscribe(testCtx(t), client.SubscribeOptions{Topic: "events", InlineHandler: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	p := newProducer(t, c, client.ProducerOptions{Topic: "events", Linger: -1})
	send := func(i int) {
		t.Helper()
		synctest.Wait()
		if err := p.Send(testCtx(t), &client.Message{Value: value(i)}, nil); err != nil {
			t.Fatal(err)
		}
		if err := p.Flush(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
	}
	return s, send
}

// TestInlineHandlerRunsOnReader: batches that arrive while Each waits are handled by the
// reader, in order, and a handler error ends Each, the next Each resuming after it.
func TestInlineHandlerRunsOnReader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, send := inlineSetup(t)
		stop := errors.New("stop")
		var offsets []int64
		each := func(n int) chan error {
			ch := make(chan error, 1)
			go func() {
				ch <- s.Each(context.Background(), func(m *client.Received) error {
					if string(m.Value) != string(value(int(m.Offset))) {
						t.Errorf("offset %d: value %q", m.Offset, m.Value)
					}
					offsets = append(offsets, m.Offset)
					if len(offsets) == n {
						return stop
					}
					return nil
				})
			}()
			return ch
		}
		done := each(5)
		for i := range 5 {
			send(i)
		}
		if err := <-done; err != stop {
			t.Fatalf("Each = %v, want the handler's error", err)
		}
		if got := client.InlineBatches(s); got != 5 {
			t.Fatalf("%d of 5 batches handled on the reader", got)
		}
		for i := 5; i < 8; i++ {
			send(i) // queued: nobody waits
		}
		done = each(10)
		send(8)
		send(9)
		if err := <-done; err != stop {
			t.Fatalf("second Each = %v", err)
		}
		for i, o := range offsets {
			if o != int64(i) {
				t.Fatalf("offsets %v", offsets)
			}
		}
		if got := client.InlineBatches(s); got != 7 {
			t.Fatalf("%d batches handled on the reader, want 7 (3 were queued)", got)
		}
	})
}

// TestInlineHandlerCancel: cancelling Each takes the handler back; later messages go to the
// next Each, none lost.
func TestInlineHandlerCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, send := inlineSetup(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- s.Each(ctx, func(*client.Received) error {
				t.Error("handler called after cancel")
				return nil
			})
		}()
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Each = %v", err)
		}
		send(0)
		var got []string
		errDone := errors.New("done")
		if err := s.Each(testCtx(t), func(m *client.Received) error {
			got = append(got, string(m.Value))
			return errDone
		}); err != errDone || len(got) != 1 || got[0] != string(value(0)) {
			t.Fatalf("Each after cancel: %v %q", err, got)
		}
	})
}

// TestInlineHandlerClose: Close from a handler on the reader returns at once (it cannot
// wait for the answer the reader would have to read) and ends Each with ErrClosed.
func TestInlineHandlerClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, send := inlineSetup(t)
		done := make(chan error, 1)
		var took time.Duration
		go func() {
			done <- s.Each(context.Background(), func(*client.Received) error {
				start := time.Now()
				err := s.Close()
				took = time.Since(start)
				return err
			})
		}()
		send(0)
		if err := <-done; !errors.Is(err, client.ErrClosed) {
			t.Fatalf("Each = %v, want ErrClosed", err)
		}
		if took > 0 || client.InlineBatches(s) != 1 {
			t.Fatalf("Close from the reader took %v; %d inline batches", took, client.InlineBatches(s))
		}
	})
}
