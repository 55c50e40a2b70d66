// Package raftlog is what a partition replica persists: its Raft log, which is the
// partition's segment log itself (Storage, a replica.Storage for etcd's raft), and its raft
// state file.
//
// # Files
//
// A replica's directory holds the segment log (package log: <base>.log, .index, .timeindex,
// checkpoint) and raft.state (state.go: two 4 KiB slots, the term, vote, commit index,
// membership, and where the raft log starts in the segment log), and, while a catch-up from
// whole segments is received, catchup/ (its temporary segment files and manifest). Each stored batch is one
// Raft entry, its term in the leader epoch field and its index in the raft index field
// (wire/batch.go, format 2); entries without messages are control batches (wire/control.go).
// The index and term of every entry come from its batch. Since the batch's CRC does not cover
// those two fields, leader-epochs (epochs.go) keeps the first index of every term, against
// which every entry's term is checked; the index must follow the previous entry's.
//
// # The parts
//
//   - storage.go: Storage, Open and its recovery, the raft.Storage read side but Entries,
//     SetHardState, SetConfState, Snapshot, the decoder of stored batches into entries;
//   - read.go: the window of recent entries (and the cache of their data), the cursor, the
//     binary search over offsets, the header walk at Open, Entries;
//   - append.go: Append (a conflicting tail replaced), ApplySnapshot, EnforceRetention;
//   - snapdata.go: the data of the snapshots replicas exchange (the offset the log goes on
//     at; version 2: the node whose segments hold what is below it);
//   - catchup.go: the catch-up from whole segments (SnapshotAt, CatchUp, InstallSnapshot);
//   - state.go: the state file;
//   - epochs.go: the leader epochs file;
//   - scrub.go: Scrub, the paced verification of the sealed segments.
//
// # Concurrency
//
// Storage's methods are safe for concurrent use (one mutex); the replica's goroutine calls
// them. Its Log may be read from any goroutine. StateFile is owned by one goroutine.
//
// # Example
//
//	s, err := raftlog.Open(dir, raftlog.Options{SyncEachAppend: true, Log: log.Options{SegmentBytes: 64 << 20}})
//	if err != nil { ... }                      // ErrCorrupt names the file and offset
//	defer s.Close()
//	r, err := replica.Start(replica.Config{ID: id, Group: g, Peers: peers, Storage: s, Sender: tr, Apply: apply})
//	// FETCH reads s.Log() up to the committed entries; the syncer calls s.EnforceRetention(applied).
package raftlog
