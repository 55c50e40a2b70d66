package broker

import (
	"fmt"
	"os"
	"slices"

	cmeta "github.com/lightq/lightq/cluster/meta"
	cpart "github.com/lightq/lightq/cluster/partition"
)

// This file opens and closes the replicas a cluster member holds as the metadata moves
// partitions (PROTOCOL.md section 16.2), and keeps the transport's peers in step with the
// metadata's brokers. All of it runs on the cluster node's goroutine, from reconcile, under
// Server.adminMu; what the event loops read (partition.dl, replPart.part and replicas) is
// published through atomic pointers.
//
// A broker holds a replica of a partition while it is among the partition's Holders: its
// replicas, and while a move is under way the replicas the move started from. So a broker a
// move adds opens its replica when it applies the SetReplicas (joining the group: the
// partition's leader adds it as a learner, brings it up, then makes it a voter), and a broker
// the move takes out closes its replica and removes its data when it applies the FinishMove,
// which the leader proposes only once the group's voters are the new replicas: by then the
// group has removed it.

// syncReplicas brings the partitions of a live cluster topic in line with the metadata: the
// replica lists that METADATA reports, and the replicas held here.
func (n *clusterNode) syncReplicas(t *topic, ct *cmeta.Topic) {
	for i, p := range t.parts {
		a := ct.Partitions[i]
		rp := p.repl
		if !slices.Equal(*rp.replicas.Load(), a.Replicas) {
			rs := a.Replicas
			rp.replicas.Store(&rs)
		}
		want, held, broken := holds(a.Holders(), n.id), rp.part.Load() != nil, rp.broken.Load()
		switch {
		case want && !held && !broken: // a replica that could not be opened stays for repair
			n.log.Info().Str("topic", t.name).Uint32("partition", p.id).Uint64("group", a.Group).Msg("this broker gained a replica of the partition: joining its group")
			n.openReplica(t, p, a)
		case !want && held:
			n.closeReplica(t, p)
		case !want && broken:
			rp.broken.Store(false) // moved off this broker: it is no longer this broker's to repair
		}
	}
}

// openReplica opens this broker's replica of partition p of t and publishes it. A replica of
// a partition never moved bootstraps the group with the partition's replicas, as every
// founding member does; any other joins it (an empty directory waits for the leader). A
// replica that cannot be opened is published with its error (the partition here answers
// STORAGE_ERROR), and its data is left for repair.
func (n *clusterNode) openReplica(t *topic, p *partition, a cmeta.Partition) {
	s, ct := n.srv, t.cluster
	d := &durablePart{shape: ct.shape, part: p, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	close(d.done) // no syncer: the replica fsyncs per its policy
	if ct.shapeErr != nil {
		d.err = fmt.Errorf("partition %d cannot be served: %w", p.id, ct.shapeErr)
		p.repl.broken.Store(true)
		p.dl.Store(d)
		return
	}
	cfg := cpart.Config{
		Dir: partitionDir(s.cfg.DataDir, t.name, int(p.id)), NodeID: n.id, Group: a.Group,
		Sender: n.tr, Fsync: partitionFsync(ct.shape), Log: ct.shape.logOpts,
		Producers: cpart.ProducerLimits{Expiry: s.cfg.ProducerExpiry, MaxProducers: s.cfg.MaxProducersPerPartition, Budget: s.producerBudget,
			Label: fmt.Sprintf("partition %d of %s", p.id, t.name)},
		OnCommit: p.wakeAll, Logf: p.logf, Segments: n.tr, Scrub: n.scrub,
	}
	if a.Moves == 0 {
		cfg.Peers = a.Replicas
	} else {
		cfg.Join = true
	}
	part, err := cpart.Open(cfg)
	if err != nil {
		d.err = fmt.Errorf("partition %d cannot be served: %w", p.id, err)
		p.repl.broken.Store(true)
		p.dl.Store(d)
		n.log.Error().Err(err).Str("topic", t.name).Uint32("partition", p.id).Msg("replica cannot be opened; its data is left untouched for repair")
		return
	}
	d.log, d.repl = part.Log(), part
	p.dl.Store(d)
	p.repl.broken.Store(false)
	p.repl.part.Store(part)
	n.segs.Store(a.Group, part)
	n.router.Add(a.Group, part.Replica())
}

// closeReplica closes this broker's replica of partition p of t, which a finished move took
// away, and removes its data. Requests that still find it are answered NOT_LEADER (produce,
// fetch waiting here: see serviceFetches) or with the closed log's error.
func (n *clusterNode) closeReplica(t *topic, p *partition) {
	rp := p.repl
	part := rp.part.Load()
	rp.part.Store(nil)
	rp.broken.Store(false)
	n.router.Remove(rp.group)
	n.segs.Delete(rp.group)
	p.wakeAll() // waiting FETCHes find no replica and are answered NOT_LEADER
	if err := part.Close(); err != nil {
		n.log.Warn().Err(err).Str("topic", t.name).Uint32("partition", p.id).Msg("closing a replica moved off this broker")
	}
	dir := partitionDir(n.srv.cfg.DataDir, t.name, int(p.id))
	if err := os.RemoveAll(dir); err != nil {
		n.log.Error().Err(err).Str("dir", dir).Msg("could not remove the data of a replica moved off this broker")
		return
	}
	n.log.Info().Str("topic", t.name).Uint32("partition", p.id).Uint64("group", rp.group).Msg("the partition moved off this broker: its replica is closed and its data removed")
}

// syncPeers gives the transport the cluster address of every broker of the metadata, so
// that a broker added to the cluster is reached at the address it was added with, and stops
// sending to a broker the cluster removed. Brokers only the configuration names (the
// cluster-peers of a cluster being founded) are left as the configuration set them.
func (n *clusterNode) syncPeers(st *cmeta.State) {
	seen := map[uint64]bool{}
	for _, b := range st.Brokers() {
		seen[b.ID] = true
		if b.ID == n.id || b.ClusterAddr == "" || n.peers[b.ID] == b.ClusterAddr {
			continue
		}
		n.tr.SetPeer(b.ID, b.ClusterAddr)
		n.peers[b.ID] = b.ClusterAddr
	}
	for id := range n.peers {
		if !seen[id] {
			n.tr.RemovePeer(id)
			delete(n.peers, id)
			n.log.Info().Uint64("node", id).Msg("the broker was removed from the cluster: no more messages to it")
		}
	}
}

// syncOffsets follows the moves of the offsets topic's partitions (its creation cur
// already served here): the replica lists the coordinator is named from, and the replicas
// held here, opened when this broker becomes a holder and closed, their data removed, once a
// move took it out. The table is immutable: a changed partition gets a new offsetsPart and
// the table is published again (requests in flight keep the one they found).
func (n *clusterNode) syncOffsets(cur *offsetsTable, ct *cmeta.Topic) {
	var next *offsetsTable
	for i, a := range ct.Partitions {
		if i >= len(cur.parts) {
			break
		}
		op := cur.parts[i]
		want, held := holds(a.Holders(), n.id), op.store != nil
		same := slices.Equal(op.replicas, a.Replicas)
		if same && (want == held || want && op.failed) {
			continue
		}
		if next == nil {
			next = &offsetsTable{created: cur.created, parts: slices.Clone(cur.parts)}
		}
		np := &offsetsPart{index: op.index, group: op.group, replicas: a.Replicas, store: op.store, failed: op.failed, take: op.take}
		switch {
		case want && !held && !op.failed:
			n.log.Info().Int("offsets_partition", i).Uint64("group", a.Group).Msg("this broker gained a replica of the offsets partition: joining its group")
			n.openOffsetsReplica(np, a, len(ct.Partitions))
		case !want && held:
			n.router.Remove(op.group)
			if err := op.store.Close(); err != nil {
				n.log.Warn().Err(err).Int("offsets_partition", i).Msg("closing an offsets replica moved off this broker")
			}
			np.store, np.take = nil, nil
			dir := offsetsDir(n.srv.cfg.DataDir, i)
			if err := os.RemoveAll(dir); err != nil {
				n.log.Error().Err(err).Str("dir", dir).Msg("could not remove the data of an offsets replica moved off this broker")
			} else {
				n.log.Info().Int("offsets_partition", i).Uint64("group", op.group).Msg("the offsets partition moved off this broker: its replica is closed and its data removed")
			}
		case !want:
			np.failed = false
		}
		next.parts[i] = np
	}
	if next != nil {
		n.offsets.Store(next)
		n.kickPurge()
	}
}
