package broker

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	cmeta "github.com/lightq/lightq/cluster/meta"
	cpart "github.com/lightq/lightq/cluster/partition"
	"github.com/lightq/lightq/cluster/replica"
	qlog "github.com/lightq/lightq/log"
	"github.com/lightq/lightq/wire"
)

// replPart is a partition of a replicated topic as this broker knows it: its Raft group, its
// replicas by the metadata (the preferred leader first), and its replica here when it holds
// one (part nil: this broker holds none, and answers every request of the partition
// NOT_LEADER). group is immutable; replicas and part change when the partition moves
// (reconcile in clustertopics.go), and are read without locks from any goroutine.
type replPart struct {
	group    uint64
	replicas atomic.Pointer[[]uint64]
	part     atomic.Pointer[cpart.Partition]
	// broken: a replica is placed here but could not be opened, so the leader is not known
	// here (METADATA names none rather than guess).
	broken atomic.Bool
}

func newReplPart(group uint64, replicas []uint64) *replPart {
	rp := &replPart{group: group}
	rp.replicas.Store(&replicas)
	return rp
}

// leader is the node that leads the partition as far as this broker knows: its replica's
// view, else the preferred leader (the client then asks that broker, which knows).
func (rp *replPart) leader() uint64 {
	if part := rp.part.Load(); part != nil {
		return part.Replica().Status().Leader
	}
	if rs := *rp.replicas.Load(); len(rs) > 0 && !rp.broken.Load() {
		return rs[0]
	}
	return 0
}

// leads reports whether this broker's replica leads the partition now.
func (rp *replPart) leads() bool {
	part := rp.part.Load()
	return part != nil && part.Replica().Status().IsLeader
}

// notLeader answers a request of a replicated partition this broker does not lead, naming
// the leader it knows and where clients reach it.
func (c *conn) notLeader(corr uint32, t *topic, p *partition, leader uint64) {
	self := c.srv.nodeID()
	msg := fmt.Sprintf("partition %d of %s: this broker (node %d) is not its leader; ", p.id, t.name, self)
	switch b, ok := c.srv.clusterBroker(leader); {
	case leader == 0:
		msg += "no leader is known (an election is under way): retry in a moment"
	case ok && b.ClientAddr != "":
		msg += fmt.Sprintf("node %d is, at %s", leader, b.ClientAddr)
	default:
		msg += fmt.Sprintf("node %d is", leader)
	}
	c.sendError(corr, wire.CodeNotLeader, msg)
}

// clusterBroker looks a node up in the cluster metadata.
func (s *Server) clusterBroker(id uint64) (cmeta.Broker, bool) {
	if s.cluster == nil || id == 0 {
		return cmeta.Broker{}, false
	}
	return s.cluster.meta.State().Broker(id)
}

// produceReplicated hands a batch to its replicated partition, which answers once a quorum
// has it (PROTOCOL.md section 16). The answer comes through the connection's completion
// queue, like a durable ack. A cluster transient partition without a ring here
// (clustertransient.go) also comes here: it is answered NOT_LEADER naming its home.
func (c *conn) produceReplicated(corr uint32, t *topic, p *partition, m *wire.Produce, bt *wire.Batch) {
	rp := p.repl
	part := rp.part.Load()
	if part == nil {
		if t.kind == wire.KindTransient {
			c.notHome(corr, t, p) // a cluster transient partition homed elsewhere
			return
		}
		c.notLeader(corr, t, p, rp.leader())
		return
	}
	if m.Acks == wire.AcksDurable && p.dlog().shape.mode != fsyncAlways {
		t.stats.rejected.Add(1)
		c.sendError(corr, wire.CodeInvalidRequest, fmt.Sprintf("PRODUCE with acks 2 to %s: a replicated topic promises a majority's fsync only with fsync=always (this one has %s); use acks 1", t.name, p.dlog().shape.describeFsync()))
		return
	}
	count, size := bt.RecordCount, len(m.Batch)
	acks, start := m.Acks, c.turnStart
	if acks != wire.AcksNone {
		c.durableWaits++
	}
	part.Produce(m.Batch, count, func(base int64, err error) {
		if err == nil || errors.Is(err, qlog.ErrDuplicate) {
			if err != nil {
				t.stats.duplicates.Add(1)
			} else {
				t.stats.msgsIn.Add(uint64(count))
				t.stats.bytesIn.Add(uint64(size))
				t.stats.batchesIn.Add(1)
				c.srv.metrics.countIn(p, count, size)
			}
			err = nil
		} else {
			t.stats.rejected.Add(1)
			err = c.srv.replicatedRefusal(t, p, err)
		}
		if acks != wire.AcksNone {
			c.queueAck(pendingAck{corr: corr, partition: p.id, base: base, err: err, start: start})
		}
	})
	c.notePublisher(t)
}

// replicatedRefusal turns a replicated partition's refusal into the client's code and text.
func (s *Server) replicatedRefusal(t *topic, p *partition, err error) error {
	var nl *replica.NotLeaderError
	switch {
	case errors.As(err, &nl):
		msg := fmt.Sprintf("partition %d of %s: this broker (node %d) is not its leader", p.id, t.name, s.nodeID())
		if b, ok := s.clusterBroker(nl.Leader); ok {
			msg += fmt.Sprintf("; node %d is, at %s", nl.Leader, b.ClientAddr)
		}
		return &wire.Error{Code: wire.CodeNotLeader, Message: msg + ": nothing stored"}
	case errors.Is(err, cpart.ErrMaybeStored):
		return &wire.Error{Code: wire.CodeReplicationTimeout, Message: fmt.Sprintf("partition %d of %s: %v", p.id, t.name, err)}
	case errors.Is(err, cpart.ErrBusy):
		return &wire.Error{Code: wire.CodeResourceLimit, Message: fmt.Sprintf("partition %d of %s: %v; nothing stored, retry", p.id, t.name, err)}
	case errors.Is(err, cpart.ErrClosed):
		return &wire.Error{Code: wire.CodeUnknownTopic, Message: fmt.Sprintf("partition %d of %s: %v", p.id, t.name, err)}
	case isProducerRefusal(err):
		code := wire.CodeOf(err)
		if code == wire.CodeInternal {
			code = wire.CodeResourceLimit // producerstate.ErrTooManyProducers
		}
		return &wire.Error{Code: code, Message: err.Error()}
	case errors.Is(err, wire.ErrCorruptBatch), errors.Is(err, wire.ErrBatchTooLarge):
		return &wire.Error{Code: wire.CodeOf(err), Message: err.Error()}
	}
	return err
}

// readableHere answers NOT_LEADER and returns false for a replicated partition this broker
// does not lead: FETCH and LIST_OFFSETS go to the leader (PROTOCOL.md section 16).
func (c *conn) readableHere(corr uint32, t *topic, p *partition) bool {
	if p.repl == nil || p.repl.leads() {
		return true
	}
	c.notLeader(corr, t, p, p.repl.leader())
	return false
}

// describeFsync names a durable shape's fsync policy as the option spells it.
func (sh durableShape) describeFsync() string {
	switch sh.mode {
	case fsyncAlways:
		return "fsync=always"
	case fsyncNever:
		return "fsync=never"
	}
	return "fsync=interval=" + sh.interval.String()
}

// partitionFsync is the replicated partition's fsync policy for a durable shape.
func partitionFsync(sh durableShape) cpart.Fsync {
	switch sh.mode {
	case fsyncAlways:
		return cpart.FsyncAlways
	case fsyncNever:
		return cpart.FsyncNever
	}
	return cpart.FsyncInterval(sh.interval)
}

// holds reports whether node is among replicas.
func holds(replicas []uint64, node uint64) bool { return slices.Contains(replicas, node) }
