package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// The end of a run: every partition read from its leader, then every replica's files read
// with the brokers stopped.

// readTimeout bounds the final read of one partition, leader changes included.
const readTimeout = 2 * time.Minute

// readPartition reads partition p from offset 0 to its high watermark from its leader, as a
// consumer would (FETCH, isolation 0: the committed batches), and returns its records
// (control batches skipped) and the high watermark. A refusal by a broker that no longer
// leads it starts the read again at the new leader.
func (c *cluster) readPartition(ctx context.Context, p int32) ([]Record, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	var lastErr error
	for ctx.Err() == nil {
		leaders, err := c.waitLeaders(ctx, readTimeout, true)
		if err != nil {
			return nil, 0, fmt.Errorf("partition %d: %w (last read: %v)", p, err, lastErr)
		}
		recs, hw, err := c.readFrom(ctx, c.node(leaders[p]), p)
		if err == nil {
			return recs, hw, nil
		}
		lastErr = err
		if !errors.Is(err, &wire.Error{Code: wire.CodeNotLeader}) && !errors.Is(err, client.ErrConnectionLost) {
			return recs, hw, err
		}
	}
	return nil, 0, fmt.Errorf("partition %d: no complete read in %v: %w", p, readTimeout, lastErr)
}

func (c *cluster) readFrom(ctx context.Context, n *node, p int32) ([]Record, int64, error) {
	conn, err := client.Dial(ctx, n.client.Addr(), clientOptions("chaos-reader"))
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close()
	var comp wire.Compressor
	defer comp.Close()
	var recs []Record
	var buf []byte
	hw := int64(-1)
	for off := int64(0); hw < 0 || off < hw; {
		fctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		res, err := conn.Fetch(fctx, wire.Fetch{Topic: c.topic, Partition: uint32(p), Offset: off, MaxBytes: 1 << 20})
		cancel()
		if err != nil {
			return recs, hw, fmt.Errorf("node %d partition %d: fetch at %d: %w", n.id, p, off, err)
		}
		if hw < 0 {
			hw = res.HighWatermark // the end of the read: nothing is produced any more
		}
		if len(res.Batches) == 0 && off < hw {
			return recs, hw, fmt.Errorf("node %d partition %d: empty answer at %d below the high watermark %d", n.id, p, off, hw)
		}
		for rest := res.Batches; len(rest) > 0 && off < hw; {
			size := wire.BatchSize(rest)
			var bt wire.Batch
			err := errNotBatch
			if size >= wire.BatchHeaderSize && size <= len(rest) {
				bt, err = wire.ParseBatch(rest[:size], MaxBatch)
			}
			if err != nil {
				// The leader served a batch that does not decode: a violation whatever
				// follows; the read stops here and the rest counts as lost.
				recs = append(recs, Record{Offset: off, Kind: KindCorrupt})
				return recs, hw, nil
			}
			rest = rest[size:]
			if bt.IsControl() || bt.NextOffset() <= off {
				off = max(off, bt.NextOffset())
				continue
			}
			records := bt.Records
			if bt.Codec() != wire.CodecNone {
				if buf, err = comp.Decompress(buf[:0], &bt); err != nil {
					recs = append(recs, Record{Offset: bt.BaseOffset, Kind: KindCorrupt})
					off = bt.NextOffset()
					continue
				}
				records = buf
			}
			it := wire.NewRecordIter(records, bt.RecordCount, bt.BaseOffset, bt.FirstTimestamp)
			var rec wire.Record
			for it.Next(&rec) {
				if rec.Offset < off || rec.Offset >= hw {
					continue
				}
				k, id := ParsePayload(rec.Value)
				recs = append(recs, Record{Offset: rec.Offset, Kind: k, ID: id})
			}
			if it.Err() != nil {
				recs = append(recs, Record{Offset: off, Kind: KindCorrupt})
			}
			off = bt.NextOffset()
		}
	}
	return recs, hw, nil
}

// readAll reads every partition from its leader.
func (c *cluster) readAll(ctx context.Context) (map[int32][]Record, map[int32]int64, error) {
	leader, hw := map[int32][]Record{}, map[int32]int64{}
	for p := int32(0); p < int32(c.parts); p++ {
		recs, h, err := c.readPartition(ctx, p)
		if err != nil {
			return nil, nil, err
		}
		leader[p], hw[p] = recs, h
	}
	return leader, hw, nil
}

// readReplicas reads every node's copy of every partition from its files; the brokers must
// be stopped (raft.state is read).
func (c *cluster) readReplicas() (map[int32][]*Replica, error) {
	out := map[int32][]*Replica{}
	for p := int32(0); p < int32(c.parts); p++ {
		for _, n := range c.nodes {
			r, err := ReadReplica(PartitionDir(n.dir, c.topic, p), n.id, true)
			if err != nil {
				return nil, fmt.Errorf("node %d partition %d: %w", n.id, p, err)
			}
			out[p] = append(out[p], r)
		}
	}
	return out, nil
}
