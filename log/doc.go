// Package log is the durable storage of one topic partition: an append-only sequence of
// record batches in a directory of segment files, with sparse offset and time indexes,
// crash recovery, retention, and zero-copy reads (a Chunk is a file range for sendfile).
//
// # Files
//
// A partition directory holds, per segment, three files named by the segment's base offset
// (the offset of its first record), zero-padded to 20 digits so they sort:
//
//	00000000000000000000.log        batches
//	00000000000000000000.index      sparse offset index (sealed segments only)
//	00000000000000000000.timeindex  sparse time index (sealed segments only)
//	00000000000000004711.log        ...the last segment is the active one
//	00000000000000004711.producers  producer state as of offset 4711 (written at the roll)
//	checkpoint                      durable-position checkpoint
//	<segment>.log.broken.<nanos>    bytes cut from a torn tail, kept for inspection
//
// All integers are big-endian. NEVER CHANGE any of these formats or names: they are on
// disk in every existing log (the constants carry the same warning).
//
// # Segment file (.log)
//
// The concatenation of record batches exactly as producers sent them (wire/batch.go), with
// the base offset rewritten to the partition offset of the batch's first record. Nothing
// else: no file header, no padding. Batches of both magics (wire/batch.go) may follow each
// other in one segment; the magic at byte 16 tells them apart. The CRC-32C covers bytes 16
// to the end of each batch (magic 2: but the leader epoch at 20-23), so rewriting the base
// offset (and the leader epoch) keeps it valid. A zero-filled region is never a valid batch
// (length 0 < 44, magic 0), so zeroed space reads as the end of the log. Magic 1:
//
//	 0        8        12       16  17  18    20       24       32       40       44
//	+--------+--------+--------+---+---+-----+--------+--------+--------+--------+---------
//	| base   | length | crc32c |mag|att|rsvd | count  | first  | max    | records| records
//	| offset | (n-12) | 16..n  | 1 |   |  0  |        | ts ms  | ts ms  | size   | ...
//	+--------+--------+--------+---+---+-----+--------+--------+--------+--------+---------
//	batch N at byte p, batch N+1 at byte p+n with base offset = N's base + N's count, ...
//
// # Offset index (.index)
//
// One 8-byte entry per IndexIntervalBytes of batches (the first batch, at byte 0, is
// implicit and never has an entry):
//
//	 0                 4                 8
//	+-----------------+-----------------+
//	| relative offset | position        |   relative offset = batch base - segment base
//	| u32             | u32             |   position = byte of the batch in the .log
//	+-----------------+-----------------+
//
// Both fields strictly increase and position is in (0, segment size), so an all-zero entry
// is invalid. A file that is not a whole number of entries, or not increasing, or pointing
// past the segment, or at a batch with another base offset, is ignored and rebuilt.
//
// # Time index (.timeindex)
//
// Written at the same points as offset index entries, when the running maximum timestamp
// has grown:
//
//	 0                                   8                 12
//	+-----------------------------------+-----------------+
//	| timestamp ms i64                  | relative offset |   every batch up to and including
//	|                                   | u32             |   this one has max ts <= timestamp
//	+-----------------------------------+-----------------+
//
// # Checkpoint file (checkpoint)
//
// Two 512-byte slots (one per disk sector) written alternately, so a torn write of one leaves
// the other; the valid slot with the higher sequence wins:
//
//	 0        4        8                 16                24                32       40
//	+--------+--------+-----------------+-----------------+-----------------+--------+
//	| magic  | crc32c | sequence u64    | segment base    | position i64    | zero   |
//	| "LQCP" | 8..40  | (>0)            | i64             |                 |        |
//	+--------+--------+-----------------+-----------------+-----------------+--------+
//
// It says "the first position bytes of segment base were fsynced". Sync writes it at most
// once per Options.CheckpointInterval (one extra small fsync), roll and Close always do. It
// exists only to tell a torn tail from media corruption (below).
//
// # Producer state snapshot (.producers)
//
// The deduplication state of idempotent produce (batches with a producer id, magic 2) as it
// was when the segment of the same name was created: it reflects every batch below that
// offset. The format is package producerstate's (CRC-32C, whole or nothing). It is written
// at each roll (temp file, fsync, rename, before the new segment exists; the roll's
// directory fsync covers it), the two newest are kept, and retention deletes one with its
// segment. Open loads the newest valid one and scans the batch headers after it (the active
// segment, normally, which recovery reads anyway); a damaged or missing one falls back to
// an older one or to a scan of every segment. The state needs no file of its own to be
// right: every batch carries its producer fields, so the log is its record.
//
// # Durability and roll
//
// Append writes the batch with one positioned write; Sync fsyncs the active segment
// (group commit) and advances DurableOffset. Roll fsyncs the old segment before the new file
// exists, writes its index files (temp file, fsync, rename), creates the new segment and
// fsyncs the directory. So every segment but the last is durable as a whole, and recovery
// need only scan the last one. A failed fsync makes the log broken (ErrBroken, sticky): after
// a failed fsync the kernel may have dropped the dirty pages, and a retry could report a
// success that is not one.
//
// # Recovery (Open)
//
// Sealed segments load their index files when sane, else rebuild them from the batch headers;
// a short walk from the last index entry to the end finds the segment's next offset, which
// must equal the next segment's base (else ErrCorrupt naming both files). Sealed segments are
// not CRC-checked at start (Verify does that); damage there makes reads of the damaged range
// fail with ErrCorrupt while the rest stays readable.
//
// The active segment is validated batch by batch: length within MaxBatch and the file, CRC,
// base offset equal to the expected next offset. At the first invalid batch, at byte p:
//
//   - if no CRC-valid batch with a base offset >= the expected one starts anywhere after p,
//     the tail is torn (partial batch, zeros, garbage): the bytes from p are copied to
//     <segment>.broken.<unix-nanos> (fsynced), the segment is truncated to p, and the file
//     and directory are fsynced;
//   - if such a batch follows, the damage is corruption in the middle, unless the checkpoint
//     shows that p was never confirmed durable (p >= the checkpoint position in this
//     segment): then it is a torn write whose later writes happened to reach the disk, and
//     it is cut as above. Otherwise Open returns ErrCorrupt naming the file and position and
//     changes nothing: the broker refuses to serve the partition rather than lose the data
//     after it. A missing checkpoint counts as "all confirmed" (refuse).
//
// The checkpoint lags Sync by up to CheckpointInterval, so media corruption within the last
// interval of acknowledged data before a crash would be cut as a torn tail; that is the
// documented window. Leftover temp files and index files without a segment are removed.
//
// # Concurrency
//
// All methods are safe for concurrent use. Append, the roll it may do and Close are
// serialised by Log.mu. Sync holds no lock during the fsync, so Appends continue (one syncer
// goroutine is the intended use). Read and OffsetForTime take a read lock only to snapshot the
// segment list and never wait for an Append's write; the I/O they do happens without locks.
// OffsetForTime reads (and may decompress) a whole batch to find the record, so call it from a
// worker, not an event loop.
//
// For replication (cluster/raftlog, whose log is a Raft log): TruncateFrom cuts an
// uncommitted tail, Reset empties the log and starts it again at any offset (a snapshot
// brought the replica past what it holds), EnforceRetentionBelow lets the caller record the
// new start before retention moves it, and ProducerOptions.Disabled turns deduplication off.
// StartOffset, NextOffset and DurableOffset are lock-free atomics. EnforceRetention removes
// segments from the list under the locks, then unlinks the files without them.
//
// The producer state is guarded by Log.mu: Append checks a batch's sequence, writes it and
// records it in one critical section.
//
// Lock order: Log.syncMu → Log.retMu → Log.mu → Log.segMu → checkpointer.mu (a leaf).
// Segment files are reference counted: one reference for the log while the segment is
// listed, one per unreleased Chunk (and one during a Sync); the last release closes the file,
// so a Chunk on a segment deleted by retention stays readable.
//
// # Example
//
//	l, err := log.Open(dir, log.Options{SegmentBytes: 64 << 20})
//	if err != nil { ... }
//	defer l.Close()
//	base, err := l.Append(batch, recordCount) // batch validated with wire.ParseBatch
//	durable, err := l.Sync()                  // ack producers of offsets < durable
//	c, err := l.Read(offset, l.DurableOffset(), 1<<20)
//	if c != nil {
//		defer c.Release()
//		// sendfile(sock, c.File.Fd(), c.Pos, c.Len); next read from c.NextOffset
//	}
package log
