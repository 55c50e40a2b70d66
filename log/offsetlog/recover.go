package offsetlog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/lightq/lightq/log/vfs"
)

const (
	tmpSuffix    = ".tmp"     // a snapshot being written; NEVER CHANGE (Open removes it)
	brokenSuffix = ".broken." // + unix nanos: a torn tail that was cut
)

// recover replays f (the log) into s.entries, cutting a torn tail.
func (s *Store) recover(f vfs.File) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	data := make([]byte, st.Size())
	if _, err := f.ReadAt(data, 0); err != nil && err != io.EOF {
		return fmt.Errorf("%s: %w", s.path, err)
	}
	// The file appears only by a rename after its header was fsynced, so a bad header is
	// damage, never a torn write.
	if !validHeader(data) {
		return fmt.Errorf("%w: %s: no valid header (%d bytes)", ErrCorrupt, s.path, len(data))
	}
	end := headerSize + decodeFrames(data[headerSize:], func(group []byte, partition uint32, offset int64) {
		s.entries[key{string(group), partition}] = offset
	})
	s.f, s.size, s.alloc = f, int64(end), int64(len(data))
	tail := data[end:]
	if allZero(tail) {
		return nil // preallocated space: the clean end
	}
	if validFrameAfter(tail) {
		clear(s.entries)
		return fmt.Errorf("%w: %s: invalid frame at byte %d, followed by valid ones", ErrCorrupt, s.path, end)
	}
	if err := s.cutTail(f, int64(end), bytes.TrimRight(tail, "\x00")); err != nil {
		return err
	}
	s.alloc = int64(end)
	return nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// cutTail saves the torn tail (without the preallocated zeros after it) to a .broken file,
// then truncates the log to end, durably.
func (s *Store) cutTail(f vfs.File, end int64, tail []byte) error {
	broken := s.path + brokenSuffix + strconv.FormatInt(time.Now().UnixNano(), 10)
	bf, err := s.fs.OpenFile(broken, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = bf.Write(tail)
	if err == nil {
		err = bf.Sync()
	}
	if cerr := bf.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = f.Truncate(end)
	}
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = s.fs.SyncDir(s.dir)
	}
	if err != nil {
		return fmt.Errorf("%s: cutting a torn tail at byte %d: %w", s.path, end, err)
	}
	s.opts.Logf("offsets: %s: cut a torn tail of %d bytes at byte %d (saved to %s)", s.path, len(tail), end, broken)
	return nil
}

// writeSnapshot writes s.entries as a new log (header, then frames of up to
// compactChunkBody bytes of records) to a temp file, fsyncs it, renames it over the log and
// fsyncs the directory; then appends go to it. A crash at any point leaves the old log or
// the new one, both whole. Called by Open and by the syncer, which owns s.f; it reads
// entries without the mutex, which only the syncer writes.
func (s *Store) writeSnapshot() error {
	tmp := s.path + tmpSuffix
	f, err := s.fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	fail := func(err error) error {
		f.Close()
		_ = s.fs.Remove(tmp)
		return fmt.Errorf("%s: writing a snapshot: %w", s.path, err)
	}
	buf := appendHeader(make([]byte, 0, compactChunkBody+frameHeaderSize+maxRecordSize))
	var pos int64
	flush := func() error {
		n, err := f.WriteAt(buf, pos)
		pos += int64(n)
		buf = buf[:0]
		return err
	}
	frame := len(buf)
	buf = startFrame(buf)
	for k, off := range s.entries {
		if len(buf)-frame-frameHeaderSize+recordSize(k.group) > compactChunkBody {
			sealFrame(buf[frame:])
			if err := flush(); err != nil {
				return fail(err)
			}
			frame, buf = 0, startFrame(buf)
		}
		buf = appendRecord(buf, k.group, k.partition, off)
	}
	if len(buf)-frame == frameHeaderSize {
		buf = buf[:frame] // no records in the last frame: none at all
	} else {
		sealFrame(buf[frame:])
	}
	err = flush()
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = s.fs.Rename(tmp, s.path)
	}
	if err != nil {
		return fail(err)
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		// The rename may not be durable, so appends to the new file could vanish with it.
		f.Close()
		return fmt.Errorf("%w: %s: directory fsync after a snapshot: %v", ErrBroken, s.path, err)
	}
	if s.f != nil {
		s.f.Close()
	}
	s.f, s.size, s.alloc, s.chunk = f, pos, pos, 0
	return nil
}

// compact rewrites the log as a snapshot of the live entries. It runs on the syncer between
// two writes, so the commits that arrive meanwhile wait for it (its cost is bounded by the
// state, MaxEntries pairs, and paid once per CompactFactor-fold growth). A failure leaves the
// old log in use (or, after the rename, breaks the store) and is retried after more growth.
func (s *Store) compact() {
	if err := s.writeSnapshot(); err != nil {
		s.opts.Logf("offsets: compaction failed: %v", err)
		if isBroken(err) {
			s.mu.Lock()
			if s.err == nil {
				s.err = err
			}
			s.mu.Unlock()
		}
		s.compactAt = 2 * s.size
		return
	}
	s.compactAt = max(s.opts.CompactMin, int64(s.opts.CompactFactor)*s.size)
}

func isBroken(err error) bool { return errors.Is(err, ErrBroken) }
