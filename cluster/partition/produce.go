package partition

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lightq/lightq/cluster/replica"
	"github.com/lightq/lightq/log"
	"github.com/lightq/lightq/wire"
)

// pending is one batch proposed and not settled: the replica's Proposal (its Data the copy of
// the batch that becomes the entry), who waits for it, and, for an idempotent batch, its
// producer fields. Records are pooled; each keeps the notify function bound to it.
//
// Ownership: the Partition's mu guards every field but prop, which the replica owns from
// ProposeNotify until it calls notify.
type pending struct {
	part   *Partition
	prop   replica.Proposal
	notify func(*replica.Proposal)

	term     uint64 // the leader term it was proposed in
	size     int
	deadline time.Time
	done     func(int64, error) // nil once answered
	joiners  []joiner           // retries of the same batch, answered with its outcome

	idem  bool
	pid   int64
	epoch int16
	seq   int32
	count uint32

	prev, next *pending // the partition's list, in proposal order
}

// joiner is a retry waiting for the outcome of an in-flight batch.
type joiner struct {
	done     func(int64, error)
	deadline time.Time
}

// answer is one call of a done function, made after mu is released.
type answer struct {
	done func(int64, error)
	base int64
	err  error
}

var pendingPool sync.Pool

func init() {
	// Set here: settled, which the records' notify calls, puts records back in the pool.
	pendingPool.New = func() any {
		r := &pending{joiners: make([]joiner, 0, 2)}
		r.notify = func(*replica.Proposal) { r.part.settled(r) }
		return r
	}
}

// call runs the answers and returns the slice emptied for reuse.
func call(ans []answer) []answer {
	for i := range ans {
		ans[i].done(ans[i].base, ans[i].err)
	}
	clear(ans)
	return ans[:0]
}

// abandon answers every caller of r still waiting with err (r stays in the list). mu held.
func (r *pending) abandon(ans []answer, err error) []answer {
	if r.done != nil {
		ans = append(ans, answer{done: r.done, err: err})
		r.done = nil
	}
	for _, j := range r.joiners {
		ans = append(ans, answer{done: j.done, err: err})
	}
	clear(r.joiners)
	r.joiners = r.joiners[:0]
	return ans
}

// Produce stores batch (a format-2 or format-1 batch the caller validated with
// wire.ParseBatch, holding count records) in the partition, on the leader. The batch is
// copied (into the one allocation Produce makes per batch); the caller may reuse its buffer
// when Produce returns. A format-1 batch is stored in format 2 (no producer, the same
// records): a replicated log holds only format 2, whose header carries the raft index.
//
// done is called exactly once, with one of:
//   - (base, nil): stored, at base on every replica, committed;
//   - (base, log.ErrDuplicate): an idempotent batch stored before (or its retry while the
//     original was in flight, once the original committed), at base;
//   - (0, *replica.NotLeaderError): nothing stored; send it to the leader named;
//   - (0, a producer refusal): wire.ErrOutOfOrderSequence, wire.ErrProducerFenced,
//     wire.ErrUnknownProducer, producerstate.ErrTooManyProducers, as the single broker
//     answers them; nothing stored;
//   - (0, ErrMaybeStored): proposed, outcome unknown (leadership lost, closed, timed out);
//   - (0, ErrBusy or ErrNotReady): nothing stored, retry later;
//   - (0, ErrClosed), (0, ErrInvalidBatch or wire.ErrBatchTooLarge): nothing stored.
//
// done runs on the caller's goroutine (answers known at once) or the replica's goroutine or
// the partition's maintenance goroutine; it must not block, and may call Produce again.
// Safe for concurrent use.
func (p *Partition) Produce(batch []byte, count uint32, done func(base int64, err error)) {
	h, err := wire.PeekBatchHeader(batch)
	switch {
	case err != nil:
		done(0, fmt.Errorf("%w: %w", ErrInvalidBatch, err))
		return
	case h.Size() != len(batch) || h.RecordCount != count || h.IsControl():
		done(0, fmt.Errorf("%w: %d bytes (header says %d), %d records (header says %d), control %v", ErrInvalidBatch, len(batch), h.Size(), count, h.RecordCount, h.IsControl()))
		return
	}
	size := len(batch)
	if h.Magic != wire.BatchMagic2 {
		size += wire.BatchHeaderSize2 - wire.BatchHeaderSize
	}
	if size > p.maxSize {
		done(0, fmt.Errorf("%w: %d bytes in format 2, the partition's limit is %d", wire.ErrBatchTooLarge, size, p.maxSize))
		return
	}
	// The entry: the replica and the transport keep it as long as they need (it cannot be
	// pooled). Made before mu is taken, so that concurrent producers copy in parallel.
	data := make([]byte, 0, size)
	if h.Magic == wire.BatchMagic2 {
		data = append(data, batch...)
	} else {
		data = appendFormat2(data, batch, &h)
	}
	p.mu.Lock()
	now := time.Now() // under mu: deadlines grow along the list (expire relies on it)
	if err := p.admit(size); err != nil {
		p.mu.Unlock()
		done(0, err)
		return
	}
	if h.HasProducer() {
		if !p.ready {
			p.mu.Unlock()
			done(0, ErrNotReady)
			return
		}
		v, base, in, err := p.dd.check(&h, p.term, now.UnixMilli())
		switch {
		case err != nil:
			p.mu.Unlock()
			done(0, err)
			return
		case v == duplicate:
			p.mu.Unlock()
			done(base, log.ErrDuplicate)
			return
		case v == join:
			if len(in.joiners) >= maxJoiners {
				p.mu.Unlock()
				done(0, ErrBusy)
				return
			}
			in.joiners = append(in.joiners, joiner{done: done, deadline: now.Add(p.cfg.ProposalTimeout)})
			p.mu.Unlock()
			return
		}
	}
	r := pendingPool.Get().(*pending)
	r.part, r.term, r.size, r.done, r.deadline = p, p.term, size, done, now.Add(p.cfg.ProposalTimeout)
	r.idem, r.pid, r.epoch, r.seq, r.count = h.HasProducer(), h.ProducerID, h.ProducerEpoch, h.BaseSequence, h.RecordCount
	r.prop.Data = data
	if err := p.rep.ProposeNotify(&r.prop, p.term, r.notify); err != nil {
		p.mu.Unlock()
		p.release(r)
		if errors.Is(err, replica.ErrStopped) {
			err = ErrClosed
		}
		done(0, err)
		return
	}
	p.link(r)
	if r.idem {
		p.dd.add(r)
	}
	p.mu.Unlock()
}

// admit refuses a batch of size bytes at once: closed, not the leader, too much waiting.
// mu held.
func (p *Partition) admit(size int) error {
	switch {
	case p.closed:
		return ErrClosed
	case p.term == 0:
		return &replica.NotLeaderError{Leader: p.status.Leader}
	case p.count >= p.cfg.MaxPending || p.bytes+int64(size) > p.cfg.MaxPendingBytes:
		return fmt.Errorf("%w: %d batches (%d bytes) waiting for a commit, the limits are %d and %d", ErrBusy, p.count, p.bytes, p.cfg.MaxPending, p.cfg.MaxPendingBytes)
	}
	return nil
}

// settled is a proposal's outcome from the replica (its goroutine).
func (p *Partition) settled(r *pending) {
	var (
		base int64
		err  = r.prop.Err
	)
	switch {
	case err == nil:
		base = wire.BatchBaseOffset(r.prop.Data) // raftlog wrote it there when it stored the entry
	case errors.Is(err, replica.ErrReplaced), isNotLeader(err):
		err = nil // below: the leader known now
	case errors.Is(err, replica.ErrBusy):
		err = ErrBusy
	default: // ErrStopped, ErrSnapshotCovered
		err = fmt.Errorf("%w (%w)", ErrMaybeStored, err)
	}
	p.mu.Lock()
	if r.prop.Err != nil && err == nil {
		err = &replica.NotLeaderError{Leader: p.status.Leader}
	}
	p.unlink(r)
	if r.idem {
		p.dd.remove(r)
	}
	ans := p.scratch[:0]
	if r.done != nil {
		ans = append(ans, answer{done: r.done, base: base, err: err})
		r.done = nil
	}
	jerr := err
	if jerr == nil {
		jerr = log.ErrDuplicate // a retry of a stored batch
	}
	for _, j := range r.joiners {
		ans = append(ans, answer{done: j.done, base: base, err: jerr})
	}
	p.mu.Unlock()
	p.release(r)
	p.scratch = call(ans)
}

// isNotLeader reports whether err is a *replica.NotLeaderError (apart, so that settled's
// other paths do not allocate the target).
func isNotLeader(err error) bool {
	var nl *replica.NotLeaderError
	return errors.As(err, &nl)
}

// release returns r to the pool; the entry's bytes stay with whoever still holds them.
func (p *Partition) release(r *pending) {
	clear(r.joiners)
	joiners := r.joiners[:0]
	notify := r.notify
	*r = pending{notify: notify, joiners: joiners}
	pendingPool.Put(r)
}

// link appends r to the list of waiting batches. mu held.
func (p *Partition) link(r *pending) {
	r.prev, r.next = p.tail, nil
	if p.tail != nil {
		p.tail.next = r
	} else {
		p.head = r
	}
	p.tail = r
	p.count++
	p.bytes += int64(r.size)
}

// unlink removes r from the list. mu held.
func (p *Partition) unlink(r *pending) {
	if r.prev != nil {
		r.prev.next = r.next
	} else {
		p.head = r.next
	}
	if r.next != nil {
		r.next.prev = r.prev
	} else {
		p.tail = r.prev
	}
	r.prev, r.next = nil, nil
	p.count--
	p.bytes -= int64(r.size)
}

// expire answers ErrMaybeStored to every caller waiting past its deadline at now (the
// maintenance goroutine). Records keep their place until the replica settles them.
func (p *Partition) expire(now time.Time) {
	p.mu.Lock()
	ans := p.sweepBuf[:0]
	for r := p.head; r != nil; r = r.next {
		// Deadlines grow along the list, a joiner's no earlier than its batch's.
		if r.deadline.After(now) {
			break
		}
		if r.done != nil {
			ans = append(ans, answer{done: r.done, err: ErrMaybeStored})
			r.done = nil
		}
		keep := r.joiners[:0]
		for _, j := range r.joiners {
			if j.deadline.After(now) {
				keep = append(keep, j)
			} else {
				ans = append(ans, answer{done: j.done, err: ErrMaybeStored})
			}
		}
		clear(r.joiners[len(keep):])
		r.joiners = keep
	}
	p.mu.Unlock()
	p.sweepBuf = call(ans)
}
