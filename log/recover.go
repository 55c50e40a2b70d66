package log

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lightq/lightq/log/producerstate"
	"github.com/lightq/lightq/wire"
)

// Open opens the log in dir, creating it if needed (an empty directory is an empty log
// starting at offset 0), and recovers it:
//
//   - leftover temp files and index files without a segment are removed;
//   - every sealed segment's index files are loaded if sane, else rebuilt from its batch
//     headers; its tail after the last index entry is walked to find its next offset;
//   - base offsets must be continuous across segments, else ErrCorrupt names both files;
//   - the active (last) segment is scanned fully, every batch validated. A torn tail is cut
//     (the cut bytes saved to <segment>.broken.<unix-nanos>); corruption followed by valid
//     data is ErrCorrupt, and nothing is changed. See the package doc for the exact rule.
func Open(dir string, opts Options) (*Log, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	l := &Log{dir: dir, opts: opts, fsys: opts.FS}
	l.producers = producerstate.New(opts.Producers.config(dir))
	if err := l.fsys.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("log: %w", err)
	}
	bases, snapshots, err := l.listSegments()
	if err != nil {
		return nil, err
	}
	cpf, cp, haveCP, err := openCheckpoint(l.fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("log: %w", err)
	}
	l.cp.f = cpf
	l.cp.last = checkpoint{seq: cp.seq, base: -1}
	ok := false
	defer func() {
		if !ok {
			l.closeFiles()
		}
	}()

	if len(bases) == 0 {
		bases = []int64{0}
		f, err := l.fsys.OpenFile(filepath.Join(dir, segmentName(0, logSuffix)), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("log: %w", err)
		}
		f.Close()
	}
	for i, base := range bases[:len(bases)-1] {
		s, err := l.openSealed(base, bases[i+1])
		if err != nil {
			return nil, err
		}
		l.segs = append(l.segs, s)
		if i > 0 {
			if err := checkContinuous(l.segs[i-1], s); err != nil {
				return nil, err
			}
		}
	}
	now := l.opts.Now().UnixMilli()
	l.loadProducers(snapshots, bases[len(bases)-1], now)
	act, err := l.recoverActive(bases[len(bases)-1], cp, haveCP, now)
	if err != nil {
		return nil, err
	}
	l.segs = append(l.segs, act)
	if n := len(l.segs); n > 1 {
		if err := checkContinuous(l.segs[n-2], act); err != nil {
			return nil, err
		}
	}
	// Whatever recovery found is made durable now, so DurableOffset starts at NextOffset.
	if err := act.f.Sync(); err != nil {
		return nil, fmt.Errorf("log: fsync %s: %w", act.path, err)
	}
	if err := l.fsys.SyncDir(dir); err != nil {
		return nil, fmt.Errorf("log: fsync directory %s: %w", dir, err)
	}
	if err := l.cp.write(act.base, act.size); err != nil {
		return nil, err
	}
	l.start.Store(l.segs[0].base)
	l.next.Store(act.next)
	l.durable.Store(act.next)
	l.producerStates.Store(int64(l.producers.Len()))
	ok = true
	return l, nil
}

// closeFiles closes what a failed Open opened.
func (l *Log) closeFiles() {
	for _, s := range l.segs {
		s.release()
	}
	l.cp.close()
	l.producers.Release()
}

// listSegments returns the base offsets of the segment files and of the producer state
// snapshots, sorted, after removing temp files, and index files and snapshots whose segment
// is gone.
func (l *Log) listSegments() (bases, snapshots []int64, _ error) {
	ents, err := l.fsys.ReadDir(l.dir)
	if err != nil {
		return nil, nil, fmt.Errorf("log: %w", err)
	}
	have := map[int64]bool{}
	for _, e := range ents {
		if base, ok := parseSegmentName(e.Name(), logSuffix); ok {
			bases = append(bases, base)
			have[base] = true
		}
	}
	for _, e := range ents {
		name := e.Name()
		base, isIndex := parseSegmentName(name, indexSuffix)
		if !isIndex {
			base, isIndex = parseSegmentName(name, timeIndexSuffix)
		}
		snapBase, isSnap := parseSegmentName(name, producersSuffix)
		if isSnap && have[snapBase] {
			snapshots = append(snapshots, snapBase)
		}
		if strings.HasSuffix(name, tmpSuffix) || isIndex && !have[base] || isSnap && !have[snapBase] {
			l.opts.Logf("log %s: removing leftover %s", l.dir, name)
			if err := l.fsys.Remove(filepath.Join(l.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, nil, fmt.Errorf("log: %w", err)
			}
		}
	}
	slices.Sort(bases)
	slices.Sort(snapshots)
	return bases, snapshots, nil
}

func checkContinuous(prev, s *segment) error {
	if prev.next != s.base {
		return fmt.Errorf("%w: %s ends at offset %d but %s starts at %d", ErrCorrupt, prev.path, prev.next, s.path, s.base)
	}
	return nil
}

// openSealed opens a sealed segment read-only and loads or rebuilds its indexes. next is the
// base of the following segment, used when the segment's own tail cannot be walked.
func (l *Log) openSealed(base, next int64) (*segment, error) {
	path := filepath.Join(l.dir, segmentName(base, logSuffix))
	f, err := l.fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("log: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("log: %w", err)
	}
	s := newSegment(base, path, f, l.opts.Now())
	s.size = fi.Size()
	if err := l.loadIndexes(s); err != nil {
		l.opts.Logf("log %s: rebuilding the index of %s: %v", l.dir, path, err)
		s.idx, s.tidx = nil, nil
	}
	if err := l.walkTail(s); err != nil {
		if errors.Is(err, ErrCorrupt) {
			// Only the active segment is checked at start; Verify reports the details.
			l.opts.Logf("log %s: sealed segment damaged (reads there will fail): %v", l.dir, err)
			s.next = next
			return s, nil
		}
		s.release()
		return nil, err
	}
	return s, nil
}

// loadIndexes loads s's index files and checks them against the segment.
func (l *Log) loadIndexes(s *segment) error {
	b, err := l.readWhole(filepath.Join(l.dir, segmentName(s.base, indexSuffix)))
	if err != nil {
		return err
	}
	if s.idx, err = decodeIndex(b, s.size); err != nil {
		return err
	}
	maxRel := uint32(math.MaxUint32)
	if n := len(s.idx); n > 0 {
		maxRel = s.idx[n-1].rel + 1
	}
	if b, err = l.readWhole(filepath.Join(l.dir, segmentName(s.base, timeIndexSuffix))); err != nil {
		return err
	}
	s.tidx, err = decodeTimeIndex(b, maxRel)
	return err
}

// walkTail walks the batch headers of s from its last index entry (from the start when it
// has none, rebuilding the index on the way) to the end, setting next and maxTS. It checks
// that the last index entry points at the batch it claims.
func (l *Log) walkTail(s *segment) error {
	pos, expect := int64(0), s.base
	if n := len(s.idx); n > 0 {
		pos, expect = int64(s.idx[n-1].pos), s.base+int64(s.idx[n-1].rel)
	}
	if n := len(s.tidx); n > 0 {
		s.maxTS = s.tidx[n-1].ts
	}
	rebuild := len(s.idx) == 0
	buf := make([]byte, wire.BatchHeaderSize)
	fileSize := s.size
	defer func() { s.size = fileSize }() // add moves it while rebuilding
	for pos < fileSize {
		h, err := readHeader(s.f, s.path, buf, pos, fileSize, l.opts.MaxBatch)
		if err != nil {
			return err
		}
		if h.BaseOffset != expect {
			if len(s.idx) > 0 && !rebuild {
				// The index points elsewhere: distrust it and rebuild from the start.
				l.opts.Logf("log %s: index of %s points at base %d, want %d: rebuilding", l.dir, s.path, h.BaseOffset, expect)
				s.idx, s.tidx, s.maxTS, s.sinceIndex = nil, nil, math.MinInt64, 0
				pos, expect, rebuild = 0, s.base, true
				continue
			}
			return fmt.Errorf("%w: %s at %d: base offset %d, want %d", ErrCorrupt, s.path, pos, h.BaseOffset, expect)
		}
		if rebuild {
			s.size, s.next = pos, h.BaseOffset // add appends at s.size
			s.add(h.BaseOffset, h.RecordCount, h.Size(), h.MaxTimestamp, l.opts.IndexIntervalBytes)
		} else {
			s.maxTS = max(s.maxTS, h.MaxTimestamp)
		}
		pos += int64(h.Size())
		expect = h.NextOffset()
	}
	s.next = expect
	return nil
}

// recoverActive opens the active segment and validates every batch in it, repairing a torn
// tail, and adds the producer fields of the batches it keeps to the producer state (as seen
// at now). cp is the newest checkpoint (valid when haveCP).
func (l *Log) recoverActive(base int64, cp checkpoint, haveCP bool, now int64) (*segment, error) {
	path := filepath.Join(l.dir, segmentName(base, logSuffix))
	// Index files of the active segment may be stale (a roll whose new segment was lost);
	// they are written again when it is sealed.
	for _, suf := range []string{indexSuffix, timeIndexSuffix} {
		if err := l.fsys.Remove(filepath.Join(l.dir, segmentName(base, suf))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("log: %w", err)
		}
	}
	f, err := l.fsys.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("log: %w", err)
	}
	s := newSegment(base, path, f, l.opts.Now())
	fail := func(err error) (*segment, error) { s.release(); return nil, err }
	fi, err := f.Stat()
	if err != nil {
		return fail(fmt.Errorf("log: %w", err))
	}
	end := fi.Size()
	var (
		pos  int64
		bad  error
		buf  = make([]byte, 0, 64<<10)
		head = make([]byte, wire.BatchHeaderSize)
	)
	for pos < end {
		var bt wire.Batch
		bt, buf, _, bad = l.readBatch(f, head, buf, pos, end)
		if bad == nil && bt.BaseOffset != s.next {
			bad = fmt.Errorf("base offset %d, want %d", bt.BaseOffset, s.next)
		}
		if bad != nil {
			break
		}
		s.add(bt.BaseOffset, bt.RecordCount, bt.Size(), bt.MaxTimestamp, l.opts.IndexIntervalBytes)
		if bt.HasProducer() && !l.opts.Producers.Disabled {
			l.producers.Record(&bt.BatchHeader, bt.BaseOffset, now)
		}
		pos += int64(bt.Size())
	}
	if bad == nil {
		return s, nil
	}
	// The batch at pos is invalid. Is anything valid after it?
	cont, found, err := findContinuation(f, pos, end, s.next, l.opts.MaxBatch)
	if err != nil {
		return fail(fmt.Errorf("log: scan %s: %w", path, err))
	}
	// confirmed: how far the checkpoint says this segment was durable (everything, when
	// there is no checkpoint to say otherwise).
	confirmed := end
	if haveCP {
		switch {
		case cp.base == base:
			confirmed = cp.pos
		case cp.base < base:
			confirmed = 0
		}
	}
	if found && pos < confirmed && !l.opts.CutDamage {
		return fail(fmt.Errorf("%w: %s at byte %d (offset %d): %v; a valid batch follows at byte %d, so this is not a torn write: refusing to truncate",
			ErrCorrupt, path, pos, s.next, bad, cont))
	}
	if err := l.cutTail(s, pos, end, bad, found); err != nil {
		return fail(err)
	}
	return s, nil
}

// DamagedTail is what Open cut from the active segment at a damaged batch that valid
// batches followed (Options.CutDamage: not a torn write), from the damaged batch on, or nil:
// a replica counts the entries it held there (it may have acknowledged them). Set at Open;
// the caller must not modify it. Safe for concurrent use.
func (l *Log) DamagedTail() []byte { return l.damagedTail }

// readBatch reads and validates the batch at pos, reusing buf. size is the batch's length
// when it could at least be framed (length field within limits and within the file), else 0.
// head is scratch of wire.BatchHeaderSize bytes.
func (l *Log) readBatch(f io.ReaderAt, head, buf []byte, pos, end int64) (bt wire.Batch, _ []byte, size int, err error) {
	head = head[:min(int64(len(head)), max(end-pos, 0))]
	if _, err := f.ReadAt(head, pos); err != nil {
		return bt, buf, 0, err
	}
	size = wire.BatchSize(head)
	if size == 0 { // head holds no whole length field
		return bt, buf, 0, fmt.Errorf("%d bytes left, less than a batch header", end-pos)
	}
	if size < wire.BatchHeaderSize || size > l.opts.MaxBatch {
		return bt, buf, 0, fmt.Errorf("batch length %d outside [%d, %d]", size, wire.BatchHeaderSize, l.opts.MaxBatch)
	}
	if int64(size) > end-pos {
		return bt, buf, 0, fmt.Errorf("batch of %d bytes, only %d left", size, end-pos)
	}
	buf = slices.Grow(buf[:0], size)[:size]
	if _, err := f.ReadAt(buf, pos); err != nil {
		return bt, buf, 0, err
	}
	bt, err = wire.ParseBatch(buf, l.opts.MaxBatch)
	return bt, buf, size, err
}

// findContinuation looks for a CRC-valid batch with base offset >= expect starting anywhere
// after from: evidence that the damage at from is not a torn tail.
func findContinuation(f io.ReaderAt, from, end, expect int64, maxBatch int) (int64, bool, error) {
	const window = 1 << 20
	buf := make([]byte, min(int64(window+maxBatch), max(end-from, 0)))
	for start := from + 1; start+wire.BatchHeaderSize <= end; start += window {
		n := int(min(int64(len(buf)), end-start))
		if _, err := f.ReadAt(buf[:n], start); err != nil && !errors.Is(err, io.EOF) {
			return 0, false, err
		}
		for i := 0; i < window && i+wire.BatchHeaderSize <= n; i++ {
			b := buf[i:n]
			// Cheap checks first (the header, a plausible base and length), so random bytes
			// rarely cost a CRC. MayBeBatchHeader is a few inlined compares; PeekBatchHeader
			// allocates its error, and so runs only where a batch may start.
			if !wire.MayBeBatchHeader(b) {
				continue
			}
			h, err := wire.PeekBatchHeader(b)
			if err != nil {
				continue
			}
			size := h.Size()
			if h.BaseOffset < expect || h.BaseOffset-expect > end-from || size > len(b) {
				continue
			}
			if _, err := wire.ParseBatch(b[:size], maxBatch); err == nil {
				return start + int64(i), true, nil
			}
		}
	}
	return 0, false, nil
}

// cutTail saves the bytes [pos, end) of the active segment to a .broken file (fsynced),
// truncates the segment to pos, and fsyncs the segment and the directory.
func (l *Log) cutTail(s *segment, pos, end int64, why error, validAfter bool) error {
	tail := make([]byte, end-pos)
	if _, err := s.f.ReadAt(tail, pos); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("log: read torn tail of %s: %w", s.path, err)
	}
	broken := fmt.Sprintf("%s%s%d", s.path, brokenInfix, l.opts.Now().UnixNano())
	bf, err := l.fsys.OpenFile(broken, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("log: save torn tail: %w", err)
	}
	_, err = bf.WriteAt(tail, 0)
	if err == nil {
		err = bf.Sync()
	}
	if cerr := bf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("log: save torn tail to %s: %w", broken, err)
	}
	if err := s.f.Truncate(pos); err != nil {
		return fmt.Errorf("log: truncate %s to %d: %w", s.path, pos, err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("log: fsync %s: %w", s.path, err)
	}
	if err := l.fsys.SyncDir(l.dir); err != nil {
		return fmt.Errorf("log: fsync directory %s: %w", l.dir, err)
	}
	note := ""
	if validAfter {
		note = " (valid batches after it were never confirmed durable)"
		l.damagedTail = tail
	}
	l.opts.Logf("log %s: torn tail in %s at byte %d (offset %d): %v; cut %d bytes%s, saved to %s",
		l.dir, s.path, pos, s.next, why, end-pos, note, broken)
	return nil
}
