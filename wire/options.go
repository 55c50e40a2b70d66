package wire

// Topic option keys: the keys of CREATE_TOPIC's options (PROTOCOL.md, "CREATE_TOPIC", the
// table of options this broker knows). They are the wire: never change a value. The broker
// parses them (broker/admin.go for transient topics, broker/durable.go for durable ones);
// lqcat, lqbench and tools/compare send them. A key the topic's kind does not know is
// INVALID_REQUEST.
const (
	// OptionRingBytes (transient) is the bytes of each partition's ring, 2×MaxBatch to 1 GiB;
	// default 8 MiB. See PROTOCOL.md, CREATE_TOPIC.
	OptionRingBytes = "ring.bytes"

	// OptionRingSlots (transient) is the batches each partition's ring holds at most;
	// default 1024. See PROTOCOL.md, CREATE_TOPIC.
	OptionRingSlots = "ring.slots"

	// OptionFsync (durable) is the fsync policy: "always" (the default),
	// "interval=<Go duration>" (1ms to 1h) or "never". See PROTOCOL.md, CREATE_TOPIC, and
	// "fsync policies and what each can lose".
	OptionFsync = "fsync"

	// OptionSegmentBytes (durable) rolls the active segment at this size in bytes, 2×MaxBatch
	// to 1 GiB; default 64 MiB. See PROTOCOL.md, CREATE_TOPIC.
	OptionSegmentBytes = "segment.bytes"

	// OptionSegmentMs (durable) rolls the active segment at this age in milliseconds
	// (0, the default: never). See PROTOCOL.md, CREATE_TOPIC.
	OptionSegmentMs = "segment.ms"

	// OptionRetentionBytes (durable) deletes the oldest whole segments while a partition is
	// larger than this many bytes (0, the default: keep all). See PROTOCOL.md, CREATE_TOPIC.
	OptionRetentionBytes = "retention.bytes"

	// OptionRetentionMs (durable) deletes whole segments whose newest record is older than
	// this many milliseconds (0, the default: keep all). See PROTOCOL.md, CREATE_TOPIC.
	OptionRetentionMs = "retention.ms"

	// OptionReplicationFactor (durable) is how many brokers of a cluster hold each partition,
	// 1 (the default: one broker, no Raft) to the cluster's size; a topic with more than one
	// is replicated with Raft (PROTOCOL.md section 16). Fixed at creation.
	OptionReplicationFactor = "replication.factor"
)
