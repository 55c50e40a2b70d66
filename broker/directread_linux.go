package broker

import (
	"errors"
	"io"

	"golang.org/x/sys/unix"
)

// Reading the rest of a large PRODUCE straight from the socket into the ring (see
// produceDirect). gnet hands OnTraffic at most ReadBufferCap bytes per read and keeps what a
// turn leaves unread in the connection's inbound ring, so a batch larger than one read was
// copied twice in the broker: gnet's read buffer to its inbound ring, and that to the
// partition's ring (a fifth of the broker's CPU at 1 KiB messages in 512 KiB batches). When
// the socket already holds the rest of the frame, the broker reads it with read(2) into the
// space the ring reserved: the kernel's copy is the only one. gnet's epoll is
// level-triggered, so reading behind its back loses no wake-up; the frame's start is taken
// from gnet's buffers first, so the bytes stay in order.

// directReadMin is the least of a frame's bytes still in the socket worth an ioctl to read
// them directly: below it, gnet's next read brings them as cheaply.
const directReadMin = 16 << 10

// socketHolds returns how many bytes the socket fd's receive queue holds (SIOCINQ), or 0
// when that cannot be told.
func socketHolds(fd int) int {
	n, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
	if err != nil {
		return 0
	}
	return n
}

// errShortSocket: the socket gave fewer bytes than it said it held.
var errShortSocket = errors.New("socket held fewer bytes than it reported")

// readSocket fills p from the non-blocking socket fd, which socketHolds said holds at least
// len(p) bytes: one read(2) normally takes them all; a few more are tried, then it gives up.
func readSocket(fd int, p []byte) error {
	for tries := 0; len(p) > 0; tries++ {
		if tries == 4 {
			return errShortSocket
		}
		n, err := unix.Read(fd, p)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return errShortSocket
		case err != nil:
			return err
		case n == 0:
			return io.ErrUnexpectedEOF
		}
		p = p[n:]
	}
	return nil
}
