// Package smlog is the storage of a small replicated state machine: a Raft log on
// cluster/raftlog (each command one stored batch) and, beside it, a snapshot file holding
// the whole state as of an entry, which the member restarts from and which raft sends to a
// member too far behind. cluster/meta (the metadata group) and cluster/offsets (a partition of
// committed offsets) are such machines; a partition of messages is not: raftlog's own
// snapshots name a log offset there, since the log is the data.
//
// It exists so that the rules binding the two files together have one home: how the file is
// written (whole: temporary file, fsync, rename, directory fsync, so a crash leaves the old
// file or the new one), how a snapshot from the leader is installed (file first, then the
// log emptied, then the state: a crash between the first two is finished by Open), and what
// Open does with a log and a file that disagree (see Storage.recover). A state machine
// brings only its state's encoding (Format.Decode, and the bytes it hands to Save).
//
// # The snapshot file
//
// Format.FileName in the store's directory. Big-endian:
//
//	0 magic (Format.Magic, 4 bytes) | 4 version u8 = 1 | 5 reserved [3] zero |
//	8 crc32c u32 of bytes 12.. | 12 index u64 | 20 term u64 |
//	28 conf state (raftpb.ConfState protobuf) u32 length + bytes |
//	state snapshot (the machine's encoding) u32 length + bytes
//
// index and term are the entry the state is as of (the state's own index repeats it); the
// conf state is the group's membership as of that entry. NEVER CHANGE version 1: it is on
// disk ("LQMF" meta.snap and "LQOF" offsets.snap).
//
// # Concurrency
//
// A Storage belongs to one replica: its goroutine calls everything (Save, ApplySnapshot,
// SetConfState, raftlog's methods), and the callbacks Install and ConfChanged run on it,
// synchronously, from ApplySnapshot and SetConfState. Snapshot alone may be called from any
// goroutine (raft reads it while the machine saves a newer one); the latest snapshot is
// guarded by a mutex. A Format is immutable and shared.
//
// # Example
//
//	stor, st, applied, err := smlog.Open(&format, dir, smlog.Options[*State]{
//		SegmentBytes: 4 << 20, Install: m.install, ConfChanged: m.confChanged})
//	// st: the snapshot file's state (Format.Empty's without one); applied: its index
//	rep, err := replica.Start(replica.Config{Storage: stor, Applied: applied, ...})
//	...
//	err = stor.Save(index, term, encodedState) // on the replica's goroutine, after applying index
//	err = stor.EnforceRetention(index)          // then the log behind it can go
package smlog
