//go:build !linux

package broker

// maxTransferTurn bounds the bytes one connection sends per loop turn.
const maxTransferTurn = 16 << 20

type xferState int

const (
	xferDone xferState = iota
	xferWaiting
	xferFailed
)

// pumpTransfer has no sendfile here: it copies.
func (c *conn) pumpTransfer() xferState { return c.pumpTransferCopy() }

// writableWatcher is not needed without sendfile.
type writableWatcher struct{}

func newWritableWatcher() (*writableWatcher, error) { return &writableWatcher{}, nil }
func (w *writableWatcher) forget(int)               {}
func (w *writableWatcher) close()                   {}
