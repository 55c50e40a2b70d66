package auth

import (
	"container/list"
	"net/netip"
	"sync"
	"time"
)

// ThrottleConfig configures a Throttle. Zero fields take the value of DefaultThrottleConfig.
type ThrottleConfig struct {
	MaxFailures int           // failures within Window that block an address
	Window      time.Duration // span over which failures are counted
	BlockFor    time.Duration // how long a blocked address stays blocked
	BaseDelay   time.Duration // delay of the first failure's answer; doubles per consecutive failure
	MaxDelay    time.Duration // cap on that delay
	MaxAddrs    int           // addresses tracked at most; the least recently failed is forgotten
}

// DefaultThrottleConfig blocks an address for a minute after 5 failures within a minute and
// delays failure answers by 200 ms, 400 ms, ... up to 2 s. It tracks up to 65536 addresses.
func DefaultThrottleConfig() ThrottleConfig {
	return ThrottleConfig{
		MaxFailures: 5,
		Window:      time.Minute,
		BlockFor:    time.Minute,
		BaseDelay:   200 * time.Millisecond,
		MaxDelay:    2 * time.Second,
		MaxAddrs:    65536,
	}
}

// Throttle tracks failed logins per remote address. Addresses are IP strings without a port;
// IPv6 addresses are grouped by /64 (one host usually owns a whole /64) and IPv4-mapped IPv6
// addresses count as IPv4. Strings that do not parse as IPs are used as given.
//
// Memory is bounded by MaxAddrs: beyond it the address whose last failure is oldest is
// forgotten, so an attacker with more than MaxAddrs addresses can flush the table; the delay
// and the worker pool's bound still limit its guessing rate. Time is passed in by the caller.
//
// A Throttle is safe for concurrent use.
type Throttle struct {
	cfg ThrottleConfig

	mu    sync.Mutex
	lru   list.List // of *addrState, most recently failed at the front
	addrs map[string]*list.Element
}

type addrState struct {
	addr         string
	windowStart  time.Time // start of the current counting window
	failures     int       // failures since windowStart
	consecutive  int       // failures since the last success
	blockedUntil time.Time // zero when not blocked
}

// NewThrottle returns a Throttle; zero fields of cfg take their defaults.
func NewThrottle(cfg ThrottleConfig) *Throttle {
	d := DefaultThrottleConfig()
	if cfg.MaxFailures <= 0 {
		cfg.MaxFailures = d.MaxFailures
	}
	if cfg.Window <= 0 {
		cfg.Window = d.Window
	}
	if cfg.BlockFor <= 0 {
		cfg.BlockFor = d.BlockFor
	}
	if cfg.BaseDelay <= 0 {
		cfg.BaseDelay = d.BaseDelay
	}
	if cfg.MaxDelay < cfg.BaseDelay {
		cfg.MaxDelay = max(d.MaxDelay, cfg.BaseDelay)
	}
	if cfg.MaxAddrs <= 0 {
		cfg.MaxAddrs = d.MaxAddrs
	}
	return &Throttle{cfg: cfg, addrs: make(map[string]*list.Element)}
}

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

// Blocked reports whether addr is blocked at now. The caller should then refuse the login
// without verifying the password. Safe for concurrent use.
func (t *Throttle) Blocked(addr string, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	el, ok := t.addrs[normalize(addr)]
	if !ok {
		return false
	}
	s := el.Value.(*addrState)
	if s.blockedUntil.IsZero() {
		return false
	}
	if now.Before(s.blockedUntil) {
		return true
	}
	// The block is over: start counting afresh (the answer delay keeps growing).
	s.blockedUntil = time.Time{}
	s.failures = 0
	s.windowStart = now
	return false
}

// Failure records a failed login from addr at now and returns how long to wait before
// answering AUTH_FAILED: BaseDelay doubled per consecutive failure, at most MaxDelay. The
// MaxFailures-th failure within Window blocks addr for BlockFor. Safe for concurrent use.
func (t *Throttle) Failure(addr string, now time.Time) time.Duration {
	key := normalize(addr)
	t.mu.Lock()
	defer t.mu.Unlock()
	var s *addrState
	if el, ok := t.addrs[key]; ok {
		s = el.Value.(*addrState)
		t.lru.MoveToFront(el)
	} else {
		s = &addrState{addr: key, windowStart: now}
		t.addrs[key] = t.lru.PushFront(s)
		for t.lru.Len() > t.cfg.MaxAddrs {
			back := t.lru.Back()
			delete(t.addrs, back.Value.(*addrState).addr)
			t.lru.Remove(back)
		}
	}
	if now.Sub(s.windowStart) >= t.cfg.Window {
		s.windowStart = now
		s.failures = 0
	}
	s.failures++
	s.consecutive++
	if s.failures >= t.cfg.MaxFailures {
		s.blockedUntil = now.Add(t.cfg.BlockFor)
	}
	delay := t.cfg.BaseDelay
	for i := 1; i < s.consecutive && delay < t.cfg.MaxDelay; i++ {
		delay *= 2
	}
	return min(delay, t.cfg.MaxDelay)
}

// Success forgets addr's failures after a successful login. Safe for concurrent use.
func (t *Throttle) Success(addr string) {
	key := normalize(addr)
	t.mu.Lock()
	defer t.mu.Unlock()
	if el, ok := t.addrs[key]; ok {
		delete(t.addrs, key)
		t.lru.Remove(el)
	}
}

// Len returns the number of addresses tracked. Safe for concurrent use.
func (t *Throttle) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lru.Len()
}
