// Package version describes the running binary from the build information the Go toolchain
// embeds (runtime/debug.ReadBuildInfo): the module version, the VCS revision and commit time,
// and the Go version. Every LightQ command prints it for --version, so a bug report names the
// exact build without a version constant anyone must remember to bump.
//
// Its functions are safe for concurrent use.
package version

import (
	"fmt"
	"runtime/debug"
)

// String is the one-line version of the command named cmd, for example
// "lightq v0.3.0 (revision 373b562c0d1e, 2026-12-01T21:10:00Z, modified) go1.26.8".
// Parts the build does not record (go run, go test, a build outside a VCS checkout) are left out;
// a binary built from a work tree reports "(devel)" as its module version.
func String(cmd string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return cmd + " (no build information)"
	}
	return format(cmd, info)
}

// format is String for given build information, so that tests can supply their own.
func format(cmd string, info *debug.BuildInfo) string {
	version := info.Main.Version
	if version == "" {
		version = "(devel)"
	}
	var revision, time, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.time":
			time = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	vcs := ""
	if revision != "" {
		if len(revision) > 12 {
			revision = revision[:12]
		}
		vcs = " (revision " + revision
		if time != "" {
			vcs += ", " + time
		}
		vcs += modified + ")"
	}
	return fmt.Sprintf("%s %s%s %s", cmd, version, vcs, info.GoVersion)
}
