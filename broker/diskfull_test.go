//go:build linux

package broker

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lightq/lightq/wire"
)

// TestDiskFull runs the broker on a 16 MiB file system: a producer that fills it gets
// STORAGE_FULL within a second, nothing acknowledged is lost or cut, reads keep working, and
// writes resume once space is freed. It needs root to mount a tmpfs and skips otherwise.
func TestDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("disk-full test needs root to mount a size-limited tmpfs")
	}
	mnt := t.TempDir()
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=16m"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	cfg := testConfig(t)
	cfg.DataDir = filepath.Join(mnt, "data")
	srv := startWith(t, cfg)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createDurable("full", 1, wire.Option{Key: "segment.bytes", Value: "4194304"})
	// Ballast that can be deleted later to make room.
	ballast := filepath.Join(mnt, "ballast")
	if err := os.WriteFile(ballast, make([]byte, 6<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	c := login(t, srv.Addr(), "d-user", "d-pw")
	var next int64
	start := time.Now()
	var full bool
	for i := 0; i < 1000 && !full; i++ {
		corr := c.send(wire.OpProduce, produceBody("full", 0, wire.AcksDurable, offsetBatch(t, next, 60, 1000)))
		f := c.mustRead()
		switch {
		case f.h.Op == wire.OpError:
			var eb wire.ErrorBody
			_ = eb.Decode(f.body)
			if eb.Code != wire.CodeStorageFull || f.h.Corr != corr {
				t.Fatalf("want STORAGE_FULL, got %s: %s", eb.Code, eb.Message)
			}
			full = true
		case f.h.Op == wire.OpProduce:
			var resp wire.ProduceResponse
			_ = resp.Decode(f.body)
			if resp.BaseOffset != next {
				t.Fatalf("acked at %d, want %d", resp.BaseOffset, next)
			}
			next += 60
			start = time.Now()
		}
	}
	if !full {
		t.Fatal("the disk never filled")
	}
	// Promptly: one request's time, with room for a loaded machine; what the bound catches is
	// a broker that retries or waits for space instead of answering.
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("STORAGE_FULL took %v after the last ack", took)
	}
	t.Logf("disk full after %d acknowledged records", next)
	readAll := func(upTo int64) {
		for off := int64(0); off < upTo; {
			_, values := c.fetchValues("full", 0, off, 0)
			if len(values) == 0 {
				t.Fatalf("no data at %d of %d", off, upTo)
			}
			off += int64(len(values))
		}
	}
	readAll(next) // every acknowledged record is there, and reads work on a full disk
	// A second attempt is refused the same way, promptly.
	c.expectError(c.send(wire.OpProduce, produceBody("full", 0, wire.AcksDurable, offsetBatch(t, next, 60, 1000))), wire.CodeStorageFull)
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	resp := c.produceAcks("full", 0, wire.AcksDurable, offsetBatch(t, next, 60, 1000))
	if resp.BaseOffset != next {
		t.Fatalf("after space returned the batch got offset %d, want %d", resp.BaseOffset, next)
	}
	next += 60
	readAll(next)
	// Nothing partial was left behind: a restart recovers the same log.
	if err := srv.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	cfg.Addr = "127.0.0.1:0"
	srv2 := startWith(t, cfg)
	c2 := login(t, srv2.Addr(), "d-user", "d-pw")
	if resp := c2.produceAcks("full", 0, wire.AcksWritten, offsetBatch(t, next, 1, 10)); resp.BaseOffset != next {
		t.Fatalf("after restart the next offset is %d, want %d", resp.BaseOffset, next)
	}
}
