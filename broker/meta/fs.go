package meta

import (
	"io"
	"os"
)

// fsys is the file system seam: the store's every disk operation goes through it, so tests
// can inject failures at each step.
type fsys interface {
	MkdirAll(dir string, perm os.FileMode) error
	ReadFile(name string) ([]byte, error)
	ReadDir(dir string) ([]os.DirEntry, error)
	CreateTemp(dir, pattern string) (file, error) // mode 0600
	Rename(oldpath, newpath string) error
	Remove(name string) error
	SyncDir(dir string) error
}

type file interface {
	io.Writer
	Name() string
	Sync() error
	Close() error
}

// osFS is the real file system.
type osFS struct{}

func (osFS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }
func (osFS) ReadFile(name string) ([]byte, error)        { return os.ReadFile(name) }
func (osFS) ReadDir(dir string) ([]os.DirEntry, error)   { return os.ReadDir(dir) }
func (osFS) Rename(oldpath, newpath string) error        { return os.Rename(oldpath, newpath) }
func (osFS) Remove(name string) error                    { return os.Remove(name) }

func (osFS) CreateTemp(dir, pattern string) (file, error) {
	return os.CreateTemp(dir, pattern) // creates with mode 0600
}

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}
