package raftlog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/log"
	"github.com/lightq/lightq/wire"
)

// The header fields the CRC does not cover and the replica writes: byte position in the
// batch and width.
var uncovered = []struct {
	name      string
	pos, size int
}{
	{"leader epoch", 20, 4},
	{"raft index", 64, 8},
}

// batchPos is where entry i's batch lies.
type batchPos struct {
	path string
	pos  int64
	off  int64
}

// damageFixture writes a log of 60 entries in four terms over several segments, committed,
// into dir, and returns where each entry's batch is (by index).
func damageFixture(t *testing.T, dir string) map[uint64]batchPos {
	t.Helper()
	s := mustOpen(t, dir, Options{Log: log.Options{SegmentBytes: 2 << 10}})
	mustAppend(t, s, clone(mixedEntries(1, 60, 1, 15)))
	if err := s.SetHardState(raftpb.HardState{Term: 4, Commit: 60}); err != nil {
		t.Fatal(err)
	}
	where := map[uint64]batchPos{}
	for i := uint64(1); i <= 60; i++ {
		off, err := s.OffsetAfter(i - 1)
		if err != nil {
			t.Fatal(err)
		}
		c, err := s.Log().Read(off, off+1, 1)
		if err != nil {
			t.Fatal(err)
		}
		where[i] = batchPos{path: c.Path(), pos: c.Pos, off: off}
		c.Release()
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return where
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		writeFile(t, filepath.Join(to, e.Name()), readFile(t, filepath.Join(from, e.Name())))
	}
}

// flip flips bit k of the field at pos of the batch at p, in dir (a copy of the fixture's).
func flip(t *testing.T, dir string, p batchPos, pos, k int) {
	t.Helper()
	path := filepath.Join(dir, filepath.Base(p.path))
	b := readFile(t, path)
	b[p.pos+int64(pos+k/8)] ^= 1 << (k % 8)
	writeFile(t, path, b)
}

// TestHeaderBitFlips flips every bit of the leader epoch and the raft index of one entry's
// stored batch, which its CRC does not cover, in the active segment and in a sealed one:
// each flip is found (at Open for the active segment, which then cuts there with CutDamage;
// by Entries and by the scrub for a sealed one) as a CorruptEntryError naming the entry,
// and after the cut the log holds the entries before it and reports the lost commit.
func TestHeaderBitFlips(t *testing.T) {
	fixture := t.TempDir()
	where := damageFixture(t, fixture)
	if where[57].path != where[60].path || where[20].path == where[60].path {
		t.Fatalf("entries 20 and 57 in %s and %s, the active segment %s: the fixture does not split as meant", where[20].path, where[57].path, where[60].path)
	}
	firstActive := uint64(60)
	for where[firstActive-1].path == where[60].path {
		firstActive--
	}
	for _, f := range uncovered {
		for k := range 8 * f.size {
			// In the active segment, in its middle and its first batch (whose index the walk
			// takes from its header: the last batch of the sealed segment before confirms it).
			for _, at := range []uint64{57, firstActive} {
				t.Run(fmt.Sprintf("active %s entry %d", f.name, at), func(t *testing.T) {
					dir := t.TempDir()
					copyDir(t, fixture, dir)
					flip(t, dir, where[at], f.pos, k)
					_, err := Open(dir, Options{})
					var ce *CorruptEntryError
					if !errors.As(err, &ce) || ce.Index != at && f.name == "leader epoch" || ce.Offset != where[at].off {
						t.Fatalf("bit %d: Open without CutDamage: %v", k, err)
					}
					s := mustOpen(t, dir, Options{CutDamage: true})
					defer s.Close()
					if last, _ := s.LastIndex(); last != at-1 || s.LostCommit() != 60 {
						t.Fatalf("bit %d: after the cut, last %d, lost commit %d", k, last, s.LostCommit())
					}
				})
			}
			t.Run("sealed "+f.name, func(t *testing.T) {
				dir := t.TempDir()
				copyDir(t, fixture, dir)
				flip(t, dir, where[20], f.pos, k)
				s := mustOpen(t, dir, Options{CutDamage: true, Window: 4})
				defer s.Close()
				// Entries found by the search over offsets: the right one or an error, never
				// the damaged batch as another entry.
				for i := uint64(2); i < 40; i++ {
					s.cur.valid = false
					got, err := s.Entries(i, i+1, 1)
					if err != nil {
						continue
					}
					p := where[i]
					b := readFile(t, filepath.Join(fixture, filepath.Base(p.path)))[p.pos:]
					if want := b[:wire.BatchSize(b)]; got[0].Index != i || got[0].Type == raftpb.EntryNormal && len(got[0].Data) > 0 && !bytes.Equal(got[0].Data, want) {
						t.Fatalf("bit %d: Entries(%d) gave entry %d, not its stored batch", k, i, got[0].Index)
					}
				}
				_, err := s.Entries(1, 61, 1<<30)
				var ce *CorruptEntryError
				if !errors.As(err, &ce) || ce.Index != 20 {
					t.Fatalf("bit %d: Entries: %v", k, err)
				}
				var scrubbed int64
				for range 100 {
					res, err := s.Scrub(512)
					scrubbed += res.Bytes
					if err != nil {
						if !errors.As(err, &ce) || ce.Index != 20 || ce.Offset != where[20].off {
							t.Fatalf("bit %d: Scrub: %v", k, err)
						}
						break
					}
					if res.Passed {
						t.Fatalf("bit %d: the scrub passed over the damage (%d bytes)", k, scrubbed)
					}
				}
				if scrubbed != where[20].pos {
					t.Fatalf("bit %d: scrubbed %d bytes before the damage at %d", k, scrubbed, where[20].pos)
				}
				if err := s.CutDamaged(ce); err != nil {
					t.Fatal(err)
				}
				if last, _ := s.LastIndex(); last != 19 || s.LostCommit() != 60 {
					t.Fatalf("bit %d: after the cut, last %d, lost commit %d", k, last, s.LostCommit())
				}
			})
		}
	}
}

// TestCutBeyondCommit: a replica acknowledges entries past its own commit index (its leader
// counts them stored here), so a cut of damaged entries reports the last entry it held as
// lost, not only its commit index: at Open, in the active segment's middle and first batch,
// and by CutDamaged.
func TestCutBeyondCommit(t *testing.T) {
	fixture := t.TempDir()
	where := damageFixture(t, fixture)
	{
		s := mustOpen(t, fixture, Options{})
		if err := s.SetHardState(raftpb.HardState{Term: 4, Commit: 10}); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	firstActive := uint64(60)
	for where[firstActive-1].path == where[60].path {
		firstActive--
	}
	for _, at := range []uint64{57, firstActive} {
		for _, f := range uncovered {
			dir := t.TempDir()
			copyDir(t, fixture, dir)
			flip(t, dir, where[at], f.pos, 2)
			s := mustOpen(t, dir, Options{CutDamage: true})
			if last, _ := s.LastIndex(); last != at-1 || s.LostCommit() != 60 {
				t.Fatalf("%s of entry %d: last %d, lost commit %d; want %d, 60", f.name, at, last, s.LostCommit(), at-1)
			}
			s.Close()
		}
	}
	// A byte the CRC covers: the log's own Open cuts the batch and the valid ones after it.
	for _, at := range []uint64{57, firstActive} {
		dir := t.TempDir()
		copyDir(t, fixture, dir)
		flip(t, dir, where[at], 30, 0) // the first timestamp
		s := mustOpen(t, dir, Options{CutDamage: true, Log: log.Options{CutDamage: true}})
		if last, _ := s.LastIndex(); last != at-1 || s.LostCommit() != 60 {
			t.Fatalf("CRC damage in entry %d: last %d, lost commit %d; want %d, 60", at, last, s.LostCommit(), at-1)
		}
		s.Close()
	}
	s := mustOpen(t, fixture, Options{})
	defer s.Close()
	if err := s.CutDamaged(&CorruptEntryError{Index: 20, Offset: where[20].off}); err != nil {
		t.Fatal(err)
	}
	if s.LostCommit() != 60 {
		t.Fatalf("CutDamaged: lost commit %d, want 60", s.LostCommit())
	}
}

// TestScrub: the scrub goes through the sealed segments of a sound log and starts over;
// entries cut, or retention, move it back to the start.
func TestScrub(t *testing.T) {
	dir := t.TempDir()
	where := damageFixture(t, dir)
	s := mustOpen(t, dir, Options{CutDamage: true})
	defer s.Close()
	sealedEnd := int64(0)
	for _, p := range where {
		if p.path != where[60].path {
			sealedEnd = max(sealedEnd, p.off)
		}
	}
	for pass := range 2 {
		var bytes int64
		for n := 0; ; n++ {
			res, err := s.Scrub(1000)
			if err != nil || n > 1000 {
				t.Fatalf("pass %d: %v after %d steps", pass, err, n)
			}
			bytes += res.Bytes
			if res.Passed {
				break
			}
		}
		if bytes == 0 || s.ScrubPasses() != uint64(pass+1) {
			t.Fatalf("pass %d: %d bytes, %d passes", pass, bytes, s.ScrubPasses())
		}
	}
	if _, err := s.Scrub(100); err != nil {
		t.Fatal(err)
	}
	if err := s.CutDamaged(&CorruptEntryError{Index: 5, Offset: where[5].off}); err != nil {
		t.Fatal(err)
	}
	if s.scrub.gen == s.gen {
		t.Fatal("the cut did not move the scrub back")
	}
	if res, err := s.Scrub(1 << 20); err != nil || !res.Passed || res.Bytes != 0 {
		t.Fatalf("after the cut: %+v %v", res, err) // entries 1-4 are in the active segment now
	}
}

// BenchmarkScrub: one pass of the scrub over 8 MiB of sealed segments (batches of 16 KiB),
// in steps of 256 KiB as the partition takes them: the CPU a scrub costs per byte.
func BenchmarkScrub(b *testing.B) {
	dir := b.TempDir()
	s := mustOpen(b, dir, Options{Log: log.Options{SegmentBytes: 1 << 20}})
	defer s.Close()
	const n = 512
	ents := make([]raftpb.Entry, n)
	for i := range ents {
		ents[i] = dataEntry(uint64(i+1), 1, 1)
		vals := make([]string, 64)
		for k := range vals {
			vals[k] = string(make([]byte, 250))
		}
		ents[i].Data = recordBatch(vals...)
	}
	mustAppend(b, s, ents)
	var total int64
	for {
		res, err := s.Scrub(256 << 10)
		if err != nil {
			b.Fatal(err)
		}
		total += res.Bytes
		if res.Passed {
			break
		}
	}
	b.SetBytes(total)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for {
			res, err := s.Scrub(256 << 10)
			if err != nil {
				b.Fatal(err)
			}
			if res.Passed {
				break
			}
		}
	}
}
