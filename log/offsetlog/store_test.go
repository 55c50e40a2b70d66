package offsetlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

func mustOpen(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// commitWait commits and waits for the answer.
func commitWait(t testing.TB, s *Store, group string, part uint32, off int64) error {
	t.Helper()
	done := make(chan error, 1)
	if err := s.Commit(group, part, off, func(err error) { done <- err }); err != nil {
		return err
	}
	return <-done
}

// state is every entry of s.
func state(s *Store) map[key]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[key]int64, len(s.entries))
	for k, v := range s.entries {
		out[k] = v
	}
	return out
}

func sameState(t *testing.T, got, want map[key]int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d entries, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%v = %d, want %d", k, got[k], v)
		}
	}
}

func TestCommitGetReopen(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, Options{})
	if _, ok := s.Get("g", 0); ok {
		t.Fatal("empty store has an entry")
	}
	for i := range 10 {
		if err := commitWait(t, s, "g", uint32(i%3), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if off, ok := s.Get("g", 0); !ok || off != 9 {
		t.Fatalf("Get = %d %v, want 9", off, ok)
	}
	want := state(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit("g", 0, 1, func(error) {}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Commit after Close: %v", err)
	}
	s = mustOpen(t, dir, Options{})
	defer s.Close()
	sameState(t, state(s), want)
}

func TestCommitRefusesInvalid(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{})
	defer s.Close()
	for _, tc := range []struct {
		group string
		off   int64
	}{{"", 1}, {string(make([]byte, 256)), 1}, {"g", -1}} {
		if err := s.Commit(tc.group, 0, tc.off, func(error) { t.Error("done called") }); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Commit(%d-byte group, %d): %v", len(tc.group), tc.off, err)
		}
	}
}

// Many committers at once: every commit is answered, the state is last-write-wins per
// committer, and far fewer frames than commits were written (group commit).
func TestGroupCommit(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, Options{})
	const workers, each = 32, 200
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if err := commitWait(t, s, fmt.Sprintf("g%d", w), uint32(i%4), int64(i)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	frames, bytes := 0, 0
	data, _ := os.ReadFile(filepath.Join(dir, fileName))
	for p := headerSize; p < len(data) && !allZero(data[p:]); p += frameAt(data[p:]) {
		if frameAt(data[p:]) == 0 {
			t.Fatalf("invalid frame at %d", p)
		}
		frames++
		bytes += frameAt(data[p:])
	}
	t.Logf("%d commits in %d frames", workers*each, frames)
	if frames >= workers*each {
		t.Fatalf("%d frames for %d commits: no group commit", frames, workers*each)
	}
	if f, b := s.Synced(); f != int64(frames) || b != int64(bytes) {
		t.Fatalf("Synced() = %d frames, %d bytes; the file holds %d, %d", f, b, frames, bytes)
	}
	for w := range workers {
		for p := range uint32(4) {
			if off, _ := s.Get(fmt.Sprintf("g%d", w), p); off != int64(each-4+int(p)) {
				t.Fatalf("g%d/%d = %d", w, p, off)
			}
		}
	}
	want := state(s)
	s.Close()
	s = mustOpen(t, dir, Options{})
	defer s.Close()
	sameState(t, state(s), want)
}

func TestCaps(t *testing.T) {
	bud := NewBudget(5)
	a := mustOpen(t, t.TempDir(), Options{MaxEntries: 3, Budget: bud})
	b := mustOpen(t, t.TempDir(), Options{MaxEntries: 3, Budget: bud})
	for p := range uint32(3) {
		if err := commitWait(t, a, "g", p, 1); err != nil {
			t.Fatal(err)
		}
	}
	var le *LimitError
	if err := a.Commit("g", 3, 1, func(error) {}); !errors.As(err, &le) || le.Scope != "topic" || le.Max != 3 {
		t.Fatalf("4th pair in a: %v", err)
	}
	if err := commitWait(t, a, "g", 0, 7); err != nil {
		t.Fatalf("existing pair past the cap: %v", err)
	}
	for p := range uint32(2) {
		if err := commitWait(t, b, "h", p, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit("h", 2, 1, func(error) {}); !errors.As(err, &le) || le.Scope != "broker" || le.Max != 5 {
		t.Fatalf("6th pair of the budget: %v", err)
	}
	if bud.Used() != 5 {
		t.Fatalf("budget used %d, want 5", bud.Used())
	}
	a.Close()
	if bud.Used() != 2 {
		t.Fatalf("budget used %d after closing a, want 2", bud.Used())
	}
	if err := commitWait(t, b, "h", 2, 1); err != nil {
		t.Fatalf("after a closed: %v", err)
	}
	b.Close()
}

// The same new pair committed many times while one write runs is counted once.
func TestCapCountsPendingDuplicatesOnce(t *testing.T) {
	bud := NewBudget(100)
	s := mustOpen(t, t.TempDir(), Options{MaxEntries: 100, Budget: bud})
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		if err := s.Commit("g", 0, int64(i), func(error) { wg.Done() }); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	s.mu.Lock()
	res := s.reserved
	s.mu.Unlock()
	if bud.Used() != 1 || s.Len() != 1 || res != 0 {
		t.Fatalf("budget %d, entries %d, reserved %d; want 1 1 0", bud.Used(), s.Len(), res)
	}
	s.Close()
}

func TestCompaction(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, Options{CompactMin: 4 << 10, CompactFactor: 2})
	for round := range 100 { // 100 writes of 50 commits each
		var wg sync.WaitGroup
		for j := range 50 {
			i := round*50 + j
			wg.Add(1)
			if err := s.Commit(fmt.Sprintf("group-%d", i%10), uint32(i%7), int64(i), func(err error) {
				if err != nil {
					t.Error(err)
				}
				wg.Done()
			}); err != nil {
				t.Fatal(err)
			}
		}
		wg.Wait()
	}
	waitIdle(s) // a compaction may run after the last answer
	// 70 live pairs of about 21 bytes: a compacted log is under 2 KiB, and the log never
	// grows past CompactMin (4 KiB) plus a frame before it is compacted again. The file
	// holds preallocated zeros after that, 64 KiB at a time.
	if s.size > 8<<10 || s.alloc > 128<<10 {
		t.Fatalf("log holds %d bytes (file %d) after 5000 commits to 70 pairs: not compacted", s.size, s.alloc)
	}
	if _, err := os.Stat(filepath.Join(dir, fileName+tmpSuffix)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temp file left: %v", err)
	}
	want := state(s)
	s.Close()
	s = mustOpen(t, dir, Options{})
	defer s.Close()
	sameState(t, state(s), want)
}

func TestMigrateLegacy(t *testing.T) {
	dir := t.TempDir()
	calls := 0
	legacy := func(add func(Entry)) error {
		calls++
		add(Entry{"g", 0, 5})
		add(Entry{"g", 1, 6})
		add(Entry{"", 1, 6}) // invalid: dropped
		return nil
	}
	s := mustOpen(t, dir, Options{Legacy: legacy})
	if off, _ := s.Get("g", 1); off != 6 || s.Len() != 2 {
		t.Fatalf("migrated: g/1 = %d, %d entries", off, s.Len())
	}
	if err := commitWait(t, s, "g", 0, 9); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = mustOpen(t, dir, Options{Legacy: legacy})
	defer s.Close()
	if calls != 1 {
		t.Fatalf("Legacy called %d times; once expected (the new log exists after the first Open)", calls)
	}
	if off, _ := s.Get("g", 0); off != 9 {
		t.Fatalf("g/0 = %d after reopen, want 9", off)
	}
	// A failing legacy reader fails Open and writes nothing, so the next Open reads it again.
	dir2 := t.TempDir()
	if _, err := Open(dir2, Options{Legacy: func(func(Entry)) error { return errors.New("bad json") }}); err == nil {
		t.Fatal("Open with a failing legacy reader succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir2, fileName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a log was written although the legacy file could not be read: %v", err)
	}
}

// A flood's big pending buffers are not kept: the spare batch the syncer keeps is small.
func TestBuffersReturned(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{})
	defer s.Close()
	var wg sync.WaitGroup
	for i := range 20000 {
		wg.Add(1)
		if err := s.Commit(fmt.Sprintf("group-with-a-long-name-%06d", i), 0, 1, func(error) { wg.Done() }); err != nil {
			wg.Done()
			if !errors.Is(err, ErrBusy) {
				t.Fatal(err)
			}
		}
	}
	wg.Wait()
	if err := commitWait(t, s, "g", 0, 1); err != nil { // the syncer ran after the flood
		t.Fatal(err)
	}
	waitIdle(s)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range []*batch{s.pending, s.spare} {
		if b != nil && cap(b.frame) > keepBatchBytes {
			t.Fatalf("a %d-byte batch buffer is kept after the flood", cap(b.frame))
		}
	}
}

// waitIdle waits until no syncer runs (the syncer's own fields are then safe to read).
func waitIdle(s *Store) {
	for {
		s.mu.Lock()
		idle := !s.syncing
		s.mu.Unlock()
		if idle {
			return
		}
		runtime.Gosched()
	}
}

func TestRange(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{})
	defer s.Close()
	for i, g := range []string{"a", "b", "a"} {
		if err := commitWait(t, s, g, uint32(i), int64(10+i)); err != nil {
			t.Fatal(err)
		}
	}
	got := map[key]int64{}
	s.Range(func(g string, p uint32, off int64) { got[key{g, p}] = off })
	sameState(t, got, map[key]int64{{"a", 0}: 10, {"b", 1}: 11, {"a", 2}: 12})
}
