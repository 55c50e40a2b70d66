package group

import (
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
