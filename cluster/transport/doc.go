// Package transport carries Raft messages between the brokers of a cluster, on a port of their
// own that clients never use.
//
// Every broker dials every peer it has messages for; a connection carries messages in one
// direction only (from the dialer to the listener), as etcd's rafthttp streams do, so the
// answer to a message travels on the peer's own connection back. A connection starts with a
// mutual challenge-response over the cluster secret (HMAC-SHA256 of both nonces and both node
// ids), so a process without the secret can neither send messages nor pass for a broker. TLS
// for this port is left to the TLS work of the client listener; the secret is never sent.
// Once authenticated, the listener of a message stream sends its features (handshake.go) on
// the direction the stream does not otherwise use; the dialer records them per peer for that
// connection (PeerFeatures), so that a leader sends a peer only what its release takes
// (Envelope.Needs). A broker of the previous release sends none and reads none; a dialer
// takes the silence for that only after Config.FeaturesWait (until then: not known).
//
// After the handshake the dialer writes frames, each a batch of envelopes (a Raft group id and
// one raftpb.Message). One writer goroutine per peer drains that peer's bounded queue into one
// frame per write, so the heartbeats of every partition a broker pair shares leave in one
// write: that is how heartbeats are coalesced per broker pair, and how appends are pipelined
// (raft's own MaxInflightMsgs bounds what is outstanding).
//
// Raft tolerates lost messages, and the transport relies on that: a full queue, a dead peer or
// an injected fault drops the message and reports the peer unreachable (Config.Unreachable), so
// raft probes it again instead of streaming into the void. Nothing here blocks a caller of
// Send.
//
// Segment streams (segments.go, whose comment has the layout) carry a group's segment files
// to a follower catching up from whole segments (cluster/raftlog, catchup.go): a connection
// of its own, dialled by the follower with the segment magic in its hello (the MACs use
// their own role strings, so a proof for one kind of stream is none for the other), one
// request, then chunk frames of at most MaxSegmentChunk, the file ranges sent with
// sendfile(2) when the connection is TCP; TCP's window is the flow control, and each side
// holds one chunk. Config.Segments gives the log of a group this broker holds; FetchSegments
// is the follower's side.
//
// Faults (faults.go) sits in the send path for tests: drop, delay (and so reorder), duplicate
// and partition sets of nodes, deterministically under a seed.
//
// PeerStats (stats.go) reports, per peer, whether its connection is up, what waits in its
// queue and what was sent and dropped: counted with atomics once per frame written or message
// dropped, so a metrics scrape reads them at no cost to the senders.
//
// Concurrency: Send, SetPeer, RemovePeer, PeerStats, PeerFeatures, FetchSegments and Close are safe from any goroutine. The handler
// runs on the receiving connection's goroutine, one call per frame, in frame order per peer; a
// slow handler slows only that peer's stream.
package transport
