package broker

import (
	"fmt"
	"time"

	qlog "github.com/lightq/lightq/log"
	"github.com/lightq/lightq/wire"
)

// maxFetchWait bounds a FETCH's long poll.
const maxFetchWait = 30 * time.Second

// fetchWait is a FETCH that found no data and waits for some (long poll).
type fetchWait struct {
	corr     uint32
	req      wire.Fetch
	t        *topic
	p        *partition
	deadline time.Time
	timer    *time.Timer
	start    time.Time // arrival, for lightq_fetch_duration_seconds (zero: metrics off)
	cold     bool      // an I/O worker prepared it
}

// transfer is a FETCH response in flight: its header went out through gnet, the batches go
// from the segment file to the socket (sendfile on Linux). While it runs, nothing else is
// written to the connection, so the bytes cannot interleave.
type transfer struct {
	chunk     *qlog.Chunk
	pos       int64 // next file position to send
	remaining int64
	prefetch  bool // a worker is reading the range into the page cache
	warm      bool // the range was found (or made) resident in the page cache
}

func (c *conn) handleFetch(corr uint32, body []byte) {
	var m wire.Fetch
	if !c.decodeOr(corr, wire.OpFetch, m.Decode(body)) {
		return
	}
	t := c.lookupTopic(corr, wire.OpFetch, []byte(m.Topic))
	if t == nil {
		return
	}
	if t.kind != wire.KindDurable {
		c.sendError(corr, wire.CodeNotSupported, fmt.Sprintf("topic %q is transient: SUBSCRIBE to it", t.name))
		return
	}
	if int(m.Partition) >= len(t.parts) {
		c.sendError(corr, wire.CodeUnknownPartition, fmt.Sprintf("topic %q has partitions 0-%d, not %d", t.name, len(t.parts)-1, m.Partition))
		return
	}
	if m.Isolation > wire.IsolationWritten {
		c.sendError(corr, wire.CodeInvalidRequest, fmt.Sprintf("isolation %d", m.Isolation))
		return
	}
	p := t.parts[m.Partition]
	if !c.readableHere(corr, t, p) {
		return
	}
	if p.dlog().err != nil {
		c.sendStorageErrorCode(corr, wire.CodeStorageError, t.name, p.id, p.dlog().err)
		return
	}
	if len(c.fetches)+c.cold+len(c.ready) >= maxFetchesPerConn {
		c.sendError(corr, wire.CodeResourceLimit, fmt.Sprintf("a connection may have %d FETCHes outstanding", maxFetchesPerConn))
		return
	}
	fw := &fetchWait{corr: corr, req: m, t: t, p: p, start: c.turnStart}
	if !c.srv.cfg.NoColdPrefetch && c.mayBeCold(fw) && c.fetchFromWorker(fw) {
		return
	}
	c.fetchOrWait(fw)
}

// maxFetchesPerConn bounds a connection's outstanding FETCHes (waiting, being prepared, or
// prepared and queued).
const maxFetchesPerConn = 1024

// readyFetch is a FETCH answer a worker prepared, waiting for the connection's socket.
type readyFetch struct {
	fw    *fetchWait
	chunk *qlog.Chunk // nil: the worker found no data; the FETCH goes on as usual
	err   error
}

// startReady answers the oldest prepared FETCH. Runs on the loop when no transfer is running.
func (c *conn) startReady() {
	r := c.ready[0]
	c.ready[0] = readyFetch{}
	c.ready = c.ready[1:]
	switch {
	case r.err != nil:
		c.sendStorageError(r.fw.corr, r.fw.t.name, r.fw.p.id, r.err)
	case r.chunk == nil:
		c.fetchOrWait(r.fw)
	default:
		c.respondFetch(r.fw, r.chunk)
		if c.xfer != nil {
			c.xfer.warm = true
		}
	}
}

// fetchOrWait answers fw now if there is data, else parks it until data comes or its wait ends.
func (c *conn) fetchOrWait(fw *fetchWait) {
	m, t, p := &fw.req, fw.t, fw.p
	if c.tryFetch(fw) {
		return
	}
	wait := min(time.Duration(m.MaxWaitMs)*time.Millisecond, maxFetchWait)
	if wait <= 0 {
		c.respondFetch(fw, nil)
		return
	}
	fw.deadline = time.Now().Add(wait)
	fw.timer = time.AfterFunc(wait, c.wakeNow)
	t.mu.Lock()
	p.addWaiter(c)
	t.mu.Unlock()
	c.fetches = append(c.fetches, fw)
	if t.deleted.Load() {
		c.wakeNow() // deleted while we registered: serviceFetches answers it
	}
}

// wakeNow wakes the loop even if a coalesced wake is pending (a deadline must not be missed).
func (c *conn) wakeNow() {
	c.wakePending.Store(false)
	c.wake()
}

// fetchMaxBytes bounds a FETCH's batches so the response frame stays within MaxFrame.
func (c *conn) fetchMaxBytes(fw *fetchWait) int {
	return int(min(fw.req.MaxBytes, uint32(c.srv.cfg.Limits.MaxFrame-wire.HeaderSize-wire.FetchResponseHeaderSize)))
}

// mayBeCold reports whether serving fw could make the loop wait for the disk: its data is
// outside the active segment and the page cache does not hold it (asked without blocking).
func (c *conn) mayBeCold(fw *fetchWait) bool {
	l := fw.p.dlog().log
	if l.InActiveSegment(fw.req.Offset) {
		return false
	}
	return !l.Probe(fw.req.Offset, int64(c.fetchMaxBytes(fw)), func(fd uintptr, pos, n int64) bool {
		return resident(int(fd), pos, n)
	})
}

// fetchFromWorker serves a FETCH of older data, whose pages may not be in the page cache: a
// worker locates the batches (reading their headers) and reads the range into the cache, so
// the loop never waits for the disk; the answer then joins c.ready and goes out with sendfile
// when the socket is free. Other requests go on meanwhile (answers are matched by corr id).
// It returns false when the workers are saturated.
func (c *conn) fetchFromWorker(fw *fetchWait) bool {
	d := fw.p.dlog()
	limit, maxBytes := d.visibleLimit(fw.req.Isolation), c.fetchMaxBytes(fw)
	fw.cold = true
	c.cold++
	ok := c.srv.ioPool.Submit(func() {
		chunk, err := d.log.Read(fw.req.Offset, limit, maxBytes)
		if chunk != nil && !chunkResident(chunk) {
			readInto(chunk)
		}
		queued := c.complete(func(c *conn) {
			c.cold--
			if c.closed() {
				chunk.Release()
				return
			}
			c.ready = append(c.ready, readyFetch{fw: fw, chunk: chunk, err: err})
		})
		if !queued {
			chunk.Release()
		}
	})
	if !ok {
		c.cold--
	}
	return ok
}

// readInto reads a chunk's bytes once, which leaves them in the page cache. Runs on a worker.
func readInto(chunk *qlog.Chunk) {
	buf := prefetchBuf.Get().(*[]byte)
	defer prefetchBuf.Put(buf)
	for off, end := chunk.Pos, chunk.Pos+chunk.Len; off < end; {
		n, err := chunk.File.ReadAt((*buf)[:min(int64(len(*buf)), end-off)], off)
		if n <= 0 || err != nil {
			return
		}
		off += int64(n)
	}
}

// tryFetch answers fw if data is readable (or the request is bad). It returns false when the
// fetch must wait for data.
func (c *conn) tryFetch(fw *fetchWait) bool {
	d := fw.p.dlog()
	limit := d.visibleLimit(fw.req.Isolation)
	chunk, err := d.log.Read(fw.req.Offset, limit, c.fetchMaxBytes(fw))
	switch {
	case err != nil:
		c.sendStorageError(fw.corr, fw.t.name, fw.p.id, err)
		return true
	case chunk == nil:
		return false
	}
	c.respondFetch(fw, chunk)
	return true
}

// respondFetch writes the FETCH response header and starts sending chunk (nil: no batches).
func (c *conn) respondFetch(fw *fetchWait, chunk *qlog.Chunk) {
	d := fw.p.dlog()
	var n int64
	if chunk != nil {
		n = chunk.Len
	}
	var hdr [wire.HeaderSize + wire.FetchResponseHeaderSize]byte
	wire.PutHeader(hdr[:], wire.OpFetch, wire.FlagResponse, fw.corr, wire.FetchResponseHeaderSize+int(n))
	resp := wire.FetchResponse{Partition: fw.p.id, HighWatermark: d.visibleLimit(fw.req.Isolation), LogStartOffset: d.log.StartOffset()}
	resp.AppendTo(hdr[wire.HeaderSize:wire.HeaderSize]) // fills hdr in place
	c.out = append(c.out, hdr[:]...)
	c.srv.metrics.fetched(fw.path(), fw.start)
	if chunk == nil {
		return
	}
	// The header and everything queued before it go to gnet now; from here until the
	// transfer ends, nothing else is written (c.out only queues).
	if !c.flush() {
		chunk.Release()
		return
	}
	st := &fw.t.stats
	st.bytesOut.Add(uint64(n))
	st.msgsOut.Add(uint64(chunk.NextOffset - chunk.BaseOffset))
	c.srv.metrics.countOut(fw.p, uint64(chunk.NextOffset-chunk.BaseOffset), int(n), 0)
	c.startTransfer(&transfer{chunk: chunk, pos: chunk.Pos, remaining: n})
}

// startTransfer makes x the connection's transfer and puts it under the transfer deadline.
func (c *conn) startTransfer(x *transfer) {
	c.xfer = x
	c.xferProgress.Store(time.Now().UnixNano())
	c.srv.connsMu.Lock()
	c.srv.transfers[c] = struct{}{}
	c.srv.connsMu.Unlock()
}

// endTransfer releases the finished (or abandoned) transfer.
func (c *conn) endTransfer() {
	c.xfer = nil
	c.srv.connsMu.Lock()
	delete(c.srv.transfers, c)
	c.srv.connsMu.Unlock()
}

// transferStuck reports whether the transfer has sent nothing for Config.TransferTimeout: the
// client stopped reading, and the chunk it pins (maybe a segment retention deleted) must go.
func (c *conn) transferStuck(now time.Time) bool {
	return c.xfer != nil && now.UnixNano()-c.xferProgress.Load() > int64(c.srv.cfg.TransferTimeout)
}

// serviceFetches answers waiting fetches that have data or whose time is up. Runs on the
// loop when nothing is being transferred.
func (c *conn) serviceFetches() {
	now := time.Now()
	for i := 0; i < len(c.fetches) && c.xfer == nil; i++ {
		fw := c.fetches[i]
		answered := fw.t.deleted.Load()
		if rp := fw.p.repl; answered {
			c.sendError(fw.corr, wire.CodeUnknownTopic, fmt.Sprintf("topic %q was deleted", fw.t.name))
		} else if rp != nil && rp.part.Load() == nil {
			c.notLeader(fw.corr, fw.t, fw.p, rp.leader()) // the partition moved off this broker
			answered = true
		} else if answered = c.tryFetch(fw); !answered && !now.Before(fw.deadline) {
			c.respondFetch(fw, nil)
			answered = true
		}
		if answered {
			if c.closed() {
				// The answer's write failed and closed the connection: onClose ran inside
				// gnet's Write and dropped every fetch (endFetches), this one included. A
				// client that gave up a stalled connection (its long polls parked here)
				// while this broker was stopped (SIGSTOP) is closed on its first write.
				return
			}
			c.dropFetch(i)
			i--
		}
	}
}

func (c *conn) dropFetch(i int) {
	fw := c.fetches[i]
	fw.timer.Stop()
	fw.t.mu.Lock()
	fw.p.removeWaiter(c)
	fw.t.mu.Unlock()
	c.fetches = append(c.fetches[:i], c.fetches[i+1:]...)
}

// endFetches drops every waiting fetch, prepared answer and transfer (the connection closed).
func (c *conn) endFetches() {
	for len(c.fetches) > 0 {
		c.dropFetch(len(c.fetches) - 1)
	}
	for _, r := range c.ready {
		r.chunk.Release()
	}
	c.ready = nil
	if c.xfer != nil {
		if !c.xfer.prefetch { // else the prefetch worker releases it (see warmUp)
			c.xfer.chunk.Release()
		}
		c.endTransfer()
	}
}
