package group

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/lightq/lightq/wire"
)

// fakeClock is a manual clock for table tests; they call Tick themselves.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newFake(t *testing.T, mutate func(*Config)) (*Coordinator, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: time.Unix(1700000000, 0)}
	cfg := DefaultConfig()
	cfg.Now = clk.now
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	co := New(cfg)
	t.Cleanup(co.Stop)
	return co, clk
}

func mid(n byte) wire.MemberID { return wire.MemberID{0xaa, n} }

// client is a test member: it applies answers and reports what it owns, like a well-behaved
// consumer that releases revoked partitions at once.
type client struct {
	t     *testing.T
	co    *Coordinator
	id    wire.MemberID
	topic string
	gen   uint32
	owned []uint32
}

const testTopic, testGroup = "audit", "billing"

func join(t *testing.T, co *Coordinator, n byte, partitions int) *client {
	t.Helper()
	cl := &client{t: t, co: co, id: mid(n), topic: testTopic}
	a := co.Join(JoinRequest{Topic: testTopic, Group: testGroup, Member: cl.id, Partitions: partitions, ClientID: fmt.Sprint("c", n), Addr: "127.0.0.1:1"})
	if a.Err != nil {
		t.Fatalf("join %d: %v", n, a.Err)
	}
	cl.apply(a)
	return cl
}

func (cl *client) apply(a Answer) {
	if a.Generation >= cl.gen {
		cl.gen, cl.owned = a.Generation, slices.Clone(a.Partitions)
	}
}

// beat sends a heartbeat that is answered at once and applies its answer.
func (cl *client) beat() Answer {
	cl.t.Helper()
	a, park := cl.co.Heartbeat(HeartbeatRequest{Topic: cl.topic, Group: testGroup, Member: cl.id, Generation: cl.gen, Owned: cl.owned}, nil)
	if park != nil {
		cl.t.Fatal("a heartbeat without max wait was held")
	}
	if a.Err == nil {
		cl.apply(a)
	}
	return a
}

// park sends a heartbeat that may be held; its answer, now or later, goes to the channel.
func (cl *client) park(wait time.Duration) (<-chan Answer, *Parked) {
	ch := make(chan Answer, 1)
	a, p := cl.co.Heartbeat(HeartbeatRequest{Topic: cl.topic, Group: testGroup, Member: cl.id, Generation: cl.gen, MaxWait: wait, Owned: cl.owned}, func(a Answer) { ch <- a })
	if p == nil {
		ch <- a
	}
	return ch, p
}

func (cl *client) commit(p uint32) error {
	return cl.co.CheckCommit(cl.topic, testGroup, cl.id, cl.gen, p)
}

// converge heartbeats every client until a whole round changes no assignment and no
// generation (a release in a round's last heartbeat hands over to a member that learns it
// in the next round).
func converge(t *testing.T, cls ...*client) {
	t.Helper()
	for round := 0; round < 10; round++ {
		changed := false
		for _, cl := range cls {
			before, gen := slices.Clone(cl.owned), cl.gen
			if a := cl.beat(); a.Err != nil {
				t.Fatalf("heartbeat of %s: %v", cl.id, a.Err)
			}
			changed = changed || !slices.Equal(before, cl.owned) || gen != cl.gen
		}
		if !changed {
			return
		}
	}
	t.Fatal("assignments did not converge in 10 rounds")
}

// checkSplit checks that the clients' assignments are disjoint, cover n partitions and
// differ in size by at most 1.
func checkSplit(t *testing.T, n int, cls ...*client) {
	t.Helper()
	seen := make([]bool, n)
	lo, hi := n, 0
	for _, cl := range cls {
		for _, p := range cl.owned {
			if seen[p] {
				t.Fatalf("partition %d assigned twice", p)
			}
			seen[p] = true
		}
		lo, hi = min(lo, len(cl.owned)), max(hi, len(cl.owned))
	}
	for p, ok := range seen {
		if !ok {
			t.Fatalf("partition %d assigned to nobody", p)
		}
	}
	if hi-lo > 1 {
		t.Fatalf("assignment sizes from %d to %d", lo, hi)
	}
}

func TestThreeMembersOnEightPartitions(t *testing.T) {
	co, _ := newFake(t, nil)
	a := join(t, co, 1, 8)
	if len(a.owned) != 8 {
		t.Fatalf("the first member got %v", a.owned)
	}
	b := join(t, co, 2, 8)
	if len(b.owned) != 0 {
		t.Fatalf("the second member got %v before the first released anything", b.owned)
	}
	c := join(t, co, 3, 8)
	converge(t, a, b, c)
	checkSplit(t, 8, a, b, c)
	for _, cl := range []*client{a, b, c} {
		if n := len(cl.owned); n < 2 || n > 3 {
			t.Fatalf("member %s has %d partitions", cl.id, n)
		}
	}
}

func TestStickyMovesOnlyWhatMust(t *testing.T) {
	co, _ := newFake(t, nil)
	a, b := join(t, co, 1, 6), join(t, co, 2, 6)
	converge(t, a, b)
	beforeA, beforeB := slices.Clone(a.owned), slices.Clone(b.owned)
	c := join(t, co, 3, 6)
	converge(t, a, b, c)
	checkSplit(t, 6, a, b, c)
	// Each of a and b gave exactly one partition to c and kept the rest.
	for _, pair := range [][2][]uint32{{beforeA, a.owned}, {beforeB, b.owned}} {
		kept := 0
		for _, p := range pair[1] {
			if slices.Contains(pair[0], p) {
				kept++
			}
		}
		if kept != 2 || len(pair[1]) != 2 {
			t.Fatalf("before %v, after %v: want 2 of the old partitions kept", pair[0], pair[1])
		}
	}
	// c leaves: its two partitions go, one each, to a and b; nothing else moves.
	ownA, ownB := slices.Clone(a.owned), slices.Clone(b.owned)
	if err := co.Leave(testTopic, testGroup, c.id); err != nil {
		t.Fatal(err)
	}
	converge(t, a, b)
	checkSplit(t, 6, a, b)
	for _, pair := range [][2][]uint32{{ownA, a.owned}, {ownB, b.owned}} {
		for _, p := range pair[0] {
			if !slices.Contains(pair[1], p) {
				t.Fatalf("partition %d moved away from a member that kept its share: %v -> %v", p, pair[0], pair[1])
			}
		}
	}
}

func TestRevokedPartitionWaitsForItsRelease(t *testing.T) {
	co, _ := newFake(t, nil)
	a := join(t, co, 1, 4)
	b := join(t, co, 2, 4)
	// a is told that half its partitions are revoked, but still holds them.
	stale := a.gen
	oldOwned := slices.Clone(a.owned)
	ans, _ := co.Heartbeat(HeartbeatRequest{Topic: testTopic, Group: testGroup, Member: a.id, Generation: a.gen, Owned: oldOwned}, nil)
	if ans.Err != nil || len(ans.Partitions) != 2 {
		t.Fatalf("heartbeat: %+v", ans)
	}
	revoked := []uint32{}
	for _, p := range oldOwned {
		if !slices.Contains(ans.Partitions, p) {
			revoked = append(revoked, p)
		}
	}
	if b.beat(); len(b.owned) != 0 {
		t.Fatalf("b got %v while a still holds them", b.owned)
	}
	a.gen = ans.Generation
	// Revoked but not released: a may commit it (the last commit before the hand-over).
	if err := a.commit(revoked[0]); err != nil {
		t.Fatalf("commit of a revoked partition before its release: %v", err)
	}
	// A heartbeat that reports an older generation than the revoking answer releases nothing.
	if ans, _ := co.Heartbeat(HeartbeatRequest{Topic: testTopic, Group: testGroup, Member: a.id, Generation: stale, Owned: ans.Partitions}, nil); ans.Err != nil {
		t.Fatal(ans.Err)
	}
	if b.beat(); len(b.owned) != 0 {
		t.Fatalf("a stale heartbeat released %v", b.owned)
	}
	if d := co.Describe(testTopic, testGroup); !slices.Equal(d.Members[0].Revoking, revoked) {
		t.Fatalf("describe: a revoking %v, want %v", d.Members[0].Revoking, revoked)
	}
	// The real release.
	a.owned = ans.Partitions
	beforeRelease := a.gen
	a.beat()
	if b.beat(); !slices.Equal(b.owned, revoked) {
		t.Fatalf("b got %v after the release, want %v", b.owned, revoked)
	}
	if err := a.commit(revoked[0]); !errors.Is(err, &Error{Kind: KindFenced}) {
		t.Fatalf("commit of a released partition: %v, want fenced", err)
	}
	if err := b.commit(revoked[0]); err != nil {
		t.Fatalf("commit by the new holder: %v", err)
	}
	b.gen = beforeRelease // older than the hand-over to b
	if err := b.commit(revoked[0]); !errors.Is(err, &Error{Kind: KindFenced}) {
		t.Fatalf("commit with a generation before the hand-over: %v, want fenced", err)
	}
}

// A partition given in an answer the member has not seen yet (it heartbeats with an older
// generation and without the partition) is not released.
func TestAnswerInFlightIsNotReleased(t *testing.T) {
	co, _ := newFake(t, nil)
	a := join(t, co, 1, 2)
	b := join(t, co, 2, 2)
	converge(t, a, b)
	if err := co.Leave(testTopic, testGroup, b.id); err != nil {
		t.Fatal(err)
	}
	// a is given b's partition in this answer, which "gets lost" (a does not apply it).
	ans, _ := co.Heartbeat(HeartbeatRequest{Topic: testTopic, Group: testGroup, Member: a.id, Generation: a.gen, Owned: a.owned}, nil)
	if len(ans.Partitions) != 2 {
		t.Fatalf("a got %v", ans.Partitions)
	}
	c := join(t, co, 3, 2) // one partition should go to c, revoked from a
	a.beat()               // old generation, owns one partition: not trusted
	c.beat()
	if len(c.owned) != 0 {
		t.Fatalf("c got %v from a heartbeat of a that had not seen its assignment", c.owned)
	}
	converge(t, a, c)
	checkSplit(t, 2, a, c)
}

func TestClaimOfAnotherMembersPartitionFences(t *testing.T) {
	co, _ := newFake(t, nil)
	a, b := join(t, co, 1, 4), join(t, co, 2, 4)
	converge(t, a, b)
	claim := append(slices.Clone(a.owned), b.owned[0])
	slices.Sort(claim)
	a.owned = claim
	if ans := a.beat(); !errors.Is(ans.Err, &Error{Kind: KindFenced}) {
		t.Fatalf("a claimed b's partition: %v, want fenced", ans.Err)
	}
	if err := a.commit(claim[0]); !errors.Is(err, &Error{Kind: KindUnknownMember}) {
		t.Fatalf("commit of a fenced member: %v, want unknown member", err)
	}
	converge(t, b)
	checkSplit(t, 4, b)
	a.gen = b.gen + 5
	if ans := b.beatWith(b.gen + 5); !errors.Is(ans.Err, &Error{Kind: KindFenced}) {
		t.Fatalf("a generation the group has not reached: %v, want fenced", ans.Err)
	}
}

func (cl *client) beatWith(gen uint32) Answer {
	a, _ := cl.co.Heartbeat(HeartbeatRequest{Topic: cl.topic, Group: testGroup, Member: cl.id, Generation: gen, Owned: cl.owned}, nil)
	return a
}

func TestRejoinKeepsTheAssignment(t *testing.T) {
	co, _ := newFake(t, nil)
	a, b := join(t, co, 1, 4), join(t, co, 2, 4)
	converge(t, a, b)
	before := slices.Clone(b.owned)
	again := join(t, co, 2, 4)
	if !slices.Equal(again.owned, before) {
		t.Fatalf("rejoin got %v, had %v", again.owned, before)
	}
	if d := co.Describe(testTopic, testGroup); len(d.Members) != 2 {
		t.Fatalf("rejoin made %d members", len(d.Members))
	}
}

func TestHeldHeartbeatAnsweredWhenPartitionsFree(t *testing.T) {
	co, _ := newFake(t, nil)
	a, b := join(t, co, 1, 4), join(t, co, 2, 4)
	converge(t, a, b)
	ch, park := b.park(time.Minute)
	if park == nil {
		t.Fatal("an up-to-date heartbeat was not held")
	}
	select {
	case ans := <-ch:
		t.Fatalf("answered while nothing changed: %+v", ans)
	default:
	}
	if err := co.Leave(testTopic, testGroup, a.id); err != nil {
		t.Fatal(err)
	}
	select {
	case ans := <-ch:
		if len(ans.Partitions) != 4 {
			t.Fatalf("b got %v after a left", ans.Partitions)
		}
	default:
		t.Fatal("the held heartbeat was not answered when a left")
	}
	// A second heartbeat answers the held one.
	ch1, _ := b.park(time.Minute)
	ch2, _ := b.park(time.Minute)
	select {
	case <-ch1:
	default:
		t.Fatal("a second heartbeat did not answer the held one")
	}
	select {
	case ans := <-ch2:
		t.Fatalf("the second heartbeat was answered without a change: %+v", ans)
	default:
	}
	co.Stop()
	select {
	case ans := <-ch2:
		if ans.Err != nil {
			t.Fatal(ans.Err)
		}
	default:
		t.Fatal("Stop did not answer the held heartbeat")
	}
	if _, p := b.park(time.Minute); p != nil {
		t.Fatal("a heartbeat was held after Stop")
	}
}

func TestExpiryAndHeldDeadlinesWithTick(t *testing.T) {
	co, clk := newFake(t, func(c *Config) { c.SessionTimeout = 3 * time.Second })
	a, b := join(t, co, 1, 2), join(t, co, 2, 2)
	converge(t, a, b)
	ch, _ := b.park(time.Minute) // held at most the interval, 1 s
	clk.advance(999 * time.Millisecond)
	co.Tick()
	if len(ch) != 0 {
		t.Fatal("answered before the interval")
	}
	clk.advance(time.Millisecond)
	co.Tick()
	if ans := <-ch; ans.Err != nil || len(ans.Partitions) != 1 {
		t.Fatalf("at the interval: %+v", ans)
	}
	// b keeps a heartbeat held; a stops: a expires 3 s after its last answer.
	ch, _ = b.park(time.Minute)
	clk.advance(time.Second) // a's last answer was 2 s ago now
	co.Tick()
	<-ch // the interval again
	ch, _ = b.park(time.Minute)
	clk.advance(999 * time.Millisecond)
	co.Tick()
	if len(ch) != 0 || len(co.Describe(testTopic, testGroup).Members) != 2 {
		t.Fatal("a expired early")
	}
	clk.advance(time.Millisecond)
	co.Tick()
	if ans := <-ch; len(ans.Partitions) != 2 {
		t.Fatalf("after a expired b has %v", ans.Partitions)
	}
	if ans := a.beat(); !errors.Is(ans.Err, &Error{Kind: KindUnknownMember}) {
		t.Fatalf("heartbeat of an expired member: %v", ans.Err)
	}
}

func TestUnparkStartsTheSessionClock(t *testing.T) {
	co, clk := newFake(t, func(c *Config) { c.SessionTimeout = 3 * time.Second })
	a := join(t, co, 1, 1)
	_, park := a.park(time.Minute)
	clk.advance(500 * time.Millisecond)
	co.Unpark(park) // the connection closed
	clk.advance(2999 * time.Millisecond)
	co.Tick()
	if !co.HasMembers(testTopic, testGroup) {
		t.Fatal("expired before a session timeout after the close")
	}
	clk.advance(time.Millisecond)
	co.Tick()
	if co.HasMembers(testTopic, testGroup) {
		t.Fatal("not expired a session timeout after the close")
	}
}

func TestLimits(t *testing.T) {
	co, _ := newFake(t, func(c *Config) { c.MaxMembersPerGroup, c.MaxGroups, c.MaxMembers = 2, 2, 3 })
	ok := func(g string, n byte) Answer {
		return co.Join(JoinRequest{Topic: testTopic, Group: g, Member: mid(n), Partitions: 1})
	}
	for _, tc := range []struct {
		group string
		n     byte
		fails bool
	}{{"g1", 1, false}, {"g1", 2, false}, {"g1", 3, true}, {"g2", 4, false}, {"g3", 5, true}, {"g2", 6, true}} {
		a := ok(tc.group, tc.n)
		if tc.fails != errors.Is(a.Err, &Error{Kind: KindLimit}) {
			t.Fatalf("join %s/%d: %v", tc.group, tc.n, a.Err)
		}
	}
	if a := co.Join(JoinRequest{Topic: testTopic, Group: "g1", Member: mid(1), Partitions: 1, Session: time.Hour}); !errors.Is(a.Err, &Error{Kind: KindInvalid}) {
		t.Fatalf("session of an hour: %v", a.Err)
	}
}

func TestDropTopic(t *testing.T) {
	co, _ := newFake(t, nil)
	a := join(t, co, 1, 2)
	ch, _ := a.park(time.Minute)
	co.DropTopic(testTopic)
	if ans := <-ch; !errors.Is(ans.Err, &Error{Kind: KindTopicDeleted}) {
		t.Fatalf("held heartbeat: %v", ans.Err)
	}
	if co.HasMembers(testTopic, testGroup) {
		t.Fatal("group kept")
	}
}

// TestDropGroups: the matching groups go (their held heartbeats answered with the error),
// the others stay; a member of a dropped group is unknown and joins again from nothing.
func TestDropGroups(t *testing.T) {
	co, _ := newFake(t, nil)
	a := join(t, co, 1, 2)
	other := co.Join(JoinRequest{Topic: testTopic, Group: "other", Member: mid(2), Partitions: 2})
	if other.Err != nil {
		t.Fatal(other.Err)
	}
	ch, _ := a.park(time.Minute)
	moved := &Error{Kind: KindNotCoordinator, Msg: "moved"}
	co.DropGroups(func(topic, group string) bool { return group == testGroup }, moved)
	if ans := <-ch; !errors.Is(ans.Err, &Error{Kind: KindNotCoordinator}) {
		t.Fatalf("held heartbeat: %v", ans.Err)
	}
	if co.HasMembers(testTopic, testGroup) || !co.HasMembers(testTopic, "other") {
		t.Fatal("dropped the wrong groups")
	}
	if ans := a.beat(); !errors.Is(ans.Err, &Error{Kind: KindUnknownMember}) {
		t.Fatalf("a heartbeat of a dropped member: %v", ans.Err)
	}
	if b := join(t, co, 1, 2); !slices.Equal(b.owned, []uint32{0, 1}) {
		t.Fatalf("joined again: %v", b.owned)
	}
}

// TestRandomOperations drives random joins, leaves, heartbeats (prompt, stale, held),
// expiries and commits, and checks after each step that no partition is told to two members
// and that each (partition, generation) has commits accepted from one member only; at the
// end, once the members converge, the split is balanced.
func TestRandomOperations(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			co, clk := newFake(t, func(c *Config) { c.SessionTimeout = 3 * time.Second })
			const n = 7
			live := map[byte]*client{}
			committed := map[[2]uint32]wire.MemberID{}
			for step := 0; step < 400; step++ {
				id := byte(rng.IntN(6))
				cl := live[id]
				switch op := rng.IntN(10); {
				case cl == nil && op < 5:
					live[id] = join(t, co, id, n)
				case cl == nil:
				case op == 0:
					_ = co.Leave(testTopic, testGroup, cl.id)
					delete(live, id)
				case op < 5:
					cl.beat()
				case op == 5: // a member that has not applied its last answer
					gen := cl.gen
					if gen > 0 && rng.IntN(2) == 0 {
						gen--
					}
					co.Heartbeat(HeartbeatRequest{Topic: testTopic, Group: testGroup, Member: cl.id, Generation: gen, Owned: cl.owned}, nil)
				case op == 6:
					clk.advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
					co.Tick()
				default:
					for _, p := range cl.owned {
						if cl.commit(p) == nil {
							k := [2]uint32{p, cl.gen}
							if other, ok := committed[k]; ok && other != cl.id {
								t.Fatalf("partition %d generation %d: commits of %s and %s accepted", p, cl.gen, other, cl.id)
							}
							committed[k] = cl.id
						}
					}
				}
				if cl != nil && !co.HasMembersID(testTopic, testGroup, cl.id) {
					delete(live, id)
				}
				co.checkTold(t)
			}
			var cls []*client
			for _, cl := range live {
				if co.HasMembersID(testTopic, testGroup, cl.id) {
					cls = append(cls, cl)
				}
			}
			if len(cls) > 0 {
				converge(t, cls...)
				checkSplit(t, n, cls...)
			}
		})
	}
}

// HasMembersID reports whether id is a member (test helper).
func (c *Coordinator) HasMembersID(topic, name string, id wire.MemberID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[key{topic, name}]
	return g != nil && g.members[id] != nil
}

// checkTold fails when a partition is in the last answer of two members, or told to a
// member that does not hold it.
func (c *Coordinator) checkTold(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, g := range c.groups {
		for _, m := range g.order {
			for _, p := range m.told {
				if g.holder[p] != m {
					t.Fatalf("partition %d told to %s, held by %v", p, m.id, g.holder[p])
				}
			}
		}
	}
}
