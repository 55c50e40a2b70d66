// Package offsetlog stores the committed offsets of one topic's consumer groups: an
// append-only log of (group, partition, offset) records, replayed at start (last write
// wins), written with group commit (every commit that arrives while one write+fsync runs
// shares the next one) and compacted into a snapshot when it grows. A commit costs one
// record in memory and a share of one write and one fsync, whatever the size of the state;
// before, every commit rewrote the whole state as JSON.
//
// It is storage, like package log: it knows nothing of the network, and all its file I/O
// goes through log/vfs, so log/vfs/crashfs can cut its power in tests.
//
// # Files
//
// In the topic's directory:
//
//	offsets.log                   the log: header, then frames
//	offsets.log.tmp               a snapshot being written (removed by Open)
//	offsets.log.broken.<nanos>    a torn tail that was cut, kept for inspection
//
// All integers are big-endian. NEVER CHANGE the format or the names: they are on disk in
// every existing log (the constants carry the same warning).
//
// # Log file (offsets.log)
//
//	 0        4         8
//	+--------+---------+--------- ... ---------+--------- ... ---------+
//	| "LQOL" | format  | frame                 | frame                 | ...
//	|        | u32 = 1 |                       |                       |
//	+--------+---------+--------- ... ---------+--------- ... ---------+
//
// A frame is what one write(2) appends: the records of one group commit, or up to 64 KiB of
// a snapshot's records.
//
//	 0        4        8
//	+--------+--------+--------- ... ---------+
//	| crc32c | length | records (length bytes)|   length in [1, MaxFrameBody = 1 MiB]
//	| 4..end | u32    |                       |   crc32c (Castagnoli) of bytes 4 to the end
//	+--------+--------+--------- ... ---------+
//
// A record is a commit:
//
//	 0      1      2           6            14
//	+------+------+-----------+------------+------- ... -------+
//	| type | glen | partition | offset i64 | group (glen bytes)|   type 1 = commit (0 invalid)
//	| u8=1 | u8   | u32       | >= 0       |                   |   glen in [1, 255]
//	+------+------+-----------+------------+------- ... -------+
//
// A frame is valid when its length fits, its CRC matches and its records section is a whole
// number of valid records. Zeroed space is never a valid frame (length 0), so it reads as
// the end: the file is preallocated with zeros (written and fsynced, 64 KiB at first and
// twice as much each time up to 8 MiB), and frames overwrite them, so an append changes no
// file size and fdatasync needs no journal commit. The CRC is per frame, not per record,
// because a frame is the unit that is written (and torn) at once: a record is trusted only
// if all of its write arrived.
//
// # Durability
//
// Commit appends the record to the pending frame in memory and returns; the store's syncer
// goroutine (started when a commit finds none running, gone when nothing is pending) takes
// the whole pending frame, writes it at the end of the log, fdatasyncs, makes its commits
// visible to Get, and calls their done functions. A commit is answered only after its
// frame's fsync, and the next frame is written only after the previous fsync returned, so
// after a crash only the last frame can be incomplete. A failed fsync makes the store
// refuse commits (ErrBroken) until it is opened again: the kernel may have dropped the
// dirty pages. A failed write is truncated away and fails only its frame.
//
// When the log is larger than CompactFactor (4) times the live state (and than
// CompactMin, 16 MiB), the syncer writes the live entries as a new log to
// offsets.log.tmp, fsyncs it, renames it over offsets.log and fsyncs the directory; a crash
// leaves one of two whole files, each holding every acknowledged commit. So the file stays
// within a constant factor of the state, and so does replay.
//
// # Recovery (Open)
//
// The header must be valid (the file appears only by a rename after it was fsynced), else
// ErrCorrupt. Frames are replayed until the first invalid one, at byte p. If only zeros
// follow, that is the preallocated end. If a valid frame starts anywhere after p, the
// damage is in data that was written whole: ErrCorrupt naming the file and p, and nothing
// is changed (an operator decides). Otherwise the tail from p is an unfinished write: it is
// copied (without its trailing zeros) to offsets.log.broken.<nanos> (fsynced), the log is
// truncated to p, and the file and directory are fsynced.
//
// If the directory holds no offsets.log, Options.Legacy (the broker's reader of the old
// offsets.json) supplies the entries of the first snapshot; the old file is left in place,
// and read again at every Open until a new log exists.
//
// # Memory
//
// The state is a map of (group, partition) to offset, bounded by Options.MaxEntries per
// store and by a Budget shared by all stores (the broker's cap): a commit for a new pair
// past either is refused with a *LimitError; pairs already stored are always accepted. The
// pending frame is bounded by MaxFrameBody (past it, ErrBusy); batch buffers larger than
// 64 KiB are dropped after their write, and a snapshot's scratch after the snapshot, so a
// flood's buffers are returned once it ends.
//
// # Concurrency
//
// All methods are safe for concurrent use. Store.mu guards the entries, the pending frame
// and the flags; it is never held across I/O, so Get may run on an event loop. Only the
// syncer goroutine (one at a time) writes the file and the entries; it writes entries under
// mu and reads them without it (a snapshot iterates them unlocked). Stores share nothing
// but a Budget's atomic counter: no lock spans topics. Commit's done functions run on the
// syncer and must not block.
package offsetlog
