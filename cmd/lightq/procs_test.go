package main

import (
	"runtime"
	"testing"
)

// TestReserveLoopProcs: one extra P per event loop unless $GOMAXPROCS is set.
func TestReserveLoopProcs(t *testing.T) {
	orig := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(orig)
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "GOMAXPROCS" {
				return v
			}
			return ""
		}
	}
	if got, set := reserveLoopProcs(3, env("")); !set || got != orig+3 || runtime.GOMAXPROCS(0) != orig+3 {
		t.Errorf("3 loops: got %d set %v, GOMAXPROCS %d; want %d", got, set, runtime.GOMAXPROCS(0), orig+3)
	}
	runtime.GOMAXPROCS(orig)
	if got, set := reserveLoopProcs(0, env("")); !set || got != orig+runtime.NumCPU() {
		t.Errorf("default loops: got %d, want %d", got, orig+runtime.NumCPU())
	}
	runtime.GOMAXPROCS(orig)
	if got, set := reserveLoopProcs(3, env("1")); set || got != orig || runtime.GOMAXPROCS(0) != orig {
		t.Errorf("$GOMAXPROCS set: got %d set %v, GOMAXPROCS %d; want it left at %d", got, set, runtime.GOMAXPROCS(0), orig)
	}
}
