package transport

import (
	"cmp"
	"slices"
	"sync/atomic"
)

// PeerStats is what the transport counted on its way to one peer since SetPeer first named
// it (a new address keeps the counts). The counters only grow; Connected and Queued are
// the state when PeerStats was called.
type PeerStats struct {
	Node uint64
	Addr string
	// Connected: an authenticated connection to the peer is up now.
	Connected bool
	// Queued is how many messages wait in the peer's queue now (at most Config.QueueLen).
	Queued int
	// Sent counts messages written to the peer's connection, SentBytes the bytes of the
	// frames that carried them. A written message may still be lost with the connection.
	Sent, SentBytes uint64
	// Dropped counts messages the transport gave up on: the queue was full or the peer
	// stopped, no connection could be had, the frame could not be built, or the write
	// failed (every message of that frame). Raft resends what it needs. Messages an
	// injected fault drops are counted by the Faults, not here.
	Dropped uint64
	// DialFailures counts dials (with their handshake) that failed.
	DialFailures uint64
	// Features are what the peer announced on the current connection (Feature* bits): 0
	// without a connection, before the announcement arrives, and for a broker of the
	// previous release.
	Features uint64
}

// peerCounters are one peer's counters. Atomics: enqueue adds from any goroutine, the
// peer's writer from its own, PeerStats reads from any. They are added to once per frame
// written and once per message dropped, never per message sent.
type peerCounters struct {
	sent, sentBytes, dropped, dialFailures atomic.Uint64
}

// PeerStats reports every peer, in node id order. It takes the transport's mutex for a
// moment and reads atomics: cheap enough for every metrics scrape. Safe for concurrent use.
func (t *Transport) PeerStats() []PeerStats {
	t.mu.Lock()
	out := make([]PeerStats, 0, len(t.peers))
	for id, p := range t.peers {
		c := p.counters
		out = append(out, PeerStats{
			Node: id, Addr: p.addr, Connected: p.current() != nil, Queued: len(p.queue),
			Sent: c.sent.Load(), SentBytes: c.sentBytes.Load(), Dropped: c.dropped.Load(),
			DialFailures: c.dialFailures.Load(), Features: p.features.Load(),
		})
	}
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b PeerStats) int { return cmp.Compare(a.Node, b.Node) })
	return out
}

// PeerFeatures are the features node announced on this broker's current connection to it
// (see PeerStats.Features), and whether they are known: not while there is no connection,
// nor in the first Config.FeaturesWait of one whose announcement has not come (a listener
// of the previous release never sends one; after the wait, none is the answer). A leader
// checks them before it sends a message only a peer with a feature takes, and sets the
// message's Envelope.Needs; while they are not known it waits rather than send the previous
// release's form to a peer that only had not spoken yet. Safe for concurrent use; cheap
// (the transport's mutex for a map lookup).
func (t *Transport) PeerFeatures(node uint64) (features uint64, known bool) {
	t.mu.Lock()
	p := t.peers[node]
	t.mu.Unlock()
	if p == nil {
		return 0, false
	}
	return p.knownFeatures()
}
