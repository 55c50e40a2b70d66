package log

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/lightq/lightq/log/producerstate"
	"github.com/lightq/lightq/log/vfs"
)

// Installing segments another replica sent (cluster/raftlog's catch-up from whole segments):
// the sender's segment files, byte for byte, are prepared in a directory of their own (src),
// with a manifest naming them, and then take the place of this log's segments from the first
// of them on.
//
// Manifest file (ManifestName in src), big-endian. NEVER CHANGE version 1: it is on disk
// while an install a crash interrupted waits for the next Open.
//
//	0 magic "LQIM" | 4 crc32c of 8..end | 8 version u8 = 1 | 9 flags u8 (bit 0: keep the
//	segments below from) | 10 zero [2] | 12 count u32 | 16 from i64 | 24 next i64 |
//	32 count bases i64, ascending, the first == from
//
// from is the first offset src holds, next the offset after its last batch. Without the keep
// flag every segment of the log is dropped (its own segments do not reach from); with it,
// those below from stay (they end at from: the caller checked).
const (
	// ManifestName is the manifest in an install's source directory.
	ManifestName    = "manifest"
	manifestMagic   = "LQIM"
	manifestVersion = 1
	manifestHeader  = 32
	// maxManifestSegs bounds the segments one install names (a 1 GiB segment each at most:
	// far more than any partition holds).
	maxManifestSegs = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrBadManifest wraps every refusal of a manifest.
var ErrBadManifest = errors.New("log: bad install manifest")

// Manifest describes an install's source directory.
type Manifest struct {
	From, Next int64
	Keep       bool    // keep the log's segments below From
	Bases      []int64 // the segment files, ascending; Bases[0] == From
}

// AppendManifest appends m's encoding to dst.
func AppendManifest(dst []byte, m *Manifest) []byte {
	start := len(dst)
	dst = append(dst, manifestMagic...)
	dst = append(dst, 0, 0, 0, 0, manifestVersion, 0, 0, 0)
	if m.Keep {
		dst[start+9] = 1
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(m.Bases)))
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.From))
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.Next))
	for _, b := range m.Bases {
		dst = binary.BigEndian.AppendUint64(dst, uint64(b))
	}
	binary.BigEndian.PutUint32(dst[start+4:], crc32.Checksum(dst[start+8:], castagnoli))
	return dst
}

// DecodeManifest decodes a manifest, checking its CRC and that its bases are ascending,
// start at From and stay below Next.
func DecodeManifest(b []byte) (Manifest, error) {
	var m Manifest
	bad := func(f string, a ...any) (Manifest, error) {
		return Manifest{}, fmt.Errorf("%w: %s", ErrBadManifest, fmt.Sprintf(f, a...))
	}
	if len(b) < manifestHeader {
		return bad("%d bytes, shorter than its header", len(b))
	}
	if string(b[:4]) != manifestMagic {
		return bad("magic %q", b[:4])
	}
	if got, want := crc32.Checksum(b[8:], castagnoli), binary.BigEndian.Uint32(b[4:]); got != want {
		return bad("crc 0x%08x, want 0x%08x", got, want)
	}
	if b[8] != manifestVersion || b[9]&^1 != 0 || b[10]|b[11] != 0 {
		return bad("version %d, flags 0x%x", b[8], b[9])
	}
	n := binary.BigEndian.Uint32(b[12:])
	if n == 0 || n > maxManifestSegs || uint64(len(b)-manifestHeader) != 8*uint64(n) {
		return bad("%d segments in %d bytes", n, len(b))
	}
	m.Keep = b[9]&1 != 0
	m.From = int64(binary.BigEndian.Uint64(b[16:]))
	m.Next = int64(binary.BigEndian.Uint64(b[24:]))
	m.Bases = make([]int64, n)
	for i := range m.Bases {
		m.Bases[i] = int64(binary.BigEndian.Uint64(b[manifestHeader+8*i:]))
		if i > 0 && m.Bases[i] <= m.Bases[i-1] {
			return bad("bases not ascending at %d", i)
		}
	}
	if m.From < 0 || m.Bases[0] != m.From || m.Next < m.Bases[n-1] {
		return bad("from %d, next %d, bases %d..%d", m.From, m.Next, m.Bases[0], m.Bases[n-1])
	}
	return m, nil
}

// WriteManifest writes m as src's manifest crash-safely (temp file, fsync, rename, fsync of
// src), after which FinishInstall may be run on src.
func WriteManifest(fsys vfs.FS, src string, m *Manifest) error {
	path := filepath.Join(src, ManifestName)
	tmp := path + tmpSuffix
	f, err := fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("log: %w", err)
	}
	if _, err := f.WriteAt(AppendManifest(nil, m), 0); err != nil {
		f.Close()
		return fmt.Errorf("log: write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("log: fsync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("log: %w", err)
	}
	if err := fsys.Rename(tmp, path); err != nil {
		return fmt.Errorf("log: %w", err)
	}
	return fsys.SyncDir(src)
}

// FinishInstall moves the segments prepared in src (with its manifest) into the log
// directory dir, on a closed log: the log's segments from the manifest's From on (and all
// of them without the keep flag) are removed, src's files are renamed into place (their
// stale index files removed first), dir is fsynced, and the manifest and src go. It is
// idempotent: a crash anywhere in it leaves a state that running it again completes. A
// missing manifest means the install finished (or never was prepared): src is removed.
func FinishInstall(fsys vfs.FS, dir, src string) error {
	b, err := readSmall(fsys, filepath.Join(src, ManifestName))
	if errors.Is(err, fs.ErrNotExist) {
		return RemoveInstallDir(fsys, src) // what a crash in the last step left
	}
	if err != nil {
		return fmt.Errorf("log: read the install manifest: %w", err)
	}
	m, err := DecodeManifest(b)
	if err != nil {
		return fmt.Errorf("%w (%s)", err, src)
	}
	ents, err := fsys.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("log: %w", err)
	}
	for _, e := range ents {
		base, ok := parseSegmentName(e.Name(), logSuffix)
		if !ok || (m.Keep && base < m.From) || slices.Contains(m.Bases, base) {
			continue
		}
		for _, suf := range []string{logSuffix, indexSuffix, timeIndexSuffix, producersSuffix} {
			if err := fsys.Remove(filepath.Join(dir, segmentName(base, suf))); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("log: install: %w", err)
			}
		}
	}
	for _, base := range m.Bases {
		from := filepath.Join(src, segmentName(base, logSuffix))
		f, err := fsys.OpenFile(from, os.O_RDONLY, 0)
		if errors.Is(err, fs.ErrNotExist) {
			continue // moved before a crash
		}
		if err != nil {
			return fmt.Errorf("log: install: %w", err)
		}
		f.Close()
		for _, suf := range []string{indexSuffix, timeIndexSuffix, producersSuffix} {
			if err := fsys.Remove(filepath.Join(dir, segmentName(base, suf))); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("log: install: %w", err)
			}
		}
		if err := fsys.Rename(from, filepath.Join(dir, segmentName(base, logSuffix))); err != nil {
			return fmt.Errorf("log: install: %w", err)
		}
	}
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("log: install: fsync %s: %w", dir, err)
	}
	return RemoveInstallDir(fsys, src)
}

// RemoveInstallDir removes src and what it holds (a prepared or abandoned install), the
// manifest first, so that a crash midway leaves no manifest naming missing files.
func RemoveInstallDir(fsys vfs.FS, src string) error {
	if err := fsys.Remove(filepath.Join(src, ManifestName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("log: %w", err)
	}
	ents, err := fsys.ReadDir(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("log: %w", err)
	}
	for _, e := range ents {
		if err := fsys.Remove(filepath.Join(src, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("log: %w", err)
		}
	}
	if err := fsys.Remove(src); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("log: %w", err)
	}
	return fsys.SyncDir(filepath.Dir(src))
}

// Install makes the log take the segments prepared in src (see FinishInstall): the log's
// segments from the manifest's From on (all without the keep flag) leave it, src's become its
// segments, the last one active, and NextOffset becomes the manifest's Next. It exists for a
// replica that a catch-up from whole segments brings up: its files then equal the sender's.
//
// Not atomic by itself: the caller records its intent durably first and runs FinishInstall
// before Open after a crash (cluster/raftlog does). The producer state is dropped (a
// replica's log keeps none). Chunks held keep their files open until released.
//
// Errors: ErrBroken, ErrClosed, a bad manifest, an I/O error (the log is then broken).
// Safe for concurrent use: it holds out Sync, retention and Append while it runs.
func (l *Log) Install(src string) error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.retMu.Lock()
	defer l.retMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	b, err := readSmall(l.fsys, filepath.Join(src, ManifestName))
	if err != nil {
		return fmt.Errorf("log: install from %s: %w", src, err)
	}
	m, err := DecodeManifest(b)
	if err != nil {
		return err
	}
	if err := FinishInstall(l.fsys, l.dir, src); err != nil {
		return l.setBroken(err)
	}
	var bases []int64
	if m.Keep {
		for _, s := range l.segs {
			if s.base < m.From {
				bases = append(bases, s.base)
			}
		}
	}
	bases = append(bases, m.Bases...)
	var segs []*segment
	fail := func(err error) error {
		for _, s := range segs {
			s.release()
		}
		return l.setBroken(fmt.Errorf("install from %s: %w", src, err))
	}
	for i, base := range bases[:len(bases)-1] {
		s, err := l.openSealed(base, bases[i+1])
		if err != nil {
			return fail(err)
		}
		if i > 0 {
			if err := checkContinuous(segs[i-1], s); err != nil {
				s.release()
				return fail(err)
			}
		}
		segs = append(segs, s)
	}
	act, err := l.recoverActive(bases[len(bases)-1], checkpoint{}, false, l.opts.Now().UnixMilli())
	if err != nil {
		return fail(err)
	}
	segs = append(segs, act)
	if n := len(segs); n > 1 {
		if err := checkContinuous(segs[n-2], act); err != nil {
			return fail(err)
		}
	}
	if act.next != m.Next {
		return fail(fmt.Errorf("%w: the installed segments end at offset %d, the manifest says %d", ErrCorrupt, act.next, m.Next))
	}
	// The sealed segments that came without index files (the installed ones, and the log's
	// own former active segment when it is kept) get them now, as a roll writes them, so
	// that no later Open rebuilds them.
	for i, s := range segs[:len(segs)-1] {
		if s.base >= m.From || i == len(segs)-len(m.Bases)-1 {
			if err := l.writeIndexes(s); err != nil {
				return fail(err)
			}
		}
	}
	if err := act.f.Sync(); err != nil {
		return fail(err)
	}
	if err := l.fsys.SyncDir(l.dir); err != nil {
		return fail(err)
	}
	l.segMu.Lock()
	dead := l.segs
	l.segs = segs
	l.start.Store(segs[0].base)
	l.next.Store(act.next)
	l.durable.Store(act.next)
	l.segMu.Unlock()
	for _, d := range dead {
		d.release()
	}
	l.producers.Release()
	l.producers = producerstate.New(l.opts.Producers.config(l.dir))
	l.producerStates.Store(0)
	l.snaps = nil
	if err := l.cp.rewind(act.base, act.size); err != nil {
		return l.setBroken(fmt.Errorf("install: rewind the checkpoint: %w", err))
	}
	l.opts.Logf("log %s: installed %d segments, offsets [%d, %d); the log holds [%d, %d)", l.dir, len(m.Bases), m.From, m.Next, segs[0].base, act.next)
	return nil
}

// SegmentBase is the base offset of the segment the chunk lies in (Pos is a position in
// that segment's file).
func (c *Chunk) SegmentBase() int64 { return c.seg.base }

func readSmall(fsys vfs.FS, path string) ([]byte, error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > manifestHeader+8*maxManifestSegs {
		return nil, fmt.Errorf("%w: %s: %d bytes", ErrBadManifest, path, fi.Size())
	}
	b := make([]byte, fi.Size())
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b, nil
}
