//go:build linux

package broker

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// writableWatcher tells connections when their socket can take more bytes. gnet has no
// writable callback, and bytes we send with sendfile bypass gnet's buffers, so a transfer
// that hit EAGAIN arms a one-shot EPOLLOUT here; when it fires, the watcher wakes the
// connection's loop, which resumes the transfer. One goroutine serves every connection.
//
// Concurrency: arm and forget are safe from any goroutine.
type writableWatcher struct {
	epfd int

	mu    sync.Mutex
	conns map[int32]*conn // fd -> conn armed or registered
	stop  chan struct{}
	done  chan struct{}
}

func newWritableWatcher() (*writableWatcher, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	w := &writableWatcher{epfd: epfd, conns: map[int32]*conn{}, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w, nil
}

// arm asks for one wake of c when fd becomes writable.
func (w *writableWatcher) arm(c *conn, fd int) error {
	ev := unix.EpollEvent{Events: unix.EPOLLOUT | unix.EPOLLONESHOT, Fd: int32(fd)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ok := w.conns[int32(fd)]; ok && old == c {
		return unix.EpollCtl(w.epfd, unix.EPOLL_CTL_MOD, fd, &ev)
	}
	// A new fd, or one an earlier connection held and closed: register it anew (a descriptor
	// leaves the epoll set when it is closed).
	err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &ev)
	if errors.Is(err, unix.EEXIST) {
		err = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_MOD, fd, &ev)
	}
	if err != nil {
		return err
	}
	w.conns[int32(fd)] = c
	return nil
}

// forget removes c's registration of fd, if it has one; call it before the descriptor is
// closed. A registration of the same fd number by another connection is left alone.
func (w *writableWatcher) forget(c *conn, fd int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ok := w.conns[int32(fd)]; ok && old == c {
		delete(w.conns, int32(fd))
		// Can fail only if the fd is already gone, which removed it from the epoll set too.
		_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	}
}

func (w *writableWatcher) run() {
	defer close(w.done)
	events := make([]unix.EpollEvent, 128)
	for {
		n, err := unix.EpollWait(w.epfd, events, 100)
		select {
		case <-w.stop:
			return
		default:
		}
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		w.mu.Lock()
		for _, ev := range events[:n] {
			if c := w.conns[ev.Fd]; c != nil {
				c.wake()
			}
		}
		w.mu.Unlock()
	}
}

func (w *writableWatcher) close() {
	close(w.stop)
	<-w.done
	_ = unix.Close(w.epfd) // at shutdown, with the watcher stopped: nothing is left to tell
}

// unackedBytes is how many bytes written to the TCP socket fd its peer has not acknowledged
// yet (SIOCOUTQ), or 0 when the kernel cannot tell.
func unackedBytes(fd int) int {
	n, err := unix.IoctlGetInt(fd, unix.SIOCOUTQ)
	if err != nil {
		return 0
	}
	return n
}
