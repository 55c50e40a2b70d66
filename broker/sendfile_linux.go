//go:build linux

package broker

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"

	qlog "github.com/lightq/lightq/log"
)

// maxTransferTurn bounds the bytes one connection sends per loop turn, so that one consumer
// catching up cannot starve the others on its loop.
const maxTransferTurn = 16 << 20

// xferState is what pumpTransfer left behind.
type xferState int

const (
	xferDone    xferState = iota // every byte sent; c.xfer is nil
	xferWaiting                  // socket full, page cache cold or turn over: a wake resumes it
	xferFailed                   // the connection must close
)

// pumpTransfer sends what the socket takes of the current FETCH response, straight from the
// segment file with sendfile(2). gnet knows nothing of these bytes, so its own buffer must be
// empty first; on EAGAIN a one-shot EPOLLOUT watch wakes the loop when the socket drains.
// Runs on the connection's loop.
func (c *conn) pumpTransfer() xferState {
	if c.srv.cfg.FetchCopy {
		return c.pumpTransferCopy()
	}
	x := c.xfer
	if x.prefetch {
		return xferWaiting // a worker is reading the range into the page cache
	}
	if c.tls != nil {
		// Its bytes are encrypted on their way (the session's Pipe): copy them, from the page
		// cache as sendfile would, so a cold chunk does not block the loop either.
		if !x.warm && !c.warmUp(x) {
			return xferWaiting
		}
		return c.pumpTransferCopy()
	}
	sock := c.gc.Fd()
	if c.gc.OutboundBuffered() > 0 {
		_ = c.gc.Flush() // returns nil even when it failed and closed the connection: check closed()
		if c.closed() {
			return xferFailed
		}
		if c.gc.OutboundBuffered() > 0 {
			return c.waitWritable(sock)
		}
	}
	if !x.warm && !c.warmUp(x) {
		return xferWaiting
	}
	fd := int(x.chunk.File.Fd())
	budget := int64(maxTransferTurn)
	for x.remaining > 0 && budget > 0 {
		n, err := unix.Sendfile(sock, fd, &x.pos, int(min(x.remaining, budget)))
		if n > 0 {
			x.remaining -= int64(n)
			budget -= int64(n)
			c.xferProgress.Store(time.Now().UnixNano())
		}
		switch {
		case errors.Is(err, unix.EAGAIN):
			return c.waitWritable(sock)
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			c.log.Info().Err(err).Msg("fetch transfer failed")
			return xferFailed
		case n == 0:
			c.log.Error().Int64("pos", x.pos).Int64("remaining", x.remaining).Msg("segment file ended before the chunk did")
			return xferFailed
		}
	}
	if x.remaining > 0 {
		c.wakeNow() // turn over: let the loop serve others, then continue
		return xferWaiting
	}
	x.chunk.Release()
	c.endTransfer()
	return xferDone
}

func (c *conn) waitWritable(sock int) xferState {
	if err := c.srv.watcher.arm(c, sock); err != nil {
		c.log.Error().Err(err).Msg("cannot watch socket for writability")
		return xferFailed
	}
	return xferWaiting
}

// warmUp checks whether the chunk's pages are in the page cache. A cold chunk would block
// this loop in sendfile while the disk reads it, stalling every other connection on the loop,
// so a worker reads it in instead and wakes the loop when done. It returns true when the
// chunk can be sent now.
func (c *conn) warmUp(x *transfer) bool {
	fd := int(x.chunk.File.Fd())
	if c.srv.cfg.NoColdPrefetch || resident(fd, x.pos, x.remaining) {
		x.warm = true
		return true
	}
	x.prefetch = true
	pos, n := x.pos, x.remaining
	// The job holds x.chunk (and so the file) until its completion runs; if the connection
	// closes first, endFetches leaves the chunk to the job, which releases it.
	ok := c.srv.ioPool.Submit(func() {
		buf := prefetchBuf.Get().(*[]byte)
		for off := pos; off < pos+n; {
			m, err := unix.Pread(fd, (*buf)[:min(int64(len(*buf)), pos+n-off)], off)
			if m <= 0 || err != nil {
				break
			}
			off += int64(m)
		}
		prefetchBuf.Put(buf)
		if !c.complete(func(c *conn) { x.prefetch, x.warm = false, true }) {
			x.chunk.Release()
		}
	})
	if !ok { // workers busy: send it from here after all
		x.prefetch, x.warm = false, true
		return true
	}
	return false
}

// chunkResident reports whether a chunk's pages seem to be in the page cache.
func chunkResident(ch *qlog.Chunk) bool {
	return resident(int(ch.File.Fd()), ch.Pos, ch.Len)
}

// resident reports whether the first, middle and last pages of [pos, pos+n) are cached,
// using preadv2(RWF_NOWAIT), which fails with EAGAIN instead of waiting for the disk.
func resident(fd int, pos, n int64) bool {
	var b [1]byte
	iov := [][]byte{b[:]}
	for _, off := range [3]int64{pos, pos + n/2, pos + n - 1} {
		if _, err := unix.Preadv2(fd, iov, off, unix.RWF_NOWAIT); err != nil {
			return !errors.Is(err, unix.EAGAIN) // other errors: let sendfile report them
		}
	}
	return true
}
