// Package replica runs one Raft group, the replication of one partition (or of the cluster's
// metadata), on etcd's raft library: go.etcd.io/raft/v3 decides; this package persists, sends
// and applies what the library asks for, in the order its Ready contract demands.
//
// One goroutine per replica owns its raft.RawNode. Everything else reaches it through
// bounded channels: Step (messages from peers), Propose (new entries, leader only),
// ReportUnreachable. Each turn of the loop persists Ready.Entries and Ready.HardState to the
// Storage before sending Ready.Messages (raft's safety needs the vote and the entries on disk
// before anyone hears of them), then applies Ready.CommittedEntries, then calls Advance.
//
// Proposals and acknowledgements: a leader appends its own proposals, and only those, to its
// log in its own term, in the order it proposed them, so the new entries of a Ready whose term
// is the leader's term are matched to the waiting proposals in order. A proposal is done when
// the entry at its index commits: with its own term, it is stored (Proposal.Err nil); with
// another term, a later leader replaced it and it is not stored (ErrReplaced). A leader that
// loses its leadership keeps its proposals waiting, since the next leader may still commit
// them; the caller bounds the wait and treats a timeout as "outcome unknown" (the idempotent
// producer's retry then resolves it without a duplicate).
//
// ProposeNotify is the allocation-light form for an owner with many proposals in flight (the
// partition): the caller's Proposal, a callback on the replica's goroutine instead of a Done
// channel, and the leader term it is proposed for, so that what the owner decided in one
// term is never proposed in the next. Status.TermStart and Config.Advanced let the owner see
// when a new leader has applied everything of earlier terms. A snapshot that replaces the log
// ends the proposals it covers with ErrSnapshotCovered (outcome unknown). A snapshot the
// leader sends is reported to raft as soon as the transport took it (or failed to), so that
// raft probes the follower again rather than waiting in StateSnapshot for a report no one
// would make.
//
// Reads: only committed entries are applied (Config.Apply), so a consumer fed from what was
// applied sees the high watermark and never an entry a later leader could replace.
//
// Raft is configured with pre-vote and check-quorum (a partitioned node cannot disrupt the
// group when it returns, and a leader that cannot reach a quorum steps down within an
// election timeout, so it cannot acknowledge), and without proposal forwarding: a follower
// answers ErrNotLeader with the leader it knows, and the client goes there. A group whose
// every member may propose (the cluster's metadata, package cluster/meta) sets
// Config.ForwardProposals: raft forwards a follower's proposals to the leader, and the
// proposer recognises its entries when it applies them (raft gives a forwarded proposal no
// index).
package replica
