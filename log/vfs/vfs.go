// Package vfs is the file system seam of the log: every file operation of package log goes
// through an FS, so tests can inject faults and simulate power loss.
//
// OS is the real file system. The power-loss simulator for tests is crashfs.FS, in the package
// beside this one (log/vfs/crashfs), so production binaries do not link it.
package vfs

import (
	"io"
	"io/fs"
)

// FS is the set of file system operations the log needs. Implementations must be safe for
// concurrent use.
type FS interface {
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	Remove(name string) error
	Rename(oldpath, newpath string) error
	MkdirAll(path string, perm fs.FileMode) error
	ReadDir(name string) ([]fs.DirEntry, error)
	// SyncDir makes the directory's entries (creates, renames, removes) durable.
	SyncDir(name string) error
}

// File is an open file. ReadAt, WriteAt and Stat are safe for concurrent use, as on *os.File.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Writer
	Sync() error
	Truncate(size int64) error
	Stat() (fs.FileInfo, error)
	Close() error
	// Fd is the real descriptor, for sendfile. It is valid until Close.
	Fd() uintptr
}
