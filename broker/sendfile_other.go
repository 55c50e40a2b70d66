//go:build !linux

package broker

import "io"

// maxTransferTurn bounds the bytes one connection sends per loop turn.
const maxTransferTurn = 16 << 20

type xferState int

const (
	xferDone xferState = iota
	xferWaiting
	xferFailed
)

// pumpTransfer is the portable fallback: it reads the chunk and writes it through gnet,
// stopping at the high-water mark (the ticker wakes stalled connections).
func (c *conn) pumpTransfer() xferState {
	x := c.xfer
	buf := prefetchBuf.Get().(*[]byte)
	defer prefetchBuf.Put(buf)
	budget := int64(maxTransferTurn)
	for x.remaining > 0 && budget > 0 {
		if c.gc.OutboundBuffered() >= c.srv.cfg.HighWaterMark {
			c.setStalled(true)
			return xferWaiting
		}
		n, err := x.chunk.File.ReadAt((*buf)[:min(int64(len(*buf)), x.remaining)], x.pos)
		if n > 0 {
			_, _ = c.gc.Write((*buf)[:n])
			if c.closed {
				return xferFailed
			}
			x.pos += int64(n)
			x.remaining -= int64(n)
			budget -= int64(n)
		}
		if err != nil && (err != io.EOF || x.remaining > 0) {
			return xferFailed
		}
	}
	if x.remaining > 0 {
		c.wakeNow()
		return xferWaiting
	}
	x.chunk.Release()
	c.xfer = nil
	return xferDone
}

// writableWatcher is not needed without sendfile.
type writableWatcher struct{}

func newWritableWatcher() (*writableWatcher, error) { return &writableWatcher{}, nil }
func (w *writableWatcher) forget(int)               {}
func (w *writableWatcher) close()                   {}
