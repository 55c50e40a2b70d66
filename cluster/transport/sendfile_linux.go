package transport

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/lightq/lightq/log/vfs"
)

// sendfile sends n bytes of f from pos to c with sendfile(2), when c is a TCP connection
// (the kernel copies from the page cache: no read into user space). It reports false when
// it cannot (then nothing was sent). Partial writes and EAGAIN are handled by waiting for
// the socket to be writable again (the runtime's poller), within c's write deadline.
func sendfile(c net.Conn, f vfs.File, pos, n int64) (bool, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok || n <= 0 {
		return false, nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return false, nil
	}
	fd := int(f.Fd())
	var werr error
	err = rc.Write(func(sock uintptr) bool {
		for n > 0 {
			k, err := unix.Sendfile(int(sock), fd, &pos, int(min(n, 1<<30)))
			if k > 0 {
				n -= int64(k)
			}
			switch {
			case errors.Is(err, syscall.EAGAIN):
				return false // wait until writable
			case errors.Is(err, syscall.EINTR):
				continue
			case err != nil:
				werr = err
				return true
			case k == 0:
				werr = errors.New("sendfile: the file ended early")
				return true
			}
		}
		return true
	})
	if err == nil {
		err = werr
	}
	return true, err
}
