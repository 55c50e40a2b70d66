// Package broker is the LightQ broker: it accepts connections on gnet event loops, speaks the
// protocol of package wire, keeps transient topics in per-partition rings (package ring),
// durable topics in logs (package log) and persists topics and credentials through package
// meta.
//
// # Threading model
//
// See also docs/DESIGN.md. Every connection lives on one gnet event loop, and all of its
// protocol state is touched only there (conn's field comments say which fields are not).
// Work that can block runs on bounded worker pools (package workpool, sized by Config):
// argon2 credential checks and topic and user changes on the auth pool, cold FETCH reads on the I/O
// pool, LIST_OFFSETS by time on the meta pool. A job's result comes back to the
// connection's loop through conn.complete, which queues it and wakes the loop. Each durable
// topic's committed offsets (package log/offsetlog) have a syncer goroutine, running while
// commits are pending, that writes and fsyncs them in groups (group commit) and answers
// them through conn.commitAnswered (a queue per connection, one coalesced wake). Each
// durable partition has a syncer goroutine that fsyncs and answers waiting acks through
// conn.queueAck. The ticker goroutine (Server.runTicker) only wakes connections. Producers
// append to a partition's ring on their own loop and wake the loops of the subscribers,
// which then copy from the ring to their sockets. Consumer group membership is package
// group's Coordinator (Server.groups, in memory): handlers call it on their loops; its timer
// (a time.AfterFunc) expires sessions and ends held HEARTBEATs, whose answers it hands to
// the waiting connection through conn.complete.
// In a cluster, each partition of the offsets topic this broker holds a replica of
// (cluster/offsets) runs its own Raft goroutine, which answers commits through
// conn.commitAnswered and, when this broker stops leading the partition, drops its groups
// from the Coordinator (coordinator.go).
//
// # Lock order
//
// A lock may be taken while holding the locks before it in this list, never one after it:
//
//  1. Server.adminMu: serialises topic and user changes (createTopic, deleteTopic, and the
//     user requests of useradmin.go, on the auth pool). Under it: meta.Store's locks,
//     auth.Verifier's, offsetlog.Store.mu, durablePart.mu and conn.mu (deleteTopic closes the
//     logs, failing waiting acks), group.Coordinator.mu (deleteTopic drops the topic's
//     groups), and the log's (opening and closing logs). A change of a user's rights is
//     applied to its connections (Server.recheckUser) after adminMu is released: it copies
//     them out under connsMu, then queues completions (conn.mu) and waits for them holding no
//     lock.
//  2. topic.mu: the partitions' subscriber tables and queue groups. Under it: Ring.mu
//     (Ring.End, to start a subscription at the end).
//  3. queueGroup.mu: a queue group's position. Under it: a ring slot's read lock (claiming
//     a batch); the slot lock is released after queueGroup.mu.
//  4. ring.Ring.mu, then a ring slot's mu (see package ring). A DELIVER writev runs under a
//     slot's read lock, and gnet may run OnClose inside it, which takes Server.connsMu; so
//     OnClose must not take topic.mu there, and conn.onClose defers the release of the
//     subscriptions until the slot is released (see conn.onClose). Under Ring.mu (between
//     Reserve and Commit): partition.idemMu, a transient partition's producer state.
//  5. producerIDs.fileMu (reserving a block of producer ids, on the meta pool), then
//     producerIDs.mu.
//  6. A subscriber connection's directState.mu (direct.go: its socket lent to other loops).
//     A producer's loop holds it (TryLock only, never waiting) while it takes a ring slot's
//     read lock and writes the DELIVER; the owner's OnClose takes it (Lock) inside its own
//     writev, under a slot's read lock: the reverse order, which cannot deadlock because
//     the owner writes only after reclaiming the socket (lent false), and a producer that
//     finds lent false takes no slot lock.
//
// Leaves, under which nothing else is taken: conn.mu (completions, durable acks and commit
// answers),
// Server.connsMu (the connection sets the ticker and shutdown walk; it is held while calling
// gnet's Wake, which takes none of ours), durablePart.mu (the waiting acks: copied out
// before conn.queueAck is called), writableWatcher.mu (held while calling conn.wake),
// partition.idemMu (taken alone, or under Ring.mu; by the ticker's sweep and STATS alone),
// producerIDs.mu (never held across I/O; INIT_PRODUCER takes it on the loop),
// workpool.Pool.mu, auth.Throttle.mu, auth.Verifier.mu, meta.Store.mu, group.Coordinator.mu
// (it calls the waiters of held heartbeats, which take conn.mu, only after releasing it;
// LIST_GROUPS reads the coordinator and then an offsetlog.Store, never both at once; a
// cluster member's offsets replicas drop and withhold groups from it on their goroutines,
// holding nothing but a partition's takeover.mu; under it only a cluster/offsets.Store's
// read lock, by the JOIN_GROUP and HEARTBEAT guards), the lock of a cluster/offsets.Store
// (a leaf: the loops read it, also under group.Coordinator.mu, its replica's goroutine
// writes it, and its answers are called after it is released; takeOver holds an offsets
// partition's takeover.mu, taken with no other lock held, while it takes these two),
// loopStates.mu (a
// connection's first look-up of its loop's scratch) and offsetlog.Store.mu (one per topic,
// never held across I/O; commit callbacks run after it is released; the topic-to-store map
// offsetStore.stores is copy-on-write, with no lock), and package tlsfront's locks (its
// listener's, a session's raw connection's and its pipe's two; the loop takes the pipe's in
// pipeConn's methods, OnClose the raw connection's and the pipe's in Session.BrokerClosed,
// maybe under a ring slot's read lock, and the TLS hooks take connsMu holding none of them).
// groupTracker.mu (the consumer groups /metrics shows) is taken by scrapes and offset syncers
// with no other lock held; under it only offsetlog.Store.mu. Inside package log, see its
// package
// doc; the broker calls into a log holding no lock of its own except adminMu.
// durablePart.close and offsetlog.Store.Close wait for their syncers under adminMu, so a
// syncer must never take adminMu.
//
// Example:
//
//	cfg := broker.DefaultConfig()
//	cfg.Addr, cfg.DataDir = "127.0.0.1:0", dir
//	srv, err := broker.New(cfg)
//	if err != nil { ... }
//	if err := srv.Start(); err != nil { ... }
//	defer srv.Shutdown(context.Background())
//	fmt.Println(srv.Addr())
package broker
