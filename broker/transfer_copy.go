package broker

import (
	"io"
	"time"
)

// pumpTransferCopy sends the current FETCH response by reading the chunk into memory and
// writing it through gnet, stopping at the high-water mark (the ticker wakes stalled
// connections). It is the portable path, and on Linux the comparison point for sendfile
// (Config.FetchCopy). Runs on the connection's loop.
func (c *conn) pumpTransferCopy() xferState {
	x := c.xfer
	buf := prefetchBuf.Get().(*[]byte)
	defer prefetchBuf.Put(buf)
	budget := int64(maxTransferTurn)
	for x.remaining > 0 && budget > 0 {
		if c.gc.OutboundBuffered() >= c.srv.cfg.HighWaterMark {
			c.xferBlocked = true // the ticker wakes us to continue
			return xferWaiting
		}
		n, err := x.chunk.File.ReadAt((*buf)[:min(int64(len(*buf)), x.remaining)], x.pos)
		if n > 0 {
			_, _ = c.gc.Write((*buf)[:n]) // an error closes the connection, which closed() reports
			if c.closed() {
				return xferFailed
			}
			x.pos += int64(n)
			x.remaining -= int64(n)
			budget -= int64(n)
			c.xferProgress.Store(time.Now().UnixNano())
		}
		if err != nil && (err != io.EOF || x.remaining > 0) {
			return xferFailed
		}
	}
	c.xferBlocked = false
	if x.remaining > 0 {
		c.wakeNow()
		return xferWaiting
	}
	x.chunk.Release()
	c.endTransfer()
	return xferDone
}
