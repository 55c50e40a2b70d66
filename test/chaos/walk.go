package chaos

import (
	"errors"
	"fmt"
	"hash/crc64"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"

	"github.com/lightq/lightq/cluster/raftlog"
	"github.com/lightq/lightq/log/vfs"
	"github.com/lightq/lightq/wire"
)

// A replica's files, read directly: the segments of one partition's directory
// (<data-dir>/topics/<topic>/<partition>/<20-digit base offset>.log, log/segment.go) walked
// batch by batch, and its raft.state (cluster/raftlog/state.go) for the commit index. Nothing
// is written. The walk is this package's own (a few lines over wire.ParseBatch), so that it
// can stop at the first damage and say where, which is what the checker needs; lqdump
// -verify (log.Verify) reports the same damage for a person.

// MaxBatch bounds one stored batch the walker accepts (the broker's max-batch is at most
// this).
const MaxBatch = 16 << 20

var segmentName = regexp.MustCompile(`^[0-9]{20}\.log$`)

// PartitionDir is where a broker with data directory dataDir keeps a partition's replica.
func PartitionDir(dataDir, topic string, partition int32) string {
	return filepath.Join(dataDir, "topics", topic, strconv.Itoa(int(partition)))
}

// Segments lists a partition directory's segment files, oldest first (by name: the base
// offset, zero-padded).
func Segments(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var segs []string
	for _, e := range ents {
		if segmentName.MatchString(e.Name()) && e.Type().IsRegular() {
			segs = append(segs, filepath.Join(dir, e.Name()))
		}
	}
	slices.Sort(segs)
	return segs, nil
}

// Damage is the first batch of a replica's log that cannot be read: a bad length, a CRC
// mismatch, a batch that is not the next offset, or bytes after the last batch that are not
// one.
type Damage struct {
	File   string
	Pos    int64 // byte position in File
	Offset int64 // the offset the batch should start at
	Err    error
}

func (d *Damage) Error() string {
	return fmt.Sprintf("%s at byte %d (offset %d): %v", d.File, d.Pos, d.Offset, d.Err)
}

// errNotBatch marks bytes that do not hold a whole batch.
var errNotBatch = errors.New("not a whole batch")

// WalkSegment walks the batches of one segment file's bytes from its start, expecting the
// first at offset base, and calls fn with each valid one (raw aliases data). It stops at the
// end of data or at the first damage, which it returns with the byte position and offset
// there (file is only for the message). A segment ending in zeros is damaged too: the broker
// leaves none at rest.
func WalkSegment(file string, data []byte, base int64, fn func(pos int, raw []byte, bt *wire.Batch)) (next int64, err error) {
	next = base
	for pos := 0; pos < len(data); {
		rest := data[pos:]
		n := wire.BatchSize(rest)
		var bt wire.Batch
		switch {
		case len(rest) < wire.BatchHeaderSize:
			err = fmt.Errorf("%w: %d bytes after the last batch", errNotBatch, len(rest))
		case n < wire.BatchHeaderSize || n > MaxBatch:
			err = fmt.Errorf("%w: length field says %d bytes", errNotBatch, n)
		case n > len(rest):
			err = fmt.Errorf("%w: a %d-byte batch with %d bytes left in the file", errNotBatch, n, len(rest))
		default:
			bt, err = wire.ParseBatch(rest[:n], MaxBatch)
			if err == nil && bt.BaseOffset != next {
				err = fmt.Errorf("base offset %d, want %d", bt.BaseOffset, next)
			}
		}
		if err != nil {
			return next, &Damage{File: file, Pos: int64(pos), Offset: next, Err: err}
		}
		if fn != nil {
			fn(pos, rest[:n], &bt)
		}
		next = bt.NextOffset()
		pos += n
	}
	return next, nil
}

// BatchSum is one stored batch of a replica: its offsets, Raft position and a hash of its
// bytes, which is what comparing replicas needs (the bytes themselves stay on disk).
type BatchSum struct {
	Base, Next int64
	RaftIndex  uint64
	Term       int32
	Size       int
	Control    bool
	Hash       uint64 // CRC-64 (ECMA) of the whole batch, base offset, term and raft index included
}

// Record is one record of a partition's log: its offset and what its value is.
type Record struct {
	Offset int64
	Kind   Kind
	ID     MsgID
}

// Replica is one broker's copy of a partition, as read from its files.
type Replica struct {
	Node    uint32
	Dir     string
	Batches []BatchSum // in order, up to the first damage
	Records []Record   // the records of those batches, control batches aside
	// End is the offset after the last readable batch (the log start when there is none).
	End int64
	// CommitIndex is raft.state's commit index; Committed the offset after the last batch
	// whose raft index is at most CommitIndex: the replica's committed log is [first batch,
	// Committed). Without raft.state (a partition that is not replicated) Committed is End.
	CommitIndex uint64
	SnapIndex   uint64 // entries up to it are not in the log (retention, or a catch-up from segments)
	HasState    bool
	Committed   int64
	// CommitBeyond: the commit index names an entry the readable log does not hold (damage or
	// a truncation cut it off): the replica has lost committed entries.
	CommitBeyond bool
	Damage       *Damage // nil when every segment reads to its end
}

// First is the offset of the replica's first batch (End when there is none).
func (r *Replica) First() int64 {
	if len(r.Batches) == 0 {
		return r.End
	}
	return r.Batches[0].Base
}

var crcTable = crc64.MakeTable(crc64.ECMA)

// ReadReplica reads a partition directory: every segment's batches in order (stopping at the
// first damage), their records, and the commit index. A missing directory is an empty
// replica. The broker may be running (the last batch may be half written: it is then the
// damage), but raft.state is read only when the broker is stopped: pass withState false
// while it runs.
func ReadReplica(dir string, node uint32, withState bool) (*Replica, error) {
	r := &Replica{Node: node, Dir: dir}
	segs, err := Segments(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, err
	}
	var comp wire.Compressor
	defer comp.Close()
	var recBuf []byte
	first := true
	for _, seg := range segs {
		base, err := strconv.ParseInt(filepath.Base(seg)[:20], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", seg, err)
		}
		if first {
			r.End, first = base, false
		} else if base != r.End {
			r.Damage = &Damage{File: seg, Offset: r.End, Err: fmt.Errorf("segment starts at offset %d, the one before ends at %d", base, r.End)}
			break
		}
		data, err := os.ReadFile(seg)
		if err != nil {
			return nil, err
		}
		next, werr := WalkSegment(seg, data, base, func(pos int, raw []byte, bt *wire.Batch) {
			r.Batches = append(r.Batches, BatchSum{Base: bt.BaseOffset, Next: bt.NextOffset(), RaftIndex: bt.RaftIndex,
				Term: bt.LeaderEpoch, Size: len(raw), Control: bt.IsControl(), Hash: crc64.Checksum(raw, crcTable)})
			if bt.IsControl() {
				return
			}
			recs := bt.Records
			if bt.Codec() != wire.CodecNone {
				var derr error
				if recBuf, derr = comp.Decompress(recBuf[:0], bt); derr != nil {
					for o := bt.BaseOffset; o < bt.NextOffset(); o++ {
						r.Records = append(r.Records, Record{Offset: o, Kind: KindCorrupt})
					}
					return
				}
				recs = recBuf
			}
			it := wire.NewRecordIter(recs, bt.RecordCount, bt.BaseOffset, bt.FirstTimestamp)
			var rec wire.Record
			for it.Next(&rec) {
				k, id := ParsePayload(rec.Value)
				r.Records = append(r.Records, Record{Offset: rec.Offset, Kind: k, ID: id})
			}
			if it.Err() != nil {
				r.Records = append(r.Records, Record{Offset: -1, Kind: KindCorrupt})
			}
		})
		r.End = next
		if werr != nil {
			var d *Damage
			if !errors.As(werr, &d) {
				return nil, werr
			}
			r.Damage = d
			break
		}
	}
	r.Committed = r.End
	if !withState {
		return r, nil
	}
	path := filepath.Join(dir, raftlog.StateFileName)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return r, nil
	} else if err != nil {
		return nil, err
	}
	sf, st, err := raftlog.OpenState(vfs.OS, path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	_ = sf.Close() // opened only to read
	r.HasState, r.CommitIndex, r.SnapIndex = true, st.HardState.Commit, st.SnapIndex
	r.Committed = r.committedOffset()
	return r, nil
}

// committedOffset maps the commit index to the offset after the last committed batch, and
// sets CommitBeyond when the readable log does not reach the commit index.
func (r *Replica) committedOffset() int64 {
	committed := r.First()
	for _, b := range r.Batches {
		if b.RaftIndex > r.CommitIndex {
			return committed
		}
		committed = b.Next
	}
	last := r.SnapIndex
	if n := len(r.Batches); n > 0 {
		last = max(last, r.Batches[n-1].RaftIndex)
	}
	r.CommitBeyond = r.CommitIndex > last
	return committed
}

// LastOffset is the offset after the last readable batch of a partition directory, read
// while the broker runs: what a follower has caught up to. It walks only the newest segment:
// one that holds nothing readable yet starts where the one before ends.
func LastOffset(dir string) (int64, error) {
	segs, err := Segments(dir)
	if err != nil || len(segs) == 0 {
		return 0, err
	}
	last := segs[len(segs)-1]
	base, err := strconv.ParseInt(filepath.Base(last)[:20], 10, 64)
	if err != nil {
		return 0, err
	}
	data, err := os.ReadFile(last)
	if err != nil {
		return 0, err
	}
	next, _ := WalkSegment(last, data, base, nil) // a half-written last batch ends the walk
	return next, nil
}
