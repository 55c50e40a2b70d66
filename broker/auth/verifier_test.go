package auth

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestVerifierCachesSuccess(t *testing.T) {
	h := mustHash(t, "pw", TestParams())
	v := NewVerifier(16, time.Minute)
	for i := range 3 {
		if !v.Check("alice", h, "pw") {
			t.Fatalf("check %d failed", i)
		}
	}
	if s := v.Stats(); s.Verifications != 1 || s.Hits != 2 || s.Entries != 1 {
		t.Fatalf("stats %+v, want 1 verification, 2 hits, 1 entry", s)
	}
}

func TestVerifierKeyCoversEveryPart(t *testing.T) {
	h := mustHash(t, "pw", TestParams())
	h2 := mustHash(t, "pw", TestParams()) // same password, new salt
	v := NewVerifier(16, time.Minute)
	v.Check("alice", h, "pw")
	for _, c := range []struct {
		user, hash, pw string
		want           bool
	}{
		{"bob", h, "pw", true},     // other user: own entry, re-verified
		{"alice", h2, "pw", true},  // changed hash: re-verified
		{"alice", h, "pw2", false}, // wrong password
		{"alic", h, "epw", false},  // same concatenation, other split
	} {
		before := v.Stats().Verifications
		if got := v.Check(c.user, c.hash, c.pw); got != c.want {
			t.Fatalf("Check(%q, .., %q) = %v", c.user, c.pw, got)
		}
		if v.Stats().Verifications != before+1 {
			t.Fatalf("Check(%q, .., %q) answered from the cache", c.user, c.pw)
		}
	}
}

func TestVerifierNeverCachesFailure(t *testing.T) {
	h := mustHash(t, "pw", TestParams())
	v := NewVerifier(16, time.Minute)
	for range 3 {
		if v.Check("alice", h, "wrong") {
			t.Fatal("wrong password accepted")
		}
		if v.Check("alice", "$argon2id$garbage", "pw") {
			t.Fatal("malformed hash accepted")
		}
	}
	if s := v.Stats(); s.Verifications != 6 || s.Failures != 6 || s.Entries != 0 || s.Hits != 0 {
		t.Fatalf("stats %+v", s)
	}
	if !v.Check("alice", h, "pw") {
		t.Fatal("right password refused after failures")
	}
}

func TestVerifierForget(t *testing.T) {
	h := mustHash(t, "pw", TestParams())
	v := NewVerifier(16, time.Minute)
	v.Check("alice", h, "pw")
	v.Check("bob", h, "pw")
	v.Forget("alice")
	if s := v.Stats(); s.Entries != 1 {
		t.Fatalf("entries after Forget: %d", s.Entries)
	}
	v.Check("alice", h, "pw")
	v.Check("bob", h, "pw")
	if s := v.Stats(); s.Verifications != 3 || s.Hits != 1 {
		t.Fatalf("stats %+v, want alice re-verified and bob hit", s)
	}
}

func TestVerifierTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := mustHash(t, "pw", TestParams())
		v := NewVerifier(16, time.Minute)
		v.Check("alice", h, "pw")
		time.Sleep(59 * time.Second)
		v.Check("alice", h, "pw")
		if n := v.Stats().Verifications; n != 1 {
			t.Fatalf("verifications before expiry: %d", n)
		}
		time.Sleep(2 * time.Second)
		if !v.Check("alice", h, "pw") {
			t.Fatal("check after expiry failed")
		}
		if s := v.Stats(); s.Verifications != 2 || s.Entries != 1 {
			t.Fatalf("stats after expiry %+v", s)
		}
	})
}

func TestVerifierBoundedLRU(t *testing.T) {
	h := mustHash(t, "pw", TestParams())
	v := NewVerifier(2, time.Minute)
	v.Check("a", h, "pw")
	v.Check("b", h, "pw")
	v.Check("a", h, "pw") // a is now the most recent
	v.Check("c", h, "pw") // evicts b
	if s := v.Stats(); s.Entries != 2 || s.Verifications != 3 {
		t.Fatalf("stats %+v", s)
	}
	v.Check("a", h, "pw")
	v.Check("c", h, "pw")
	if n := v.Stats().Verifications; n != 3 {
		t.Fatalf("a or c was evicted (verifications %d)", n)
	}
	v.Check("b", h, "pw")
	if n := v.Stats().Verifications; n != 4 {
		t.Fatalf("b was not evicted (verifications %d)", n)
	}
	for i := range 100 {
		v.Check(fmt.Sprint("u", i), h, "pw")
	}
	if n := v.Stats().Entries; n != 2 {
		t.Fatalf("entries %d, want 2", n)
	}
}

// A storm of concurrent Checks of the same credentials costs one argon2 run.
func TestVerifierStormSharesOneRun(t *testing.T) {
	h := mustHash(t, "pw", Params{MemoryKiB: 8192, Time: 1, Threads: 1}) // slow enough that the Checks overlap
	v := NewVerifier(16, time.Minute)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			if !v.Check("alice", h, "pw") {
				t.Error("check failed")
			}
		})
	}
	wg.Wait()
	if s := v.Stats(); s.Verifications != 1 || s.Hits+s.Verifications > 32 {
		t.Fatalf("stats %+v, want one verification", s)
	}
}

func TestVerifierConcurrentMixed(t *testing.T) {
	h := mustHash(t, "pw", TestParams())
	v := NewVerifier(4, time.Minute)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				user := fmt.Sprint("u", (g+i)%6)
				if i%7 == 0 {
					v.Forget(user)
				}
				if v.Check(user, h, "wrong") {
					t.Error("wrong password accepted")
				}
				if !v.Check(user, h, "pw") {
					t.Error("right password refused")
				}
			}
		})
	}
	wg.Wait()
	if n := v.Stats().Entries; n > 4 {
		t.Fatalf("entries %d above size", n)
	}
}

// CheckCached answers from the cache only: it never runs argon2, and a miss is not a failure.
func TestVerifierCheckCached(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := mustHash(t, "pw", TestParams())
		v := NewVerifier(16, time.Minute)
		if v.CheckCached("alice", h, "pw") {
			t.Fatal("hit before any verification")
		}
		v.Check("alice", h, "pw")
		if !v.CheckCached("alice", h, "pw") || v.CheckCached("alice", h, "wrong") || v.CheckCached("bob", h, "pw") {
			t.Fatal("CheckCached answered wrongly")
		}
		if s := v.Stats(); s.Verifications != 1 || s.Hits != 1 || s.Failures != 0 {
			t.Fatalf("stats %+v, want 1 verification, 1 hit, no failures", s)
		}
		time.Sleep(time.Minute)
		if v.CheckCached("alice", h, "pw") {
			t.Fatal("hit after the TTL")
		}
	})
}
