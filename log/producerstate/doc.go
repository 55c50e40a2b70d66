// Package producerstate is the deduplication state of idempotent produce for one partition
// (PROTOCOL.md section 15): per producer id, its epoch and its last Window batches (base
// sequence, record count, base offset), so that a batch is stored only when its base
// sequence is the next one expected, and a batch sent again is answered with the offsets it
// got the first time. It knows no network and no files: the log (durable topics) and the
// broker (transient topics) keep one Table per partition, and the log persists it with
// AppendSnapshot and LoadSnapshot.
//
// # Use
//
//	res, err := t.Check(&h, nowMs) // h: the batch's header, ParseBatch-checked
//	switch {
//	case err != nil:               // wraps wire.ErrOutOfOrderSequence, ErrProducerFenced,
//		                           // ErrUnknownProducer, or ErrTooManyProducers: refuse
//	case res.Duplicate:            // stored before at res.Base: answer that, store nothing
//	default:                       // store the batch at base, then:
//		t.Record(&h, base, nowMs)
//	}
//
// Check and Record of a known producer do not allocate; a new producer costs a map entry
// once (entries of dropped producers are reused).
//
// # Memory bounds
//
// A state whose producer has sent nothing for Config.Expiry is dropped: Record drops up to
// two expired states per call (the least recently seen first), Check drops every expired
// state before refusing a new producer for a cap, and Expire drops them all. A table holds
// at most Config.MaxProducers states, and all tables sharing a Budget at most its max,
// overshot by at most one per goroutine appending at the same moment (Check tests the cap;
// Record takes the slot). Load and Record without Check (recovery) never refuse: they drop
// the least recently seen states to stay within the table's cap.
//
// # Snapshot format
//
// Big-endian. NEVER CHANGE: snapshots are on disk beside the segments of every log. A new
// layout takes a new version.
//
//	 0        4        8    9     12                20                28       32
//	+--------+--------+----+-----+-----------------+-----------------+--------+---------
//	| "LQPS" | crc32c | ver| zero| offset i64      | written ms i64  | count  | entries
//	|        | 8..end | 1  |     | (covers < this) |                 | u32    | ...
//	+--------+--------+----+-----+-----------------+-----------------+--------+---------
//
//	entry:  | producer id i64 | epoch i16 | n u8 | zero u8 | last seen ms i64 | batch[n] |
//	batch:  | base sequence i32 | record count u32 | base offset i64 |   oldest first
//
// offset is the log offset below which every batch is reflected in the snapshot (the base
// of the segment it was written beside). Entries come least recently seen first, so loading
// them in order rebuilds the expiry order. 1 <= n <= Window; within an entry the batches'
// sequences follow each other and their base offsets increase. Anything else (a bad CRC, a
// count that does not fit, trailing bytes, a producer listed twice) makes the whole snapshot
// invalid: the log then rebuilds the state by scanning batches instead.
//
// # Concurrency
//
// A Table is not safe for concurrent use: its owner serialises every call (the log's
// writer lock, or the broker's per-partition lock). A Budget is safe for concurrent use.
package producerstate
