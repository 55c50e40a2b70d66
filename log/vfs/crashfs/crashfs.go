// Package crashfs is a vfs.FS for tests that simulates power loss, process death and disk
// faults: FS writes through to the real files and keeps beside them the image a power cut
// would leave. It lives apart from package vfs so that production binaries do not link it;
// only tests import it (log's fault, crash and fuzz tests).
package crashfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/lightq/lightq/log/vfs"
)

var _ vfs.FS = (*FS)(nil)

// ErrKilled is returned by every FS operation after the simulated process death that
// KillAfter arranges, and by files opened before the last Crash.
var ErrKilled = errors.New("crashfs: simulated process death")

// sectorSize is the unit in which Crash tears a write.
const sectorSize = 512

// Op names a kind of FS operation, for Fault and Killed.
type Op string

// The operations FS counts. Every one of them mutates the file system and is a possible
// crash point for KillAfter.
const (
	OpCreate   Op = "create"   // OpenFile that creates the file
	OpWrite    Op = "write"    // Write and WriteAt
	OpTruncate Op = "truncate" // Truncate, and OpenFile with O_TRUNC
	OpSync     Op = "sync"     // vfs.File.Sync
	OpSyncDir  Op = "syncdir"  // FS.SyncDir
	OpRename   Op = "rename"
	OpRemove   Op = "remove"
)

// Fault makes the Nth matching operation from now fail with Err.
type Fault struct {
	Op    Op
	Name  string // match only files whose path contains Name ("" matches every file)
	Nth   int    // 1 is the next matching operation
	Err   error  // e.g. syscall.EIO, syscall.ENOSPC
	Short bool   // OpWrite only: write the first half of the buffer, then fail with Err
}

// FS is a vfs.FS that writes through to the real files (so reads and sendfile see what was
// written) while keeping, per file and per directory, the "durable image" a power cut would
// leave: file contents are updated only by vfs.File.Sync, directory entries only by SyncDir.
//
// Crash simulates the power cut: every tracked file is rebuilt from its durable image, and each
// write made since the file's last Sync is, at random, applied, dropped, torn at 512-byte
// sector granularity (each sector new or old/zero) or filled with garbage (only the bytes it
// wrote: the "powersafe overwrite" model of SQLite, in which a write never damages durable
// bytes that share its sector; without it no unpadded log could keep acked data); each unsynced
// truncate is applied or dropped. Unsynced creates, renames and removes of a directory survive
// as a random prefix (metadata is journalled in order). MkdirAll is durable at once.
//
// Faults: Inject fails chosen operations (EIO, ENOSPC, short writes), SetSpace makes writes
// fail with ENOSPC once a byte budget is spent (a full disk), and KillAfter stops the process
// at the Nth operation from now: that operation and every later one fail with ErrKilled and
// change nothing, as if the process died there, until Crash. Fault state lives here, never in
// the code under test.
//
// All methods are safe for concurrent use. The zero value is not usable: call New.
type FS struct {
	mu      sync.RWMutex
	dirs    map[string]*crashDir
	handles map[*crashFile]struct{}
	gen     int // crash generation: files from older generations are dead

	ops       int // mutating operations so far
	faults    []Fault
	space     int64 // bytes writes may still add; <0 is unlimited
	killAfter int   // ops left before the kill; <=0 is never
	killed    Op
	killedAt  string
}

type crashDir struct {
	durable map[string]*inode // entries as of the last SyncDir
	current map[string]*inode // entries now (mirrors the real directory)
	ops     []nsOp            // namespace changes since the last SyncDir, in order
}

type nsOp struct {
	op       Op // OpCreate, OpRemove or OpRename
	name, to string
	ino      *inode
}

type inode struct {
	durable []byte
	pending []pendingWrite // since the last Sync, in order
}

type pendingWrite struct {
	truncate bool
	off      int64 // write position, or the new size of a truncate
	data     []byte
}

// New returns an FS with no faults. Directories are tracked from their first use;
// files that exist then are taken as durable.
func New() *FS {
	return &FS{dirs: map[string]*crashDir{}, handles: map[*crashFile]struct{}{}, space: -1}
}

// Inject arms a fault.
func (c *FS) Inject(f Fault) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.Nth < 1 {
		f.Nth = 1
	}
	c.faults = append(c.faults, f)
}

// SetSpace lets writes add n more bytes, after which they fail with ENOSPC (a write that
// does not fit writes what fits first). n < 0 removes the limit.
func (c *FS) SetSpace(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.space = n
}

// KillAfter makes the nth mutating operation from now (1 = the next) and every later one fail
// with ErrKilled without effect, until Crash. n <= 0 disarms it.
func (c *FS) KillAfter(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.killAfter = n
}

// Killed reports whether the process is "dead", and at which operation and path it died.
func (c *FS) Killed() (dead bool, op Op, path string) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.killed != "", c.killed, c.killedAt
}

// Ops is the number of mutating operations so far, for choosing kill points.
func (c *FS) Ops() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.ops
}

// Crash simulates a power cut and reboot (see FS). Files opened before it are dead: their
// descriptors are closed and every method fails with ErrKilled. Crash clears every fault and
// the kill; the byte budget stays.
func (c *FS) Crash(rng *rand.Rand) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for h := range c.handles {
		h.f.Close()
	}
	clear(c.handles)
	c.gen++
	c.faults, c.killAfter, c.killed, c.killedAt = nil, 0, "", ""

	images := map[*inode][]byte{}
	for dir, d := range c.dirs {
		survivors := make(map[string]*inode, len(d.durable))
		for name, ino := range d.durable {
			survivors[name] = ino
		}
		for _, op := range d.ops[:rng.IntN(len(d.ops)+1)] {
			switch op.op {
			case OpCreate:
				survivors[op.name] = op.ino
			case OpRemove:
				delete(survivors, op.name)
			case OpRename:
				delete(survivors, op.name)
				survivors[op.to] = op.ino
			}
		}
		for name := range d.current {
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		for name, ino := range survivors {
			img, ok := images[ino]
			if !ok {
				img = ino.crashImage(rng)
				images[ino] = img
			}
			if err := os.WriteFile(filepath.Join(dir, name), img, 0o644); err != nil {
				return err
			}
			// After the reboot the file holds exactly img, durably.
			ino.durable, ino.pending = img, nil
		}
		d.durable, d.current, d.ops = survivors, maps(survivors), nil
	}
	return nil
}

func maps(m map[string]*inode) map[string]*inode {
	out := make(map[string]*inode, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// crashImage is what the file holds after a power cut: the durable image with each pending
// change given a random fate.
func (ino *inode) crashImage(rng *rand.Rand) []byte {
	img := append([]byte(nil), ino.durable...)
	grow := func(n int64) {
		if int64(len(img)) < n {
			img = append(img, make([]byte, n-int64(len(img)))...)
		}
	}
	for _, w := range ino.pending {
		if w.truncate {
			if rng.IntN(2) == 0 {
				grow(w.off)
				img = img[:w.off]
			}
			continue
		}
		end := w.off + int64(len(w.data))
		switch rng.IntN(4) {
		case 0: // applied
			grow(end)
			copy(img[w.off:], w.data)
		case 1: // dropped
		case 2: // torn: each sector new or old
			grow(end)
			for s := w.off / sectorSize * sectorSize; s < end; s += sectorSize {
				if rng.IntN(2) == 0 {
					lo, hi := max(s, w.off), min(s+sectorSize, end)
					copy(img[lo:hi], w.data[lo-w.off:hi-w.off])
				}
			}
		case 3: // garbage over the bytes written (never over durable bytes beside them)
			grow(end)
			for i := w.off; i < end; i++ {
				img[i] = byte(rng.Uint32())
			}
		}
	}
	return img
}

// apply makes the pending changes durable, as a successful Sync does.
func (ino *inode) apply() {
	for _, w := range ino.pending {
		if int64(len(ino.durable)) < w.off+int64(len(w.data)) {
			ino.durable = append(ino.durable, make([]byte, w.off+int64(len(w.data))-int64(len(ino.durable)))...)
		}
		if w.truncate {
			ino.durable = ino.durable[:w.off]
			continue
		}
		copy(ino.durable[w.off:], w.data)
	}
	ino.pending = nil
}

// dir returns the tracked state of directory name, snapshotting it on first use. c.mu held.
func (c *FS) dir(name string) (*crashDir, error) {
	name = filepath.Clean(name)
	if d, ok := c.dirs[name]; ok {
		return d, nil
	}
	d := &crashDir{durable: map[string]*inode{}, current: map[string]*inode{}}
	ents, err := os.ReadDir(name)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(name, e.Name()))
		if err != nil {
			return nil, err
		}
		ino := &inode{durable: data}
		d.durable[e.Name()], d.current[e.Name()] = ino, ino
	}
	c.dirs[name] = d
	return d, nil
}

// step counts one mutating operation and returns the error it must fail with, if any: the
// kill, or an injected fault. c.mu held.
func (c *FS) step(op Op, path string) (fault *Fault, err error) {
	if c.killed != "" {
		return nil, ErrKilled
	}
	c.ops++
	if c.killAfter > 0 {
		c.killAfter--
		if c.killAfter == 0 {
			c.killed, c.killedAt = op, path
			return nil, ErrKilled
		}
	}
	for i := range c.faults {
		f := &c.faults[i]
		if f.Op != op || !strings.Contains(path, f.Name) {
			continue
		}
		if f.Nth--; f.Nth == 0 {
			hit := *f
			c.faults = append(c.faults[:i], c.faults[i+1:]...)
			return &hit, hit.Err
		}
	}
	return nil, nil
}

func pathErr(op Op, path string, err error) error {
	return &fs.PathError{Op: string(op), Path: path, Err: err}
}

// OpenFile opens or creates a real file and tracks it.
func (c *FS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.killed != "" {
		return nil, pathErr("open", name, ErrKilled)
	}
	d, err := c.dir(filepath.Dir(name))
	if err != nil {
		return nil, err
	}
	base := filepath.Base(name)
	ino, exists := d.current[base]
	if !exists && flag&os.O_CREATE != 0 {
		if _, err := c.step(OpCreate, name); err != nil {
			return nil, pathErr(OpCreate, name, err)
		}
	}
	if exists && flag&os.O_TRUNC != 0 {
		if _, err := c.step(OpTruncate, name); err != nil {
			return nil, pathErr(OpTruncate, name, err)
		}
	}
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	switch {
	case !exists:
		// Created now, or created behind our back (then taken as durable).
		ino = &inode{}
		if flag&os.O_CREATE != 0 {
			d.ops = append(d.ops, nsOp{op: OpCreate, name: base, ino: ino})
		} else if ino.durable, err = os.ReadFile(name); err != nil {
			f.Close()
			return nil, err
		}
		d.current[base] = ino
	case flag&os.O_TRUNC != 0:
		ino.pending = append(ino.pending, pendingWrite{truncate: true})
	}
	h := &crashFile{fs: c, f: f, ino: ino, gen: c.gen, name: name, appendMode: flag&os.O_APPEND != 0}
	c.handles[h] = struct{}{}
	return h, nil
}

// Remove removes a real file; the removal is durable after SyncDir.
func (c *FS) Remove(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, err := c.dir(filepath.Dir(name))
	if err != nil {
		return err
	}
	if _, err := c.step(OpRemove, name); err != nil {
		return pathErr(OpRemove, name, err)
	}
	if err := os.Remove(name); err != nil {
		return err
	}
	base := filepath.Base(name)
	if ino, ok := d.current[base]; ok {
		d.ops = append(d.ops, nsOp{op: OpRemove, name: base, ino: ino})
		delete(d.current, base)
	}
	return nil
}

// Rename renames a real file; the rename is durable after SyncDir. A rename across
// directories is modelled as a create in the new one and a remove in the old one.
func (c *FS) Rename(oldpath, newpath string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	od, err := c.dir(filepath.Dir(oldpath))
	if err != nil {
		return err
	}
	nd, err := c.dir(filepath.Dir(newpath))
	if err != nil {
		return err
	}
	if _, err := c.step(OpRename, oldpath); err != nil {
		return &os.LinkError{Op: string(OpRename), Old: oldpath, New: newpath, Err: err}
	}
	if err := os.Rename(oldpath, newpath); err != nil {
		return err
	}
	ob, nb := filepath.Base(oldpath), filepath.Base(newpath)
	ino := od.current[ob]
	if ino == nil {
		ino = &inode{} // untracked: treat as empty
	}
	delete(od.current, ob)
	nd.current[nb] = ino
	if od == nd {
		od.ops = append(od.ops, nsOp{op: OpRename, name: ob, to: nb, ino: ino})
	} else {
		od.ops = append(od.ops, nsOp{op: OpRemove, name: ob, ino: ino})
		nd.ops = append(nd.ops, nsOp{op: OpCreate, name: nb, ino: ino})
	}
	return nil
}

// MkdirAll creates directories; they are durable at once.
func (c *FS) MkdirAll(path string, perm fs.FileMode) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.killed != "" {
		return pathErr("mkdir", path, ErrKilled)
	}
	return os.MkdirAll(path, perm)
}

// ReadDir lists the real directory.
func (c *FS) ReadDir(name string) ([]fs.DirEntry, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.dir(name); err != nil {
		return nil, err
	}
	return os.ReadDir(name)
}

// SyncDir makes the directory's entries durable. It does not call fsync: the durable image
// is simulated.
func (c *FS) SyncDir(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, err := c.dir(name)
	if err != nil {
		return err
	}
	if _, err := c.step(OpSyncDir, name); err != nil {
		return pathErr(OpSyncDir, name, err)
	}
	d.durable, d.ops = maps(d.current), nil
	return nil
}

type crashFile struct {
	fs         *FS
	f          *os.File
	ino        *inode
	gen        int
	name       string
	appendMode bool
}

// live reports whether the file is from the current generation. fs.mu held.
func (h *crashFile) live() error {
	if h.gen != h.fs.gen {
		return pathErr("access", h.name, ErrKilled)
	}
	return nil
}

func (h *crashFile) ReadAt(p []byte, off int64) (int, error) {
	h.fs.mu.RLock()
	defer h.fs.mu.RUnlock()
	if err := h.live(); err != nil {
		return 0, err
	}
	return h.f.ReadAt(p, off)
}

func (h *crashFile) WriteAt(p []byte, off int64) (int, error) { return h.write(p, off, false) }

func (h *crashFile) Write(p []byte) (int, error) { return h.write(p, 0, true) }

func (h *crashFile) write(p []byte, off int64, seq bool) (int, error) {
	c := h.fs
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := h.live(); err != nil {
		return 0, err
	}
	fault, ferr := c.step(OpWrite, h.name)
	if ferr != nil && (fault == nil || !fault.Short) {
		return 0, pathErr(OpWrite, h.name, ferr)
	}
	n := len(p)
	if fault != nil {
		n /= 2
	}
	if c.space >= 0 && int64(n) > c.space {
		n, ferr = int(c.space), syscall.ENOSPC
	}
	if seq {
		var err error
		if h.appendMode {
			var fi fs.FileInfo
			fi, err = h.f.Stat()
			if fi != nil {
				off = fi.Size()
			}
		} else {
			off, err = h.f.Seek(0, io.SeekCurrent)
		}
		if err != nil {
			return 0, err
		}
	}
	var (
		wrote int
		err   error
	)
	if seq {
		wrote, err = h.f.Write(p[:n])
	} else {
		wrote, err = h.f.WriteAt(p[:n], off)
	}
	if wrote > 0 {
		h.ino.pending = append(h.ino.pending, pendingWrite{off: off, data: append([]byte(nil), p[:wrote]...)})
		if c.space >= 0 {
			c.space -= int64(wrote)
		}
	}
	if err == nil && ferr != nil {
		err = pathErr(OpWrite, h.name, ferr)
	}
	if err == nil && wrote < len(p) {
		err = io.ErrShortWrite
	}
	return wrote, err
}

// Sync makes the file's contents durable. It does not call fsync: the durable image is
// simulated.
func (h *crashFile) Sync() error {
	c := h.fs
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := h.live(); err != nil {
		return err
	}
	if _, err := c.step(OpSync, h.name); err != nil {
		return pathErr(OpSync, h.name, err)
	}
	h.ino.apply()
	return nil
}

func (h *crashFile) Truncate(size int64) error {
	c := h.fs
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := h.live(); err != nil {
		return err
	}
	if _, err := c.step(OpTruncate, h.name); err != nil {
		return pathErr(OpTruncate, h.name, err)
	}
	if err := h.f.Truncate(size); err != nil {
		return err
	}
	h.ino.pending = append(h.ino.pending, pendingWrite{truncate: true, off: size})
	return nil
}

func (h *crashFile) Stat() (fs.FileInfo, error) {
	h.fs.mu.RLock()
	defer h.fs.mu.RUnlock()
	if err := h.live(); err != nil {
		return nil, err
	}
	return h.f.Stat()
}

// Close closes the real descriptor. It works on dead files too (a dead process's
// descriptors are gone; closing again is harmless).
func (h *crashFile) Close() error {
	c := h.fs
	c.mu.Lock()
	defer c.mu.Unlock()
	if h.gen != c.gen {
		return nil
	}
	delete(c.handles, h)
	return h.f.Close()
}

func (h *crashFile) Fd() uintptr { return h.f.Fd() }

func (h *crashFile) String() string { return fmt.Sprintf("crashfs:%s", h.name) }
