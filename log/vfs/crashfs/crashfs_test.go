package crashfs

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestCrashKeepsSyncedDropsUnsyncedCreate(t *testing.T) {
	for seed := range uint64(50) {
		dir := t.TempDir()
		c := New()
		f, err := c.OpenFile(filepath.Join(dir, "a"), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt([]byte("durable"), 0)
		f.Sync()
		c.SyncDir(dir)
		f.WriteAt(bytes.Repeat([]byte("x"), 2000), 7) // unsynced
		g, _ := c.OpenFile(filepath.Join(dir, "b"), os.O_RDWR|os.O_CREATE, 0o644)
		g.WriteAt([]byte("b"), 0)
		g.Sync() // synced data, but the name was never SyncDir'd
		if err := c.Crash(rand.New(rand.NewPCG(seed, 0))); err != nil {
			t.Fatal(err)
		}
		a, _ := os.ReadFile(filepath.Join(dir, "a"))
		if !bytes.HasPrefix(a, []byte("durable")) {
			t.Fatalf("seed %d: synced bytes lost: %q", seed, a[:min(len(a), 10)])
		}
		if len(a) != 7 && len(a) != 2007 {
			t.Fatalf("seed %d: size %d", seed, len(a))
		}
		if _, err := f.ReadAt(make([]byte, 1), 0); !errors.Is(err, ErrKilled) {
			t.Fatalf("old handle still works: %v", err)
		}
	}
}

func TestFaults(t *testing.T) {
	dir := t.TempDir()
	c := New()
	f, _ := c.OpenFile(filepath.Join(dir, "a"), os.O_RDWR|os.O_CREATE, 0o644)
	c.Inject(Fault{Op: OpSync, Nth: 2, Err: syscall.EIO})
	if f.Sync() != nil || !errors.Is(f.Sync(), syscall.EIO) || f.Sync() != nil {
		t.Fatal("second sync should fail, only it")
	}
	c.SetSpace(10)
	if n, err := f.WriteAt(make([]byte, 20), 0); n != 10 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("budget: %d %v", n, err)
	}
	c.SetSpace(-1)
	c.Inject(Fault{Op: OpWrite, Short: true, Err: syscall.ENOSPC})
	if n, err := f.WriteAt(make([]byte, 20), 0); n != 10 || err == nil {
		t.Fatalf("short write: %d %v", n, err)
	}
	c.KillAfter(1)
	if _, err := f.WriteAt([]byte("x"), 0); !errors.Is(err, ErrKilled) {
		t.Fatalf("kill: %v", err)
	}
	if dead, op, _ := c.Killed(); !dead || op != OpWrite {
		t.Fatalf("Killed: %v %v", dead, op)
	}
}
