package partition

import (
	"encoding/binary"

	"github.com/lightq/lightq/wire"
)

// appendFormat2 appends to dst the format-2 form of the format-1 batch b (validated, header
// h): the same attributes, count, timestamps and records, no producer (id, epoch and base
// sequence -1), leader epoch and raft index 0 (raftlog writes them), and the CRC of the new
// layout. A replicated log holds only format 2, whose raft index makes the log the Raft log;
// consumers take both formats (PROTOCOL.md section 7), so what they read is the same
// messages.
func appendFormat2(dst, b []byte, h *wire.BatchHeader) []byte {
	bt := wire.Batch{BatchHeader: *h, Records: b[wire.BatchHeaderSize:]}
	bt.Magic = wire.BatchMagic2
	bt.Length += wire.BatchHeaderSize2 - wire.BatchHeaderSize
	bt.LeaderEpoch, bt.RaftIndex = 0, 0
	bt.ProducerID, bt.ProducerEpoch, bt.BaseSequence = wire.NoProducer, wire.NoProducer, wire.NoProducer
	start := len(dst)
	dst = wire.AppendBatch(dst, &bt)
	binary.BigEndian.PutUint32(dst[start+12:], wire.BatchChecksum(dst[start:]))
	return dst
}
