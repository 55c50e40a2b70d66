// Package partition is one replica of a replicated partition (a topic with
// replication.factor > 1): a Raft group (cluster/replica) whose log is the partition's segment
// log (cluster/raftlog), with the idempotent producer's deduplication (log/producerstate)
// kept consistent across replicas and leaders. The broker opens one Partition per replica it
// holds, routes the group's messages to it, calls Produce on the leader and serves FETCH from
// Log below HighWatermark on any replica.
//
// # Produce
//
// Only the leader takes batches. It checks an idempotent batch (format 2 with a producer id)
// before proposing it, against the producer state of the committed log plus the batches it
// proposed that are not settled yet (as if they were stored), and answers as the single
// broker does (PROTOCOL.md section 15): a duplicate of a committed batch gets its original
// offset (log.ErrDuplicate) without a proposal; a refusal (OUT_OF_ORDER_SEQUENCE,
// PRODUCER_FENCED, UNKNOWN_PRODUCER, too many producers) stores nothing. A batch sent again
// while its first copy is still in flight (proposed, not committed) is not proposed again: it
// waits for that copy's outcome and gets it (the offset, as a duplicate, or the same error).
// The check, the proposal and the order of proposals are one step under the partition's
// lock, so batches of one producer enter the log in the order they were checked. Format-1
// batches are stored in format 2 (no producer, the same records): a replicated log holds only
// format 2, whose header carries the raft index.
//
// A batch is answered stored once its entry commits and this replica applies it: the base
// offset is the one every replica gives it (offsets follow from the log's prefix, which raft
// makes the same everywhere, and the segment files are byte-identical). What a commit means
// depends on the fsync policy: with FsyncAlways every replica fsyncs an entry before it
// acknowledges it to the leader (and the leader before it counts its own copy), so a commit
// means a quorum fsynced it; with FsyncInterval or FsyncNever it means a quorum wrote it to
// its page cache (a power cut of a quorum may lose it). The broker refuses acks=2 on a
// replicated topic unless it is fsync=always.
//
// ErrMaybeStored is the answer when the batch was proposed and its outcome cannot be known
// here: the leadership was lost (a later leader decides; it is answered at once, not when the
// timeout passes), the partition closed, or no commit came within ProposalTimeout. The batch
// is then stored at most once: a retry of an idempotent batch is deduplicated by whichever
// replica leads. A leader that is cut off from the others cannot acknowledge anything (a
// commit needs a quorum), and steps down within an election timeout (check-quorum).
//
// # A new leader
//
// A new leader's producer state must reflect everything its predecessors committed before it
// deduplicates: until it has applied the first entry of its own term (the empty entry raft
// appends on election; everything before it is then applied, and every proposal of an
// earlier term settled), it answers idempotent batches ErrNotReady (a retriable ErrBusy;
// within one round trip of the election). Plain batches it takes at once.
//
// # The producer state on every replica
//
// Every replica builds the producer state by applying committed entries (the leader too:
// what it checks against is what it applied, plus what is in flight), so that any replica
// can lead. The segment log itself is opened without deduplication (a follower stores what
// raft commits). A producer's last-seen time is the replica's clock when it applied the batch
// and expiry runs on each replica's clock, as the single broker's; replicas may disagree only
// on states idle for about the expiry (24 h by default), which a new leader may have dropped
// (UNKNOWN_PRODUCER: nothing stored). Budget and caps work as in a single log; a state
// recorded by applying is never refused (the least recently seen go past the cap).
//
// Restart: Open loads the checkpoint (CheckpointFileName: the state as of a raft index,
// written every CheckpointInterval when it changed, before a retention that deletes
// segments, and at Close; the log is synced before each) and applies the batch headers of the
// committed entries after it. The cost is reading the entries committed since the last
// checkpoint: none after a clean Close, at most CheckpointInterval of appends after a crash.
// Without a checkpoint that reaches the log's start, the state is rebuilt from the whole log
// (producers whose batches retention deleted are then unknown: UNKNOWN_PRODUCER, never a
// duplicate). Retention deletes only segments whose entries the checkpoint reflects.
//
// Snapshots: a follower that needs entries the leader's retention deleted gets a raft
// snapshot. Its data is raftlog's (the offset the follower's log starts again at) followed by
// the producer state as of the leader's applied index (state.go), which the follower
// checkpoints before its log is reset, and which then deduplicates there as on the leader.
// With Config.Segments the snapshot is at the leader's applied index and names the leader as
// the source of the segments below it (raftlog data version 2): the follower fetches the
// leader's segment files from the leader's log start (or its own committed end, if later) up
// to the snapshot's offset over the cluster port, verified, crash-safely installed
// (catchup.go, raftlog's catchup.go), so that it holds the partition from the log start on,
// byte for byte as the leader. Without it, or when the fetch gives up (CatchUpTimeout), the
// follower holds the partition from the snapshot's offset on. A fetch whose source stops
// answering (CatchUpStall, a refused dial, a newer term heard) abandons the snapshot
// instead (replica.ErrAbandonSnapshot): the follower votes again, and a live leader sends
// another snapshot.
//
// # Bounded memory
//
// At most MaxPending batches (default 4096) and MaxPendingBytes (default 32 MiB) wait for a
// commit; past either, Produce answers ErrBusy. Raft's own cap on uncommitted bytes is set
// above it (so raft never drops a proposal for size, which would let a later batch of the
// same producer be stored after a gap). At most 8 retries wait on one batch in flight (more:
// ErrBusy). The producer state is capped as in a single log. The entries' bytes are one
// allocation per batch (the copy Produce makes: the transport and raft keep it until they are
// done with it, so it cannot be pooled); the records that track a batch are pooled.
//
// # Concurrency
//
// Every exported method is safe for concurrent use. Produce never blocks: it takes the
// partition's mutex briefly (the check and a non-blocking hand-off to the replica's queue)
// and answers through done, on the caller's goroutine (answers known at once), the replica's
// goroutine (commits, leadership changes) or the maintenance goroutine (timeouts). done must
// not block; it may call Produce. OnCommit runs on the replica's goroutine. Lock order:
// Partition.ckMu, then Partition.mu, then (inside the replica) its status lock; the
// partition's mutex is never held across storage calls, and the replica's goroutine never
// waits for Produce. The scrub goroutine calls the replica (Status, Progress,
// TransferLeadership, Restart) and the Storage, never holding the partition's mutex; the
// replica's goroutine only queues damage for it (a buffered channel, never waiting).
//
// # Files
//
//   - partition.go: Config, Open (the rebuild of the producer state), the replica's
//     callbacks (apply, advanced), Close;
//   - produce.go: Produce, the records of batches in flight, their outcomes and timeouts;
//   - dedup.go: the verdict on an idempotent batch (committed state plus in-flight batches);
//   - storage.go: the replica's Storage: raftlog plus the producer state in snapshots;
//   - catchup.go: fetching a snapshot's segments from its source;
//   - state.go: the partition state format (checkpoint file and snapshot data);
//   - maintain.go: the maintenance goroutine (timeouts, fsync interval, checkpoints,
//     retention, expiry);
//   - scrub.go: the scrub goroutine (the sealed segments verified again at Config.Scrub's
//     rate) and the repair of damage it or raft's reads find, from the other replicas;
//   - format.go: format 1 to format 2; status.go: Status.
//
// # Example
//
//	p, err := partition.Open(partition.Config{Dir: dir, NodeID: 1, Group: g, Peers: []uint64{1, 2, 3},
//		Sender: tr, Fsync: partition.FsyncAlways, Log: log.Options{SegmentBytes: 64 << 20},
//		OnCommit: wakeFetches})
//	if err != nil { ... }
//	defer p.Close()
//	router.Add(g, p.Replica())                    // the transport's handler steps messages in
//	p.Produce(batch, count, func(base int64, err error) { ... }) // on the leader
//	hw := p.HighWatermark()                       // FETCH reads p.Log() below hw
package partition
