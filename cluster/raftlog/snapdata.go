package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Snapshot data: what raftpb.Snapshot.Data holds for a replicated partition (big-endian).
//
//	version 1: 0 magic "LQSN" | 4 version u8 = 1 | 5 reserved [3] zero | 8 first offset i64 | 16
//	version 2: ... as version 1 ... | 16 source node u64 | 24 source log start i64 | 32
//
// first offset is the segment-log offset at which entry Metadata.Index+1 is on the replica
// that made the snapshot: the receiver's log goes on there, so that every replica gives the
// same messages the same offsets. Version 2 adds where the batches below it are: the node
// that made the snapshot (its cluster port serves its segments: cluster/transport's segment
// stream) and its log start; the receiver fetches the segments from there (or from its own
// committed end, if later) up to first offset and installs them (catchup.go), so that it holds
// the partition from the log start on, byte for byte as the source. A version-1 receiver's log
// starts again empty at first offset. NEVER CHANGE versions 1 and 2: replicas of two releases
// exchange them.
const (
	snapMagic     = "LQSN"
	snapVersion   = 1
	snapVersion2  = 2
	snapDataSize  = 16
	snapDataSize2 = 32
)

// errSnapshotData wraps every refusal of snapshot data.
var errSnapshotData = errors.New("raftlog: snapshot data")

// SnapData is decoded snapshot data.
type SnapData struct {
	FirstOffset int64
	// Source and Start (version 2; Source 0 in version 1): the node whose segments hold the
	// batches below FirstOffset, and its log start.
	Source uint64
	Start  int64
}

// AppendSnapshotData appends snapshot data (version 1) naming firstOffset. It is for an owner
// whose snapshots carry a state of their own beside the log (the cluster's metadata,
// cluster/meta): it sends its own data to peers, and gives ApplySnapshot data of this format,
// with the offset its own log goes on at.
func AppendSnapshotData(dst []byte, firstOffset int64) []byte {
	return appendSnapshotData(dst, firstOffset)
}

func appendSnapshotData(dst []byte, firstOffset int64) []byte {
	dst = append(dst, snapMagic...)
	dst = append(dst, snapVersion, 0, 0, 0)
	return binary.BigEndian.AppendUint64(dst, uint64(firstOffset))
}

// appendSnapshotData2 appends version-2 snapshot data.
func appendSnapshotData2(dst []byte, d SnapData) []byte {
	dst = append(dst, snapMagic...)
	dst = append(dst, snapVersion2, 0, 0, 0)
	dst = binary.BigEndian.AppendUint64(dst, uint64(d.FirstOffset))
	dst = binary.BigEndian.AppendUint64(dst, d.Source)
	return binary.BigEndian.AppendUint64(dst, uint64(d.Start))
}

// DecodeSnapshotData decodes snapshot data of either version.
func DecodeSnapshotData(b []byte) (SnapData, error) {
	var d SnapData
	switch {
	case len(b) < 5:
		return d, fmt.Errorf("%w: %d bytes", errSnapshotData, len(b))
	case string(b[:4]) != snapMagic:
		return d, fmt.Errorf("%w: magic %q, want %q", errSnapshotData, b[:4], snapMagic)
	case b[4] == snapVersion && len(b) != snapDataSize, b[4] == snapVersion2 && len(b) != snapDataSize2:
		return d, fmt.Errorf("%w: version %d in %d bytes", errSnapshotData, b[4], len(b))
	case b[4] != snapVersion && b[4] != snapVersion2:
		return d, fmt.Errorf("%w: version %d, want %d or %d", errSnapshotData, b[4], snapVersion, snapVersion2)
	case b[5]|b[6]|b[7] != 0:
		return d, fmt.Errorf("%w: reserved bytes not zero", errSnapshotData)
	}
	d.FirstOffset = int64(binary.BigEndian.Uint64(b[8:]))
	if b[4] == snapVersion2 {
		d.Source = binary.BigEndian.Uint64(b[16:])
		d.Start = int64(binary.BigEndian.Uint64(b[24:]))
		if d.Source == 0 || d.Start < 0 || d.Start > d.FirstOffset {
			return d, fmt.Errorf("%w: source node %d, log start %d, first offset %d", errSnapshotData, d.Source, d.Start, d.FirstOffset)
		}
	}
	if d.FirstOffset < 0 {
		return d, fmt.Errorf("%w: first offset %d", errSnapshotData, d.FirstOffset)
	}
	return d, nil
}

// decodeSnapshotData returns the first offset of snapshot data b.
func decodeSnapshotData(b []byte) (int64, error) {
	d, err := DecodeSnapshotData(b)
	return d.FirstOffset, err
}
