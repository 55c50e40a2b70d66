//go:build !linux

package broker

import qlog "github.com/lightq/lightq/log"

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

// chunkResident cannot be told here: assume not, and read the chunk in on a worker.
func chunkResident(*qlog.Chunk) bool { return false }

// resident cannot be told here: assume not.
func resident(int, int64, int64) bool { return false }

// writableWatcher is not needed without sendfile.
type writableWatcher struct{}

func newWritableWatcher() (*writableWatcher, error) { return &writableWatcher{}, nil }
func (w *writableWatcher) forget(*conn, int)        {}
func (w *writableWatcher) close()                   {}

// unackedBytes cannot be told here: assume the peer has everything.
func unackedBytes(int) int { return 0 }
