package partition

import (
	"errors"
	"sync/atomic"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/cluster/raftlog"
	"github.com/lightq/lightq/cluster/replica"
	"github.com/lightq/lightq/cluster/transport"
	"github.com/lightq/lightq/log"
)

// The counters an operator reads of a replica's catch-ups, snapshots and damage (Status's
// Counts, the broker's /metrics), and the gate that sends a snapshot a peer can install.
//
// Every counter is an atomic added to where the event happens (once per catch-up, attempt,
// snapshot, damaged batch, or segment chunk of up to 1 MiB: never per message or entry), and
// read by Status with loads.

// Where damage was found (Counts.DamageFound and DamageRepaired).
const (
	FoundAtOpen  = iota // by Open: the log's recovery, raftlog's walk, the producer state's rebuild
	FoundByScrub        // by the scrub (scrub.go)
	FoundByRead         // by a read raft made (storage.Entries, Term)
	FoundKinds
)

// Why a catch-up abandoned its snapshot (Counts.CatchUpsAbandoned).
const (
	AbandonStall    = iota // its stream brought no bytes for CatchUpStall
	AbandonTerm            // the replica heard a newer term (or a pre-vote)
	AbandonNoAnswer        // an attempt failed before its first chunk (a refused dial, a failed handshake)
	AbandonReasons
)

// Counts are a replica's counters since Open.
type Counts struct {
	// Catch-ups from whole segments (catchup.go): started (segments to fetch), done
	// (installed with them), timed out (given up after CatchUpTimeout: the snapshot was
	// installed without them), abandoned (not installed, raft restarted) by reason.
	CatchUpsStarted, CatchUpsDone, CatchUpsTimedOut int64
	CatchUpsAbandoned                               [AbandonReasons]int64
	// The segment streams: bytes and segment files received by this replica's catch-ups
	// (every chunk, those of streams restarted included) and sent from its log to other
	// replicas' (a stream counts each segment file it carried bytes of).
	SegmentBytesReceived, SegmentsReceived, SegmentBytesSent, SegmentsSent int64
	// Snapshots sent to followers, by their data version (index 0: version 1, the previous
	// release's, to a peer that did not announce transport.FeatureSegmentCatchUp; 1:
	// version 2), received (ApplySnapshot called) and applied (installed, with or without
	// segments).
	SnapshotsSent                       [2]int64
	SnapshotsReceived, SnapshotsApplied int64
	// Damaged batches found and repaired (the log cut there, to be filled again by the
	// peers) by where they were found; CheckFailures counts them all by the check they
	// failed (raftlog.Check: the batch's CRC and framing, its raft index, its term).
	DamageFound, DamageRepaired [FoundKinds]int64
	CheckFailures               [raftlog.Checks]int64
	// EntriesCut counts the raft entries damage cuts removed (raftlog.DamageStats).
	EntriesCut int64
}

// counters are the atomics behind Counts that the partition adds to (the catch-ups' own
// figures are in CatchUpStats, under the partition's mutex, the log's Open figures in
// raftlog.DamageStats).
type counters struct {
	catchUpStarted              atomic.Int64
	segBytesIn, segsIn          atomic.Int64
	segBytesOut, segsOut        atomic.Int64
	snapsSent                   [2]atomic.Int64
	snapsReceived, snapsApplied atomic.Int64
	damageFound, damageRepaired [FoundKinds]atomic.Int64
	checkFailed                 [raftlog.Checks]atomic.Int64
}

// found counts damage ce found at where.
func (c *counters) found(where int, ce *raftlog.CorruptEntryError) {
	c.damageFound[where].Add(1)
	c.checkFailed[ce.Check].Add(1)
}

// counts reads the counters (and what the catch-ups and the Storage counted).
func (p *Partition) counts(cu CatchUpStats) Counts {
	c := &p.ct
	d := p.st.Damage()
	n := Counts{
		CatchUpsStarted: c.catchUpStarted.Load(), CatchUpsDone: int64(cu.Done), CatchUpsTimedOut: int64(cu.Failed),
		SegmentBytesReceived: c.segBytesIn.Load(), SegmentsReceived: c.segsIn.Load(),
		SegmentBytesSent: c.segBytesOut.Load(), SegmentsSent: c.segsOut.Load(),
		SnapshotsSent:     [2]int64{c.snapsSent[0].Load(), c.snapsSent[1].Load()},
		SnapshotsReceived: c.snapsReceived.Load(), SnapshotsApplied: c.snapsApplied.Load(),
		EntriesCut: d.EntriesCut,
	}
	for i := range n.CatchUpsAbandoned {
		n.CatchUpsAbandoned[i] = int64(cu.AbandonedBy[i])
	}
	for i := range n.DamageFound {
		n.DamageFound[i], n.DamageRepaired[i] = c.damageFound[i].Load(), c.damageRepaired[i].Load()
	}
	for i := range n.CheckFailures {
		n.CheckFailures[i] = c.checkFailed[i].Load() + d.AtOpen[i]
		// What the log's Open cut is found and repaired at once.
		n.DamageFound[FoundAtOpen] += d.AtOpen[i]
		n.DamageRepaired[FoundAtOpen] += d.AtOpen[i]
	}
	return n
}

// FeatureSource tells what a peer announced (*transport.Transport is one: PeerFeatures).
type FeatureSource interface {
	PeerFeatures(node uint64) (features uint64, known bool)
}

// errFeaturesPending: a snapshot not sent because its receiver's features are not known
// yet (no connection, or its announcement not arrived); raft sends it again later.
var errFeaturesPending = errors.New("the peer's features are not known yet")

// snapGate is the replica's Sender: the partition's Sender, with the snapshots raft sends
// made for their receiver. raft asks the storage for a snapshot without saying for whom;
// with Config.Segments it is a version-2 one (the receiver fetches the segments below it),
// which a broker of the previous release refuses. So a snapshot to a peer that did not
// announce transport.FeatureSegmentCatchUp on the transport's connection to it is replaced
// by the previous release's (storage.snapshot(false): at the log's first index, data
// version 1, the receiver's log starting empty at its offset), and one to a peer that did is
// sent needing the feature (transport.Envelope.Needs: dropped if the connection changed to
// one without it since). Send runs on the replica's goroutine, as Snapshot does.
type snapGate struct {
	next replica.Sender
	p    *Partition
}

func (g *snapGate) Send(node uint64, envs ...transport.Envelope) bool {
	for i := range envs {
		if envs[i].Msg.Type == raftpb.MsgSnap && envs[i].Msg.Snapshot != nil {
			return g.sendSnapshots(node, envs)
		}
	}
	return g.next.Send(node, envs...)
}

// sendSnapshots sends envs one by one, each snapshot made for node first.
func (g *snapGate) sendSnapshots(node uint64, envs []transport.Envelope) bool {
	ok := true
	for _, e := range envs {
		if e.Msg.Type != raftpb.MsgSnap || e.Msg.Snapshot == nil {
			ok = g.next.Send(node, e) && ok
			continue
		}
		v, err := g.p.forPeer(node, &e)
		if errors.Is(err, errFeaturesPending) {
			ok = false // reported failed: raft probes the follower and sends another
			continue
		}
		if err != nil {
			g.p.logf("snapshot at entry %d for node %d: %v; not sent", e.Msg.Snapshot.Metadata.Index, node, err)
			ok = false
			continue
		}
		if !g.next.Send(node, e) {
			ok = false
			continue
		}
		g.p.ct.snapsSent[v-1].Add(1)
	}
	return ok
}

// forPeer makes e's snapshot one node can install (see snapGate) and returns its data
// version. On the replica's goroutine.
func (p *Partition) forPeer(node uint64, e *transport.Envelope) (int, error) {
	_, logPart, _, err := decodeState(e.Msg.Snapshot.Data)
	if err != nil {
		return 0, err
	}
	d, err := raftlog.DecodeSnapshotData(logPart)
	if err != nil {
		return 0, err
	}
	if d.Source == 0 {
		return 1, nil // version 1 already (no Config.Segments)
	}
	// Not known: wait rather than send the previous release's snapshot to a peer that has
	// only not announced its features yet (a restarted follower, on a new connection),
	// whose log the version 1 snapshot would empty of what it could keep.
	f, known := p.cfg.Segments.PeerFeatures(node)
	if !known {
		return 0, errFeaturesPending
	}
	if f&transport.FeatureSegmentCatchUp != 0 {
		e.Needs |= transport.FeatureSegmentCatchUp
		return 2, nil
	}
	snap, err := p.st.snapshot(false)
	if err != nil {
		return 0, err
	}
	e.Msg.Snapshot = &snap
	return 1, nil
}

// segSource is the replica's log as a segment stream's source (transport.SegmentSource),
// counting what the streams send from it (transport.SentCounter).
type segSource struct{ p *Partition }

func (s *segSource) Read(offset, limit int64, maxBytes int) (*log.Chunk, error) {
	return s.p.st.Log().Read(offset, limit, maxBytes)
}

func (s *segSource) StartOffset() int64 { return s.p.st.Log().StartOffset() }

func (s *segSource) SegmentSent(n int64, first bool) {
	s.p.ct.segBytesOut.Add(n)
	if first {
		s.p.ct.segsOut.Add(1)
	}
}

// SegmentSource is what the transport's Config.Segments gives for this partition's group:
// its log, with what segment streams send from it counted (Counts). Safe for concurrent use.
func (p *Partition) SegmentSource() transport.SegmentSource { return p.src }
