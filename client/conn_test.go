package client_test

import (
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

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func dial(t testing.TB, fb *fakeBroker) *client.Conn {
	t.Helper()
	c, err := client.Dial(testCtx(t), fb.Addr(), client.Options{User: fakeUser, Password: fakePass, ClientName: t.Name()})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// dialPipe connects to a fake made by startPipeFake, in memory (reconnects too).
func dialPipe(t testing.TB, fb *fakeBroker) *client.Conn {
	t.Helper()
	c, err := client.DialFunc(testCtx(t), fb.DialPipe, client.Options{User: fakeUser, Password: fakePass, ClientName: t.Name()})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestDial(t *testing.T) {
	fb := startFake(t)
	c := dial(t, fb)
	if got, want := c.Limits(), wire.DefaultLimits(); got != want {
		t.Errorf("Limits = %+v, want %+v", got, want)
	}
	if c.Role() != wire.RoleAdmin || c.BrokerVersion() != "fake" {
		t.Errorf("role %v, broker %q", c.Role(), c.BrokerVersion())
	}
	if _, err := c.Ping(testCtx(t)); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

func TestDialBadCredentials(t *testing.T) {
	fb := startFake(t)
	_, err := client.Dial(testCtx(t), fb.Addr(), client.Options{User: fakeUser, Password: "wrong"})
	if !errors.Is(err, &wire.Error{Code: wire.CodeAuthFailed}) {
		t.Fatalf("err = %v, want AUTH_FAILED", err)
	}
	var we *wire.Error
	if !errors.As(err, &we) || we.Message == "" {
		t.Fatalf("err = %#v, want a *wire.Error with the broker's message", err)
	}
}

func TestDialTimeout(t *testing.T) {
	fb := startFake(t)
	fb.set(func(fb *fakeBroker) { fb.silent = true })
	start := time.Now()
	_, err := client.Dial(context.Background(), fb.Addr(), client.Options{DialTimeout: 100 * time.Millisecond})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Dial took %v", d)
	}
}

func TestDialRefused(t *testing.T) {
	fb := startFake(t)
	addr := fb.Addr()
	fb.Close()
	if _, err := client.Dial(testCtx(t), addr, client.Options{}); err == nil {
		t.Fatal("Dial to a closed port succeeded")
	}
}

// TestPipelinedOutOfOrder sends several requests at once; the fake answers them in reverse
// order, and each caller must get its own answer.
func TestPipelinedOutOfOrder(t *testing.T) {
	fb := startFake(t)
	const n = 8
	for i := range n {
		fb.AddTopic(fmt.Sprintf("t%d", i), i+1)
	}
	c := dial(t, fb)
	fb.set(func(fb *fakeBroker) { fb.holdMetadata = n })
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			name := fmt.Sprintf("t%d", i)
			md, err := c.Metadata(testCtx(t), name)
			switch {
			case err != nil:
				errs <- err
			case len(md) != 1 || md[0].Name != name || len(md[0].Partitions) != i+1:
				errs <- fmt.Errorf("asked for %s, got %+v", name, md)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestRequestContextCancel(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("a", 1)
	c := dial(t, fb)
	fb.set(func(fb *fakeBroker) { fb.holdMetadata = 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Metadata(ctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
	// The second request releases both answers; the late one is discarded.
	md, err := c.Metadata(testCtx(t), "a")
	if err != nil || len(md) != 1 {
		t.Fatalf("Metadata = %v, %v", md, err)
	}
	if _, err := c.Ping(testCtx(t)); err != nil {
		t.Fatalf("Ping after a discarded answer: %v", err)
	}
}

func TestAdmin(t *testing.T) {
	fb := startFake(t)
	c := dial(t, fb)
	ctx := testCtx(t)
	if err := c.CreateTopic(ctx, client.TopicConfig{Name: "orders", Partitions: 3, User: "u", Password: "p"}); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	err := c.CreateTopic(ctx, client.TopicConfig{Name: "orders"})
	if !errors.Is(err, &wire.Error{Code: wire.CodeTopicExists}) {
		t.Fatalf("second CreateTopic: %v", err)
	}
	if err := c.CreateTopic(ctx, client.TopicConfig{Name: "bad/name"}); err == nil {
		t.Fatal("CreateTopic accepted an invalid name")
	}
	md, err := c.Metadata(ctx, "orders")
	if err != nil || len(md) != 1 || len(md[0].Partitions) != 3 || md[0].Kind != wire.KindTransient {
		t.Fatalf("Metadata = %+v, %v", md, err)
	}
	st, err := c.Stats(ctx, "orders")
	if err != nil || len(st) != 1 {
		t.Fatalf("Stats = %+v, %v", st, err)
	}
	if v, ok := st[0].Get("messages"); !ok || v != 0 {
		t.Fatalf("messages counter = %d, %v", v, ok)
	}
	if err := c.DeleteTopic(ctx, "orders"); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	if _, err := c.Metadata(ctx, "orders"); !errors.Is(err, &wire.Error{Code: wire.CodeUnknownTopic}) {
		t.Fatalf("Metadata of a deleted topic: %v", err)
	}
}

func TestDurableRequestsExist(t *testing.T) {
	fb := startFake(t)
	c := dial(t, fb)
	ctx := testCtx(t)
	notSupported := &wire.Error{Code: wire.CodeNotSupported}
	if _, err := c.Fetch(ctx, wire.Fetch{Topic: "d", MaxBytes: 1 << 20}); !errors.Is(err, notSupported) {
		t.Errorf("Fetch: %v", err)
	}
	if _, err := c.ListOffsets(ctx, wire.ListOffsets{Topic: "d", Mode: wire.OffsetLatest}); !errors.Is(err, notSupported) {
		t.Errorf("ListOffsets: %v", err)
	}
	if err := c.CommitOffset(ctx, wire.CommitOffset{Group: "g", Topic: "d"}); !errors.Is(err, notSupported) {
		t.Errorf("CommitOffset: %v", err)
	}
	if _, err := c.FetchCommitted(ctx, wire.FetchCommitted{Group: "g", Topic: "d"}); !errors.Is(err, notSupported) {
		t.Errorf("FetchCommitted: %v", err)
	}
}

func TestCloseIdempotentAndUnblocks(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("a", 1)
	c := dial(t, fb)
	fb.set(func(fb *fakeBroker) { fb.holdMetadata = 100 })
	done := make(chan error, 1)
	go func() {
		_, err := c.Metadata(context.Background(), "a")
		done <- err
	}()
	fb.waitUntil(func(fb *fakeBroker) bool { return len(fb.heldMeta) == 1 }) // the request is pending
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { c.Close() })
	}
	wg.Wait()
	if err := <-done; !errors.Is(err, client.ErrClosed) {
		t.Fatalf("pending request got %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := c.Ping(context.Background()); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Ping after Close: %v", err)
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed")
	}
}

// An idle connection sends a PING once per KeepAlive, so the broker's idle timeout does not
// close it; a connection that sends requests sends no PING.
func TestKeepAlivePingsOnlyWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := startPipeFake(t)
		c, err := client.DialOver(testCtx(t), fb.Pipe(), client.Options{User: fakeUser, Password: fakePass, KeepAlive: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		pings := func() (n int) {
			synctest.Wait()
			fb.get(func(fb *fakeBroker) { n = fb.pings })
			return n
		}
		// Busy: a request every 30 s for 5 minutes.
		for range 10 {
			time.Sleep(30 * time.Second)
			if _, err := c.Metadata(testCtx(t)); err != nil {
				t.Fatal(err)
			}
		}
		if n := pings(); n != 0 {
			t.Fatalf("%d PINGs on a connection that sent a request every 30 s", n)
		}
		// Idle for 3.5 intervals: the first tick may still see the last request.
		time.Sleep(3*time.Minute + 30*time.Second)
		if n := pings(); n < 2 || n > 3 {
			t.Fatalf("%d PINGs in 3.5 idle minutes with KeepAlive 1m, want 2 or 3", n)
		}
	})
}
