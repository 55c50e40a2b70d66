// Package ring is the in-memory store of a transient topic partition: a preallocated byte
// arena written circularly, plus a fixed index of the batches it holds. A produced batch is
// copied into the arena once; every subscriber then writes it to its socket straight from
// there, so fan-out costs no copy in our code and no allocation.
//
// When the arena or the index is full, the oldest batches are evicted. A subscriber that has
// not read them by then has lost them; it learns how many messages it lost from the message
// sequence numbers (see View.FirstMsg).
//
// Concurrency: Append (or Reserve then Commit or Abort) may be called from any goroutine
// (writers are serialised by Ring.mu, which Reserve holds until Commit or Abort).
// Acquire/Release may be called from any goroutine concurrently with Append. A View holds a
// read lock on its slot until Release, which keeps writers from reusing that part of the
// arena: hold it only for the duration of a non-blocking write. Lock order: Ring.mu, then a
// slot's mu; readers take only slot locks.
package ring

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/lightq/lightq/wire"
)

// ErrTooLarge is returned by Append for a batch larger than half the arena.
var ErrTooLarge = errors.New("batch larger than half the partition ring")

type slot struct {
	mu       sync.RWMutex
	valid    bool
	seq      uint64 // batch sequence number held
	off, n   int    // location in the arena
	firstMsg uint64 // message sequence number of the batch's first record
	count    uint32
}

// Ring holds the recent batches of one partition.
type Ring struct {
	mu       sync.Mutex // serialises Append and End
	arena    []byte
	slots    []slot
	mask     uint64
	writePos int // under mu: arena offset after the newest batch
	resPos   int // under mu: the space Reserve handed out
	resN     int
	nextMsg  atomic.Uint64 // message sequence number the next record gets
	head     atomic.Uint64 // batch sequence number the next Append gets
	tail     atomic.Uint64 // oldest batch sequence number still held
	tailMsg  atomic.Uint64 // message sequence number of the oldest message still held
}

// SlotBytes is the memory one entry of a ring's batch index takes (72 bytes on 64-bit
// platforms): a ring of n slots preallocates n times this beside its arena.
const SlotBytes = int64(unsafe.Sizeof(slot{}))

// New returns a ring with an arena of arenaBytes and room for slots batches (rounded up to a
// power of two, see Slots). Both are allocated here, once: Memory(arenaBytes, slots) bytes.
func New(arenaBytes, slots int) *Ring {
	n := Slots(slots)
	return &Ring{arena: make([]byte, arenaBytes), slots: make([]slot, n), mask: uint64(n - 1)}
}

// Slots is the number of slots New allocates when asked for slots: the next power of two.
func Slots(slots int) int {
	n := 1
	for n < slots {
		n <<= 1
	}
	return n
}

// Memory is what New(arenaBytes, slots) preallocates: the arena plus the slot index. A broker
// that caps ring memory counts this, so that neither option escapes the cap.
func Memory(arenaBytes, slots int) int64 {
	return int64(arenaBytes) + int64(Slots(slots))*SlotBytes
}

// ArenaBytes is the size of the ring's preallocated arena.
func (r *Ring) ArenaBytes() int { return len(r.arena) }

// Memory is what the ring preallocated (see the function Memory).
func (r *Ring) Memory() int64 { return Memory(len(r.arena), len(r.slots)) }

// MaxBatch is the largest batch Append accepts.
func (r *Ring) MaxBatch() int { return len(r.arena) / 2 }

// Append copies batch (a whole, validated record batch of count records) into the ring,
// rewrites its base offset to the sequence number of its first message, and returns that
// number. It evicts the oldest batches as needed; it never blocks on readers except for the
// duration of a write a reader of an evicted batch is doing right now.
func (r *Ring) Append(batch []byte, count uint32) (uint64, error) {
	dst, err := r.Reserve(len(batch))
	if err != nil {
		return 0, err
	}
	copy(dst, batch)
	return r.Commit(count), nil
}

// Reserve makes room for a batch of n bytes, evicting the oldest batches as needed, and
// returns the arena space to write it into: a writer can fill it straight from its input
// and validate it there, with no copy of its own. Exactly one of Commit or Abort must follow;
// until then the ring is locked for other writers (readers are not blocked), so fill the
// space without waiting on anything. Batches evicted for an aborted batch stay evicted.
func (r *Ring) Reserve(n int) ([]byte, error) {
	if n > r.MaxBatch() {
		return nil, fmt.Errorf("%w: %d bytes, ring holds %d", ErrTooLarge, n, len(r.arena))
	}
	r.mu.Lock()
	head := r.head.Load()
	pos := r.writePos
	if pos+n > len(r.arena) {
		pos = 0
	}
	for tail := r.tail.Load(); tail < head; tail++ {
		if head-tail < uint64(len(r.slots)) && !r.overlapsLive(tail, pos, n) {
			break
		}
		s := &r.slots[tail&r.mask]
		s.mu.Lock() // waits for a reader of this batch to finish its write
		s.valid = false
		next := s.firstMsg + uint64(s.count)
		s.mu.Unlock()
		r.tailMsg.Store(next)
		r.tail.Store(tail + 1)
	}
	r.resPos, r.resN = pos, n
	return r.arena[pos : pos+n : pos+n], nil
}

// ReservedFirst is the sequence number Commit will give the first message of the batch
// being reserved. Call it only between Reserve and Commit (the writer lock is held).
func (r *Ring) ReservedFirst() uint64 { return r.nextMsg.Load() }

// Commit publishes the batch of count records written into the space Reserve returned: it
// rewrites the batch's base offset to the sequence number of its first message and returns
// that number.
func (r *Ring) Commit(count uint32) uint64 {
	defer r.mu.Unlock()
	head := r.head.Load()
	pos, n := r.resPos, r.resN
	first := r.nextMsg.Load()
	wire.SetBaseOffset(r.arena[pos:], int64(first))
	s := &r.slots[head&r.mask]
	s.mu.Lock()
	s.valid, s.seq, s.off, s.n, s.firstMsg, s.count = true, head, pos, n, first, count
	s.mu.Unlock()
	r.writePos = pos + n
	if head == r.tail.Load() {
		r.tailMsg.Store(first)
	}
	r.nextMsg.Store(first + uint64(count))
	r.head.Store(head + 1)
	return first
}

// Abort gives up the space Reserve returned (its batch was invalid). Nothing is published.
func (r *Ring) Abort() { r.mu.Unlock() }

// overlapsLive reports whether [pos, pos+n) intersects the live data, which runs circularly
// from the start of batch tail to writePos. Caller holds mu.
func (r *Ring) overlapsLive(tail uint64, pos, n int) bool {
	toff := r.slots[tail&r.mask].off
	end := pos + n
	if toff < r.writePos {
		return pos < r.writePos && end > toff
	}
	// Live data wraps: [toff, len) and [0, writePos).
	return end > toff || pos < r.writePos
}

// End returns the sequence numbers a new reader starts at: the next batch and the next
// message. Safe for concurrent use.
func (r *Ring) End() (seq, msg uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.head.Load(), r.nextMsg.Load()
}

// Head is the sequence number the next batch will get.
func (r *Ring) Head() uint64 { return r.head.Load() }

// Messages returns the sequence number of the oldest message held and of the next message to
// be appended; their difference is the number of messages held.
func (r *Ring) Messages() (oldest, next uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.head.Load() == r.tail.Load() {
		return r.nextMsg.Load(), r.nextMsg.Load()
	}
	return r.tailMsg.Load(), r.nextMsg.Load()
}

// Span is Messages without the ring's lock, for monitoring: it never waits for a writer
// that holds the lock while it validates a batch. Taken during a write, the pair may be a
// moment old, but oldest never exceeds next; between writes it equals Messages. Safe for
// concurrent use; lock-free.
func (r *Ring) Span() (oldest, next uint64) {
	next = r.nextMsg.Load()
	// tailMsg is the oldest message held, or nextMsg when the ring is empty (it starts so,
	// and evicting every batch leaves it so).
	return min(r.tailMsg.Load(), next), next
}

// View is a batch being read. Data aliases the arena and is valid until Release.
type View struct {
	Data     []byte
	Seq      uint64
	FirstMsg uint64
	Count    uint32
	s        *slot
}

// Acquire returns the batch with sequence number seq or, if it has been evicted, the oldest
// batch still held (its Seq says which). ok is false when no batch at or after seq exists yet.
// A successful Acquire must be followed by Release.
func (r *Ring) Acquire(seq uint64) (v View, ok bool) {
	for {
		if seq >= r.head.Load() {
			return View{}, false
		}
		if t := r.tail.Load(); seq < t {
			seq = t
			continue
		}
		s := &r.slots[seq&r.mask]
		s.mu.RLock()
		if s.valid && s.seq == seq {
			return View{Data: r.arena[s.off : s.off+s.n : s.off+s.n], Seq: seq, FirstMsg: s.firstMsg, Count: s.count, s: s}, true
		}
		s.mu.RUnlock()
		// Evicted between the tail check and the lock: the tail has moved past it.
		seq++
	}
}

// Release ends a successful Acquire.
func (r *Ring) Release(v View) { v.s.mu.RUnlock() }
