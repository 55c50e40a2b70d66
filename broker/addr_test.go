package broker

import (
	"context"
	"testing"
)

// TestAddrConcurrentWithStart: Addr may be called from another goroutine while Start runs
// (the Server's methods are documented safe for concurrent use); -race checks it. Before
// Start has the listener, Addr is empty; after, it is the real address.
func TestAddrConcurrentWithStart(t *testing.T) {
	srv, err := New(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	seen := make(chan string, 1)
	go func() {
		last := ""
		defer func() { seen <- last }()
		for {
			if a := srv.Addr(); a != "" {
				last = a
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Shutdown(context.Background()) }()
	addr := srv.Addr()
	if addr == "" {
		t.Fatal("Addr is empty after Start")
	}
	close(stop)
	if last := <-seen; last != "" && last != addr {
		t.Fatalf("Addr changed from %q to %q", last, addr)
	}
}
