package client

import (
	"context"
	"fmt"
	"time"

	"github.com/lightq/lightq/wire"
)

// Where a consumer starts reading a partition: the group's committed offset, or its
// StartPosition.

// StartPosition says where a consumer starts reading a partition for which its group has no
// committed offset (or when it has no group). The zero value is Earliest().
type StartPosition struct {
	kind   startKind
	offset int64
	time   time.Time
}

type startKind uint8

const (
	startEarliest startKind = iota
	startLatest
	startOffset
	startTime
	startFromEnd
)

// Earliest starts at the oldest record still stored (the log start offset).
func Earliest() StartPosition { return StartPosition{kind: startEarliest} }

// Latest starts after the last record readable when the consumer is created: it receives only
// records produced afterwards.
func Latest() StartPosition { return StartPosition{kind: startLatest} }

// AtOffset starts at offset o. An offset below the log start offset is moved up to it (and
// reported to OnError); one beyond the end of the log fails the consumer.
func AtOffset(o int64) StartPosition { return StartPosition{kind: startOffset, offset: o} }

// AtTime starts at the first record whose timestamp is at or after t (millisecond precision),
// or at the end of the log when there is none.
func AtTime(t time.Time) StartPosition { return StartPosition{kind: startTime, time: t} }

func (s StartPosition) String() string {
	switch s.kind {
	case startLatest:
		return "latest"
	case startOffset:
		return fmt.Sprintf("offset %d", s.offset)
	case startFromEnd:
		return fmt.Sprintf("%d before the end", s.offset)
	case startTime:
		return "time " + s.time.Format(time.RFC3339Nano)
	}
	return "earliest"
}

// FromEnd starts n records before the end of the log (at the log start when it holds
// fewer), the end being the last readable record when the consumer starts the partition.
func FromEnd(n int64) StartPosition { return StartPosition{kind: startFromEnd, offset: n} }

// check reports a start position that cannot be used.
func (s StartPosition) check() error {
	if (s.kind == startOffset || s.kind == startFromEnd) && s.offset < 0 {
		return fmt.Errorf("lightq: start position %v: negative", s)
	}
	return nil
}

// resolveStart returns the group's committed offset for p, or the Start position's offset
// (Starts[p] when it names p).
func (k *Consumer) resolveStart(ctx context.Context, c *Conn, p *partState) (int64, error) {
	if k.opts.Group != "" {
		off, err := c.FetchCommitted(ctx, wire.FetchCommitted{Group: k.opts.Group, Topic: k.topic, Partition: uint32(p.id)})
		if err != nil {
			return 0, err
		}
		if off >= 0 {
			p.committed.Store(off)
			return off, nil
		}
	}
	st := k.opts.Start
	if s, ok := k.opts.Starts[p.id]; ok {
		st = s
	}
	lo := wire.ListOffsets{Topic: k.topic, Partition: uint32(p.id)}
	switch st.kind {
	case startOffset:
		return st.offset, nil
	case startFromEnd:
		lo.Mode = wire.OffsetLatest
		end, err := c.ListOffsets(ctx, lo)
		if err != nil {
			return 0, err
		}
		lo.Mode = wire.OffsetEarliest
		begin, err := c.ListOffsets(ctx, lo)
		return max(begin, end-st.offset), err
	case startTime:
		lo.Mode, lo.Timestamp = wire.OffsetTimestamp, st.time.UnixMilli()
	case startLatest:
		lo.Mode = wire.OffsetLatest
	default:
		lo.Mode = wire.OffsetEarliest
	}
	off, err := c.ListOffsets(ctx, lo)
	if err != nil || st.kind != startLatest || k.opts.Isolation != wire.IsolationWritten {
		return off, err
	}
	// LIST_OFFSETS latest is the durable end; a written-isolation consumer starts at the
	// written end, which only a FETCH reports (as its high watermark).
	res, err := c.Fetch(ctx, wire.Fetch{Topic: k.topic, Partition: uint32(p.id), Offset: off, MaxBytes: 1, Isolation: wire.IsolationWritten})
	if err != nil {
		return 0, err
	}
	return max(off, res.HighWatermark), nil
}
