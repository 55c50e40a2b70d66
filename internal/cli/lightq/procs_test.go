package lightq

import (
	"runtime"
	"testing"
)

// TestReserveLoopProcs: one extra P per event loop on top of the runtime's own choice, the
// same however often it is called, capped at gnet's loop limit, and nothing when $GOMAXPROCS
// is set.
func TestReserveLoopProcs(t *testing.T) {
	base := baseProcs()
	defer runtime.GOMAXPROCS(base)
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "GOMAXPROCS" {
				return v
			}
			return ""
		}
	}
	for i := 0; i < 3; i++ { // not cumulative
		if got, set := reserveLoopProcs(3, env("")); !set || got != base+3 || runtime.GOMAXPROCS(0) != base+3 {
			t.Fatalf("call %d, 3 loops: got %d set %v, GOMAXPROCS %d; want %d", i, got, set, runtime.GOMAXPROCS(0), base+3)
		}
	}
	if got, _ := reserveLoopProcs(0, env("")); got != base+defaultEventLoops() {
		t.Errorf("default loops: got %d, want %d", got, base+defaultEventLoops())
	}
	if got, _ := reserveLoopProcs(10_000, env("")); got != base+maxEventLoops {
		t.Errorf("10000 loops: got %d, want %d", got, base+maxEventLoops)
	}
	runtime.GOMAXPROCS(base)
	if got, set := reserveLoopProcs(3, env("1")); set || got != base || runtime.GOMAXPROCS(0) != base {
		t.Errorf("$GOMAXPROCS set: got %d set %v, GOMAXPROCS %d; want it left at %d", got, set, runtime.GOMAXPROCS(0), base)
	}
	if d := defaultEventLoops(); d < 1 || d > base {
		t.Errorf("default event loops %d, want 1..%d", d, base)
	}
}
