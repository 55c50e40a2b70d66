// Package diskfree tells the benchmark harnesses (tools/compare, tools/diskref) how much
// space is free where they are about to write gigabytes, so that they refuse to start
// instead of filling the disk, and whether that place is a disk at all (tmpfs is memory).
//
// Its functions are safe for concurrent use.
package diskfree

import (
	"errors"
	"fmt"
)

// ErrUnsupported: this platform has no way to ask (the check is then skipped).
var ErrUnsupported = errors.New("diskfree: not supported on this platform")

// Check returns an error saying what is missing when dir's file system has fewer than need
// bytes free for an unprivileged writer. It returns nil when the platform cannot tell.
func Check(dir string, need int64) error {
	free, err := Free(dir)
	if errors.Is(err, ErrUnsupported) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("free space in %s: %w", dir, err)
	}
	if free < need {
		return fmt.Errorf("not enough free disk space in %s: %.2f GB free, %.2f GB needed", dir, float64(free)/1e9, float64(need)/1e9)
	}
	return nil
}
