package raftlog

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/log"
)

// cachedBytes recomputes what the window's cache holds: its first cached index and bytes.
func cachedBytes(s *Storage) (uint64, int) {
	w := &s.win
	first, n := uint64(0), 0
	for i := w.first; i < w.first+uint64(w.n); i++ {
		if p := w.slot(i); p.cached {
			if first == 0 {
				first = i
			}
			n += len(p.data)
		}
	}
	return first, n
}

// TestStorageEntryCache: the recent entries Append stored are served from memory within the
// byte limit, the same entries the log holds; a replaced tail, a snapshot and retention drop
// what they make stale; a cache of -1 bytes holds nothing.
func TestStorageEntryCache(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Window: 16, CacheBytes: 1500, Log: log.Options{SegmentBytes: 1 << 10, RetentionBytes: 2 << 10}}
	s := mustOpen(t, dir, opts)
	ents := clone(mixedEntries(1, 40, 1, 7))
	mustAppend(t, s, ents)
	from, n := cachedBytes(s)
	if n != s.win.bytes || n == 0 || n > 1500 || from <= 24 {
		t.Fatalf("cache from entry %d, %d bytes (counted %d), limit 1500, window from %d", from, n, s.win.bytes, s.win.first)
	}
	hits := s.cacheHits
	got, err := s.Entries(from, 41, 1<<62)
	if err != nil || s.cacheHits != hits+1 || len(got) != int(41-from) {
		t.Fatalf("Entries(%d, 41): %d entries, %v, hits %d -> %d", from, len(got), err, hits, s.cacheHits)
	}
	for i, e := range got {
		if !sameEntry(e, ents[from-1+uint64(i)]) {
			t.Fatalf("cached entry %d differs from the one appended", e.Index)
		}
	}
	if _, err := s.Entries(from-1, 41, 1<<62); err != nil || s.cacheHits != hits+1 {
		t.Fatalf("a range starting before the cache was served from it (%v)", err)
	}
	// At least one entry, and then what fits, from the cache too.
	if one, _ := s.Entries(from, 41, 1); len(one) != 1 || s.cacheHits != hits+2 || s.cur.index != from+1 {
		t.Fatalf("Entries(%d, 41, 1): %d entries, cursor %+v", from, len(one), s.cur)
	}
	// A replaced tail: the new entries, never the old ones.
	repl := clone(mixedEntries(38, 41, 9, 0))
	mustAppend(t, s, repl)
	want := append(clone(ents[:37]), repl...)
	checkLog(t, s, want)
	if _, n := cachedBytes(s); n != s.win.bytes {
		t.Fatalf("after the replacement: %d bytes counted, %d cached", s.win.bytes, n)
	}
	// What the cache served is what the log holds.
	s.Close()
	s = mustOpen(t, dir, opts)
	if s.win.bytes != 0 {
		t.Fatalf("a reopened storage caches %d bytes", s.win.bytes)
	}
	checkLog(t, s, want)
	// Retention and a snapshot drop what they remove.
	mustAppend(t, s, clone(mixedEntries(42, 80, 9, 0)))
	if err := s.SetHardState(raftpb.HardState{Term: 9, Commit: 80}); err != nil {
		t.Fatal(err)
	}
	if err := s.EnforceRetention(80); err != nil {
		t.Fatal(err)
	}
	if _, n := cachedBytes(s); n != s.win.bytes || s.st.SnapIndex == 0 {
		t.Fatalf("after retention to %d: %d bytes counted, %d cached", s.st.SnapIndex, s.win.bytes, n)
	}
	snap := raftpb.Snapshot{Data: appendSnapshotData(nil, s.Log().NextOffset()+10), Metadata: raftpb.SnapshotMetadata{Index: 100, Term: 10}}
	if err := s.ApplySnapshot(snap); err != nil {
		t.Fatal(err)
	}
	if s.win.bytes != 0 {
		t.Fatalf("after a snapshot: %d bytes cached", s.win.bytes)
	}
	s.Close()

	off := mustOpen(t, t.TempDir(), Options{CacheBytes: -1})
	defer off.Close()
	mustAppend(t, off, clone(mixedEntries(1, 10, 1, 0)))
	if _, err := off.Entries(5, 11, 1<<62); err != nil || off.cacheHits != 0 || off.win.bytes != 0 {
		t.Fatalf("a storage without a cache: %v, %d hits, %d bytes", err, off.cacheHits, off.win.bytes)
	}
}

// TestStorageEntryCacheApplied: entries not yet applied stay cached up to CacheBytes; once
// Applied covers them, the cache shrinks to CacheAppliedBytes, oldest first, and never gives
// up an entry not applied to get there.
func TestStorageEntryCacheApplied(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{Window: 64, CacheBytes: 1 << 20, CacheAppliedBytes: 600})
	defer s.Close()
	mustAppend(t, s, clone(mixedEntries(1, 40, 1, 7)))
	if from, n := cachedBytes(s); from != 1 || n != s.win.bytes {
		t.Fatalf("nothing applied: cache from entry %d, %d bytes (counted %d); want every entry", from, n, s.win.bytes)
	}
	all := s.win.bytes
	if _, err := s.Applied(10); err != nil {
		t.Fatal(err)
	}
	if from, n := cachedBytes(s); from != 11 || n != s.win.bytes || n >= all {
		t.Fatalf("applied 10: cache from entry %d, %d bytes of %d; want from 11 (entries not applied stay)", from, n, all)
	}
	if _, err := s.Applied(40); err != nil {
		t.Fatal(err)
	}
	if _, n := cachedBytes(s); n > 600 || n == 0 || n != s.win.bytes {
		t.Fatalf("applied all: %d bytes cached (counted %d), want at most 600", n, s.win.bytes)
	}
	if _, err := s.Entries(40, 41, 1<<62); err != nil || s.cacheHits == 0 {
		t.Fatalf("the last entry: %v, %d cache hits", err, s.cacheHits)
	}
}
