package client

import (
	"context"
	"fmt"
	"time"

	"github.com/lightq/lightq/wire"
)

// TopicConfig describes a topic to create.
type TopicConfig struct {
	Name       string
	Kind       wire.Kind // zero means wire.KindTransient
	Partitions int       // zero means 1
	// User gets both roles (produce and consume) on the topic. The broker creates the user
	// when it is new; otherwise Password must match the user's password. Both empty: the
	// topic starts without users (Grant gives roles on it).
	User, Password string
	Options        []wire.Option // e.g. {Key: "retention.bytes", Value: "1073741824"}
}

// CreateTopic creates a topic. It needs the admin role; an existing topic gives
// wire.CodeTopicExists. Safe for concurrent use, like every Conn method.
func (c *Conn) CreateTopic(ctx context.Context, cfg TopicConfig) error {
	if err := wire.ValidTopicName(cfg.Name); err != nil {
		return fmt.Errorf("lightq: %w", err)
	}
	if cfg.Kind == 0 {
		cfg.Kind = wire.KindTransient
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = 1
	}
	if cfg.Partitions < 0 || cfg.Partitions > wire.MaxPartitions {
		return fmt.Errorf("lightq: %d partitions, want 1-%d", cfg.Partitions, wire.MaxPartitions)
	}
	if len(cfg.User) > wire.MaxUser || len(cfg.Password) > wire.MaxPassword || len(cfg.Options) > wire.MaxOptions {
		return fmt.Errorf("lightq: user, password or options over the protocol limits")
	}
	req := wire.CreateTopic{
		Name: cfg.Name, Kind: cfg.Kind, Partitions: uint32(cfg.Partitions),
		User: cfg.User, Password: cfg.Password, Options: cfg.Options,
	}
	_, err := c.anyRoundTrip(ctx, wire.OpCreateTopic, req.AppendTo(nil))
	return err
}

// DeleteTopic deletes a topic and everything in it.
func (c *Conn) DeleteTopic(ctx context.Context, name string) error {
	if err := wire.ValidTopicName(name); err != nil {
		return fmt.Errorf("lightq: %w", err)
	}
	req := wire.TopicName{Name: name}
	_, err := c.anyRoundTrip(ctx, wire.OpDeleteTopic, req.AppendTo(nil))
	return err
}

// Metadata describes the named topics, or every topic the caller may see when none is named.
func (c *Conn) Metadata(ctx context.Context, topics ...string) ([]wire.TopicMetadata, error) {
	for _, t := range topics {
		if err := wire.ValidTopicName(t); err != nil {
			return nil, fmt.Errorf("lightq: %w", err)
		}
	}
	req := wire.MetadataRequest{Topics: topics}
	body, err := c.anyRoundTrip(ctx, wire.OpMetadata, req.AppendTo(nil))
	if err != nil {
		return nil, err
	}
	var resp wire.MetadataResponse
	if err := resp.Decode(body); err != nil {
		return nil, fmt.Errorf("%w: METADATA response: %w", ErrProtocol, err)
	}
	return resp.Topics, nil
}

// Stats returns the counters of one topic, or of every topic the caller may see when topic
// is empty.
func (c *Conn) Stats(ctx context.Context, topic string) ([]wire.TopicStats, error) {
	if topic != "" {
		if err := wire.ValidTopicName(topic); err != nil {
			return nil, fmt.Errorf("lightq: %w", err)
		}
	}
	req := wire.TopicName{Name: topic}
	body, err := c.anyRoundTrip(ctx, wire.OpStats, req.AppendTo(nil))
	if err != nil {
		return nil, err
	}
	var resp wire.StatsResponse
	if err := resp.Decode(body); err != nil {
		return nil, fmt.Errorf("%w: STATS response: %w", ErrProtocol, err)
	}
	return resp.Topics, nil
}

// FetchResult is the answer to a FETCH: the partition's offsets and the raw batches
// (FetchResponse.Batches), which Iter walks. It owns its memory.
type FetchResult struct {
	wire.FetchResponse
	topic    string
	offset   int64 // asked for
	maxBatch int
}

// Iter returns an iterator over the fetched batches, r.Batches. (It was called Batches,
// which hid the embedded field of the raw bytes.)
func (r *FetchResult) Iter() BatchIter {
	return BatchIter{topic: r.topic, partition: int32(r.Partition), hw: r.HighWatermark, from: r.offset, rest: r.FetchResponse.Batches, max: r.maxBatch}
}

// BatchIter walks a sequence of whole record batches, validating each one (wire.ParseBatch:
// CRC and structure). Records decompresses and checks the records of the current batch.
// Control batches (PROTOCOL.md section 7: a replicated partition's entries without messages)
// are checked and passed over: Next never stops at one.
//
//	it := res.Iter()
//	for it.Next() { bt := it.Batch(); records, err := it.Records(&comp, buf); ... }
//	if err := it.Err(); err != nil { ... }
//
// A batch that fails is reported as a *CorruptBatchError naming its topic, partition and
// offsets: by Err, and then SkipCorrupt goes on past it; by Records, and then Next does.
type BatchIter struct {
	topic     string
	partition int32
	hw        int64 // the answer's high watermark: bounds the extent of a corrupt last batch
	from      int64 // the offset asked for, then the offset after the last batch passed
	rest      []byte
	max       int
	cur       wire.Batch
	err       error
	skippable bool // err is a corrupt batch that Next has moved past
}

// Next advances to the next record batch, passing over control batches; it returns false at
// the end or on a corrupt batch.
func (it *BatchIter) Next() bool {
	for it.err == nil && len(it.rest) > 0 {
		n := wholeBatchSize(it.rest)
		if n == 0 {
			cause := fmt.Errorf("%w: its length field says %d bytes, %d are left in the FETCH answer", wire.ErrCorruptBatch, wire.BatchSize(it.rest), len(it.rest))
			it.err = corruptBatch(it.topic, it.partition, it.rest, 0, it.from, it.hw, cause)
			return false
		}
		bt, err := wire.ParseBatch(it.rest[:n], it.max)
		if err != nil {
			bad := corruptBatch(it.topic, it.partition, it.rest, n, it.from, it.hw, err)
			it.err, it.skippable = bad, bad.Skippable()
			if it.skippable {
				it.from = bad.LastOffset + 1
			}
			it.rest = it.rest[n:]
			return false
		}
		it.from = bt.NextOffset()
		it.rest = it.rest[n:]
		if !bt.IsControl() {
			it.cur = bt
			return true
		}
	}
	return false
}

// SkipCorrupt clears the error of the corrupt batch Next stopped at, so that Next goes on
// with the batch after it. It returns false, and changes nothing, when the error is not a
// *CorruptBatchError or the batch's extent is unknown (CorruptBatchError.Skippable): then
// nothing after it in this answer can be read; FETCH again after its last offset, if known,
// or report it.
func (it *BatchIter) SkipCorrupt() bool {
	if !it.skippable {
		return false
	}
	it.err, it.skippable = nil, false
	return true
}

// wholeBatchSize is the size of the batch at the start of b, a sequence of whole batches (a
// FETCH answer), or 0 when b does not start with a whole batch of at least a header.
func wholeBatchSize(b []byte) int {
	n := wire.BatchSize(b)
	if n < wire.BatchHeaderSize || n > len(b) {
		return 0
	}
	return n
}

// Records returns the current batch's records section, decompressed into buf (reused when it
// is large enough; nil is fine) when the batch is compressed, after checking that every
// record decodes: a wire.RecordIter over it then meets no error. When they do not, the error
// is a *CorruptBatchError naming the batch's offsets, and Next goes on with the next batch.
// comp may be nil when nothing is compressed.
func (it *BatchIter) Records(comp *wire.Compressor, buf []byte) ([]byte, error) {
	bt := &it.cur
	records := bt.Records
	if bt.Codec() != wire.CodecNone {
		if comp == nil {
			return nil, fmt.Errorf("lightq: BatchIter.Records: a %v batch needs a Compressor", bt.Codec())
		}
		dec, err := comp.Decompress(buf[:0], bt)
		if err != nil {
			return nil, it.corruptRecords(err)
		}
		records = dec
	}
	var rec wire.Record
	if err := checkRecords(records, bt, &rec); err != nil {
		return nil, it.corruptRecords(err)
	}
	return records, nil
}

// corruptRecords describes the current batch, whose records failed with cause. It passed its
// CRC check, so its header's offsets are right.
func (it *BatchIter) corruptRecords(cause error) *CorruptBatchError {
	return &CorruptBatchError{Topic: it.topic, Partition: it.partition, FirstOffset: it.cur.BaseOffset, LastOffset: it.cur.NextOffset() - 1, Err: cause}
}

// Batch is the current batch; its Records alias the FetchResult.
func (it *BatchIter) Batch() *wire.Batch { return &it.cur }

// Err is the first error met.
func (it *BatchIter) Err() error { return it.err }

// Fetch reads batches of a durable topic's partition from req.Offset, asking the
// partition's leader (and following NOT_LEADER: doc.go, "Clusters"). This is the thin
// request; Conn.NewConsumer and DialConsumer build the durable consumer on it (positions,
// prefetch, groups, reconnects).
func (c *Conn) Fetch(ctx context.Context, req wire.Fetch) (*FetchResult, error) {
	body, err := c.partitionRoundTrip(ctx, req.Topic, int32(req.Partition), wire.OpFetch, req.AppendTo(nil), time.Duration(req.MaxWaitMs)*time.Millisecond)
	if err != nil {
		return nil, err
	}
	res := &FetchResult{topic: req.Topic, offset: req.Offset, maxBatch: c.Limits().MaxBatch}
	if err := res.FetchResponse.Decode(body); err != nil {
		return nil, fmt.Errorf("%w: FETCH response: %w", ErrProtocol, err)
	}
	return res, nil
}

// ListOffsets looks up an offset of a durable topic's partition: the earliest, the latest, or
// the first at or after a timestamp. It asks the partition's leader, as Fetch does.
func (c *Conn) ListOffsets(ctx context.Context, req wire.ListOffsets) (int64, error) {
	resp, err := c.partitionRoundTrip(ctx, req.Topic, int32(req.Partition), wire.OpListOffsets, req.AppendTo(nil), 0)
	return decodeOffset(wire.OpListOffsets, resp, err)
}

// CommitOffset stores a group's next offset to read for a partition. In a cluster it goes to
// the group's coordinator (coordinator.go).
func (c *Conn) CommitOffset(ctx context.Context, req wire.CommitOffset) error {
	_, err := c.groupRoundTrip(ctx, req.Group, wire.OpCommitOffset, req.AppendTo(nil))
	return err
}

// FetchCommitted returns a group's committed offset for a partition, -1 if none. In a
// cluster it asks the group's coordinator.
func (c *Conn) FetchCommitted(ctx context.Context, req wire.FetchCommitted) (int64, error) {
	return c.offsetRequest(ctx, wire.OpFetchCommitted, req.Group, req.AppendTo(nil))
}

// offsetRequest is a request of group answered with an offset, sent to the group's
// coordinator.
func (c *Conn) offsetRequest(ctx context.Context, op wire.Op, group string, body []byte) (int64, error) {
	resp, err := c.groupRoundTrip(ctx, group, op, body)
	return decodeOffset(op, resp, err)
}

// decodeOffset reads an OffsetResponse, the answer of op.
func decodeOffset(op wire.Op, resp []byte, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	var or wire.OffsetResponse
	if err := or.Decode(resp); err != nil {
		return 0, fmt.Errorf("%w: %v response: %w", ErrProtocol, op, err)
	}
	return or.Offset, nil
}
