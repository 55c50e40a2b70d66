//go:build linux

package broker

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// directWrites: direct delivery (direct.go) writes with writev2.
const directWrites = true

// writev2 writes a and b (neither empty) to the non-blocking socket fd with one writev(2),
// without allocating. It returns what the kernel took; EAGAIN is an error with n == 0.
func writev2(fd int, a, b []byte) (int, error) {
	var iov [2]unix.Iovec
	iov[0].Base, iov[1].Base = &a[0], &b[0]
	iov[0].SetLen(len(a))
	iov[1].SetLen(len(b))
	for {
		n, _, e := unix.Syscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), 2)
		switch e {
		case 0:
			return int(n), nil
		case unix.EINTR:
			continue
		}
		return 0, e
	}
}
