package log

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/lightq/lightq/log/vfs"
	"github.com/lightq/lightq/wire"
)

// Checkpoint record layout. NEVER CHANGE (see doc.go). Two slots, one per 512-byte sector,
// written alternately, so a torn write of one leaves the other intact.
const (
	checkpointMagic    = 0x4c514350 // "LQCP"
	checkpointSlotSize = 512
	checkpointRecSize  = 40
)

// checkpoint says: segment base's first pos bytes are durable.
type checkpoint struct {
	seq  uint64
	base int64
	pos  int64
}

// checkpointer writes the checkpoint file. Its lock is a leaf.
type checkpointer struct {
	mu   sync.Mutex
	f    vfs.File
	last checkpoint
	at   time.Time // when last written
}

func encodeCheckpoint(c checkpoint) []byte {
	b := make([]byte, checkpointRecSize)
	binary.BigEndian.PutUint32(b[0:], checkpointMagic)
	binary.BigEndian.PutUint64(b[8:], c.seq)
	binary.BigEndian.PutUint64(b[16:], uint64(c.base))
	binary.BigEndian.PutUint64(b[24:], uint64(c.pos))
	binary.BigEndian.PutUint32(b[4:], wire.Checksum(b[8:]))
	return b
}

func decodeCheckpoint(b []byte) (checkpoint, bool) {
	if len(b) < checkpointRecSize || binary.BigEndian.Uint32(b) != checkpointMagic ||
		binary.BigEndian.Uint32(b[4:]) != wire.Checksum(b[8:checkpointRecSize]) {
		return checkpoint{}, false
	}
	c := checkpoint{
		seq:  binary.BigEndian.Uint64(b[8:]),
		base: int64(binary.BigEndian.Uint64(b[16:])),
		pos:  int64(binary.BigEndian.Uint64(b[24:])),
	}
	return c, c.seq > 0 && c.base >= 0 && c.pos >= 0
}

// openCheckpoint opens (creating if needed) the checkpoint file and returns the newest valid
// record, ok false when there is none.
func openCheckpoint(fsys vfs.FS, dir string) (vfs.File, checkpoint, bool, error) {
	path := filepath.Join(dir, checkpointName)
	f, err := fsys.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, checkpoint{}, false, err
	}
	var best checkpoint
	found := false
	buf := make([]byte, checkpointRecSize)
	for slot := int64(0); slot < 2; slot++ {
		n, err := f.ReadAt(buf, slot*checkpointSlotSize)
		if err != nil && !errors.Is(err, io.EOF) {
			f.Close()
			return nil, checkpoint{}, false, fmt.Errorf("log: read %s: %w", path, err)
		}
		if c, ok := decodeCheckpoint(buf[:n]); ok && c.seq > best.seq {
			best, found = c, true
		}
	}
	return f, best, found, nil
}

// write records that segment base's first pos bytes are durable, unless an equal or later
// position is already recorded. The caller made them durable first.
func (c *checkpointer) write(base, pos int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writeLocked(base, pos, time.Now())
}

// maybeWrite is write at most once per interval (every time when interval < 0).
func (c *checkpointer) maybeWrite(base, pos int64, interval time.Duration, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if interval >= 0 && now.Sub(c.at) < interval {
		return
	}
	c.writeLocked(base, pos, now) // advisory: a failure only weakens corruption detection
}

func (c *checkpointer) writeLocked(base, pos int64, now time.Time) error {
	if c.f == nil {
		return ErrClosed
	}
	if base < c.last.base || base == c.last.base && pos <= c.last.pos {
		return nil
	}
	next := checkpoint{seq: c.last.seq + 1, base: base, pos: pos}
	if _, err := c.f.WriteAt(encodeCheckpoint(next), int64(next.seq%2)*checkpointSlotSize); err != nil {
		return fmt.Errorf("log: write checkpoint: %w", err)
	}
	if err := c.f.Sync(); err != nil {
		return fmt.Errorf("log: fsync checkpoint: %w", err)
	}
	c.last, c.at = next, now
	return nil
}

// rewind records that segment base is durable up to pos, although a later position was
// recorded before: the log was cut there (TruncateFrom, Reset). Left as it was, the old
// position would make a torn write of what is appended after the cut look like damage to
// confirmed data, and recovery would refuse the log.
func (c *checkpointer) rewind(base, pos int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last.base, c.last.pos = -1, -1
	return c.writeLocked(base, pos, time.Now())
}

func (c *checkpointer) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f == nil {
		return nil
	}
	err := c.f.Close()
	c.f = nil
	return err
}
