package broker

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/lightq/lightq/wire"
)

// Issue 9, findings 2 and 3: parallel password guessing must not get past the login
// throttle, and one user's failures must not lock out the others at the same address. These
// tests send hundreds of AUTHs at once over hundreds of connections, with cheap hash
// parameters (testConfig), and count the argon2 runs in the verifier's stats.

// loginProbe is a connection past HELLO that any goroutine can drive: it returns errors
// instead of failing a test, which only the test's goroutine may do.
type loginProbe struct {
	conn net.Conn
	r    *bufio.Reader
	corr uint32
}

// dialLogin connects from the local IP from (any 127.0.0.0/8 address is loopback on Linux,
// so one machine can play many client addresses) and says HELLO.
func dialLogin(addr, from string) (*loginProbe, error) {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &loginProbe{conn: c, r: bufio.NewReader(c)}
	m := wire.Hello{ClientName: "login-storm", ClientVersion: "1"}
	if op, _, err := p.roundTrip(wire.OpHello, m.AppendTo(nil)); err != nil || op != wire.OpHello {
		c.Close()
		return nil, fmt.Errorf("HELLO: %v (answer %s)", err, op)
	}
	return p, nil
}

// roundTrip sends one request and reads its answer, returning the answer's op and body.
func (p *loginProbe) roundTrip(op wire.Op, body []byte) (wire.Op, []byte, error) {
	p.corr++
	_ = p.conn.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := p.conn.Write(wire.AppendFrame(nil, op, 0, p.corr, body)); err != nil {
		return 0, nil, err
	}
	head := make([]byte, wire.HeaderSize)
	if _, err := io.ReadFull(p.r, head); err != nil {
		return 0, nil, err
	}
	n, err := wire.FrameSize(head, 1<<20)
	if err != nil {
		return 0, nil, err
	}
	buf := make([]byte, n)
	copy(buf, head)
	if _, err := io.ReadFull(p.r, buf[wire.HeaderSize:]); err != nil {
		return 0, nil, err
	}
	h, b, err := wire.ParseFrame(buf)
	if err != nil {
		return 0, nil, err
	}
	if h.Corr != p.corr {
		return 0, nil, fmt.Errorf("answer to corr %d, want %d", h.Corr, p.corr)
	}
	return h.Op, b, nil
}

// auth sends AUTH and returns 0 on success or the ERROR's code.
func (p *loginProbe) auth(user, pass string) (wire.Code, error) {
	m := wire.Auth{User: user, Password: pass}
	op, body, err := p.roundTrip(wire.OpAuth, m.AppendTo(nil))
	if err != nil {
		return 0, err
	}
	switch op {
	case wire.OpAuth:
		return 0, nil
	case wire.OpError:
		var eb wire.ErrorBody
		if err := eb.Decode(body); err != nil {
			return 0, err
		}
		return eb.Code, nil
	}
	return 0, fmt.Errorf("AUTH answered with %s", op)
}

// guessUntilRefused sends wrong passwords for user until the broker answers
// TOO_MANY_ATTEMPTS, as an attacker would: AUTH_FAILED and RESOURCE_LIMIT keep the
// connection open, so it tries again. It tallies the answers in codes.
func (p *loginProbe) guessUntilRefused(user, tag string, codes *codeTally) error {
	for i := 0; i < 10000; i++ {
		code, err := p.auth(user, fmt.Sprintf("wrong-%s-%d", tag, i))
		if err != nil {
			return err
		}
		codes.add(code)
		switch code {
		case wire.CodeTooManyAttempts:
			return nil
		case wire.CodeAuthFailed, wire.CodeResourceLimit:
		default:
			return fmt.Errorf("wrong password answered %s", code)
		}
	}
	return fmt.Errorf("still not refused after 10000 guesses")
}

type codeTally struct {
	mu sync.Mutex
	n  map[wire.Code]int
}

func (t *codeTally) add(c wire.Code) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil {
		t.n = map[wire.Code]int{}
	}
	t.n[c]++
}

func (t *codeTally) get(c wire.Code) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n[c]
}

// attack opens one connection per entry of from, then lets all of them guess user's password
// at once (each until refused) and returns a function that waits for them. Failing to
// connect fails the test.
func attack(t *testing.T, addr string, from []string, user string, codes *codeTally) (wait func()) {
	t.Helper()
	probes := make([]*loginProbe, len(from))
	for i, ip := range from {
		p, err := dialLogin(addr, ip)
		if err != nil {
			t.Fatalf("attacker %d from %s: %v", i, ip, err)
		}
		t.Cleanup(func() { p.conn.Close() })
		probes[i] = p
	}
	start := make(chan struct{})
	errs := make(chan error, len(probes))
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Go(func() {
			<-start
			if err := p.guessUntilRefused(user, fmt.Sprint(i), codes); err != nil {
				errs <- fmt.Errorf("attacker %d: %w", i, err)
			}
		})
	}
	close(start)
	return func() {
		t.Helper()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
}

// mustLoginWithin logs user in from the address from and fails the test unless that
// succeeds within limit (finding 3: the penalty of others' failures must not reach it).
func mustLoginWithin(t *testing.T, addr, from, user, pass string, limit time.Duration) {
	t.Helper()
	p, err := dialLogin(addr, from)
	if err != nil {
		t.Fatal(err)
	}
	defer p.conn.Close()
	begin := time.Now()
	code, err := p.auth(user, pass)
	el := time.Since(begin)
	if err != nil || code != 0 {
		t.Fatalf("%s from %s: %v %v after %v", user, from, code, err, el)
	}
	if el > limit {
		t.Fatalf("%s from %s logged in after %v, more than %v", user, from, el, limit)
	}
}

// expectRefused checks that the right password of user from the address from is refused with
// TOO_MANY_ATTEMPTS: the correct guess placed last in a burst must not be let in beyond the
// budget.
func expectRefused(t *testing.T, addr, from, user, pass string) {
	t.Helper()
	p, err := dialLogin(addr, from)
	if err != nil {
		t.Fatal(err)
	}
	defer p.conn.Close()
	if code, err := p.auth(user, pass); err != nil || code != wire.CodeTooManyAttempts {
		t.Fatalf("right password of %s from %s after the burst: code %v, err %v; want TOO_MANY_ATTEMPTS", user, from, code, err)
	}
}

func TestLoginStormFromOneAddress(t *testing.T) {
	srv := startBroker(t, nil)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass) // caches the admin's success
	admin.createTopic("storm-victim", 1, "victim", "victim-pw")
	admin.createTopic("storm-bystander", 1, "bystander", "bystander-pw")
	before := srv.verifier.Stats()

	const attackers = 300
	from := make([]string, attackers)
	for i := range from {
		from[i] = "127.0.0.1"
	}
	var codes codeTally
	wait := attack(t, srv.Addr(), from, "victim", &codes)
	// While the burst runs: another user from the same address gets in, whether its
	// success is cached (admin) or must be hashed (bystander, never logged in).
	mustLoginWithin(t, srv.Addr(), "127.0.0.1", "bystander", "bystander-pw", 2*time.Second)
	mustLoginWithin(t, srv.Addr(), "127.0.0.1", testAdminUser, testAdminPass, 2*time.Second)
	wait()
	after := srv.verifier.Stats()

	// The victim's guesses hashed: MaxFailures (5) of them, however many were sent.
	// The bystander's one login is the other verification; the admin's was a cache hit.
	maxFailures := srv.throttle.Config().MaxFailures
	if runs := after.Verifications - before.Verifications; runs != uint64(maxFailures)+1 {
		t.Errorf("%d argon2 runs for %d parallel guesses plus one login, want %d", runs, attackers, maxFailures+1)
	}
	if n := codes.get(wire.CodeAuthFailed); n != maxFailures-1 {
		t.Errorf("%d guesses answered AUTH_FAILED, want %d (the %dth answers TOO_MANY_ATTEMPTS)", n, maxFailures-1, maxFailures)
	}
	t.Logf("answers: %d AUTH_FAILED, %d RESOURCE_LIMIT, %d TOO_MANY_ATTEMPTS; %d argon2 runs",
		codes.get(wire.CodeAuthFailed), codes.get(wire.CodeResourceLimit), codes.get(wire.CodeTooManyAttempts),
		after.Verifications-before.Verifications)
	expectRefused(t, srv.Addr(), "127.0.0.1", "victim", "victim-pw")
	mustLoginWithin(t, srv.Addr(), "127.0.0.1", "bystander", "bystander-pw", 2*time.Second)
	if s := srv.throttle.Sizes(); s.Pending != 0 {
		t.Errorf("%d attempts still counted in flight", s.Pending)
	}
	admin.ping()
}

func TestLoginGuessesFromManyAddresses(t *testing.T) {
	srv := startBroker(t, nil)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createTopic("spread-victim", 1, "victim", "victim-pw")
	mustLoginWithin(t, srv.Addr(), "127.0.0.1", "victim", "victim-pw", 2*time.Second) // its usual address
	before := srv.verifier.Stats()
	begin := time.Now()

	// 60 addresses with 5 connections each: 300 parallel guessers, each address allowed
	// MaxFailures of its own, so only the user's budget limits them.
	var from []string
	for a := range 60 {
		for range 5 {
			from = append(from, fmt.Sprintf("127.0.1.%d", a+1))
		}
	}
	var codes codeTally
	attack(t, srv.Addr(), from, "victim", &codes)()
	runs := int(srv.verifier.Stats().Verifications - before.Verifications)
	cfg := srv.throttle.Config()
	refills := int(time.Since(begin) / cfg.UserRefill)
	if runs < cfg.UserBurst || runs > cfg.UserBurst+refills {
		t.Errorf("%d argon2 runs for %d guessers on 60 addresses, want %d (UserBurst) plus %d refills at most",
			runs, len(from), cfg.UserBurst, refills)
	}
	t.Logf("answers: %d AUTH_FAILED, %d RESOURCE_LIMIT, %d TOO_MANY_ATTEMPTS; %d argon2 runs",
		codes.get(wire.CodeAuthFailed), codes.get(wire.CodeResourceLimit), codes.get(wire.CodeTooManyAttempts), runs)

	// The right password from a new address is refused while the budget is spent; from the
	// address the user logged in from before, it gets in.
	expectRefused(t, srv.Addr(), "127.0.2.1", "victim", "victim-pw")
	mustLoginWithin(t, srv.Addr(), "127.0.0.1", "victim", "victim-pw", 2*time.Second)
	if s := srv.throttle.Sizes(); s.Pending != 0 {
		t.Errorf("%d attempts still counted in flight", s.Pending)
	}
}

// A login storm of one service with the right password (all its connections after a broker
// restart, say) is not mistaken for guessing: MaxPendingPerPair connections get in at once
// while the first check runs (one argon2 run, shared), and once it has succeeded any number
// are cache hits, answered on the event loop without an argon2 run or an in-flight slot.
func TestLoginStormOfRightPasswords(t *testing.T) {
	srv := startBroker(t, nil)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createTopic("storm-service", 1, "service", "service-pw")
	before := srv.verifier.Stats()

	storm := func(n int) {
		t.Helper()
		probes := make([]*loginProbe, n)
		for i := range probes {
			p, err := dialLogin(srv.Addr(), "127.0.0.1")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.conn.Close() })
			probes[i] = p
		}
		start := make(chan struct{})
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for i, p := range probes {
			wg.Go(func() {
				<-start
				if code, err := p.auth("service", "service-pw"); err != nil || code != 0 {
					errs <- fmt.Errorf("login %d: code %v, err %v", i, code, err)
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
	storm(srv.throttle.Config().MaxPendingPerPair) // cold: nothing cached yet
	if runs := srv.verifier.Stats().Verifications - before.Verifications; runs != 1 {
		t.Errorf("cold storm: %d argon2 runs, want 1 (the others wait for it or hit the cache)", runs)
	}
	warm := srv.verifier.Stats()
	storm(300) // warm: cache hits
	if after := srv.verifier.Stats(); after.Verifications != warm.Verifications || after.Hits < warm.Hits+300 {
		t.Errorf("warm storm of 300: %d argon2 runs, %d hits", after.Verifications-warm.Verifications, after.Hits-warm.Hits)
	}
	if s := srv.throttle.Sizes(); s.Pending != 0 {
		t.Errorf("%d attempts still counted in flight", s.Pending)
	}
}
