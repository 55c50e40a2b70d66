// Package offsets is one replica of a partition of a cluster's offsets topic: the committed
// offsets of the consumer groups whose names hash to the partition, kept by one Raft group
// (cluster/replica) whose log is a cluster/raftlog segment log, as Kafka keeps them in
// __consumer_offsets. The leader of the partition is the coordinator of those groups (the
// broker wires that: broker/coordinator.go); this package knows no groups, only keys.
//
// # State
//
// The state is a map from Key (topic, the topic's creation time, group, partition) to the
// group's next offset. Every replica applies every committed entry to its own copy, in index
// order (record.go: a commit replaces one key's offset, a drop removes every key of one topic
// creation), so any replica can lead and a new leader has nothing to rebuild but the entries
// it has not applied yet: it is ready (Store.Leading) once it has applied the first entry of
// its own term, which raft commits only after every entry of earlier terms, so its state then
// holds every commit its predecessors answered. Until then it takes no commit and the broker
// answers NOT_COORDINATOR.
//
// # Commits
//
// Store.Commit, on a ready leader, proposes one record for the leadership of the term it was
// checked in (replica.ProposeNotify: a decision of one term is never proposed in the next) and
// answers once the entry is committed and applied here. The log is synced before each append
// is acknowledged (raftlog.Options.SyncEachAppend), so a commit answered means a majority of
// the replicas fsynced it. A leadership change, Close or ProposalTimeout answers what waits
// ErrMaybeStored; a proposal a later leader replaced, ErrNotStored.
//
// # Snapshots and the log
//
// Once the entries applied since the last snapshot add up to Config.SnapshotBytes and to
// twice the state's size, the replica writes the whole state to its snapshot file
// (cluster/smlog keeps it with the log, as for cluster/meta) and removes the log's whole segments
// behind it; so disk use is bounded by a few times the state plus a segment, and each snapshot
// is paid for by at least as many bytes of commits as it writes. At Open the replica starts
// from its snapshot file and raft replays the committed entries after it; a replica too far
// behind, or new, receives the leader's snapshot.
//
// A committed entry this broker cannot decode (a record of a newer release, damage) stops the
// applying for good (ErrStalled): skipping it would make this replica's state differ from the
// others'.
//
// # Bounds
//
// At most Config.MaxEntries keys, and never more than a snapshot may hold: the leader refuses
// a commit of a new key past either (a *LimitError; applying never refuses, so every replica
// holds what was committed). At most Config.MaxPending proposals wait (ErrBusy).
//
// # Concurrency
//
// Every exported method is safe from any goroutine. The replica's goroutine applies entries,
// installs snapshots, takes them and follows the leadership; Store.mu (a read-write lock)
// guards the state and the proposals, and nothing is called while it is held. Answers (the
// done functions) are called on the replica's goroutine or the store's maintenance goroutine,
// and must not block.
//
// # Example
//
//	st, err := offsets.Open(offsets.Config{Dir: dir, NodeID: id, Group: g, Peers: replicas, Sender: tr})
//	if err != nil { ... }
//	router.Add(g, st.Replica())
//	if term, ready := st.Leading(); ready {
//		err := st.Commit(term, offsets.Key{Topic: "orders", Created: created, Group: "billing", Partition: 3}, 120,
//			func(err error) { /* nil: a majority fsynced it */ })
//	}
//	off, ok := st.Get(key)
package offsets
