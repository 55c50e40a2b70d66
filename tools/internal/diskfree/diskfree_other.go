//go:build !linux

package diskfree

// Free is not implemented here: it returns ErrUnsupported.
func Free(dir string) (int64, error) { return 0, ErrUnsupported }

// InMemory cannot tell here: it returns false.
func InMemory(dir string) bool { return false }
