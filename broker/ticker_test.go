package broker

import (
	"testing"
	"time"
)

// TestTickerSleepsWhenNothingIsStalled: the ticker ticks every tickInterval only while a
// connection is stalled, and the first connection to stall wakes it at once.
func TestTickerSleepsWhenNothingIsStalled(t *testing.T) {
	s := &Server{
		stalled: map[*conn]struct{}{}, preauth: map[*conn]time.Time{}, transfers: map[*conn]struct{}{},
		tickKick: make(chan struct{}, 1),
	}
	if d := s.tick(); d != deadlineInterval {
		t.Fatalf("idle tick asks for %v, want %v", d, deadlineInterval)
	}
	c := &conn{srv: s}
	c.wakePending.Store(true) // a wake is already pending: wake() does nothing without a socket
	c.setStalled(true)
	select {
	case <-s.tickKick:
	default:
		t.Fatal("the first stalled connection did not kick the ticker")
	}
	c2 := &conn{srv: s}
	c2.wakePending.Store(true)
	c2.setStalled(true)
	select {
	case <-s.tickKick:
		t.Fatal("a second stalled connection kicked the ticker again")
	default:
	}
	if d := s.tick(); d != tickInterval {
		t.Fatalf("tick with stalled connections asks for %v, want %v", d, tickInterval)
	}
	c.setStalled(false)
	c2.setStalled(false)
	if d := s.tick(); d != deadlineInterval {
		t.Fatalf("tick after the stalls ended asks for %v, want %v", d, deadlineInterval)
	}
}
