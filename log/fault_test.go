package log

import (
	"errors"
	"math/rand/v2"
	"os"
	"syscall"
	"testing"

	"github.com/lightq/lightq/log/vfs/crashfs"
)

func TestDiskFull(t *testing.T) {
	dir := t.TempDir()
	fsys := crashfs.New()
	rng := rand.New(rand.NewPCG(21, 22))
	l := mustOpen(t, dir, Options{FS: fsys, SegmentBytes: 8 << 10})
	defer l.Close()
	want := appendN(t, l, rng, 20, 3, 100, 0)
	fsys.SetSpace(1000)
	var full int
	for i := range 20 {
		b := makeBatch(rng, 2, 400, 0)
		base, err := l.Append(b, 2)
		if errors.Is(err, ErrStorageFull) {
			full++
			continue
		}
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		want = append(want, stored{base: base, count: 2, data: b})
	}
	if full == 0 {
		t.Fatal("never full")
	}
	// The active file ends at the last whole batch.
	act := l.segs[len(l.segs)-1]
	st, err := os.Stat(act.path)
	if err != nil || st.Size() != act.size {
		t.Fatalf("active file %d bytes, log says %d (%v)", st.Size(), act.size, err)
	}
	sameBatches(t, readAll(t, l), want)
	fsys.SetSpace(-1)
	more := appendN(t, l, rng, 10, 3, 300, 0)
	if more[0].base != want[len(want)-1].next() {
		t.Fatalf("resumed at %d, want %d", more[0].base, want[len(want)-1].next())
	}
	want = append(want, more...)
	sameBatches(t, readAll(t, l), want)
	if _, err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if cs, err := Verify(dir, nil, 0); err != nil || len(cs) != 0 {
		t.Fatalf("Verify: %v %v", cs, err)
	}
}

func TestShortWriteIsStorageFull(t *testing.T) {
	dir := t.TempDir()
	fsys := crashfs.New()
	rng := rand.New(rand.NewPCG(23, 24))
	l := mustOpen(t, dir, Options{FS: fsys})
	defer l.Close()
	want := appendN(t, l, rng, 3, 2, 100, 0)
	fsys.Inject(crashfs.Fault{Op: crashfs.OpWrite, Name: ".log", Short: true, Err: syscall.ENOSPC})
	if _, err := l.Append(makeBatch(rng, 1, 100, 0), 1); !errors.Is(err, ErrStorageFull) {
		t.Fatalf("short write: %v", err)
	}
	want = append(want, appendN(t, l, rng, 2, 2, 100, 0)...)
	sameBatches(t, readAll(t, l), want)
}

func TestWriteEIOBreaks(t *testing.T) {
	fsys := crashfs.New()
	l := mustOpen(t, t.TempDir(), Options{FS: fsys})
	defer l.Close()
	rng := rand.New(rand.NewPCG(25, 26))
	fsys.Inject(crashfs.Fault{Op: crashfs.OpWrite, Name: ".log", Err: syscall.EIO})
	if _, err := l.Append(makeBatch(rng, 1, 100, 0), 1); !errors.Is(err, ErrBroken) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("EIO: %v", err)
	}
	if _, err := l.Append(makeBatch(rng, 1, 100, 0), 1); !errors.Is(err, ErrBroken) {
		t.Fatalf("not sticky: %v", err)
	}
}

func TestSyncFailureBreaks(t *testing.T) {
	dir := t.TempDir()
	fsys := crashfs.New()
	rng := rand.New(rand.NewPCG(27, 28))
	l := mustOpen(t, dir, Options{FS: fsys})
	appendN(t, l, rng, 5, 2, 100, 0)
	durable, err := l.Sync()
	if err != nil || durable != l.NextOffset() {
		t.Fatalf("Sync: %d %v", durable, err)
	}
	appendN(t, l, rng, 5, 2, 100, 0)
	fsys.Inject(crashfs.Fault{Op: crashfs.OpSync, Name: ".log", Err: syscall.EIO})
	d, err := l.Sync()
	if !errors.Is(err, ErrBroken) || d != durable || l.DurableOffset() != durable {
		t.Fatalf("failed Sync: durable %d (was %d) %v", d, durable, err)
	}
	// Sticky: no later Sync reports progress, no Append succeeds.
	if d, err := l.Sync(); !errors.Is(err, ErrBroken) || d != durable {
		t.Fatalf("second Sync: %d %v", d, err)
	}
	if _, err := l.Append(makeBatch(rng, 1, 10, 0), 1); !errors.Is(err, ErrBroken) {
		t.Fatalf("Append after failed fsync: %v", err)
	}
	// Reads still work.
	readAll(t, l)
	l.Close()
	l = mustOpen(t, dir, Options{FS: fsys})
	defer l.Close()
	if l.NextOffset() < durable {
		t.Fatalf("reopened at %d, durable was %d", l.NextOffset(), durable)
	}
}

func TestRollSyncFailureBreaks(t *testing.T) {
	fsys := crashfs.New()
	l := mustOpen(t, t.TempDir(), Options{FS: fsys, SegmentBytes: 1024})
	defer l.Close()
	rng := rand.New(rand.NewPCG(29, 30))
	appendN(t, l, rng, 1, 2, 300, 0)
	fsys.Inject(crashfs.Fault{Op: crashfs.OpSyncDir, Err: syscall.EIO})
	var err error
	for range 10 {
		if _, err = l.Append(makeBatch(rng, 2, 300, 0), 2); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrBroken) {
		t.Fatalf("dir fsync failure in roll: %v", err)
	}
}
