package version

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestFormat: every part the build records appears, and parts it lacks are left out cleanly.
func TestFormat(t *testing.T) {
	full := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Version: "v0.3.0"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "373b562c0d1e2f3a4b5c6d7e8f90123456789abc"},
			{Key: "vcs.time", Value: "2026-12-01T21:10:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	for _, tc := range []struct {
		info *debug.BuildInfo
		want string
	}{
		{full, "lightq v0.3.0 (revision 373b562c0d1e, 2026-12-01T21:10:00Z, modified) go1.26.8"},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, "lightq (devel) go1.26.8"},
		{&debug.BuildInfo{GoVersion: "go1.26.8"}, "lightq (devel) go1.26.8"},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.0.0"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}}, "lightq v1.0.0 (revision abc) go1.26.8"},
	} {
		if got := format("lightq", tc.info); got != tc.want {
			t.Errorf("format = %q, want %q", got, tc.want)
		}
	}
}

// TestString: the real build information of the test binary names the command and the Go version.
func TestString(t *testing.T) {
	s := String("lqcat")
	if !strings.HasPrefix(s, "lqcat ") || !strings.HasSuffix(s, runtime.Version()) {
		t.Errorf("String = %q, want lqcat ... %s", s, runtime.Version())
	}
}
