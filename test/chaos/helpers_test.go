package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitFor polls cond on a ticker until it holds, failing the test after timeout: for
// conditions no event announces (a counter in another goroutine, a file another process
// writes). The timeout is one only a broken program misses on a loaded machine.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := pollUntil(context.Background(), timeout, 2*time.Millisecond, cond); err != nil {
		t.Fatalf("still not %s after %v", what, timeout)
	}
}

// errPollTimeout is pollUntil's error when cond never held.
var errPollTimeout = errors.New("condition not met in time")

// pollUntil checks cond every interval until it holds (nil), ctx ends (ctx's error) or
// timeout passes (errPollTimeout).
func pollUntil(ctx context.Context, timeout, every time.Duration, cond func() bool) error {
	if cond() {
		return nil
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			if cond() {
				return nil
			}
			return errPollTimeout
		case <-tick.C:
			if cond() {
				return nil
			}
		}
	}
}

// envInt reads a positive integer knob, def when unset.
func envInt(t testing.TB, key string, def int) int {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", key, v)
	}
	return n
}

// envDuration reads a duration knob, def when unset.
func envDuration(t testing.TB, key string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration such as 90s", key, v)
	}
	return d
}

// echoServer is a backend for the proxy's tests: it echoes what it reads on every
// connection and counts connections and bytes.
type echoServer struct {
	ln       net.Listener
	accepted atomic.Int64
	read     atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

func startEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.accepted.Add(1)
			e.mu.Lock()
			e.conns = append(e.conns, c)
			e.mu.Unlock()
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						e.read.Add(int64(n))
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		e.mu.Lock()
		for _, c := range e.conns {
			c.Close()
		}
		e.mu.Unlock()
		e.wg.Wait()
	})
	return e
}

func (e *echoServer) addr() string { return e.ln.Addr().String() }

// roundTrip writes msg to c and reads the echo, with a deadline.
func roundTrip(c net.Conn, msg string) error {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if string(got) != msg {
		return fmt.Errorf("echo %q, want %q", got, msg)
	}
	return nil
}
