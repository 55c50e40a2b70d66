package broker

import (
	"sync"

	"github.com/panjf2000/gnet/v2"

	"github.com/lightq/lightq/wire"
)

// loopState is scratch state shared by every connection of one gnet event loop. A loop runs
// its connections' callbacks one at a time on one goroutine, so whatever one connection's
// request uses here is free again before the next callback: no lock is needed, and the memory
// is paid once per loop instead of once per connection (10,000 producers on 2 loops cost 2
// scratch buffers, not 10,000). A connection finds its loop's state on its first PRODUCE
// (conn.recordValidator) and keeps the pointer.
//
// Only code running on the loop may touch a loopState, and only through its own connection's
// pointer: never from a worker, a syncer or the ticker, and never across a completion that
// runs later (the next callback may reuse the scratch).
type loopState struct {
	// validator checks the records of every produced batch before it is stored (see
	// wire.RecordValidator). Its decompression scratch is at most 1.25 × MaxBatch, and its
	// zstd decoder is created on the loop's first zstd batch.
	validator wire.RecordValidator
}

// loopStates holds one loopState per event loop, keyed by the loop as gnet hands it to each
// connection (gnet.Conn.EventLoop, a pointer per loop for the engine's life). gnet has no
// public loop index and no per-loop start callback, so states are created on first use.
type loopStates struct {
	mu     sync.Mutex // guards byLoop; a leaf, taken once per connection
	byLoop map[gnet.EventLoop]*loopState
}

// get returns el's state, creating it on the first call for el. Safe for concurrent use.
func (ls *loopStates) get(el gnet.EventLoop) *loopState {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	st := ls.byLoop[el]
	if st == nil {
		if ls.byLoop == nil {
			ls.byLoop = map[gnet.EventLoop]*loopState{}
		}
		st = &loopState{}
		ls.byLoop[el] = st
	}
	return st
}

// close releases every loop's zstd state. Call it only once the loops have stopped.
func (ls *loopStates) close() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for el, st := range ls.byLoop {
		st.validator.Close()
		delete(ls.byLoop, el)
	}
}

// recordValidator is the validator of the connection's event loop. Call it only on the loop,
// and do not keep the result past the current callback.
func (c *conn) recordValidator() *wire.RecordValidator {
	if c.loop == nil {
		c.loop = c.srv.loops.get(c.gc.EventLoop())
	}
	return &c.loop.validator
}

// validateRecords checks the records of bt, a batch ParseBatch accepted, against the
// broker's per-record limit (see wire.RecordValidator.Validate).
func (c *conn) validateRecords(bt *wire.Batch) error {
	return c.recordValidator().Validate(bt, c.srv.cfg.Limits.MaxMessage)
}
