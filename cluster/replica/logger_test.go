package replica

import (
	"fmt"
	"slices"
	"testing"
)

// TestLogfLogger: warnings and errors reach Logf with the "raft: " prefix, info lines only
// when Verbose, debug lines never; a nil Logf drops them; Fatal and Panic panic.
func TestLogfLogger(t *testing.T) {
	var got []string
	logf := func(f string, v ...any) { got = append(got, fmt.Sprintf(f, v...)) }
	for _, l := range []LogfLogger{{Logf: logf}, {Logf: logf, Verbose: true}, {}} {
		l.Debugf("d %d", 1)
		l.Infof("i %d", 2)
		l.Info("i", 3)
		l.Warningf("w %d", 4)
		l.Error("e", 5)
	}
	want := []string{"raft: w 4", "raft: e5", "raft: i 2", "raft: i3", "raft: w 4", "raft: e5"}
	if !slices.Equal(got, want) {
		t.Fatalf("logged %q, want %q", got, want)
	}
	for _, f := range []func(){func() { LogfLogger{}.Fatalf("f") }, func() { LogfLogger{}.Panic("p") }} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		}()
	}
}
