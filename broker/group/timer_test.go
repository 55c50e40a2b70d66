package group

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// The coordinator's own timer, in fake time: sessions expire and held heartbeats end exactly
// when they should, with nobody calling Tick.

func newTimed(t *testing.T, session time.Duration) *Coordinator {
	cfg := DefaultConfig()
	cfg.SessionTimeout = session
	co := New(cfg)
	t.Cleanup(co.Stop)
	return co
}

func TestTimerExpiresSilentMember(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		co := newTimed(t, 2*time.Second)
		a, b := join(t, co, 1, 4), join(t, co, 2, 4)
		converge(t, a, b)
		start := time.Now() // a's last answer
		// b long-polls like a real member; a is silent from now on.
		for {
			ch, _ := b.park(time.Minute)
			ans := <-ch
			if ans.Err != nil {
				t.Fatal(ans.Err)
			}
			b.apply(ans)
			if len(b.owned) == 4 {
				break
			}
			if time.Since(start) > time.Minute {
				t.Fatal("a never expired")
			}
		}
		if got := time.Since(start); got != 2*time.Second {
			t.Fatalf("b got a's partitions %v after a's last answer, want exactly the session timeout, 2s", got)
		}
	})
}

func TestTimerEndsHeldHeartbeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		co := newTimed(t, 3*time.Second)
		a := join(t, co, 1, 2)
		start := time.Now()
		ch, park := a.park(5 * time.Second)
		if park == nil {
			t.Fatal("not held")
		}
		ans := <-ch
		if got := time.Since(start); got != time.Second || ans.Err != nil || len(ans.Partitions) != 2 {
			t.Fatalf("held heartbeat answered after %v with %+v, want 1s (the interval) and the same assignment", got, ans)
		}
		ch, _ = a.park(200 * time.Millisecond) // a shorter max wait wins
		start = time.Now()
		<-ch
		if got := time.Since(start); got != 200*time.Millisecond {
			t.Fatalf("answered after %v, want its max wait 200ms", got)
		}
	})
}

func TestTimerCountsSessionFromClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		co := newTimed(t, 3*time.Second)
		a := join(t, co, 1, 1)
		_, park := a.park(time.Minute)
		time.Sleep(500 * time.Millisecond) // fake time: the heartbeat is held meanwhile
		co.Unpark(park)
		closed := time.Now()
		for co.HasMembers(testTopic, testGroup) {
			time.Sleep(10 * time.Millisecond)
		}
		if got := time.Since(closed); got < 3*time.Second || got > 3*time.Second+10*time.Millisecond {
			t.Fatalf("removed %v after the close, want the session timeout, 3s", got)
		}
	})
}

// TestWithholdGivesNothingUntilItEnds: members of a withheld group join and heartbeat but
// are given no partition until the withhold ends, exactly then (their held heartbeats
// answered at that instant); a later Withhold extends it, a shorter one does not shorten it.
func TestWithholdGivesNothingUntilItEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		co := newTimed(t, 3*time.Second)
		start := time.Now()
		co.Withhold(testTopic, testGroup, 4*time.Second)
		co.Withhold(testTopic, testGroup, time.Second) // ends before: no effect
		a, b := join(t, co, 1, 4), join(t, co, 2, 4)
		if len(a.owned)+len(b.owned) != 0 || !co.Withheld(testTopic, testGroup) {
			t.Fatalf("withheld group: a owns %v, b %v", a.owned, b.owned)
		}
		if err := a.commit(0); !errors.Is(err, &Error{Kind: KindFenced}) {
			t.Fatalf("a commit while withheld: %v", err)
		}
		time.Sleep(2 * time.Second)
		co.Withhold(testTopic, testGroup, 3*time.Second) // now ends at 5 s
		got := make(chan time.Duration, 2)
		for _, m := range []*client{a, b} {
			go func() {
				for len(m.owned) == 0 {
					ch, _ := m.park(time.Minute)
					ans := <-ch
					if ans.Err != nil {
						t.Error(ans.Err)
						return
					}
					m.apply(ans)
				}
				got <- time.Since(start)
			}()
		}
		for range 2 {
			if d := <-got; d != 5*time.Second {
				t.Fatalf("partitions given %v after the start, want at the withhold's end, 5s", d)
			}
		}
		if len(a.owned)+len(b.owned) != 4 || co.Withheld(testTopic, testGroup) {
			t.Fatalf("a owns %v, b %v; want all 4", a.owned, b.owned)
		}
	})
}

// TestWithholdEndsWithDrop: DropGroups ends a withhold: the group coordinated here again
// later starts without it. A Guard's refusal is the answer of a join and of a heartbeat.
func TestWithholdEndsWithDrop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		co := newTimed(t, 3*time.Second)
		co.Withhold(testTopic, testGroup, time.Hour)
		moved := &Error{Kind: KindNotCoordinator, Msg: "moved"}
		co.DropGroups(func(string, string) bool { return true }, moved)
		if co.Withheld(testTopic, testGroup) {
			t.Fatal("still withheld after DropGroups")
		}
		a := join(t, co, 1, 2)
		if len(a.owned) != 2 {
			t.Fatalf("a owns %v after the drop, want both", a.owned)
		}
		guard := func() error { return moved }
		if ans := co.Join(JoinRequest{Topic: testTopic, Group: testGroup, Member: mid(2), Partitions: 2, Guard: guard}); !errors.Is(ans.Err, moved) {
			t.Fatalf("a guarded join: %+v", ans)
		}
		ans, park := co.Heartbeat(HeartbeatRequest{Topic: testTopic, Group: testGroup, Member: a.id, Generation: a.gen, MaxWait: time.Minute, Owned: a.owned, Guard: guard}, nil)
		if park != nil || !errors.Is(ans.Err, moved) {
			t.Fatalf("a guarded heartbeat: %+v, held %v", ans, park != nil)
		}
		if d := co.Describe(testTopic, testGroup); len(d.Members) != 1 {
			t.Fatalf("a refused join added a member: %+v", d)
		}
	})
}

// TestWithholdAllHoldsEveryGroup: WithholdAll gives no partition a holder, in the groups
// that exist and in those that join later alike, until its end exactly (what a member held
// before stays held); a group also held by Withhold waits for the later of the two,
// whichever it is.
func TestWithholdAllHoldsEveryGroup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		co := newTimed(t, 10*time.Second)
		start := time.Now()
		early := &client{t: t, co: co, id: mid(1), topic: "before"}
		early.apply(co.Join(JoinRequest{Topic: "before", Group: testGroup, Member: early.id, Partitions: 2}))
		co.WithholdAll(3 * time.Second)
		co.WithholdAll(time.Second) // ends before: no effect
		if !co.Withheld("other", testGroup) {
			t.Fatal("a group nobody joined yet is not withheld")
		}
		// Groups are (topic, name): other topics make other groups.
		co.Withhold("longer", testGroup, 5*time.Second)
		co.Withhold("shorter", testGroup, time.Second)
		members := map[string]*client{}
		for i, topic := range []string{testTopic, "longer", "shorter"} {
			m := &client{t: t, co: co, id: mid(byte(10 + i)), topic: topic}
			ans := co.Join(JoinRequest{Topic: topic, Group: testGroup, Member: m.id, Partitions: 2})
			if ans.Err != nil {
				t.Fatalf("join of %s: %v", topic, ans.Err)
			}
			m.apply(ans)
			members[topic] = m
		}
		if len(early.owned) != 2 {
			t.Fatalf("the member that joined before owns %v, want what it held", early.owned)
		}
		want := map[string]time.Duration{testTopic: 3 * time.Second, "longer": 5 * time.Second, "shorter": 3 * time.Second}
		type given struct {
			topic string
			d     time.Duration
		}
		got := make(chan given, len(members))
		for topic, m := range members {
			go func() {
				for len(m.owned) == 0 {
					ch, _ := m.park(time.Minute)
					ans := <-ch
					if ans.Err != nil {
						t.Error(ans.Err)
						return
					}
					m.apply(ans)
				}
				got <- given{topic, time.Since(start)}
			}()
		}
		for range members {
			r := <-got
			if r.d != want[r.topic] {
				t.Errorf("the group of %s given partitions %v after the start, want %v", r.topic, r.d, want[r.topic])
			}
		}
		if co.Withheld("other", testGroup) {
			t.Fatal("still withheld after the end")
		}
	})
}
