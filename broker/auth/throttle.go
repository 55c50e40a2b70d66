package auth

import (
	"net/netip"
	"sync"
	"time"
)

// ThrottleConfig configures a Throttle. Zero fields take the value of DefaultThrottleConfig.
// The package doc says why the limits are keyed the way they are.
type ThrottleConfig struct {
	// One (address, user) pair: the penalty for guessing one user's password from one place.
	MaxFailures int           // failures of a pair within Window that block the pair
	Window      time.Duration // span over which pairs' and addresses' failures are counted
	BlockFor    time.Duration // how long a blocked pair or address stays blocked
	BaseDelay   time.Duration // delay of a failure's answer; doubles per consecutive failure of the pair
	MaxDelay    time.Duration // cap on that delay

	// One address, all users: a much higher ceiling, against spraying many users.
	MaxAddrFailures int // failures from an address within Window that block the address

	// One user, all addresses: a budget of failed guesses, refilled at a steady rate.
	UserBurst  int           // failures the budget holds
	UserRefill time.Duration // the budget regains one failure per UserRefill, up to UserBurst
	TrustFor   time.Duration // a pair that logged in is exempt from its user's budget this long

	// Attempts in flight (admitted, queued or being verified), refused beyond.
	MaxPending        int // in total
	MaxPendingPerAddr int // from one address
	MaxPendingPerPair int // from one address for one user

	// Memory: entries tracked at most; the least recently used idle entry is forgotten.
	MaxPairs   int
	MaxAddrs   int
	MaxUsers   int
	MaxTrusted int
}

// DefaultThrottleConfig returns the broker's limits, which PROTOCOL.md's AUTH section states:
//
//   - a pair is blocked for 1 minute after 5 failures within 1 minute; failures are answered
//     after 200 ms, doubling per consecutive failure of the pair, at most 2 s;
//   - an address is blocked for 1 minute after 50 failures (any users) within 1 minute;
//   - a user's budget holds 20 failures and regains one every 6 s (10 a minute, whatever the
//     number of addresses); pairs that logged in within 24 h are exempt from it;
//   - at most 128 attempts are in flight, 32 from one address, 8 from one pair (a cold
//     login storm of one service from one host gets 8 in at once, the rest retry; once one
//     has succeeded the others are cache hits, answered on the event loop without a slot);
//   - 65536 pairs, 65536 addresses, 16384 users and 16384 trusted pairs are tracked at most
//     (about 60 MB in the worst case of 255-byte user names, a few MB in practice).
func DefaultThrottleConfig() ThrottleConfig {
	return ThrottleConfig{
		MaxFailures:       5,
		Window:            time.Minute,
		BlockFor:          time.Minute,
		BaseDelay:         200 * time.Millisecond,
		MaxDelay:          2 * time.Second,
		MaxAddrFailures:   50,
		UserBurst:         20,
		UserRefill:        6 * time.Second,
		TrustFor:          24 * time.Hour,
		MaxPending:        128,
		MaxPendingPerAddr: 32,
		MaxPendingPerPair: 8,
		MaxPairs:          65536,
		MaxAddrs:          65536,
		MaxUsers:          16384,
		MaxTrusted:        16384,
	}
}

// withDefaults fills zero (or nonsensical) fields from DefaultThrottleConfig.
func (c ThrottleConfig) withDefaults() ThrottleConfig {
	d := DefaultThrottleConfig()
	orInt := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	orDur := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	orInt(&c.MaxFailures, d.MaxFailures)
	orDur(&c.Window, d.Window)
	orDur(&c.BlockFor, d.BlockFor)
	orDur(&c.BaseDelay, d.BaseDelay)
	if c.MaxDelay < c.BaseDelay {
		c.MaxDelay = max(d.MaxDelay, c.BaseDelay)
	}
	orInt(&c.MaxAddrFailures, d.MaxAddrFailures)
	orInt(&c.UserBurst, d.UserBurst)
	orDur(&c.UserRefill, d.UserRefill)
	orDur(&c.TrustFor, d.TrustFor)
	orInt(&c.MaxPending, d.MaxPending)
	orInt(&c.MaxPendingPerAddr, d.MaxPendingPerAddr)
	orInt(&c.MaxPendingPerPair, d.MaxPendingPerPair)
	orInt(&c.MaxPairs, d.MaxPairs)
	orInt(&c.MaxAddrs, d.MaxAddrs)
	orInt(&c.MaxUsers, d.MaxUsers)
	orInt(&c.MaxTrusted, d.MaxTrusted)
	return c
}

// Refusal says why a login attempt is refused without its password being verified. The zero
// value, Admitted, refuses nothing.
type Refusal uint8

const (
	Admitted           Refusal = iota
	RefusedBusy                // MaxPending attempts are in flight
	RefusedAddrBusy            // MaxPendingPerAddr (or MaxPendingPerPair) attempts are in flight
	RefusedPairBlocked         // the pair has used its failures (or is verifying its last ones)
	RefusedAddrBlocked         // the address has reached MaxAddrFailures
	RefusedUserBudget          // the user's budget is spent and the pair is not trusted
	RefusedVerifying           // attempts being verified may use up what the failures leave
)

// Busy reports whether r refuses for lack of capacity (answer RESOURCE_LIMIT: retrying soon
// may succeed) rather than as a penalty for failures (answer TOO_MANY_ATTEMPTS).
func (r Refusal) Busy() bool {
	return r == RefusedBusy || r == RefusedAddrBusy || r == RefusedVerifying
}

// Message is the refusal's text for the client.
func (r Refusal) Message() string {
	switch r {
	case RefusedBusy:
		return "too many logins in progress; retry shortly"
	case RefusedAddrBusy:
		return "too many logins in progress from this address; retry shortly"
	case RefusedPairBlocked:
		return "too many failed logins for this user from this address; try later"
	case RefusedAddrBlocked:
		return "too many failed logins from this address; try later"
	case RefusedUserBudget:
		return "too many failed logins for this user; try later"
	case RefusedVerifying:
		return "other logins for this user are being verified; retry shortly"
	}
	return "admitted"
}

// Outcome is what became of an admitted attempt, told to Throttle.Finish.
type Outcome uint8

const (
	Unverified Outcome = iota // refused by Evaluate, or never evaluated (the worker pool was full)
	Succeeded                 // the password matched
	Failed                    // the password (or the user) was wrong
)

// Throttle decides which login attempts may be verified and how failures are answered.
//
// Failures are counted per (address, user) pair, per address and per user. Addresses are IP
// strings without a port; IPv6 addresses are grouped by /64 (one host usually owns a whole
// /64) and IPv4-mapped IPv6 addresses count as IPv4. Strings that do not parse as IPs are
// used as given. Time is passed in by the caller.
//
// An attempt goes through three calls. Admit, on the connection's event loop, refuses at
// once what is already blocked or over the in-flight bounds, and counts the attempt in
// flight. Evaluate, on the worker, immediately before the password is checked, takes the
// decision again against the state of that moment and reserves the attempt's share of every
// failure budget, so parallel attempts cannot all pass a check none of them has yet failed.
// Finish records the outcome, releases the attempt and says how long to delay a failure.
//
// Memory is bounded by the Max* table sizes: beyond them the least recently used idle entry
// is forgotten (never one an attempt in flight points to), so an attacker who makes attempts
// from more distinct addresses than MaxPairs can flush blocks, and one who tries more user
// names than MaxUsers can flush a user's budget; the address ceiling and the in-flight
// bounds still limit its guessing rate.
//
// A Throttle is safe for concurrent use; no method blocks. An Attempt is handed from one
// goroutine to the next (loop, worker), never used by two at once.
type Throttle struct {
	cfg ThrottleConfig

	mu      sync.Mutex
	pending int // attempts between Admit and Finish
	pairs   *boundedTable[pairKey, pairState]
	addrs   *boundedTable[string, addrState]
	users   *boundedTable[string, userState]
	trusted *boundedTable[pairKey, time.Time] // until when a pair is exempt from its user's budget
}

type pairKey struct{ addr, user string }

// window counts failures in fixed windows and blocks once they reach a limit. reserved
// counts attempts being verified that would count if they failed.
type window struct {
	start        time.Time // of the current counting window
	failures     int       // since start
	reserved     int       // attempts evaluated and not yet finished
	blockedUntil time.Time // zero when not blocked
}

// refresh ends a block that is over and a counting window that is over.
func (w *window) refresh(now time.Time, span time.Duration) {
	if !w.blockedUntil.IsZero() {
		if now.Before(w.blockedUntil) {
			return
		}
		w.blockedUntil = time.Time{} // the block is over: count afresh
		w.failures, w.start = 0, now
	}
	if now.Sub(w.start) >= span {
		w.failures, w.start = 0, now
	}
}

// refuses reports whether the window refuses another attempt; with reserved, attempts being
// verified count as failures.
func (w *window) refuses(now time.Time, limit int, reserved bool) bool {
	if !w.blockedUntil.IsZero() && now.Before(w.blockedUntil) {
		return true
	}
	n := w.failures
	if reserved {
		n += w.reserved
	}
	return n >= limit
}

// fail counts a failure, blocking for blockFor once limit is reached. It reports whether
// the window is now blocked.
func (w *window) fail(now time.Time, limit int, blockFor time.Duration) bool {
	w.failures++
	if w.failures >= limit {
		w.blockedUntil = now.Add(blockFor)
		return true
	}
	return false
}

type pairState struct {
	window
	consecutive int // failures since the last success: the delay's exponent
	pending     int
}

type addrState struct {
	window
	pending int
}

// userState is a token bucket of failures: spent grows by one per failure of an untrusted
// pair and shrinks by one per UserRefill.
type userState struct {
	spent    int       // failures charged and not yet refilled
	refilled time.Time // when spent last shrank (or was zero)
	reserved int       // untrusted attempts evaluated and not yet finished
	pending  int
}

func (u *userState) refill(now time.Time, every time.Duration) {
	if u.spent == 0 {
		u.refilled = now
		return
	}
	n := int(now.Sub(u.refilled) / every)
	if n <= 0 {
		return
	}
	if n >= u.spent {
		u.spent, u.refilled = 0, now
		return
	}
	u.spent -= n
	u.refilled = u.refilled.Add(time.Duration(n) * every)
}

// NewThrottle returns a Throttle; zero fields of cfg take their defaults.
func NewThrottle(cfg ThrottleConfig) *Throttle {
	cfg = cfg.withDefaults()
	return &Throttle{
		cfg:     cfg,
		pairs:   newBoundedTable[pairKey](cfg.MaxPairs, func(p *pairState) bool { return p.pending > 0 }),
		addrs:   newBoundedTable[string](cfg.MaxAddrs, func(a *addrState) bool { return a.pending > 0 }),
		users:   newBoundedTable[string](cfg.MaxUsers, func(u *userState) bool { return u.pending > 0 }),
		trusted: newBoundedTable[pairKey, time.Time](cfg.MaxTrusted, nil),
	}
}

// Config returns the throttle's configuration, defaults filled in.
func (t *Throttle) Config() ThrottleConfig { return t.cfg }

// normalize maps an address to its throttling key.
func normalize(addr string) string {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// Attempt is one login attempt between Throttle.Admit and Throttle.Finish.
type Attempt struct {
	key      pairKey
	pair     *pairState
	addr     *addrState
	user     *userState
	trusted  bool // set by Evaluate: exempt from the user budget
	reserved bool // Evaluate admitted it and reserved its share of the budgets
	finished bool
}

// Admit is called when an attempt by user from addr arrives, before it is queued. It
// refuses at once an attempt that is blocked, or over an in-flight bound; otherwise it
// counts the attempt in flight and returns it, and the caller must call Finish exactly once
// (after Evaluate, or with Unverified). Safe for concurrent use; does not block.
func (t *Throttle) Admit(addr, user string, now time.Time) (*Attempt, Refusal) {
	key := pairKey{addr: normalize(addr), user: user}
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.penaltyLocked(key, t.pairs.peek(key), t.addrs.peek(key.addr), t.users.peek(user), now, false); r != Admitted {
		return nil, r
	}
	if t.pending >= t.cfg.MaxPending {
		return nil, RefusedBusy
	}
	if a := t.addrs.peek(key.addr); a != nil && a.pending >= t.cfg.MaxPendingPerAddr {
		return nil, RefusedAddrBusy
	}
	if p := t.pairs.peek(key); p != nil && p.pending >= t.cfg.MaxPendingPerPair {
		return nil, RefusedAddrBusy
	}
	at := &Attempt{
		key:  key,
		pair: t.pairs.getOrAdd(key, func() pairState { return pairState{window: window{start: now}} }),
		addr: t.addrs.getOrAdd(key.addr, func() addrState { return addrState{window: window{start: now}} }),
		user: t.users.getOrAdd(user, func() userState { return userState{refilled: now} }),
	}
	at.pair.pending++
	at.addr.pending++
	at.user.pending++
	t.pending++
	return at, Admitted
}

// Evaluate is called immediately before at's password is checked (on the worker that would
// hash it) and decides whether it may be: against the failures recorded by then and the
// attempts being verified at that moment, each counted as if it will fail. An admitted
// attempt has reserved its share of the budgets until Finish. Call it once per attempt
// (later calls change nothing); a refused attempt is then finished with Unverified. Safe
// for concurrent use.
func (t *Throttle) Evaluate(at *Attempt, now time.Time) Refusal {
	t.mu.Lock()
	defer t.mu.Unlock()
	if at.reserved || at.finished { // misuse: never reserve twice, or after Finish
		return Admitted
	}
	if exp := t.trusted.peek(at.key); exp != nil {
		if now.Before(*exp) {
			at.trusted = true
		} else {
			t.trusted.remove(at.key)
		}
	}
	if r := t.penaltyLocked(at.key, at.pair, at.addr, at.user, now, false); r != Admitted {
		return r
	}
	// The failures alone leave room, but the attempts being verified could use it up: this
	// one waits for their outcome. That is capacity, not a penalty: a storm of right
	// passwords must not be refused as if it were guessing.
	if t.penaltyLocked(at.key, at.pair, at.addr, at.user, now, true) != Admitted {
		return RefusedVerifying
	}
	at.reserved = true
	at.pair.reserved++
	at.addr.reserved++
	if !at.trusted {
		at.user.reserved++
	}
	return Admitted
}

// penaltyLocked says which failure limit refuses an attempt of key now (nil states have no
// failures); with reserved, attempts being verified count as failures. t.mu must be held.
func (t *Throttle) penaltyLocked(key pairKey, p *pairState, a *addrState, u *userState, now time.Time, reserved bool) Refusal {
	if p != nil {
		p.refresh(now, t.cfg.Window)
		if p.refuses(now, t.cfg.MaxFailures, reserved) {
			return RefusedPairBlocked
		}
	}
	if a != nil {
		a.refresh(now, t.cfg.Window)
		if a.refuses(now, t.cfg.MaxAddrFailures, reserved) {
			return RefusedAddrBlocked
		}
	}
	if u != nil {
		u.refill(now, t.cfg.UserRefill)
		n := u.spent
		if reserved {
			n += u.reserved
		}
		if n >= t.cfg.UserBurst && !t.trustedLocked(key, now) {
			return RefusedUserBudget
		}
	}
	return Admitted
}

func (t *Throttle) trustedLocked(key pairKey, now time.Time) bool {
	exp := t.trusted.peek(key)
	return exp != nil && now.Before(*exp)
}

// Finish records what became of at and releases it. For Failed it returns how long to wait
// before answering (BaseDelay doubled per consecutive failure of the pair, at most MaxDelay)
// and, when this failure blocked the pair or the address, the refusal to answer with instead
// of AUTH_FAILED. A success resets the pair's failures (not the address's or the user's: an
// attacker's own account must not buy it more guesses) and exempts the pair from the user's
// budget for TrustFor. Calls after the first for the same attempt do nothing. Safe for
// concurrent use.
func (t *Throttle) Finish(at *Attempt, outcome Outcome, now time.Time) (time.Duration, Refusal) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if at.finished {
		return 0, Admitted
	}
	at.finished = true
	at.pair.pending--
	at.addr.pending--
	at.user.pending--
	t.pending--
	if at.reserved {
		at.pair.reserved--
		at.addr.reserved--
		if !at.trusted {
			at.user.reserved--
		}
	}
	switch {
	case outcome == Succeeded:
		// A block set meanwhile by attempts evaluated alongside this one ends too.
		at.pair.failures, at.pair.consecutive, at.pair.blockedUntil = 0, 0, time.Time{}
		*t.trusted.getOrAdd(at.key, func() time.Time { return now }) = now.Add(t.cfg.TrustFor)
		return 0, Admitted
	case outcome == Failed:
		refusal := Admitted
		at.pair.refresh(now, t.cfg.Window)
		at.pair.consecutive++
		if at.pair.fail(now, t.cfg.MaxFailures, t.cfg.BlockFor) {
			refusal = RefusedPairBlocked
		}
		at.addr.refresh(now, t.cfg.Window)
		if at.addr.fail(now, t.cfg.MaxAddrFailures, t.cfg.BlockFor) && refusal == Admitted {
			refusal = RefusedAddrBlocked
		}
		if !at.trusted {
			at.user.refill(now, t.cfg.UserRefill)
			at.user.spent++
		}
		delay := t.cfg.BaseDelay
		for i := 1; i < at.pair.consecutive && delay < t.cfg.MaxDelay; i++ {
			delay *= 2
		}
		return min(delay, t.cfg.MaxDelay), refusal
	}
	return 0, Admitted
}

// ThrottleSizes are the sizes of a Throttle's tables.
type ThrottleSizes struct {
	Pending, Pairs, Addrs, Users, Trusted int
}

// Sizes returns the sizes of the throttle's tables. Safe for concurrent use.
func (t *Throttle) Sizes() ThrottleSizes {
	t.mu.Lock()
	defer t.mu.Unlock()
	return ThrottleSizes{
		Pending: t.pending,
		Pairs:   t.pairs.len(),
		Addrs:   t.addrs.len(),
		Users:   t.users.len(),
		Trusted: t.trusted.len(),
	}
}
