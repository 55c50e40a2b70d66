package broker

import (
	"errors"
	"fmt"
	"time"

	"github.com/lightq/lightq/broker/ring"
	qlog "github.com/lightq/lightq/log"
	"github.com/lightq/lightq/wire"
)

// handleProduce stores one batch, in a transient partition's ring or a durable partition's
// log (produceDurable), and wakes the partition's subscribers and waiting fetches. It runs on
// the producer's loop and allocates nothing: the batch is checked in place in gnet's read
// buffer (header and CRC by wire.ParseBatch, every record by the loop's RecordValidator, so
// that every stored batch decodes) and copied once, into the ring or the log's page cache.
// Most transient batches never get here: produceDirect takes them straight from gnet's
// buffers.
func (c *conn) handleProduce(corr uint32, body []byte) {
	if c.srv.stopping.Load() {
		// Nothing new is accepted while the broker drains. The refusal closes the
		// connection, so it waits for the acks this connection is owed (see onTraffic).
		if !c.refused {
			c.refused, c.refusedCorr = true, corr
		}
		return
	}
	var m wire.Produce
	if !c.decodeOr(corr, wire.OpProduce, m.Decode(body)) {
		return
	}
	t := c.lookupTopic(corr, wire.OpProduce, m.Topic)
	if t == nil {
		return
	}
	bt, err := wire.ParseBatch(m.Batch, c.srv.cfg.Limits.MaxBatch)
	if err == nil {
		err = c.validateRecords(&bt)
	}
	if err != nil {
		t.stats.rejected.Add(1)
		c.sendError(corr, wire.CodeOf(err), err.Error())
		return
	}
	if bt.IsControl() {
		t.stats.rejected.Add(1)
		c.sendError(corr, wire.CodeInvalidRequest, "PRODUCE: a control batch (attributes bit 5): only the broker writes them; nothing stored")
		return
	}
	if bt.HasProducer() && m.Partition == wire.PartitionAny {
		c.sendError(corr, wire.CodeInvalidRequest, fmt.Sprintf("PRODUCE: a batch with producer id %d sent to partition -1: its sequence numbers are per partition, so it must name one", bt.ProducerID))
		return
	}
	p := t.partitionFor(m.Partition)
	if p == nil {
		c.sendError(corr, wire.CodeUnknownPartition, fmt.Sprintf("topic %q has partitions 0-%d, not %d", t.name, len(t.parts)-1, m.Partition))
		return
	}
	if bt.HasProducer() && !c.idempotentOK(corr, t, m.Acks, &bt.BatchHeader) {
		return
	}
	if p.repl != nil {
		c.produceReplicated(corr, t, p, &m, &bt) // the replica stamps term and index
		return
	}
	stampUnreplicated(m.Batch)
	switch {
	case p.dlog() != nil:
		c.produceDurable(corr, t, p, &m, &bt)
		return
	case bt.HasProducer():
		c.produceTransientIdempotent(corr, t, p, &m, &bt)
		return
	}
	first, err := p.ring.Append(m.Batch, bt.RecordCount)
	if err != nil {
		c.ringRefusal(corr, t, err)
		return
	}
	c.producedTransient(corr, t, p, m.Acks, len(m.Batch), bt.RecordCount, first)
}

// ringRefusal answers a batch a ring refused.
func (c *conn) ringRefusal(corr uint32, t *topic, err error) {
	t.stats.rejected.Add(1)
	if errors.Is(err, ring.ErrTooLarge) {
		c.sendError(corr, wire.CodeMessageTooLarge, err.Error())
	} else {
		c.sendError(corr, wire.CodeInternal, err.Error())
	}
}

// produceDirect stores the PRODUCE frame of size bytes at the head of the input straight
// into its transient partition's ring: the batch is copied once, from gnet's buffers into
// ring space, and checked there. Taking the frame with Peek instead would copy it a first
// time whenever it spans gnet's buffers (a 128 KiB batch usually arrives in more than one
// read), which was a third of the broker's CPU at 1 KiB messages.
//
// gnet may hold only the frame's start (at least its headers): then, on a plaintext
// connection whose socket already holds the rest (directread_linux.go), the rest is read
// from the socket into the ring, and the only copy of those bytes is the kernel's. Without
// them there it returns false and the frame waits for gnet's reads, which is also what the
// caller does with an incomplete frame this returns false for.
//
// It returns false, having consumed nothing, for any frame the general path must answer:
// not a PRODUCE a ready connection may send, a body or topic that is not right, a durable
// topic, an oversized batch, a batch with a producer id that is a duplicate or would be
// refused (see idempotence.go), a control batch. Those go through handle, which gives the same answers it always
// did. Only the batch's own errors are answered here, with the codes handleProduce gives.
// The batch is checked as handleProduce checks it: header and CRC (wire.ParseBatch), then
// every record (the loop's RecordValidator, decompressing a compressed batch into the loop's
// scratch). Two costs of checking it in the ring: a batch that fails has already made room
// (older batches evicted, which a subscriber still behind them sees as dropped), and the
// check runs under the ring's writer lock, which other producers to the same partition, a
// SUBSCRIBE starting at its end, and STATS and METADATA of the topic wait for. For an uncompressed 1 MiB batch that is about
// 0.1 ms of CRC and 0.1-0.3 ms of record walk; a compressed one adds its decompression
// (s2 roughly 1 ms, zstd 2 ms per MiB of records on the 2-core VM, see
// wire.BenchmarkValidate).
func (c *conn) produceDirect(size int) bool {
	if !c.helloDone || c.principal == nil || c.srv.stopping.Load() {
		return false
	}
	head, err := c.gc.Peek(min(size, wire.HeaderSize+wire.MaxProduceHeader+wire.MaxBatchHeaderSize))
	if err != nil {
		return false
	}
	fh, ok := wire.PeekHeader(head)
	if !ok || fh.Op != wire.OpProduce || fh.Flags&wire.FlagResponse != 0 {
		return false
	}
	corr := fh.Corr
	var m wire.Produce
	hl, err := m.DecodeHeader(head[wire.HeaderSize:])
	if err != nil {
		return false
	}
	t := (*c.srv.topics.Load())[string(m.Topic)]
	if t == nil || t.deleted.Load() || !c.may(wire.OpProduce, t) {
		return false
	}
	batchLen := size - wire.HeaderSize - hl
	// A cluster's transient topic may have partitions without a ring here (homed on another
	// broker: clustertransient.go); its direct path takes the partitions homed here.
	r0 := t.parts[0].ring
	if t.cluster != nil {
		r0 = t.cluster.ring0
	}
	// Decide before choosing a partition: PartitionAny advances the round robin, which the
	// general path would advance again.
	if t.kind != wire.KindTransient || batchLen > c.srv.cfg.Limits.MaxBatch || batchLen < wire.BatchHeaderSize ||
		r0 == nil || batchLen > r0.MaxBatch() {
		return false
	}
	// Bytes of the frame still in the socket, not yet in gnet's buffers.
	inSocket := size - c.gc.InboundBuffered()
	if inSocket > 0 && (c.tls != nil || socketHolds(c.gc.Fd()) < inSocket) {
		return false
	}
	// A batch with a producer id (magic 2) goes on here only if it is to be stored: a
	// duplicate or a refusal is answered by the general path, without making room in the
	// ring. The header is peeked before a partition is chosen, for the same reason as above.
	var idem wire.BatchHeader
	idempotent, now := false, int64(0)
	bh := head[wire.HeaderSize+hl:]
	if wire.IsControlBatch(bh) {
		return false // refused by the general path, before it makes room in the ring
	}
	if len(bh) >= wire.BatchHeaderSize2 && wire.BatchMagicOf(bh) == wire.BatchMagic2 {
		if idem, err = wire.PeekBatchHeader(bh); err != nil {
			return false
		}
		idempotent = idem.HasProducer()
		if idempotent && (m.Acks == wire.AcksNone || !c.srv.pids.handedOut(idem.ProducerID) || m.Partition == wire.PartitionAny) {
			return false
		}
	}
	p := t.partitionFor(m.Partition)
	if p == nil || p.ring == nil {
		return false
	}
	if idempotent {
		now = time.Now().UnixMilli()
		if res, err := p.checkTransient(c.srv, t, &idem, now); err != nil || res.Duplicate {
			return false
		}
	}

	// Committed to this path: consume the frame.
	c.discard(wire.HeaderSize + hl)
	dst, err := p.ring.Reserve(batchLen)
	if err != nil { // cannot happen: the size was checked
		c.discard(batchLen)
		c.sendError(corr, wire.CodeInternal, err.Error())
		return true
	}
	inGnet := batchLen - max(inSocket, 0)
	if n, err := c.gc.Read(dst[:inGnet]); err != nil || n != inGnet {
		p.ring.Abort()
		c.discard(inGnet - n)
		c.sendError(corr, wire.CodeInternal, fmt.Sprintf("read %d of %d buffered batch bytes", n, inGnet))
		if inSocket > 0 {
			c.advance(connFailing) // the rest of the frame is still in the socket
		}
		return true
	}
	if inSocket > 0 {
		if err := readSocket(c.gc.Fd(), dst[inGnet:]); err != nil {
			// Part of the frame is consumed: the stream cannot go on.
			p.ring.Abort()
			c.log.Warn().Err(err).Int("bytes", inSocket).Msg("closing: reading a batch's rest from the socket failed")
			c.sendError(corr, wire.CodeInternal, "reading the batch from the socket: "+err.Error())
			c.advance(connFailing)
			return true
		}
	}
	bt, err := wire.ParseBatch(dst, c.srv.cfg.Limits.MaxBatch)
	if err == nil {
		err = c.validateRecords(&bt)
	}
	if err != nil {
		p.ring.Abort()
		t.stats.rejected.Add(1)
		c.sendError(corr, wire.CodeOf(err), err.Error())
		return true
	}
	if bt.HasProducer() {
		if !idempotent { // the header peeked and the header checked differ: refuse
			p.ring.Abort()
			c.sendError(corr, wire.CodeInternal, "batch header changed while it was read")
			return true
		}
		res, err := p.admitTransient(c.srv, t, &bt.BatchHeader, p.ring.ReservedFirst(), now)
		if err != nil || res.Duplicate {
			p.ring.Abort()
			if err != nil {
				c.sendProducerRefusal(corr, t, err)
			} else {
				c.answerDuplicate(corr, t, p, m.Acks, res.Base, bt.RecordCount)
			}
			return true
		}
	}
	stampUnreplicated(dst)
	first := p.ring.Commit(bt.RecordCount)
	c.producedTransient(corr, t, p, m.Acks, batchLen, bt.RecordCount, first)
	return true
}

// partitionFor returns the partition a PRODUCE names, taking the next in round robin for
// PartitionAny, or nil when the topic has no such partition.
func (t *topic) partitionFor(id int32) *partition {
	switch {
	case id == wire.PartitionAny:
		return t.parts[int(t.rr.Add(1)-1)%len(t.parts)]
	case id < 0 || int(id) >= len(t.parts):
		return nil
	}
	return t.parts[id]
}

// producedTransient counts a batch stored in a transient partition, delivers it to idle
// subscribers or wakes their loops (direct.go), and acknowledges it.
func (c *conn) producedTransient(corr uint32, t *topic, p *partition, acks wire.Acks, size int, count uint32, first uint64) {
	t.stats.msgsIn.Add(uint64(count))
	t.stats.bytesIn.Add(uint64(size))
	t.stats.batchesIn.Add(1)
	c.srv.metrics.countIn(p, count, size)
	c.notePublisher(t)
	p.deliverOrWake()
	if acks != wire.AcksNone {
		c.srv.metrics.acked(ackTransient, c.turnStart)
		resp := wire.ProduceResponse{Partition: p.id, BaseOffset: int64(first)}
		c.respond(wire.OpProduce, corr, resp.AppendTo)
	}
}

// produceDurable appends a batch to a durable partition's log (a write into the page cache,
// on this loop) and answers now, or once the syncer has fsynced it. The log checks a batch
// with a producer id against the partition's producer state: a duplicate is answered with
// the original base offset (qlog.ErrDuplicate), a refusal with its code.
func (c *conn) produceDurable(corr uint32, t *topic, p *partition, m *wire.Produce, bt *wire.Batch) {
	d := p.dlog()
	count := bt.RecordCount
	if d.err != nil {
		t.stats.rejected.Add(1)
		c.sendStorageErrorCode(corr, wire.CodeStorageError, t.name, p.id, d.err)
		return
	}
	base, err := d.log.Append(m.Batch, count)
	if err != nil {
		switch {
		case err == qlog.ErrDuplicate:
			c.answerDuplicate(corr, t, p, m.Acks, base, count)
		case isProducerRefusal(err):
			c.sendProducerRefusal(corr, t, err)
		default:
			t.stats.rejected.Add(1)
			c.sendStorageError(corr, t.name, p.id, err)
		}
		return
	}
	t.stats.msgsIn.Add(uint64(count))
	t.stats.bytesIn.Add(uint64(len(m.Batch)))
	t.stats.batchesIn.Add(1)
	c.srv.metrics.countIn(p, count, len(m.Batch))
	c.notePublisher(t)
	// Waiting fetches with isolation "written" (and every fetch unless fsync=always) can
	// see the batch now; the syncer wakes the others once it is durable.
	p.wakeAll()
	switch {
	case d.needsSyncForAck(m.Acks):
		c.durableWaits++
		d.waitDurable(durableAck{c: c, corr: corr, base: base, next: base + int64(count), at: c.turnStart})
		return
	case d.shape.mode == fsyncAlways:
		d.kickSync() // consumers with isolation "durable" see it once fsynced
	}
	if m.Acks != wire.AcksNone {
		c.srv.metrics.acked(ackWritten, c.turnStart)
		resp := wire.ProduceResponse{Partition: p.id, BaseOffset: base}
		c.respond(wire.OpProduce, corr, resp.AppendTo)
	}
}

// notePublisher counts the connection as a publisher of t the first time it produces there.
func (c *conn) notePublisher(t *topic) {
	for _, p := range c.published {
		if p == t {
			return
		}
	}
	c.published = append(c.published, t)
	t.stats.publishers.Add(1)
}
