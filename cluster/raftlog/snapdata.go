package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Snapshot data: what raftpb.Snapshot.Data holds for a replicated partition (big-endian).
//
//	0 magic "LQSN" | 4 version u8 = 1 | 5 reserved [3] zero | 8 first offset i64 | 16
//
// first offset is the segment-log offset at which entry Metadata.Index+1 is on the replica
// that made the snapshot: the receiver's log goes on there, so that every replica gives the
// same messages the same offsets. Version 1 carries nothing else: bringing the receiver the
// segments below that offset is the job of a later version (see Storage.Snapshot). NEVER
// CHANGE version 1: replicas of two releases exchange it.
const (
	snapMagic    = "LQSN"
	snapVersion  = 1
	snapDataSize = 16
)

// errSnapshotData wraps every refusal of snapshot data.
var errSnapshotData = errors.New("raftlog: snapshot data")

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

// decodeSnapshotData returns the first offset of snapshot data b.
func decodeSnapshotData(b []byte) (int64, error) {
	switch {
	case len(b) != snapDataSize:
		return 0, fmt.Errorf("%w: %d bytes, want %d", errSnapshotData, len(b), snapDataSize)
	case string(b[:4]) != snapMagic:
		return 0, fmt.Errorf("%w: magic %q, want %q", errSnapshotData, b[:4], snapMagic)
	case b[4] != snapVersion:
		return 0, fmt.Errorf("%w: version %d, want %d", errSnapshotData, b[4], snapVersion)
	case b[5]|b[6]|b[7] != 0:
		return 0, fmt.Errorf("%w: reserved bytes not zero", errSnapshotData)
	}
	off := int64(binary.BigEndian.Uint64(b[8:]))
	if off < 0 {
		return 0, fmt.Errorf("%w: first offset %d", errSnapshotData, off)
	}
	return off, nil
}
