package broker

import (
	"sync"

	"github.com/lightq/lightq/wire"
)

// Direct delivery: a producer's loop writes a small transient batch it has just stored
// straight to the sockets of idle fan-out subscribers, instead of waking each subscriber's
// loop to do it.
//
// Why: at a low rate every batch is a message or a few, and the wake-up is most of the
// broker's part of the latency: gnet's Wake queues a task and writes the target loop's
// eventfd; that loop's thread wakes from epoll_wait (on a VM an idle vCPU takes tens of µs to
// wake), finds a P, runs the task, and only then writes the DELIVER. The producer's loop is
// already running and holds the batch.
//
// gnet allows Write and Writev only on a connection's own loop, and its outbound buffer is
// not safe from other goroutines. So direct delivery never touches the gnet.Conn: it writes
// the frame with writev(2) on the socket's descriptor, and only while the subscriber's loop
// has lent it the right to (directState):
//
//   - The owner lends at the end of a turn (conn.lend, from Server.OnTraffic) when its socket is
//     idle: nothing in gnet's outbound buffer or in c.out, no FETCH transfer, not stalled at
//     the high-water mark, not closing, plaintext (a TLS session's bytes are not the socket's).
//     gnet writes to a socket only from its outbound buffer, so while that is empty and the
//     owner is between turns, nobody else writes to the descriptor.
//   - The owner takes it back (conn.reclaim) first thing in every turn (onTraffic) and in
//     onClose, before gnet closes the descriptor (gnet calls OnClose first), so a direct
//     write never reaches a descriptor number that a new connection may get.
//   - While lent, the fields a delivery changes (the subscriptions' credit and cursors, c.subs
//     itself, c.dhdr) belong to whoever holds directState.mu: the owner touches them only
//     after reclaim, other loops only under mu with lent set.
//   - A partial write keeps the unsent tail in directState.rest and ends the loan; the owner's
//     reclaim writes that tail through gnet before anything else, so frames never interleave.
//     Nothing written (EAGAIN) or an error ends the loan too, and the owner's loop is woken to
//     deliver (or find the error) the ordinary way.
//
// The producer's loop tries TryLock only, so it never waits for another loop; on any doubt
// (lock taken, not lent, a queue group, a batch over directMaxBatch, more than
// directMaxBatches waiting) it wakes the subscriber's loop as before. At most directMaxConns
// subscribers are written to per batch, which bounds the work a wide fan-out adds to the
// producer's loop; the rest are woken. Lock order: directState.mu, then a ring slot's read
// lock; the owner holds mu only to flip lent.

const (
	// directMaxBatch: larger batches go through the subscriber's loop; a big batch is a busy
	// producer, whose batches are not waiting for a wake-up anyway.
	directMaxBatch = 16 << 10
	// directMaxConns: subscribers one stored batch is written to directly.
	directMaxConns = 8
	// directMaxBatches: batches written to one subscription in one go (a few may have piled
	// up while the loan was off); the owner's loop delivers beyond that.
	directMaxBatches = 4
)

// directState is what a connection's loop lends other loops between its turns (see above).
type directState struct {
	mu   sync.Mutex
	lent bool   // guarded by mu: other loops may deliver to fd
	fd   int    // guarded by mu: the socket, set with lent
	rest []byte // guarded by mu while lent, then the owner's: a frame's unsent tail
	// Guarded by mu: DELIVERs other loops wrote, and how many of them the socket took only
	// in part (for tests and debugging).
	written, short uint64
}

// lend lets other loops deliver to the connection until its next turn, if its socket is
// idle. Runs on the loop at the end of a turn.
func (c *conn) lend() {
	if !directWrites || c.tls != nil || len(c.subs) == 0 || c.failing() || c.closed() || c.saidGoodbye ||
		c.xfer != nil || len(c.ready) > 0 || c.deliverBlocked || len(c.out) > 0 || c.gc.OutboundBuffered() > 0 {
		return
	}
	fd := c.gc.Fd()
	d := &c.direct
	d.mu.Lock()
	d.lent, d.fd = true, fd
	d.mu.Unlock()
}

// reclaim ends the loan: from here on only the owner's loop writes to the socket and touches
// the subscriptions. A frame tail a direct write left is written first, through gnet (which
// buffers what the socket does not take), unless the connection is closing (write false).
// Runs on the loop, first in each turn and in onClose.
func (c *conn) reclaim(write bool) {
	d := &c.direct
	d.mu.Lock()
	d.lent = false
	rest := d.rest
	d.rest = nil
	d.mu.Unlock()
	if len(rest) == 0 || !write || c.closed() {
		return
	}
	// A write error closes the connection (OnClose inside Write), which closed() reports.
	_, _ = c.gc.Write(rest)
	d.rest = rest[:0]
}

// deliverDirect writes p's batches that c's fan-out subscriptions wait for straight to c's
// socket, if c's loop lent it. It reports whether c's loop has nothing left to do for p;
// false means wake it. Runs on a producer's loop (any loop but, possibly, c's own, which is
// between turns then).
func (c *conn) deliverDirect(p *partition) bool {
	d := &c.direct
	if !d.mu.TryLock() {
		return false
	}
	defer d.mu.Unlock()
	if !d.lent {
		return false
	}
	for _, s := range c.subs {
		for _, cur := range s.cursors {
			if cur.part != p {
				continue
			}
			if cur.queueGroup != nil || s.topic.deleted.Load() {
				return false
			}
			if !c.deliverDirectFrom(s, cur) {
				return false
			}
		}
	}
	return true
}

// deliverDirectFrom writes the batches cur waits for while s has credit, at most
// directMaxBatches. It reports false when the owner's loop must take over: a batch too
// large, more waiting, or the loan ended (a short write, EAGAIN, an error). directState.mu
// is held and lent set.
func (c *conn) deliverDirectFrom(s *subscription, cur *cursor) bool {
	d := &c.direct
	r := cur.part.ring
	for k := 0; s.credit > 0; k++ {
		v, ok := r.Acquire(cur.seq)
		if !ok {
			return true
		}
		if k == directMaxBatches || len(v.Data) > directMaxBatch {
			r.Release(v)
			return false
		}
		dropped := v.FirstMsg - cur.nextMsg
		hdr := c.dhdr[:]
		wire.PutHeader(hdr, wire.OpDeliver, 0, s.id, wire.DeliverHeaderSize+len(v.Data))
		wire.PutDeliverHeader(hdr[wire.HeaderSize:], cur.part.id, dropped)
		n, err := writev2(d.fd, hdr, v.Data)
		if err != nil || n <= 0 {
			r.Release(v)
			d.lent = false // the owner delivers it, or meets the error
			return false
		}
		if total := len(hdr) + len(v.Data); n < total {
			if n < len(hdr) {
				d.rest = append(append(d.rest[:0], hdr[n:]...), v.Data...)
			} else {
				d.rest = append(d.rest[:0], v.Data[n-len(hdr):]...)
			}
			d.lent = false // the owner writes the tail before anything else
			d.short++
		}
		d.written++
		cur.seq, cur.nextMsg = v.Seq+1, v.FirstMsg+uint64(v.Count)
		c.countDelivered(s, cur, v.Count, len(v.Data), dropped)
		r.Release(v)
		if !d.lent {
			return false
		}
	}
	return true
}

// countDelivered charges a DELIVER of size bytes and count messages to s's credit and the
// statistics. On the owner's loop, or under a loan (directState.mu).
func (c *conn) countDelivered(s *subscription, cur *cursor, count uint32, size int, dropped uint64) {
	s.credit -= int64(size)
	st := &s.topic.stats
	st.msgsOut.Add(uint64(count))
	st.bytesOut.Add(uint64(size))
	if dropped > 0 {
		st.dropped.Add(dropped)
	}
	c.srv.metrics.countOut(cur.part, uint64(count), size, dropped)
}

// deliverOrWake hands a transient partition's new batch to its subscribers: written directly
// to up to directMaxConns of them whose loops lent their sockets, the others' loops woken.
// Runs on the producer's loop.
func (p *partition) deliverOrWake() {
	direct := 0
	for _, c := range *p.wakers.Load() {
		if directWrites && direct < directMaxConns {
			direct++
			if c.deliverDirect(p) {
				continue
			}
		}
		c.wake()
	}
}
