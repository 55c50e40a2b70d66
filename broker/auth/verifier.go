package auth

import (
	"container/list"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"sync"
	"time"
)

// Verifier caches successful verifications so that a storm of logins with the same
// credentials costs one argon2 run per (user, password, hash) per TTL. Concurrent Checks of
// the same credentials share one argon2 run.
//
// The cache key is HMAC-SHA256, under a random per-process key, of the user, the encoded hash
// and the password; no plaintext is stored. Because the encoded hash is part of the key, a
// password change makes old entries unreachable at once; Forget also removes them. Only
// successes are cached. The cache holds at most size entries (least recently used evicted)
// and each expires ttl after it was verified.
//
// A Verifier is safe for concurrent use.
type Verifier struct {
	macKey [32]byte
	size   int
	ttl    time.Duration

	mu       sync.Mutex
	lru      list.List // of *cacheEntry, most recently used at the front
	entries  map[[32]byte]*list.Element
	inflight map[[32]byte]*flight
	stats    VerifierStats
}

type cacheEntry struct {
	key     [32]byte
	user    string
	expires time.Time
}

// flight is one argon2 run that concurrent Checks of the same credentials wait for.
type flight struct {
	user      string
	done      chan struct{}
	ok        bool // valid after done is closed
	forgotten bool // Forget ran while in flight: do not cache the result
}

// VerifierStats are counters of a Verifier.
type VerifierStats struct {
	Hits          uint64 // Checks answered from the cache
	Verifications uint64 // argon2 runs (Verify calls)
	Failures      uint64 // runs that did not match, malformed hashes included
	Entries       int    // entries now cached
}

// NewVerifier returns a Verifier that caches up to size successes (at least 1) for ttl. With
// ttl <= 0 nothing is served from the cache, but concurrent Checks still share argon2 runs.
func NewVerifier(size int, ttl time.Duration) *Verifier {
	v := &Verifier{
		size:     max(size, 1),
		ttl:      ttl,
		entries:  make(map[[32]byte]*list.Element),
		inflight: make(map[[32]byte]*flight),
	}
	if _, err := rand.Read(v.macKey[:]); err != nil {
		panic("auth: reading random cache key: " + err.Error())
	}
	return v
}

func (v *Verifier) cacheKey(user, encoded, password string) [32]byte {
	m := hmac.New(sha256.New, v.macKey[:])
	var n [4]byte
	for _, s := range [...]string{user, encoded, password} {
		binary.BigEndian.PutUint32(n[:], uint32(len(s)))
		m.Write(n[:])
		m.Write([]byte(s))
	}
	var k [32]byte
	m.Sum(k[:0])
	return k
}

// Check reports whether password matches encoded, the stored hash of user. A cached success
// answers at once; otherwise Check runs argon2 (about 100 ms with DefaultParams), so call it
// from a worker (a workpool.Pool), never from an event loop. A malformed encoded hash is a
// failure. Safe for concurrent use.
func (v *Verifier) Check(user, encoded, password string) bool {
	k := v.cacheKey(user, encoded, password)
	now := time.Now()

	v.mu.Lock()
	if el, ok := v.entries[k]; ok {
		e := el.Value.(*cacheEntry)
		if now.Before(e.expires) {
			v.lru.MoveToFront(el)
			v.stats.Hits++
			v.mu.Unlock()
			return true
		}
		v.remove(el)
	}
	if f, ok := v.inflight[k]; ok {
		v.mu.Unlock()
		<-f.done
		return f.ok
	}
	f := &flight{user: user, done: make(chan struct{})}
	v.inflight[k] = f
	v.stats.Verifications++
	v.mu.Unlock()

	ok := false
	defer func() { // deferred so that waiters are released even if Verify panics
		v.mu.Lock()
		delete(v.inflight, k)
		if !ok {
			v.stats.Failures++
		} else if !f.forgotten {
			v.insert(k, user, time.Now().Add(v.ttl))
		}
		v.mu.Unlock()
		f.ok = ok
		close(f.done)
	}()
	match, err := Verify(encoded, password)
	ok = match && err == nil
	return ok
}

// CheckCached reports whether password matches encoded, the stored hash of user, by a
// cached success alone: it never runs argon2 and never waits for a run, so it is cheap
// enough for an event loop (one HMAC). false means "not known to match", not "wrong". Safe
// for concurrent use.
func (v *Verifier) CheckCached(user, encoded, password string) bool {
	k := v.cacheKey(user, encoded, password)
	now := time.Now()
	v.mu.Lock()
	defer v.mu.Unlock()
	el, ok := v.entries[k]
	if !ok || !now.Before(el.Value.(*cacheEntry).expires) {
		return false
	}
	v.lru.MoveToFront(el)
	v.stats.Hits++
	return true
}

// insert adds an entry, evicting the least recently used beyond size. v.mu must be held.
func (v *Verifier) insert(k [32]byte, user string, expires time.Time) {
	if el, ok := v.entries[k]; ok {
		el.Value.(*cacheEntry).expires = expires
		v.lru.MoveToFront(el)
		return
	}
	v.entries[k] = v.lru.PushFront(&cacheEntry{key: k, user: user, expires: expires})
	for v.lru.Len() > v.size {
		v.remove(v.lru.Back())
	}
}

// remove drops one entry. v.mu must be held.
func (v *Verifier) remove(el *list.Element) {
	delete(v.entries, el.Value.(*cacheEntry).key)
	v.lru.Remove(el)
}

// Forget drops every cached success of user, and keeps Checks of user now in flight from
// caching theirs. Call it when a user's password changes or the user is deleted. It scans the
// whole cache (bounded by size). Safe for concurrent use.
func (v *Verifier) Forget(user string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for el := v.lru.Front(); el != nil; {
		next := el.Next()
		if el.Value.(*cacheEntry).user == user {
			v.remove(el)
		}
		el = next
	}
	for _, f := range v.inflight {
		if f.user == user {
			f.forgotten = true
		}
	}
}

// Stats returns the Verifier's counters. Safe for concurrent use.
func (v *Verifier) Stats() VerifierStats {
	v.mu.Lock()
	defer v.mu.Unlock()
	s := v.stats
	s.Entries = v.lru.Len()
	return s
}
