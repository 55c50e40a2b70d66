package log

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/lightq/lightq/log/vfs"
	"github.com/lightq/lightq/wire"
)

// Corruption is one problem Verify found.
type Corruption struct {
	File   string // segment path
	Pos    int64  // byte position of the damaged batch
	Offset int64  // offset the batch should start at (-1 when unknown)
	Err    error  // wraps ErrCorrupt
}

func (c Corruption) String() string {
	return fmt.Sprintf("%s at byte %d (offset %d): %v", c.File, c.Pos, c.Offset, c.Err)
}

// BatchInfo describes one batch for Dump and Verify.
type BatchInfo struct {
	Pos            int64
	BaseOffset     int64
	Count          uint32
	Size           int
	FirstTimestamp int64
	MaxTimestamp   int64
	// Header is the batch's whole header (magic, leader epoch, producer fields) when the
	// batch is valid; zero otherwise.
	Header wire.BatchHeader
	// Control describes a valid control batch (wire/control.go: a replicated partition's
	// raft entry without messages): its type and the size of its value. Empty otherwise.
	Control string
	Err     error // nil when the batch is valid, its base offset included
}

// Verify scans every segment in dir fully: each batch's length, CRC and header, and base
// offsets continuous within and across segments. It reports each problem with file, byte
// position and offset; the error is for I/O failures. It changes nothing and needs no Open.
// maxBatch 0 means the default.
func Verify(dir string, fsys vfs.FS, maxBatch int) ([]Corruption, error) {
	var out []Corruption
	err := scanDir(dir, fsys, maxBatch, func(path string, b BatchInfo) {
		if b.Err != nil {
			out = append(out, Corruption{File: path, Pos: b.Pos, Offset: b.BaseOffset, Err: b.Err})
		}
	}, nil)
	return out, err
}

// Dump writes a listing of every segment in dir and its batches (offset, record count, size,
// CRC check, timestamps) to w. It is the body of the segment dump tool.
func Dump(w io.Writer, dir string, fsys vfs.FS, maxBatch int) error {
	var werr error
	printf := func(format string, args ...any) {
		if werr == nil {
			_, werr = fmt.Fprintf(w, format, args...)
		}
	}
	err := scanDir(dir, fsys, maxBatch, func(path string, b BatchInfo) {
		status := "ok"
		if b.Err != nil {
			status = "BAD: " + b.Err.Error()
		}
		control := ""
		if b.Control != "" {
			control = " control=" + b.Control
		}
		printf("  pos=%d offset=%d count=%d size=%d first=%s max=%s%s%s %s\n", b.Pos, b.BaseOffset, b.Count, b.Size,
			fmtMillis(b.FirstTimestamp), fmtMillis(b.MaxTimestamp), fmtFormat(&b.Header), control, status)
	}, func(path string, size int64) {
		printf("segment %s (%d bytes)\n", filepath.Base(path), size)
	})
	if err != nil {
		return err
	}
	return werr
}

// fmtFormat describes what a batch's magic adds: nothing for magic 1 (or an invalid batch);
// the leader epoch, the raft index when set, and the producer fields for magic 2.
func fmtFormat(h *wire.BatchHeader) string {
	if h.Magic != wire.BatchMagic2 {
		return ""
	}
	repl := ""
	if h.RaftIndex != 0 {
		repl = fmt.Sprintf(" raft-index=%d", h.RaftIndex)
	}
	if !h.HasProducer() {
		return fmt.Sprintf(" magic=2 leader-epoch=%d%s producer=none", h.LeaderEpoch, repl)
	}
	return fmt.Sprintf(" magic=2 leader-epoch=%d%s producer=%d epoch=%d seq=%d-%d", h.LeaderEpoch, repl, h.ProducerID, h.ProducerEpoch, h.BaseSequence, h.LastSequence())
}

// describeControl names the control batch bt (ParseBatch accepted it): its type and the size
// of its value; the error is a record that does not decode.
func describeControl(bt *wire.Batch) (string, error) {
	typ, value, err := wire.ParseControl(bt)
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("type-%d", typ)
	switch typ {
	case wire.ControlEmptyEntry:
		name = "empty-entry"
	case wire.ControlConfChange:
		name = "conf-change"
	case wire.ControlConfChangeV2:
		name = "conf-change-v2"
	}
	return fmt.Sprintf("%s(%d bytes)", name, len(value)), nil
}

func fmtMillis(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

// scanDir walks every batch of every segment in dir, in order.
func scanDir(dir string, fsys vfs.FS, maxBatch int, batch func(path string, b BatchInfo), seg func(path string, size int64)) error {
	if fsys == nil {
		fsys = vfs.OS
	}
	if maxBatch <= 0 {
		maxBatch = defaultMaxBatch
	}
	ents, err := fsys.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("log: %w", err)
	}
	l := &Log{opts: Options{MaxBatch: maxBatch}} // for readBatch
	expect := int64(-1)                          // next offset the previous segment ends at
	var prevPath string
	for _, e := range ents { // ReadDir sorts by name, and names sort by base offset
		base, ok := parseSegmentName(e.Name(), logSuffix)
		if !ok {
			continue
		}
		path := filepath.Join(dir, e.Name())
		f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // deleted by retention meanwhile
			}
			return fmt.Errorf("log: %w", err)
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return fmt.Errorf("log: %w", err)
		}
		end := fi.Size()
		if seg != nil {
			seg(path, end)
		}
		if expect >= 0 && base != expect {
			batch(path, BatchInfo{BaseOffset: expect, Err: fmt.Errorf("%w: segment starts at offset %d but %s ends at %d", ErrCorrupt, base, prevPath, expect)})
		}
		expect = base
		var (
			pos  int64
			buf  []byte
			head = make([]byte, wire.BatchHeaderSize)
		)
		for pos < end {
			bt, b, size, berr := l.readBatch(f, head, buf, pos, end)
			buf = b
			if size == 0 {
				// Cannot even frame it: the rest of the segment is unreachable.
				batch(path, BatchInfo{Pos: pos, BaseOffset: expect, Err: fmt.Errorf("%w: %v; %d bytes from here unchecked", ErrCorrupt, berr, end-pos)})
				break
			}
			info := BatchInfo{Pos: pos, BaseOffset: bt.BaseOffset, Count: bt.RecordCount, Size: size,
				FirstTimestamp: bt.FirstTimestamp, MaxTimestamp: bt.MaxTimestamp, Header: bt.BatchHeader}
			if berr == nil && bt.IsControl() {
				info.Control, berr = describeControl(&bt)
			}
			switch {
			case berr != nil:
				info.Header = wire.BatchHeader{}
				info.BaseOffset = wire.PeekBatchHeaderUnchecked(buf).BaseOffset
				info.Err = fmt.Errorf("%w: %v", ErrCorrupt, berr)
				expect = -1 // its record count is not to be trusted: resynchronise on the next batch
			case expect >= 0 && bt.BaseOffset != expect:
				info.Err = fmt.Errorf("%w: base offset %d, want %d", ErrCorrupt, bt.BaseOffset, expect)
				expect = bt.BaseOffset + int64(bt.RecordCount)
			default:
				expect = bt.BaseOffset + int64(bt.RecordCount)
			}
			batch(path, info)
			pos += int64(size)
		}
		f.Close()
		prevPath = path
	}
	return nil
}
