//go:build !linux

package offsetlog

import "github.com/lightq/lightq/log/vfs"

// datasync makes f's data durable (fsync where fdatasync is not used).
func datasync(f vfs.File) error { return f.Sync() }
