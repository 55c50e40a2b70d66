package broker

import (
	"errors"
	"fmt"
	"math"
	"time"

	qlog "github.com/lightq/lightq/log"
	"github.com/lightq/lightq/log/producerstate"
	"github.com/lightq/lightq/wire"
)

// Idempotent produce (PROTOCOL.md section 15). INIT_PRODUCER hands out producer ids
// (producerids.go). A PRODUCE whose batch carries a producer id is checked against the
// partition's producer state (package producerstate) in the same critical section that
// stores it: a durable partition's state is in its log (log.Append does it under the log's
// writer lock); a transient partition's is p.idem, under p.idemMu, which the produce path
// takes inside the ring's writer lock, so that check, store and record are one step even
// when two connections send the same producer's batches at once. No lock is shared across
// partitions; a batch without a producer id costs one branch.

// producerSweepInterval is how often the ticker drops expired producer states of transient
// partitions (durable partitions' syncers do their own).
const producerSweepInterval = time.Minute

// handleInitProducer answers INIT_PRODUCER: the same id with the next epoch for a producer
// that names its previous one, else a fresh id. A fresh id comes from the reserved block on
// the loop; when the block is used up, the next block is reserved (one fsync) on the meta
// pool.
func (c *conn) handleInitProducer(corr uint32, body []byte) {
	var m wire.InitProducer
	if !c.decodeOr(corr, wire.OpInitProducer, m.Decode(body)) {
		return
	}
	ids := c.srv.pids
	if m.PreviousID != wire.NoProducer {
		if !ids.handedOut(m.PreviousID) {
			c.sendError(corr, wire.CodeInvalidRequest, fmt.Sprintf("INIT_PRODUCER: producer id %d was never handed out by this broker", m.PreviousID))
			return
		}
		if m.PreviousEpoch < math.MaxInt16 {
			c.respondInitProducer(corr, m.PreviousID, m.PreviousEpoch+1)
			return
		}
		// Epochs are used up: a fresh id.
	}
	if id, ok := ids.take(); ok {
		c.respondInitProducer(corr, id, 0)
		return
	}
	ok := c.srv.metaPool.Submit(func() {
		id, err := ids.reserve()
		if err != nil {
			c.srv.log.Error().Err(err).Msg("cannot reserve producer ids; INIT_PRODUCER fails until this is fixed and the broker restarted")
		}
		c.complete(func(c *conn) {
			if err != nil {
				c.sendError(corr, wire.CodeStorageError, "INIT_PRODUCER: the broker cannot record producer ids on its disk (its log says why)")
				return
			}
			c.respondInitProducer(corr, id, 0)
		})
	})
	if !ok {
		c.sendError(corr, wire.CodeResourceLimit, "INIT_PRODUCER: the broker is busy; retry")
	}
}

func (c *conn) respondInitProducer(corr uint32, id int64, epoch int16) {
	resp := wire.InitProducerResponse{ProducerID: id, ProducerEpoch: epoch, Window: producerstate.Window,
		ExpiryMs: uint32(c.srv.cfg.ProducerExpiry.Milliseconds())}
	c.respond(wire.OpInitProducer, corr, resp.AppendTo)
}

// idempotentOK makes the checks of a batch with a producer id that need no partition state:
// acks 0 does not go with idempotence, and the id must have been handed out. It answers the
// refusal and returns false.
func (c *conn) idempotentOK(corr uint32, t *topic, acks wire.Acks, h *wire.BatchHeader) bool {
	switch {
	case acks == wire.AcksNone:
		c.sendError(corr, wire.CodeInvalidRequest, fmt.Sprintf("PRODUCE: a batch with producer id %d sent with acks 0: idempotence needs acks 1 or 2 (send producer id -1 with acks 0)", h.ProducerID))
	case !c.srv.pids.handedOut(h.ProducerID):
		t.stats.rejected.Add(1)
		c.sendError(corr, wire.CodeUnknownProducer, fmt.Sprintf("PRODUCE: producer id %d was never handed out by this broker (ask INIT_PRODUCER): nothing stored", h.ProducerID))
	default:
		return true
	}
	return false
}

// isProducerRefusal reports whether err is the producer state's refusal of a batch.
func isProducerRefusal(err error) bool {
	return errors.Is(err, wire.ErrOutOfOrderSequence) || errors.Is(err, wire.ErrProducerFenced) ||
		errors.Is(err, wire.ErrUnknownProducer) || errors.Is(err, producerstate.ErrTooManyProducers)
}

// sendProducerRefusal answers a batch the producer state refused.
func (c *conn) sendProducerRefusal(corr uint32, t *topic, err error) {
	t.stats.rejected.Add(1)
	code := wire.CodeOf(err)
	if errors.Is(err, producerstate.ErrTooManyProducers) {
		code = wire.CodeResourceLimit
	}
	c.sendError(corr, code, err.Error())
}

// idemTable is p's producer state, created on first use. p.idemMu held.
func (p *partition) idemTable(s *Server, t *topic) *producerstate.Table {
	if p.idem == nil {
		p.idem = producerstate.New(producerstate.Config{Expiry: s.cfg.ProducerExpiry, MaxProducers: s.cfg.MaxProducersPerPartition,
			Budget: s.producerBudget, Label: fmt.Sprintf("partition %d of %s", p.id, t.name)})
	}
	return p.idem
}

// admitTransient is the check that counts of a batch with a producer id reserved in p's
// ring at first (the sequence number of its first message, ring.ReservedFirst): with the
// ring's writer lock held, it checks the batch against the producer state and, when the
// batch is to be stored, records it (Commit, which cannot fail, follows). Otherwise the
// caller aborts the reservation and answers the duplicate or the refusal.
func (p *partition) admitTransient(s *Server, t *topic, h *wire.BatchHeader, first uint64, now int64) (producerstate.Result, error) {
	p.idemMu.Lock()
	defer p.idemMu.Unlock()
	tbl := p.idemTable(s, t)
	res, err := tbl.Check(h, now)
	if err == nil && !res.Duplicate {
		tbl.Record(h, int64(first), now)
	}
	return res, err
}

// checkTransient is admitTransient's verdict without the ring: both paths ask it before
// reserving, so that a duplicate or a refusal costs the ring nothing (room made for a batch
// evicts the oldest ones). produceDirect asks it of a header not yet CRC-checked, as a hint
// only: the check that counts is admitTransient's.
func (p *partition) checkTransient(s *Server, t *topic, h *wire.BatchHeader, now int64) (producerstate.Result, error) {
	p.idemMu.Lock()
	defer p.idemMu.Unlock()
	return p.idemTable(s, t).Check(h, now)
}

// answerDuplicate acknowledges a batch stored before at base, with the answer the first one
// got. A durable partition's duplicate waits for the same fsync as the original would have
// (it may not be durable yet).
func (c *conn) answerDuplicate(corr uint32, t *topic, p *partition, acks wire.Acks, base int64, count uint32) {
	t.stats.duplicates.Add(1)
	if d := p.dlog(); d != nil && d.needsSyncForAck(acks) && base+int64(count) > d.log.DurableOffset() {
		c.durableWaits++
		d.waitDurable(durableAck{c: c, corr: corr, base: base, next: base + int64(count)})
		return
	}
	resp := wire.ProduceResponse{Partition: p.id, BaseOffset: base}
	c.respond(wire.OpProduce, corr, resp.AppendTo)
}

// produceTransientIdempotent stores a batch with a producer id, checked and validated in
// gnet's buffer (the general path), in transient partition p.
func (c *conn) produceTransientIdempotent(corr uint32, t *topic, p *partition, m *wire.Produce, bt *wire.Batch) {
	now := time.Now().UnixMilli()
	if res, err := p.checkTransient(c.srv, t, &bt.BatchHeader, now); err != nil {
		c.sendProducerRefusal(corr, t, err)
		return
	} else if res.Duplicate {
		c.answerDuplicate(corr, t, p, m.Acks, res.Base, bt.RecordCount)
		return
	}
	dst, err := p.ring.Reserve(len(m.Batch))
	if err != nil {
		c.ringRefusal(corr, t, err)
		return
	}
	copy(dst, m.Batch)
	stampUnreplicated(dst)
	res, err := p.admitTransient(c.srv, t, &bt.BatchHeader, p.ring.ReservedFirst(), now)
	if err != nil || res.Duplicate {
		p.ring.Abort()
		if err != nil {
			c.sendProducerRefusal(corr, t, err)
		} else {
			c.answerDuplicate(corr, t, p, m.Acks, res.Base, bt.RecordCount)
		}
		return
	}
	first := p.ring.Commit(bt.RecordCount)
	c.producedTransient(corr, t, p, m.Acks, len(m.Batch), bt.RecordCount, first)
}

// stampUnreplicated writes the fields replication owns into a format-2 batch this broker
// stores in a partition that is not replicated: leader epoch 0 and raft index 0, whatever the
// producer sent (PROTOCOL.md section 7). A format-1 batch has neither and is left alone.
func stampUnreplicated(b []byte) {
	wire.SetBatchLeaderEpoch(b, leaderEpoch)
	wire.SetBatchRaftIndex(b, 0)
}

// leaderEpoch is the leader epoch the broker writes into every format-2 batch it stores:
// 0 until replication gives partitions terms.
const leaderEpoch = 0

// sweepProducers drops the expired producer states of every transient partition. It runs
// on the ticker goroutine, taking each partition's idemMu for the time of the sweep.
func (s *Server) sweepProducers(now time.Time) {
	ms := now.UnixMilli()
	topics := s.topics.Load()
	if topics == nil {
		return
	}
	for _, t := range *topics {
		if t.kind != wire.KindTransient {
			continue
		}
		for _, p := range t.parts {
			p.idemMu.Lock()
			if p.idem != nil {
				p.idem.Expire(ms)
			}
			p.idemMu.Unlock()
		}
	}
}

// producerOptions are the producer state options of a durable partition's log.
func (s *Server) producerOptions(topic string, partition uint32) qlog.ProducerOptions {
	return qlog.ProducerOptions{Expiry: s.cfg.ProducerExpiry, MaxProducers: s.cfg.MaxProducersPerPartition,
		Budget: s.producerBudget, Label: fmt.Sprintf("partition %d of %s", partition, topic)}
}
