package client_test

// The Conn's reconnects against the fake broker: requests in flight fail with a retriable
// error, new ones use the new connection, backoff timing on synctest's clock, a refused
// login ends the Conn.

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

func TestConnectionLossFailsRequestsThenReconnects(t *testing.T) {
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
	fb.set(func(fb *fakeBroker) { fb.holdMetadata, fb.heldMeta = 0, nil })
	fb.DropConns()
	if err := <-done; !errors.Is(err, client.ErrConnectionLost) {
		t.Fatalf("pending request got %v, want ErrConnectionLost", err)
	}
	// The Conn reconnects by itself; a new request goes out on the new connection.
	md, err := c.Metadata(testCtx(t), "a")
	if err != nil || len(md) != 1 {
		t.Fatalf("Metadata after the loss: %v, %v", md, err)
	}
	if c.Err() != nil {
		t.Fatalf("Err = %v while reconnected", c.Err())
	}
	select {
	case <-c.Done():
		t.Fatal("Done closed by a connection loss")
	default:
	}
	fb.get(func(fb *fakeBroker) {
		if fb.accepted != 2 {
			t.Errorf("%d connections accepted, want 2", fb.accepted)
		}
	})
}

// A broker that closes the connection with a fatal code (SHUTTING_DOWN) is reconnected to.
func TestFatalConnectionErrorReconnects(t *testing.T) {
	fb := startFake(t)
	c := dial(t, fb)
	fb.mu.Lock()
	for fc := range fb.conns {
		fc.fail(0, wire.CodeShuttingDown, "bye")
		_ = fc.nc.Close()
	}
	fb.mu.Unlock()
	fb.waitUntil(func(fb *fakeBroker) bool { return fb.accepted == 2 })
	if _, err := c.Ping(testCtx(t)); err != nil {
		t.Fatalf("Ping after the reconnect: %v", err)
	}
	if c.Err() != nil {
		t.Fatalf("Err = %v", c.Err())
	}
}

// TestReconnectBackoff runs in a synctest bubble: the fake refuses connections for a while,
// and the attempts, on the fake clock, follow the schedule: the first at once, then waits in
// [d/2, d] with d doubling from 50 ms to 2 s. A request made meanwhile waits and goes out on
// the new connection.
func TestReconnectBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := startPipeFake(t)
		var mu sync.Mutex
		var times []time.Time
		open := func(ctx context.Context) (net.Conn, error) {
			mu.Lock()
			times = append(times, time.Now())
			mu.Unlock()
			return fb.DialPipe(ctx)
		}
		c, err := client.DialFunc(testCtx(t), open, client.Options{User: fakeUser, Password: fakePass})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fb.set(func(fb *fakeBroker) { fb.refuse = true })
		lostAt := time.Now()
		fb.DropConns()
		synctest.Wait() // the Conn has seen the loss: the Ping below waits for the next connection
		pingErr := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := c.Ping(ctx)
			pingErr <- err
		}()
		time.Sleep(10 * time.Second) // the attempts fail meanwhile
		synctest.Wait()
		if ok, last := c.Connected(); ok || last == nil {
			t.Fatalf("Connected() = %v, %v while the fake refuses", ok, last)
		}
		mu.Lock()
		got := append([]time.Time(nil), times[1:]...) // times[0] is Dial's
		mu.Unlock()
		if len(got) < 8 {
			t.Fatalf("%d reconnect attempts in 10 s", len(got))
		}
		if !got[0].Equal(lostAt) {
			t.Errorf("first attempt %v after the loss, want at once", got[0].Sub(lostAt))
		}
		d := 50 * time.Millisecond
		for i := 1; i < len(got); i++ {
			if gap := got[i].Sub(got[i-1]); gap < d/2 || gap > d {
				t.Errorf("wait %d: %v, want %v to %v", i, gap, d/2, d)
			}
			d = min(2*d, 2*time.Second)
		}
		fb.set(func(fb *fakeBroker) { fb.refuse = false })
		time.Sleep(3 * time.Second)
		synctest.Wait()
		select {
		case err := <-pingErr:
			if err != nil {
				t.Fatalf("Ping made while reconnecting: %v", err)
			}
		default:
			t.Fatal("Ping made while reconnecting has not returned")
		}
		if ok, _ := c.Connected(); !ok {
			t.Fatal("not connected after the fake accepts again")
		}
	})
}

// A request whose context ends while the Conn reconnects says so.
func TestRequestWhileReconnecting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := startPipeFake(t)
		c := dialPipe(t, fb)
		fb.set(func(fb *fakeBroker) { fb.refuse = true })
		fb.DropConns()
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := c.Ping(ctx)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "reconnecting") {
			t.Fatalf("Ping while reconnecting: %v, want a deadline error that says reconnecting", err)
		}
	})
}

// A reconnect refused with AUTH_FAILED (the password changed) ends the Conn: Done closes, Err
// wraps ErrConnectionLost and the refusal, and no further attempt is made.
func TestReconnectAuthFailedEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := startPipeFake(t)
		c := dialPipe(t, fb)
		fb.set(func(fb *fakeBroker) { fb.pass = "changed" })
		fb.DropConns()
		synctest.Wait()
		select {
		case <-c.Done():
		default:
			t.Fatal("Done not closed after AUTH_FAILED on a reconnect")
		}
		err := c.Err()
		if !errors.Is(err, client.ErrConnectionLost) || !errors.Is(err, &wire.Error{Code: wire.CodeAuthFailed}) {
			t.Fatalf("Err = %v, want ErrConnectionLost and AUTH_FAILED", err)
		}
		var n int
		fb.get(func(fb *fakeBroker) { n = fb.accepted })
		time.Sleep(time.Minute)
		synctest.Wait()
		fb.get(func(fb *fakeBroker) {
			if fb.accepted != n {
				t.Errorf("%d more connections after the refusal", fb.accepted-n)
			}
		})
		if _, err := c.Ping(context.Background()); !errors.Is(err, &wire.Error{Code: wire.CodeAuthFailed}) {
			t.Fatalf("Ping on an ended Conn: %v", err)
		}
	})
}

// Close while reconnecting stops the attempts and returns.
func TestCloseWhileReconnecting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := startPipeFake(t)
		c := dialPipe(t, fb)
		fb.set(func(fb *fakeBroker) { fb.refuse = true })
		fb.DropConns()
		time.Sleep(time.Second)
		synctest.Wait()
		c.Close()
		if !errors.Is(c.Err(), client.ErrClosed) {
			t.Fatalf("Err = %v after Close", c.Err())
		}
	})
}
