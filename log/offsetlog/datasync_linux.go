package offsetlog

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/lightq/lightq/log/vfs"
)

// datasync makes f's data durable. On a real file it is fdatasync(2), which, unlike fsync,
// skips the inode's timestamps: appends into preallocated space then change no metadata
// the file's data needs, so the file system commits no journal transaction for them, and
// one topic's stream of commits does not make another's fsyncs wait for its journal
// commits. Other vfs.Files (crashfs in tests) get Sync, whose durability they model.
func datasync(f vfs.File) error {
	if osf, ok := f.(*os.File); ok {
		for {
			err := unix.Fdatasync(int(osf.Fd()))
			if err != unix.EINTR {
				if err != nil {
					return &os.PathError{Op: "fdatasync", Path: osf.Name(), Err: err}
				}
				return nil
			}
		}
	}
	return f.Sync()
}
