package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/lightq/lightq/wire"
)

// producerIDs hands out the producer ids of INIT_PRODUCER so that no id is ever handed out
// twice, across restarts and crashes: ids are reserved in blocks, and a block is written to
// <data dir>/producer-ids and fsynced before any id of it is given. A restart starts at the
// end of the last block reserved (what was left of it is skipped). A counter and not random
// ids, because two producers sharing an id would have their batches taken for each other's
// duplicates, and because the broker can then tell an id it never handed out.
//
// Concurrency: take runs on event loops (a mutex around two integers, never held across
// I/O); reserve, which writes and fsyncs the file, runs on the meta pool and is serialised
// by fileMu. Lock order: fileMu, then mu (a leaf).
type producerIDs struct {
	path  string
	block int64
	// node, in a cluster, is this broker's node id: its ids are node<<nodeIDShift plus the
	// counter, so no two brokers hand out the same id, and an id another broker handed out
	// is taken as handed out (a replicated partition's producer state decides about it).
	node int64

	fileMu sync.Mutex
	mu     sync.Mutex
	next   int64 // guarded by mu: the next id to hand out
	limit  int64 // guarded by mu: the end of the reserved block (file says so)
	err    error // guarded by fileMu: a failed write, sticky (ids stop until a restart)

	issued atomic.Int64 // == next: every id below it may have been handed out
}

// producerIDsFile is the file's name in the data directory. NEVER CHANGE: existing data
// directories have it.
const producerIDsFile = "producer-ids"

// The file's layout (16 bytes, big-endian). NEVER CHANGE.
//
//	 0        4        8
//	+--------+--------+-------------------+
//	| "LQPI" | crc32c | next unreserved   |   crc32c of bytes 8-15; ids below the value may
//	|        | 8..16  | id, i64           |   have been handed out
//	+--------+--------+-------------------+
const producerIDsMagic = "LQPI"

// defaultProducerIDBlock is how many ids one fsync reserves.
const defaultProducerIDBlock = 1 << 16

// openProducerIDs reads the file (none: a new data directory, ids from 0) and reserves the
// first block. A damaged file is an error: the ids handed out before are unknown, so new
// ones could repeat them.
func openProducerIDs(dataDir string, block int64) (*producerIDs, error) {
	if block <= 0 {
		block = defaultProducerIDBlock
	}
	a := &producerIDs{path: filepath.Join(dataDir, producerIDsFile), block: block}
	b, err := os.ReadFile(a.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("producer ids: %w", err)
	case len(b) != 16 || string(b[:4]) != producerIDsMagic || binary.BigEndian.Uint32(b[4:]) != wire.Checksum(b[8:16]) || int64(binary.BigEndian.Uint64(b[8:])) < 0:
		return nil, fmt.Errorf("producer ids: %s is damaged (%d bytes, not a valid record): the ids handed out before are unknown, so the broker will not hand out more; restore the file, or replace it with one whose value is above every id ever handed out", a.path, len(b))
	default:
		a.next = int64(binary.BigEndian.Uint64(b[8:]))
	}
	a.limit = a.next
	a.issued.Store(a.next)
	if err := a.write(a.next + a.block); err != nil {
		return nil, err
	}
	a.limit = a.next + a.block
	return a, nil
}

// write records that ids below end may be handed out (writeFileDurable).
func (a *producerIDs) write(end int64) error {
	b := make([]byte, 16)
	copy(b, producerIDsMagic)
	binary.BigEndian.PutUint64(b[8:], uint64(end))
	binary.BigEndian.PutUint32(b[4:], wire.Checksum(b[8:]))
	err := writeFileDurable(a.path, b)
	if err != nil {
		return fmt.Errorf("producer ids: reserving ids below %d in %s: %w", end, a.path, err)
	}
	return nil
}

// take hands out the next id of the reserved block, or reports that the block is used up
// (call reserve, off the event loop). Safe for concurrent use; it does no I/O.
func (a *producerIDs) take() (int64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.next >= a.limit {
		return 0, false
	}
	id := a.next
	a.next++
	a.issued.Store(a.next)
	return a.node<<nodeIDShift | id, true
}

// nodeIDShift puts a cluster broker's node id above 2^40 ids of its own.
const nodeIDShift = 40

// inCluster makes a's ids those of node in a cluster (see producerIDs.node). Before use.
func (a *producerIDs) inCluster(node uint32) { a.node = int64(node) }

// reserve reserves the next block (one fsync) if the current one is used up, then hands out
// an id. It blocks on the disk: run it on a worker. Safe for concurrent use.
func (a *producerIDs) reserve() (int64, error) {
	a.fileMu.Lock()
	defer a.fileMu.Unlock()
	if id, ok := a.take(); ok {
		return id, nil // another reservation made room meanwhile
	}
	if a.err != nil {
		return 0, a.err
	}
	a.mu.Lock()
	end := a.limit + a.block
	a.mu.Unlock()
	if err := a.write(end); err != nil {
		a.err = err
		return 0, err
	}
	a.mu.Lock()
	a.limit = end
	a.mu.Unlock()
	id, _ := a.take()
	return id, nil
}

// handedOut reports whether id may have been handed out (it is below the next id to be
// given). Lock-free: the produce path asks it for every batch with a producer id.
func (a *producerIDs) handedOut(id int64) bool {
	switch {
	case a.node == 0:
		return id < a.issued.Load()
	case id>>nodeIDShift != a.node:
		return id >= 0 // another broker's (see producerIDs.node)
	}
	return id&(1<<nodeIDShift-1) < a.issued.Load()
}
