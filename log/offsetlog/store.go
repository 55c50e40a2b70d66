package offsetlog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/lightq/lightq/log/vfs"
)

// Errors of Open and Commit. Each is wrapped with what happened and where.
var (
	// ErrCorrupt: the file is damaged before its last frame (or its header is), so data
	// written whole is unreadable. Open changes nothing and refuses the store.
	ErrCorrupt = errors.New("offsetlog: the offsets log is damaged")
	// ErrBroken: an fsync of the log failed. The kernel may have dropped the dirty pages, so
	// the store refuses commits until it is opened again (Get keeps working).
	ErrBroken = errors.New("offsetlog: an fsync of the offsets log failed; commits are refused until the store is reopened")
	// ErrClosed: Commit after Close.
	ErrClosed = errors.New("offsetlog: store closed")
	// ErrBusy: the commits waiting for the next write already fill a frame (MaxFrameBody);
	// retry once the write in progress ends.
	ErrBusy = errors.New("offsetlog: commits arrive faster than they can be written")
	// ErrInvalid: a group name outside 1-255 bytes or a negative offset.
	ErrInvalid = errors.New("offsetlog: invalid commit")
)

// LimitError is Commit's answer for a new (group, partition) pair past a cap: the store's
// Options.MaxEntries (Scope "topic") or the shared Budget (Scope "broker"). Commits for pairs
// already stored are always accepted.
type LimitError struct {
	Scope string // "topic" or "broker"
	Max   int64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("offsetlog: the %s holds %d committed (group, partition) pairs, its limit", e.Scope, e.Max)
}

// Budget caps the (group, partition) pairs of many stores together. It is a counter, not
// a lock: stores share nothing else. Safe for concurrent use.
type Budget struct {
	max  int64
	used atomic.Int64
}

// NewBudget returns a budget of max pairs (max <= 0: unlimited).
func NewBudget(max int64) *Budget { return &Budget{max: max} }

// Used is the number of pairs held by the stores open on this budget.
func (b *Budget) Used() int64 { return b.used.Load() }

func (b *Budget) reserve() bool {
	if b.used.Add(1) > b.max && b.max > 0 {
		b.used.Add(-1)
		return false
	}
	return true
}

func (b *Budget) release(n int) { b.used.Add(-int64(n)) }

// Options configure a Store. The zero value is usable.
type Options struct {
	FS vfs.FS // nil: vfs.OS

	MaxEntries int     // (group, partition) pairs this store may hold; 0: unlimited
	Budget     *Budget // shared cap over many stores; nil: none

	// Legacy, when set, is called by Open only if the directory holds no offsets log yet: it
	// hands over the entries of an older format, which Open writes as the new log's first
	// snapshot. Until that succeeds, every Open reads the old format again.
	Legacy func(add func(Entry)) error

	// The log is compacted once it is larger than CompactFactor times its size after the
	// previous compaction, and larger than CompactMin. Defaults: 4 and 16 MiB (compaction
	// rewrites the file and fsyncs the directory, which delays other topics' fsyncs: it
	// should be rare).
	CompactFactor int
	CompactMin    int64

	Logf func(format string, args ...any) // torn tails cut, compactions failed; nil: silent
}

type key struct {
	group     string
	partition uint32
}

// Store is the committed offsets of one topic. See the package doc for the format and the
// concurrency rules.
type Store struct {
	fs   vfs.FS
	dir  string
	path string
	opts Options

	mu       sync.Mutex
	entries  map[key]int64 // durable state; written by the syncer holding mu, read by others holding mu, by the syncer without
	pending  *batch        // commits waiting for the next write
	reserved int           // pending commits of new pairs, counted against MaxEntries
	syncing  bool          // a syncer goroutine runs (it exits when pending is empty)
	err      error         // sticky ErrBroken
	closed   bool
	syncers  sync.WaitGroup

	// Owned by the syncer goroutine (by Open and Close while none runs).
	f         vfs.File
	size      int64 // bytes of f that hold whole frames; zeros (preallocated) follow
	alloc     int64 // the file's size: size plus the preallocated zeros
	chunk     int64 // the last preallocation step (0 after open and compaction)
	compactAt int64
	spare     *batch

	synced, syncedBytes atomic.Int64 // group-commit frames written and fdatasynced (Synced)
}

// batch is the commits of one write: one frame and the callbacks it answers.
type batch struct {
	frame []byte // frame header, then records
	waits []waiter
}

type waiter struct {
	k        key
	offset   int64
	reserved bool // counted against the caps as a new pair
	done     func(error)
}

// keepBatchBytes is the largest batch buffer the syncer keeps for reuse; a flood's bigger
// buffers are dropped after their write, so memory returns once the flood ends.
const keepBatchBytes = 64 << 10

func newBatch() *batch { return &batch{frame: startFrame(make([]byte, 0, 4<<10))} }

// Open opens (recovering) or creates the offsets log in dir. A torn tail (an unfinished last
// write) is cut, after copying it to offsets.log.broken.<unix-nanos>; damage before the last
// frame is ErrCorrupt, and then nothing is changed.
func Open(dir string, opts Options) (*Store, error) {
	if opts.FS == nil {
		opts.FS = vfs.OS
	}
	if opts.CompactFactor < 2 {
		opts.CompactFactor = 4
	}
	if opts.CompactMin <= 0 {
		opts.CompactMin = 16 << 20
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	s := &Store{fs: opts.FS, dir: dir, path: filepath.Join(dir, fileName), opts: opts,
		entries: map[key]int64{}, pending: newBatch()}
	if err := s.fs.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// A compaction that died before its rename leaves its temp file; the log is intact.
	if err := s.fs.Remove(s.path + tmpSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	f, err := s.fs.OpenFile(s.path, os.O_RDWR, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := s.migrate(); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	default:
		if err := s.recover(f); err != nil {
			f.Close()
			return nil, err
		}
	}
	if opts.Budget != nil {
		opts.Budget.used.Add(int64(len(s.entries))) // already stored: held even past the cap
	}
	// Measured against the live state, not the file: a log replayed at its largest is
	// compacted by its first write.
	s.compactAt = max(opts.CompactMin, int64(opts.CompactFactor)*s.snapshotSize())
	return s, nil
}

// migrate creates the log, from the legacy entries if there are any.
func (s *Store) migrate() error {
	if s.opts.Legacy != nil {
		skipped := 0
		err := s.opts.Legacy(func(e Entry) {
			if len(e.Group) == 0 || len(e.Group) > MaxGroupName || e.Offset < 0 {
				skipped++
				return
			}
			s.entries[key{e.Group, e.Partition}] = e.Offset
		})
		if err != nil {
			return fmt.Errorf("reading the offsets of the old format: %w", err)
		}
		if skipped > 0 {
			s.opts.Logf("offsets: %d entries of the old format are invalid and were dropped", skipped)
		}
	}
	return s.writeSnapshot()
}

// Get returns the committed offset of (group, partition), if there is one. Only durable
// commits are seen. Safe for concurrent use; it takes the store's mutex only.
func (s *Store) Get(group string, partition uint32) (int64, bool) {
	s.mu.Lock()
	off, ok := s.entries[key{group, partition}]
	s.mu.Unlock()
	return off, ok
}

// Range calls fn for every durable (group, partition, offset), in no order, holding the
// store's mutex: fn must not call the store, and commits wait meanwhile (it serves listings,
// not the commit path). Safe for concurrent use.
func (s *Store) Range(fn func(group string, partition uint32, offset int64)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, off := range s.entries {
		fn(k.group, k.partition, off)
	}
}

// Len is the number of (group, partition) pairs stored.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// Commit queues offset for (group, partition) and returns at once, without I/O: done is
// called later, from the store's syncer goroutine, with nil once the commit is durable
// (written and fsynced; Get then returns it), or with the error that failed it. Commits
// that arrive while a write runs share the next one (group commit). A refused commit
// (ErrInvalid, ErrClosed, ErrBroken, ErrBusy, *LimitError) returns its error and done is
// never called. done must not block: it runs on the syncer, before the next write.
// Safe for concurrent use.
func (s *Store) Commit(group string, partition uint32, offset int64, done func(error)) error {
	if len(group) == 0 || len(group) > MaxGroupName {
		return fmt.Errorf("%w: a group name has 1-%d bytes, not %d", ErrInvalid, MaxGroupName, len(group))
	}
	if offset < 0 {
		return fmt.Errorf("%w: offset %d is negative", ErrInvalid, offset)
	}
	k := key{group, partition}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrClosed
	case s.err != nil:
		return s.err
	}
	b := s.pending
	if len(b.frame)-frameHeaderSize+recordSize(group) > MaxFrameBody {
		return ErrBusy
	}
	reserved := false
	if _, ok := s.entries[k]; !ok {
		if s.opts.MaxEntries > 0 && len(s.entries)+s.reserved >= s.opts.MaxEntries {
			return &LimitError{Scope: "topic", Max: int64(s.opts.MaxEntries)}
		}
		if bud := s.opts.Budget; bud != nil && !bud.reserve() {
			return &LimitError{Scope: "broker", Max: bud.max}
		}
		reserved = true
		s.reserved++
	}
	b.frame = appendRecord(b.frame, group, partition, offset)
	b.waits = append(b.waits, waiter{k: k, offset: offset, reserved: reserved, done: done})
	if !s.syncing {
		s.syncing = true
		s.syncers.Add(1)
		go s.syncer()
	}
	return nil
}

// Close waits for the commits already accepted to be written and answered, then closes the
// file and returns the store's pairs to the budget. Later commits get ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.syncers.Wait()
	if s.opts.Budget != nil {
		s.opts.Budget.release(len(s.entries))
	}
	return s.f.Close()
}

// syncer writes the pending batch, one frame per write and one fsync per frame, until no
// commit is pending, then exits (an idle store has no goroutine).
func (s *Store) syncer() {
	defer s.syncers.Done()
	for {
		s.mu.Lock()
		b := s.pending
		if len(b.waits) == 0 {
			s.syncing = false
			s.mu.Unlock()
			return
		}
		next := s.spare
		if next == nil {
			next = newBatch()
		}
		s.pending, s.spare = next, nil
		err := s.err
		s.mu.Unlock()

		if err == nil {
			err = s.write(b.frame)
		}
		s.apply(b, err)
		for i := range b.waits {
			b.waits[i].done(err)
		}
		if cap(b.frame) <= keepBatchBytes {
			clear(b.waits)
			b.frame, b.waits = b.frame[:frameHeaderSize], b.waits[:0]
			s.spare = b
		}
		if err == nil && s.size > s.compactAt {
			s.compact()
		}
	}
}

// write appends one frame into the preallocated space (extending it first if needed) and
// makes it durable with fdatasync. A failed write is undone and fails only its batch; a
// failed fsync breaks the store.
func (s *Store) write(frame []byte) error {
	sealFrame(frame)
	if end := s.size + int64(len(frame)); end > s.alloc {
		if err := s.preallocate(end); err != nil {
			return err
		}
	}
	if _, err := s.f.WriteAt(frame, s.size); err != nil {
		// Put the zeros back, so that what follows the log is still its clean end.
		if _, zerr := s.f.WriteAt(zeros[:len(frame)], s.size); zerr != nil {
			return fmt.Errorf("%w: %s: write: %v; undoing it: %v", ErrBroken, s.path, err, zerr)
		}
		return fmt.Errorf("%s: write: %w", s.path, err)
	}
	if err := datasync(s.f); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBroken, s.path, err)
	}
	s.size += int64(len(frame))
	s.synced.Add(1)
	s.syncedBytes.Add(int64(len(frame)))
	return nil
}

// Synced is the number of group-commit frames written and fdatasynced since Open, and their
// bytes: the store's load on the disk (snapshots and preallocation not counted). Safe for
// concurrent use.
func (s *Store) Synced() (frames, bytes int64) { return s.synced.Load(), s.syncedBytes.Load() }

// zeros is what preallocated space is filled with.
var zeros [frameHeaderSize + MaxFrameBody]byte

// Preallocation steps: the first after an open or compaction is minPrealloc, each next one
// twice the previous, up to maxPrealloc. So a quiet topic holds 64 KiB of zeros, and a flood
// pays one metadata fsync (and journal commit, which other topics' fsyncs may wait for) per
// 8 MiB of commits.
const (
	minPrealloc = 64 << 10
	maxPrealloc = 8 << 20
)

// preallocate writes zeros from the file's end until it holds at least end bytes (one
// preallocation step more), and fsyncs it, size included. Appends then overwrite zeros
// without changing the file's size. A failure truncates the file back and fails only the
// batch that needed the room (a full disk, typically).
func (s *Store) preallocate(end int64) error {
	s.chunk = min(max(2*s.chunk, minPrealloc), maxPrealloc)
	to := max(end, s.alloc+s.chunk)
	for pos := s.alloc; pos < to; {
		n, err := s.f.WriteAt(zeros[:min(int64(len(zeros)), to-pos)], pos)
		pos += int64(n)
		if err != nil {
			if terr := s.f.Truncate(s.alloc); terr != nil {
				return fmt.Errorf("%w: %s: preallocating: %v; truncate: %v", ErrBroken, s.path, err, terr)
			}
			return fmt.Errorf("%s: preallocating: %w", s.path, err)
		}
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBroken, s.path, err)
	}
	s.alloc = to
	return nil
}

// apply makes a written batch visible (last write wins), or returns a failed batch's
// reservations. A failed fsync makes the store broken.
func (s *Store) apply(b *batch, err error) {
	released := 0
	s.mu.Lock()
	if errors.Is(err, ErrBroken) && s.err == nil {
		s.err = err
	}
	for _, w := range b.waits {
		if w.reserved {
			s.reserved--
		}
		if err != nil {
			if w.reserved {
				released++
			}
			continue
		}
		if _, ok := s.entries[w.k]; ok && w.reserved {
			released++ // committed twice while new: counted once
		}
		s.entries[w.k] = w.offset
	}
	s.mu.Unlock()
	if s.opts.Budget != nil && released > 0 {
		s.opts.Budget.release(released)
	}
}

// snapshotSize is about the size of a snapshot of the entries: the header and their
// records (frame headers aside). Only the syncer, or Open, calls it.
func (s *Store) snapshotSize() int64 {
	n := int64(headerSize)
	for k := range s.entries {
		n += int64(recordSize(k.group))
	}
	return n
}
