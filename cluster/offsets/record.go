package offsets

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/lightq/lightq/wire"
)

// Records: what one Raft entry of an offsets partition says. An entry is a format-2 record
// batch of one uncompressed record (what raftlog stores: the raft index and term go into its
// header), whose value is one record, big-endian, str a u16 length and the bytes:
//
//	version u8 = 1 | kind u8 |
//	kind 1, commit:     topic str | created i64 | group str | partition u32 | offset i64
//	kind 2, drop topic: topic str | created i64
//	kind 3, session:    topic str | created i64 | group str | session u32 (ms, at least 1)
//
// created is the topic's creation time (Unix ms, as the cluster's metadata has it), so that a
// topic deleted and created again under its name starts without the old one's offsets. A
// commit stores offset for (topic, created, group, partition), replacing what was there; a
// drop removes every offset and session of (topic, created); a session stores the longest
// session timeout the group's members were granted (the coordinator proposes it before it
// answers a JOIN_GROUP asking for longer; a coordinator taking the group over withholds its
// partitions that long, broker/coordinator.go): the stored session becomes the larger of the
// two, never smaller, so that two joins' records applied in either order leave the longer. Kind 3 came after
// the first release: a broker without it stalls on it (ErrStalled), as on any unknown kind.
// Every record has one encoding. NEVER CHANGE
// version 1: logs and peers hold it; a new layout is a new version.
const recordVersion = 1

// Record kinds.
const (
	kindCommit  = 1
	kindDrop    = 2
	kindSession = 3
)

// maxRecord bounds a record's value: the largest possible commit (a topic of MaxTopicName,
// a group of MaxGroupName) with room to spare.
const maxRecord = 1024

// maxEntry bounds an entry: a batch header and one record of maxRecord with its lengths.
const maxEntry = wire.MaxBatchHeaderSize + maxRecord + 32

// ErrMalformed wraps every refusal of bytes that are no record, no entry or no snapshot.
var ErrMalformed = errors.New("offsets: malformed")

// Key names one committed offset: a group's next offset in one partition of one creation of
// a topic.
type Key struct {
	Topic     string
	Created   int64 // the topic's creation time, Unix ms
	Group     string
	Partition uint32
}

// size is what k and its offset take in a snapshot (and about what they take in memory).
func (k *Key) size() int64 { return int64(2 + len(k.Topic) + 8 + 2 + len(k.Group) + 4 + 8) }

// GroupRef names one group of one creation of a topic: what a session record is kept for.
type GroupRef struct {
	Topic   string
	Created int64 // the topic's creation time, Unix ms
	Group   string
}

// size is what a session of r takes in a snapshot (and about what it takes in memory).
func (r *GroupRef) size() int64 { return int64(2 + len(r.Topic) + 8 + 2 + len(r.Group) + 4) }

// record is one decoded record.
type record struct {
	kind    uint8
	key     Key // Topic and Created only, for a drop; Partition unused for a session
	offset  int64
	session uint32 // ms, for a session
}

func appendRecord(dst []byte, r *record) []byte {
	dst = append(dst, recordVersion, r.kind)
	dst = wire.AppendString(dst, r.key.Topic)
	dst = wire.AppendI64(dst, r.key.Created)
	switch r.kind {
	case kindCommit:
		dst = wire.AppendString(dst, r.key.Group)
		dst = wire.AppendU32(dst, r.key.Partition)
		dst = wire.AppendI64(dst, r.offset)
	case kindSession:
		dst = wire.AppendString(dst, r.key.Group)
		dst = wire.AppendU32(dst, r.session)
	}
	return dst
}

// checkSession checks a session record's names and timeout.
func checkSession(ref *GroupRef, session uint32) error {
	if err := wire.ValidTopicName(ref.Topic); err != nil {
		return err
	}
	if err := wire.ValidGroupName(ref.Group); err != nil {
		return err
	}
	if session == 0 {
		return fmt.Errorf("a session timeout of 0 ms")
	}
	return nil
}

// checkKey checks the names and the offset of a commit by the rules of the wire protocol.
func checkKey(k *Key, offset int64) error {
	if err := wire.ValidTopicName(k.Topic); err != nil {
		return err
	}
	if err := wire.ValidGroupName(k.Group); err != nil {
		return err
	}
	if offset < 0 {
		return fmt.Errorf("offset %d is negative", offset)
	}
	return nil
}

// decodeRecord decodes one record (the whole of b). Strings are copied.
func decodeRecord(b []byte) (record, error) {
	var rec record
	if len(b) > maxRecord {
		return rec, fmt.Errorf("%w record: %d bytes, limit %d", ErrMalformed, len(b), maxRecord)
	}
	r := wire.NewReader(b)
	if v := r.U8(); r.Err() == nil && v != recordVersion {
		return rec, fmt.Errorf("%w record: version %d, this broker reads %d (written by a newer broker?)", ErrMalformed, v, recordVersion)
	}
	rec.kind = r.U8()
	rec.key.Topic = r.String(wire.MaxTopicName, "topic")
	rec.key.Created = r.I64()
	switch {
	case r.Err() != nil:
	case rec.kind == kindCommit:
		rec.key.Group = r.String(wire.MaxGroupName, "group")
		rec.key.Partition = r.U32()
		rec.offset = r.I64()
	case rec.kind == kindSession:
		rec.key.Group = r.String(wire.MaxGroupName, "group")
		rec.session = r.U32()
	case rec.kind != kindDrop:
		return rec, fmt.Errorf("%w record: kind %d unknown to this broker (written by a newer broker?)", ErrMalformed, rec.kind)
	}
	if err := r.Done("record"); err != nil {
		return rec, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	var err error
	switch rec.kind {
	case kindCommit:
		err = checkKey(&rec.key, rec.offset)
	case kindSession:
		err = checkSession(&GroupRef{rec.key.Topic, rec.key.Created, rec.key.Group}, rec.session)
	default:
		err = wire.ValidTopicName(rec.key.Topic)
	}
	if err != nil {
		return rec, fmt.Errorf("%w record: %w", ErrMalformed, err)
	}
	return rec, nil
}

// encodeEntry is the Raft entry of a record: a format-2 batch of one record whose value is
// the record. Its bytes are new (raftlog writes the index and term into an entry in place).
func encodeEntry(rec *record) []byte {
	var bb wire.BatchBuilder
	bb.SetMagic(wire.BatchMagic2)
	var buf [maxRecord]byte
	bb.Append(time.Now().UnixMilli(), nil, appendRecord(buf[:0], rec), nil)
	b, err := bb.Finish(wire.CodecNone, nil)
	if err != nil {
		panic(fmt.Sprintf("offsets: encode a record batch: %v", err)) // uncompressed: cannot fail
	}
	return bytes.Clone(b)
}

// decodeEntry decodes a committed entry's record.
func decodeEntry(data []byte) (record, error) {
	bt, err := wire.ParseBatch(data, maxEntry)
	if err != nil {
		return record{}, fmt.Errorf("%w entry: %w", ErrMalformed, err)
	}
	if bt.RecordCount != 1 || bt.Codec() != wire.CodecNone {
		return record{}, fmt.Errorf("%w entry: %d records, codec %v; want one uncompressed", ErrMalformed, bt.RecordCount, bt.Codec())
	}
	it := wire.NewRecordIter(bt.Records, bt.RecordCount, bt.BaseOffset, bt.FirstTimestamp)
	var r wire.Record
	if !it.Next(&r) {
		return record{}, fmt.Errorf("%w entry: %v", ErrMalformed, it.Err())
	}
	return decodeRecord(r.Value)
}
