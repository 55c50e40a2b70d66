package auth

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// try runs one attempt through Admit, Evaluate and Finish with outcome (when it is admitted)
// and returns the failure delay and the refusal (from Admit, Evaluate, or the blocking
// failure).
func try(th *Throttle, addr, user string, outcome Outcome) (time.Duration, Refusal) {
	at, r := th.Admit(addr, user, time.Now())
	if r != Admitted {
		return 0, r
	}
	if r := th.Evaluate(at, time.Now()); r != Admitted {
		th.Finish(at, Unverified, time.Now())
		return 0, r
	}
	return th.Finish(at, outcome, time.Now())
}

// admitted reports whether an attempt of user from addr would be let through to hashing now,
// without recording anything.
func admitted(th *Throttle, addr, user string) Refusal {
	at, r := th.Admit(addr, user, time.Now())
	if r != Admitted {
		return r
	}
	defer th.Finish(at, Unverified, time.Now())
	return th.Evaluate(at, time.Now())
}

func mustAdmit(t *testing.T, th *Throttle, addr, user string) *Attempt {
	t.Helper()
	at, r := th.Admit(addr, user, time.Now())
	if r != Admitted {
		t.Fatalf("Admit(%s, %s) refused: %s", addr, user, r.Message())
	}
	return at
}

func TestThrottleDelaysGrow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := NewThrottle(ThrottleConfig{MaxFailures: 100, MaxAddrFailures: 100, UserBurst: 100})
		want := []time.Duration{200, 400, 800, 1600, 2000, 2000, 2000}
		for i, w := range want {
			if got, _ := try(th, "10.0.0.1", "alice", Failed); got != w*time.Millisecond {
				t.Fatalf("failure %d: delay %v, want %v", i+1, got, w*time.Millisecond)
			}
			time.Sleep(time.Second)
		}
		if got, _ := try(th, "10.0.0.2", "alice", Failed); got != 200*time.Millisecond {
			t.Fatalf("other address: delay %v", got)
		}
		if got, _ := try(th, "10.0.0.1", "bob", Failed); got != 200*time.Millisecond {
			t.Fatalf("other user at the same address: delay %v", got)
		}
		try(th, "10.0.0.1", "alice", Succeeded)
		if got, _ := try(th, "10.0.0.1", "alice", Failed); got != 200*time.Millisecond {
			t.Fatalf("after success: delay %v", got)
		}
	})
}

func TestThrottleBlocksPair(t *testing.T) {
	cases := []struct {
		name        string
		gaps        []time.Duration // gap before each failure
		lastBlocks  bool            // the last failure sets a block
		probeAfter  time.Duration   // probe time after the last failure
		wantBlocked bool
	}{
		{"four failures", []time.Duration{0, 1, 1, 1}, false, 0, false},
		{"five failures", []time.Duration{0, 1, 1, 1, 1}, true, 0, true},
		{"five failures, just before expiry", []time.Duration{0, 1, 1, 1, 1}, true, 59 * time.Second, true},
		{"five failures, block over", []time.Duration{0, 1, 1, 1, 1}, true, 60 * time.Second, false},
		{"five spread past the window", []time.Duration{0, 20 * time.Second, 20 * time.Second, 20 * time.Second, 20 * time.Second}, false, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				th := NewThrottle(DefaultThrottleConfig())
				for i, g := range c.gaps {
					time.Sleep(g)
					_, r := try(th, "192.0.2.7", "admin", Failed)
					want := Admitted
					if i == len(c.gaps)-1 && c.lastBlocks {
						want = RefusedPairBlocked
					}
					if r != want {
						t.Fatalf("failure %d answered %q, want %q", i+1, r.Message(), want.Message())
					}
				}
				time.Sleep(c.probeAfter)
				if got := admitted(th, "192.0.2.7", "admin"); (got == RefusedPairBlocked) != c.wantBlocked {
					t.Fatalf("probe: %q, want blocked %v", got.Message(), c.wantBlocked)
				}
				// Nobody else is locked out: not another address, not another user here.
				if r := admitted(th, "192.0.2.8", "admin"); r != Admitted {
					t.Fatalf("another address: %q", r.Message())
				}
				if r := admitted(th, "192.0.2.7", "service"); r != Admitted {
					t.Fatalf("another user at the same address: %q", r.Message())
				}
			})
		})
	}
}

// The fifth failure itself reports the block, so the broker answers it TOO_MANY_ATTEMPTS.
func TestThrottleBlockingFailureSaysSo(t *testing.T) {
	th := NewThrottle(DefaultThrottleConfig())
	for i := range 5 {
		_, r := try(th, "192.0.2.7", "admin", Failed)
		if want := map[bool]Refusal{true: RefusedPairBlocked, false: Admitted}[i == 4]; r != want {
			t.Fatalf("failure %d: %q, want %q", i+1, r.Message(), want.Message())
		}
	}
	if r := admitted(th, "192.0.2.7", "admin"); r != RefusedPairBlocked || r.Busy() {
		t.Fatalf("after the block: %q", r.Message())
	}
}

func TestThrottleUnblockStartsFresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := NewThrottle(DefaultThrottleConfig())
		for range 5 {
			try(th, "192.0.2.7", "admin", Failed)
		}
		time.Sleep(time.Minute)
		if _, r := try(th, "192.0.2.7", "admin", Failed); r != Admitted {
			t.Fatalf("first failure after the block: %q", r.Message())
		}
		if r := admitted(th, "192.0.2.7", "admin"); r != Admitted {
			t.Fatalf("one failure after the block re-blocked: %q", r.Message())
		}
	})
}

// Finding 2 of issue 9: attempts already queued when the failures that block them are
// recorded must be refused when a worker gets to them, not hashed.
func TestThrottleQueuedAttemptsRefusedWhenEvaluated(t *testing.T) {
	th := NewThrottle(ThrottleConfig{MaxPendingPerPair: 1000, MaxPendingPerAddr: 1000, MaxPending: 1000})
	var queued []*Attempt
	for range 300 { // a burst: all admitted before any is evaluated
		queued = append(queued, mustAdmit(t, th, "192.0.2.7", "admin"))
	}
	hashed := 0
	for i, at := range queued {
		r := th.Evaluate(at, time.Now())
		if r != Admitted {
			th.Finish(at, Unverified, time.Now())
			continue
		}
		hashed++
		outcome := Failed
		if i == len(queued)-1 {
			t.Fatal("the correct password placed last was let through to hashing")
		}
		th.Finish(at, outcome, time.Now())
	}
	if hashed != 5 {
		t.Fatalf("%d attempts hashed, want 5 (MaxFailures)", hashed)
	}
	if s := th.Sizes(); s.Pending != 0 {
		t.Fatalf("%d attempts still pending", s.Pending)
	}
}

// Workers evaluate in parallel: attempts being verified count against the budget, so the
// sixth is refused before any of the first five has failed.
func TestThrottleReservesWhileVerifying(t *testing.T) {
	th := NewThrottle(ThrottleConfig{MaxPendingPerPair: 10})
	var running []*Attempt
	for range 5 {
		at := mustAdmit(t, th, "192.0.2.7", "admin")
		if r := th.Evaluate(at, time.Now()); r != Admitted {
			t.Fatalf("attempt %d refused: %q", len(running)+1, r.Message())
		}
		running = append(running, at)
	}
	sixth := mustAdmit(t, th, "192.0.2.7", "admin")
	if r := th.Evaluate(sixth, time.Now()); r != RefusedVerifying || !r.Busy() {
		t.Fatalf("sixth attempt while five verify: %q", r.Message())
	}
	th.Finish(sixth, Unverified, time.Now())
	// One of the five turns out right: the pair is reset, the others' failures still count.
	th.Finish(running[0], Succeeded, time.Now())
	for _, at := range running[1:] {
		th.Finish(at, Failed, time.Now())
	}
	if r := admitted(th, "192.0.2.7", "admin"); r != Admitted {
		t.Fatalf("after four failures: %q", r.Message())
	}
}

func TestThrottleInFlightBounds(t *testing.T) {
	th := NewThrottle(ThrottleConfig{MaxPending: 10, MaxPendingPerAddr: 6, MaxPendingPerPair: 4})
	var held []*Attempt
	for range 4 {
		held = append(held, mustAdmit(t, th, "192.0.2.7", "mallory-target"))
	}
	if _, r := th.Admit("192.0.2.7", "mallory-target", time.Now()); r != RefusedAddrBusy || !r.Busy() {
		t.Fatalf("fifth attempt of one pair: %q", r.Message())
	}
	// Another user at the same address still gets in, up to the address's bound.
	for range 2 {
		held = append(held, mustAdmit(t, th, "192.0.2.7", "admin"))
	}
	if _, r := th.Admit("192.0.2.7", "admin2", time.Now()); r != RefusedAddrBusy {
		t.Fatalf("seventh attempt of one address: %q", r.Message())
	}
	for i := range 4 {
		held = append(held, mustAdmit(t, th, fmt.Sprint("198.51.100.", i), "admin"))
	}
	if _, r := th.Admit("203.0.113.1", "admin", time.Now()); r != RefusedBusy || !r.Busy() {
		t.Fatalf("eleventh attempt in flight: %q", r.Message())
	}
	if s := th.Sizes(); s.Pending != 10 {
		t.Fatalf("pending %d, want 10", s.Pending)
	}
	for _, at := range held {
		th.Finish(at, Unverified, time.Now())
		th.Finish(at, Failed, time.Now()) // a second Finish does nothing
	}
	if s := th.Sizes(); s.Pending != 0 {
		t.Fatalf("pending %d after Finish", s.Pending)
	}
	if r := admitted(th, "192.0.2.7", "mallory-target"); r != Admitted {
		t.Fatalf("after the attempts finished: %q", r.Message())
	}
}

// Finding 3 of issue 9: an attacker hammering one user does not lock out another user at the
// same address; only spraying many users reaches the address's ceiling.
func TestThrottleAddressCeiling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := NewThrottle(DefaultThrottleConfig())
		for range 200 {
			try(th, "192.0.2.7", "victim", Failed)
		}
		if r := admitted(th, "192.0.2.7", "victim"); r != RefusedPairBlocked {
			t.Fatalf("hammered pair: %q", r.Message())
		}
		if _, r := try(th, "192.0.2.7", "admin", Succeeded); r != Admitted {
			t.Fatalf("admin at the hammering address: %q", r.Message())
		}
		// Spraying: 4 failures each for many users (never blocking a pair) reaches the ceiling.
		n := 5 // the victim's counted failures
		for u := 0; n < 50; u++ {
			for range 4 {
				if _, r := try(th, "192.0.2.7", fmt.Sprint("user", u), Failed); r == RefusedAddrBlocked {
					n = 50
					break
				}
				n++
			}
		}
		if r := admitted(th, "192.0.2.7", "admin"); r != RefusedAddrBlocked || r.Busy() {
			t.Fatalf("sprayed address: %q", r.Message())
		}
		if r := admitted(th, "192.0.2.8", "admin"); r != Admitted {
			t.Fatalf("another address: %q", r.Message())
		}
		time.Sleep(time.Minute)
		if r := admitted(th, "192.0.2.7", "admin"); r != Admitted {
			t.Fatalf("after BlockFor: %q", r.Message())
		}
	})
}

// Guesses against one user are limited however many addresses send them, except from pairs
// that logged in recently.
func TestThrottleUserBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := NewThrottle(DefaultThrottleConfig())
		try(th, "10.9.9.9", "alice", Succeeded) // alice's own host
		for i := range 20 {
			if _, r := try(th, fmt.Sprint("10.0.0.", i), "alice", Failed); r != Admitted {
				t.Fatalf("failure %d from its own address: %q", i+1, r.Message())
			}
		}
		if r := admitted(th, "10.0.1.1", "alice"); r != RefusedUserBudget || r.Busy() {
			t.Fatalf("21st address: %q", r.Message())
		}
		if r := admitted(th, "10.0.1.1", "bob"); r != Admitted {
			t.Fatalf("another user: %q", r.Message())
		}
		if _, r := try(th, "10.9.9.9", "alice", Succeeded); r != Admitted {
			t.Fatalf("alice from the address she logged in from: %q", r.Message())
		}
		// Her own failures there do not spend the budget either.
		if _, r := try(th, "10.9.9.9", "alice", Failed); r != Admitted {
			t.Fatalf("trusted failure: %q", r.Message())
		}
		// The budget refills one failure per UserRefill.
		time.Sleep(6 * time.Second)
		if _, r := try(th, "10.0.1.1", "alice", Failed); r != Admitted {
			t.Fatalf("after one refill: %q", r.Message())
		}
		if r := admitted(th, "10.0.1.2", "alice"); r != RefusedUserBudget {
			t.Fatalf("refill gave more than one: %q", r.Message())
		}
		time.Sleep(2 * time.Minute)
		for i := range 20 {
			if _, r := try(th, fmt.Sprint("10.0.2.", i), "alice", Failed); r != Admitted {
				t.Fatalf("after a full refill, failure %d: %q", i+1, r.Message())
			}
		}
		// Trust expires.
		time.Sleep(24 * time.Hour)
		for i := range 20 {
			try(th, fmt.Sprint("10.0.3.", i), "alice", Failed)
		}
		if r := admitted(th, "10.9.9.9", "alice"); r != RefusedUserBudget {
			t.Fatalf("trust after TrustFor: %q", r.Message())
		}
	})
}

// Many addresses verifying in parallel reserve the user's budget: no more than UserBurst are
// let through, whatever the interleaving.
func TestThrottleUserBudgetParallel(t *testing.T) {
	th := NewThrottle(DefaultThrottleConfig())
	var queued []*Attempt
	for i := range 60 {
		queued = append(queued, mustAdmit(t, th, fmt.Sprint("10.0.", i/4, ".", i%4), "alice"))
	}
	var through []*Attempt
	for _, at := range queued {
		if th.Evaluate(at, time.Now()) == Admitted {
			through = append(through, at)
		} else {
			th.Finish(at, Unverified, time.Now())
		}
	}
	if len(through) != 20 {
		t.Fatalf("%d of 60 parallel attempts let through, want 20 (UserBurst)", len(through))
	}
	for _, at := range through {
		th.Finish(at, Failed, time.Now())
	}
}

func TestThrottleSuccessResetsOnlyThePair(t *testing.T) {
	th := NewThrottle(ThrottleConfig{MaxAddrFailures: 8})
	for range 4 {
		try(th, "192.0.2.7", "alice", Failed)
	}
	try(th, "192.0.2.7", "alice", Succeeded)
	for i := range 4 {
		if _, r := try(th, "192.0.2.7", "alice", Failed); r != Admitted && i < 3 {
			t.Fatalf("failure %d after the success: %q", i+1, r.Message())
		}
	}
	// 8 failures from the address: its ceiling, which a success does not reset.
	if r := admitted(th, "192.0.2.7", "bob"); r != RefusedAddrBlocked {
		t.Fatalf("address after 8 failures: %q", r.Message())
	}
}

func TestThrottleNormalizesAddresses(t *testing.T) {
	th := NewThrottle(ThrottleConfig{MaxFailures: 2})
	try(th, "2001:db8::1", "u", Failed)
	try(th, "2001:db8::ffff", "u", Failed) // same /64
	if admitted(th, "2001:db8::42", "u") != RefusedPairBlocked {
		t.Fatal("IPv6 /64 not grouped")
	}
	if admitted(th, "2001:db8:0:1::1", "u") != Admitted {
		t.Fatal("another /64 blocked")
	}
	try(th, "::ffff:192.0.2.1", "u", Failed)
	try(th, "192.0.2.1", "u", Failed)
	if admitted(th, "192.0.2.1", "u") != RefusedPairBlocked {
		t.Fatal("IPv4-mapped address not unmapped")
	}
}

func TestThrottleBoundedTables(t *testing.T) {
	th := NewThrottle(ThrottleConfig{MaxPairs: 3, MaxAddrs: 3, MaxUsers: 3, MaxTrusted: 3, MaxFailures: 1})
	for i := range 10 {
		try(th, fmt.Sprint("10.0.0.", i), fmt.Sprint("u", i), Failed)
		try(th, fmt.Sprint("10.0.1.", i), fmt.Sprint("u", i), Succeeded)
	}
	if s := th.Sizes(); s.Pairs != 3 || s.Addrs != 3 || s.Users != 3 || s.Trusted != 3 {
		t.Fatalf("sizes %+v, want 3 of each", s)
	}
	if admitted(th, "10.0.0.0", "u0") != Admitted || admitted(th, "10.0.0.9", "u9") != RefusedPairBlocked {
		t.Fatal("evicted the wrong pairs")
	}
	// Entries an attempt in flight points to are never evicted, so its Finish counts.
	at := mustAdmit(t, th, "192.0.2.1", "held")
	for i := range 10 {
		try(th, fmt.Sprint("10.0.2.", i), fmt.Sprint("v", i), Failed)
	}
	if r := th.Evaluate(at, time.Now()); r != Admitted {
		t.Fatalf("held attempt: %q", r.Message())
	}
	th.Finish(at, Failed, time.Now())
	if admitted(th, "192.0.2.1", "held") != RefusedPairBlocked {
		t.Fatal("the held pair's failure was lost")
	}
}

func TestThrottleConcurrent(t *testing.T) {
	th := NewThrottle(ThrottleConfig{MaxPairs: 16, MaxAddrs: 16, MaxUsers: 16, MaxTrusted: 16})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				addr, user := fmt.Sprintf("10.0.%d.%d", g, i%20), fmt.Sprint("u", i%7)
				outcome := Failed
				if i%5 == 0 {
					outcome = Succeeded
				}
				try(th, addr, user, outcome)
			}
		})
	}
	wg.Wait()
	if s := th.Sizes(); s.Pending != 0 || s.Pairs > 16 || s.Addrs > 16 || s.Users > 16 || s.Trusted > 16 {
		t.Fatalf("sizes %+v", s)
	}
}

// A table whose every entry is pinned grows past its size rather than drop the entry just
// added (which an attempt is about to point to), and shrinks back at the next addition once
// they are idle.
func TestThrottleTableFullOfPinned(t *testing.T) {
	th := NewThrottle(ThrottleConfig{MaxPairs: 1, MaxAddrs: 1, MaxUsers: 1, MaxFailures: 1})
	first := mustAdmit(t, th, "10.0.0.1", "a")
	second := mustAdmit(t, th, "10.0.0.2", "b")
	if s := th.Sizes(); s.Pairs != 2 || s.Addrs != 2 || s.Users != 2 {
		t.Fatalf("sizes %+v with two attempts in flight, want 2 of each", s)
	}
	for _, at := range []*Attempt{first, second} {
		if r := th.Evaluate(at, time.Now()); r != Admitted {
			t.Fatalf("Evaluate: %q", r.Message())
		}
		th.Finish(at, Failed, time.Now())
	}
	if admitted(th, "10.0.0.2", "b") != RefusedPairBlocked {
		t.Fatal("the second attempt's failure was lost")
	}
	admitted(th, "10.0.0.3", "c")
	if s := th.Sizes(); s.Pairs != 1 || s.Addrs != 1 || s.Users != 1 {
		t.Fatalf("sizes %+v after the next addition, want 1 of each", s)
	}
}
