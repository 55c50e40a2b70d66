package auth

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func TestThrottleDelaysGrow(t *testing.T) {
	th := NewThrottle(ThrottleConfig{MaxFailures: 100})
	want := []time.Duration{200, 400, 800, 1600, 2000, 2000, 2000}
	for i, w := range want {
		if got := th.Failure("10.0.0.1", t0.Add(time.Duration(i)*time.Second)); got != w*time.Millisecond {
			t.Fatalf("failure %d: delay %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
	if got := th.Failure("10.0.0.2", t0); got != 200*time.Millisecond {
		t.Fatalf("other address: delay %v", got)
	}
	th.Success("10.0.0.1")
	if got := th.Failure("10.0.0.1", t0); got != 200*time.Millisecond {
		t.Fatalf("after success: delay %v", got)
	}
}

func TestThrottleBlocks(t *testing.T) {
	cases := []struct {
		name        string
		gaps        []time.Duration // gap before each failure
		blockedAt   time.Duration   // probe time after the last failure
		wantBlocked bool
	}{
		{"four failures", []time.Duration{0, 1, 1, 1}, 0, false},
		{"five failures", []time.Duration{0, 1, 1, 1, 1}, 0, true},
		{"five failures, just before expiry", []time.Duration{0, 1, 1, 1, 1}, 59 * time.Second, true},
		{"five failures, block over", []time.Duration{0, 1, 1, 1, 1}, 60 * time.Second, false},
		{"five spread past the window", []time.Duration{0, 20 * time.Second, 20 * time.Second, 20 * time.Second, 20 * time.Second}, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			th := NewThrottle(DefaultThrottleConfig())
			now := t0
			for _, g := range c.gaps {
				now = now.Add(g)
				if th.Blocked("192.0.2.7", now) {
					t.Fatalf("blocked before failure at %v", now.Sub(t0))
				}
				th.Failure("192.0.2.7", now)
			}
			if got := th.Blocked("192.0.2.7", now.Add(c.blockedAt)); got != c.wantBlocked {
				t.Fatalf("Blocked = %v, want %v", got, c.wantBlocked)
			}
			if th.Blocked("192.0.2.8", now) {
				t.Fatal("another address is blocked")
			}
		})
	}
}

func TestThrottleUnblockStartsFresh(t *testing.T) {
	th := NewThrottle(DefaultThrottleConfig())
	for range 5 {
		th.Failure("192.0.2.7", t0)
	}
	later := t0.Add(time.Minute)
	if th.Blocked("192.0.2.7", later) {
		t.Fatal("still blocked after BlockFor")
	}
	th.Failure("192.0.2.7", later)
	if th.Blocked("192.0.2.7", later) {
		t.Fatal("one failure after the block re-blocked")
	}
}

func TestThrottleSuccessResets(t *testing.T) {
	th := NewThrottle(DefaultThrottleConfig())
	for range 5 {
		th.Failure("192.0.2.7", t0)
	}
	th.Success("192.0.2.7")
	if th.Blocked("192.0.2.7", t0) || th.Len() != 0 {
		t.Fatal("Success did not reset the address")
	}
}

func TestThrottleNormalizesAddresses(t *testing.T) {
	th := NewThrottle(ThrottleConfig{MaxFailures: 2})
	th.Failure("2001:db8::1", t0)
	th.Failure("2001:db8::ffff", t0) // same /64
	if !th.Blocked("2001:db8::42", t0) {
		t.Fatal("IPv6 /64 not grouped")
	}
	if th.Blocked("2001:db8:0:1::1", t0) {
		t.Fatal("another /64 blocked")
	}
	th.Failure("::ffff:192.0.2.1", t0)
	th.Failure("192.0.2.1", t0)
	if !th.Blocked("192.0.2.1", t0) {
		t.Fatal("IPv4-mapped address not unmapped")
	}
}

func TestThrottleBoundedTable(t *testing.T) {
	th := NewThrottle(ThrottleConfig{MaxAddrs: 3, MaxFailures: 1})
	for i := range 10 {
		th.Failure(fmt.Sprintf("10.0.0.%d", i), t0)
	}
	if th.Len() != 3 {
		t.Fatalf("tracking %d addresses, want 3", th.Len())
	}
	if th.Blocked("10.0.0.0", t0) || !th.Blocked("10.0.0.9", t0) {
		t.Fatal("evicted the wrong addresses")
	}
}

func TestThrottleConcurrent(t *testing.T) {
	th := NewThrottle(ThrottleConfig{MaxAddrs: 16})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				addr := fmt.Sprintf("10.0.%d.%d", g, i%20)
				th.Blocked(addr, t0)
				th.Failure(addr, t0)
				if i%5 == 0 {
					th.Success(addr)
				}
			}
		})
	}
	wg.Wait()
	if th.Len() > 16 {
		t.Fatalf("tracking %d addresses", th.Len())
	}
}
