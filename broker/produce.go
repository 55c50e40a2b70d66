package broker

import (
	"errors"
	"fmt"

	"github.com/lightq/lightq/broker/ring"
	"github.com/lightq/lightq/wire"
)

// handleProduce stores one batch in a transient partition and wakes its subscribers. It runs
// on the producer's loop and allocates nothing: the batch is checked in place in gnet's read
// buffer and copied once, into the ring.
func (c *conn) handleProduce(corr uint32, body []byte) {
	if c.srv.stopping.Load() {
		// Nothing new is accepted while the broker drains what it already acknowledged.
		c.sendError(corr, wire.CodeShuttingDown, "broker is shutting down; batch not stored")
		return
	}
	var m wire.Produce
	if !c.decodeOr(corr, wire.OpProduce, m.Decode(body)) {
		return
	}
	t := c.lookupTopic(corr, m.Topic)
	if t == nil {
		return
	}
	bt, err := wire.ParseBatch(m.Batch, c.srv.cfg.Limits.MaxBatch)
	if err != nil {
		t.stats.rejected.Add(1)
		c.sendError(corr, wire.CodeOf(err), err.Error())
		return
	}
	var p *partition
	switch {
	case m.Partition == wire.PartitionAny:
		p = t.parts[int(t.rr.Add(1)-1)%len(t.parts)]
	case m.Partition < 0 || int(m.Partition) >= len(t.parts):
		c.sendError(corr, wire.CodeUnknownPartition, fmt.Sprintf("topic %q has partitions 0-%d, not %d", t.name, len(t.parts)-1, m.Partition))
		return
	default:
		p = t.parts[m.Partition]
	}
	if p.dlog != nil {
		c.produceDurable(corr, t, p, &m, bt.RecordCount)
		return
	}
	first, err := p.ring.Append(m.Batch, bt.RecordCount)
	if err != nil {
		t.stats.rejected.Add(1)
		if errors.Is(err, ring.ErrTooLarge) {
			c.sendError(corr, wire.CodeMessageTooLarge, err.Error())
		} else {
			c.sendError(corr, wire.CodeInternal, err.Error())
		}
		return
	}
	t.stats.msgsIn.Add(uint64(bt.RecordCount))
	t.stats.bytesIn.Add(uint64(len(m.Batch)))
	t.stats.batchesIn.Add(1)
	c.notePublisher(t)
	p.wakeAll()
	if m.Acks != wire.AcksNone {
		resp := wire.ProduceResponse{Partition: p.id, BaseOffset: int64(first)}
		c.respond(wire.OpProduce, corr, resp.AppendTo)
	}
}

// produceDurable appends a batch to a durable partition's log (a write into the page cache,
// on this loop) and answers now, or once the syncer has fsynced it.
func (c *conn) produceDurable(corr uint32, t *topic, p *partition, m *wire.Produce, count uint32) {
	d := p.dlog
	if d.err != nil {
		t.stats.rejected.Add(1)
		c.sendError(corr, wire.CodeStorageError, d.err.Error())
		return
	}
	base, err := d.log.Append(m.Batch, count)
	if err != nil {
		t.stats.rejected.Add(1)
		c.log.Warn().Err(err).Str("topic", t.name).Uint32("partition", p.id).Msg("append refused")
		c.sendError(corr, storageCode(err), err.Error())
		return
	}
	t.stats.msgsIn.Add(uint64(count))
	t.stats.bytesIn.Add(uint64(len(m.Batch)))
	t.stats.batchesIn.Add(1)
	c.notePublisher(t)
	// Waiting fetches with isolation "written" (and every fetch unless fsync=always) can
	// see the batch now; the syncer wakes the others once it is durable.
	p.wakeAll()
	switch {
	case d.needsSyncForAck(m.Acks):
		d.waitDurable(durableAck{c: c, corr: corr, base: base, next: base + int64(count)})
		return
	case d.shape.mode == fsyncAlways:
		d.kickSync() // consumers with isolation "durable" see it once fsynced
	}
	if m.Acks != wire.AcksNone {
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
