package raftlog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/log"
	"github.com/lightq/lightq/log/vfs"
	"github.com/lightq/lightq/wire"
)

// rawEntry is the stored batch of a data entry, as Append would write it, without Append's
// checks: for logs Append would never write.
func rawEntry(index uint64, term int32, records int) []byte {
	b := dataEntry(index, 1, records).Data
	wire.SetBatchLeaderEpoch(b, term)
	wire.SetBatchRaftIndex(b, index)
	return b
}

// writeRaw appends batches to the segment log in dir directly, and saves st as the state.
func writeRaw(t *testing.T, dir string, st State, batches ...[]byte) {
	t.Helper()
	l, err := log.Open(dir, log.Options{Producers: log.ProducerOptions{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range batches {
		if _, err := l.Append(b, wire.PeekBatchHeaderUnchecked(b).RecordCount); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	sf, _, err := OpenState(vfs.OS, filepath.Join(dir, StateFileName))
	if err != nil {
		t.Fatal(err)
	}
	if err := sf.Save(st, true); err != nil {
		t.Fatal(err)
	}
	sf.Close()
}

// TestOpenRefuses: a directory that does not hold a replica's Raft log is refused with an
// error naming what is wrong and where (file, offset); nothing is changed.
func TestOpenRefuses(t *testing.T) {
	magic1 := func() []byte {
		var bb wire.BatchBuilder
		bb.Append(1, nil, []byte("v"), nil)
		b, _ := bb.Finish(wire.CodecNone, nil)
		return append([]byte(nil), b...)
	}()
	for _, tc := range []struct {
		name    string
		write   func(t *testing.T, dir string)
		want    error
		message string
	}{
		{"a log without raft state", func(t *testing.T, dir string) {
			writeRaw(t, dir, State{}, rawEntry(1, 1, 1))
			if err := os.Remove(filepath.Join(dir, StateFileName)); err != nil {
				t.Fatal(err)
			}
		}, ErrCorrupt, "holds offsets [0, 1) but no raft state"},
		{"the first batch is not the entry after the snapshot", func(t *testing.T, dir string) {
			writeRaw(t, dir, State{SnapIndex: 3, SnapTerm: 1}, rawEntry(1, 1, 1), rawEntry(2, 1, 1))
		}, ErrCorrupt, "00000000000000000000.log: batch at offset 0 (entry 4): base offset 0, raft index 1: not the entry after the snapshot at 3"},
		{"the first offset inside a batch", func(t *testing.T, dir string) {
			writeRaw(t, dir, State{FirstOffset: 1}, rawEntry(1, 1, 3))
		}, ErrCorrupt, "batch at offset 1 (entry 1): base offset 0, raft index 1: not the entry after the snapshot at 0"},
		{"the first offset past the log", func(t *testing.T, dir string) {
			writeRaw(t, dir, State{FirstOffset: 10000}, rawEntry(1, 1, 1))
		}, ErrCorrupt, "starts at offset 10000 (entry 1), but the log holds [0, 1)"},
		{"indexes not consecutive", func(t *testing.T, dir string) {
			writeRaw(t, dir, State{}, rawEntry(1, 1, 2), rawEntry(2, 1, 1), rawEntry(4, 1, 1))
		}, ErrCorrupt, "00000000000000000000.log: batch at offset 3 (entry 3): raft index 4, want 3: the indexes are not consecutive"},
		{"a term going down", func(t *testing.T, dir string) {
			writeRaw(t, dir, State{}, rawEntry(1, 2, 1), rawEntry(2, 2, 1), rawEntry(3, 1, 1))
		}, ErrCorrupt, "batch at offset 2 (entry 3): term 1 after term 2"},
		{"a format-1 batch", func(t *testing.T, dir string) {
			writeRaw(t, dir, State{}, rawEntry(1, 1, 1), magic1)
		}, ErrCorrupt, "batch at offset 1 (entry 2): magic 1"},
		{"a damaged state file", func(t *testing.T, dir string) {
			writeRaw(t, dir, State{}, rawEntry(1, 1, 1))
			path := filepath.Join(dir, StateFileName)
			b := readFile(t, path)
			for i := range b {
				b[i] ^= 0x55
			}
			writeFile(t, path, b)
		}, ErrDamagedState, StateFileName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.write(t, dir)
			s, err := Open(dir, Options{})
			if err == nil {
				s.Close()
				t.Fatal("opened")
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("Open: %v\nwant %v saying %q", err, tc.want, tc.message)
			}
		})
	}
	if _, err := Open(t.TempDir(), Options{Log: log.Options{Producers: log.ProducerOptions{Expiry: 1}}}); err == nil || !strings.Contains(err.Error(), "Producers must be zero") {
		t.Fatalf("producer options: %v", err)
	}
}

// TestOpenRecovers: states a crash can leave, which Open accepts: batches below the first
// offset (retention cut short), a reset still to do (ApplySnapshot cut short), a commit
// index past entries the fsync policy lost.
func TestOpenRecovers(t *testing.T) {
	t.Run("batches below the first offset", func(t *testing.T) {
		dir := t.TempDir()
		writeRaw(t, dir, State{SnapIndex: 2, SnapTerm: 1, FirstOffset: 3, HardState: raftpb.HardState{Term: 1, Commit: 4}},
			rawEntry(1, 1, 2), rawEntry(2, 1, 1), rawEntry(3, 1, 2), rawEntry(4, 1, 1))
		s := mustOpen(t, dir, Options{})
		defer s.Close()
		first, _ := s.FirstIndex()
		last, _ := s.LastIndex()
		got, err := s.Entries(3, 5, 1<<30)
		if first != 3 || last != 4 || err != nil || len(got) != 2 || got[0].Index != 3 {
			t.Fatalf("first %d last %d, entries %v %v", first, last, got, err)
		}
	})
	t.Run("a reset to finish", func(t *testing.T) {
		dir := t.TempDir()
		writeRaw(t, dir, State{SnapIndex: 50, SnapTerm: 3, FirstOffset: 777, ResetPending: true, HardState: raftpb.HardState{Term: 3, Commit: 50}},
			rawEntry(1, 1, 2), rawEntry(2, 1, 1))
		s := mustOpen(t, dir, Options{})
		first, _ := s.FirstIndex()
		last, _ := s.LastIndex()
		if first != 51 || last != 50 || s.State().ResetPending || s.Log().StartOffset() != 777 || s.Log().NextOffset() != 777 {
			t.Fatalf("first %d last %d state %+v log [%d, %d)", first, last, s.State(), s.Log().StartOffset(), s.Log().NextOffset())
		}
		s.Close()
		s = mustOpen(t, dir, Options{}) // and it stays done
		defer s.Close()
		if s.State().ResetPending || s.Log().NextOffset() != 777 {
			t.Fatalf("reopened: %+v", s.State())
		}
	})
	t.Run("a commit past the log", func(t *testing.T) {
		dir := t.TempDir()
		writeRaw(t, dir, State{HardState: raftpb.HardState{Term: 1, Vote: 2, Commit: 9}}, rawEntry(1, 1, 1), rawEntry(2, 1, 1))
		s := mustOpen(t, dir, Options{})
		defer s.Close()
		if hs, _, _ := s.InitialState(); hs != (raftpb.HardState{Term: 1, Vote: 2, Commit: 2}) {
			t.Fatalf("InitialState %+v, want the commit at the last entry", hs)
		}
	})
	t.Run("an empty active segment after sealed ones", func(t *testing.T) {
		// A crash after a roll created the new segment, before its first batch was written.
		dir := t.TempDir()
		opts := Options{Log: log.Options{SegmentBytes: 1 << 10}}
		s := mustOpen(t, dir, opts)
		ents := clone(mixedEntries(1, 40, 1, 0))
		mustAppend(t, s, ents)
		next := s.Log().NextOffset()
		s.Close()
		empty := filepath.Join(dir, fmt.Sprintf("%020d.log", next))
		writeFile(t, empty, nil)
		s = mustOpen(t, dir, Options{Window: 3, Log: opts.Log})
		defer s.Close()
		checkLog(t, s, ents)
		if _, err := os.Stat(empty); !os.IsNotExist(err) {
			t.Fatalf("the empty segment is still there: %v", err)
		}
		if !s.Log().InActiveSegment(next - 1) {
			t.Fatal("the last batch is not in the active segment")
		}
		mustAppend(t, s, clone(mixedEntries(41, 41, 1, 0)))
	})
}

// FuzzDecodeEntry: decodeEntry, the decoder of stored batches into entries, refuses what is
// not entry index at offset off and never panics; an accepted control batch's entry carries
// its value, an accepted record batch's entry the batch itself.
func FuzzDecodeEntry(f *testing.F) {
	f.Add(rawEntry(3, 2, 2), uint64(3), int64(0))
	ctl := wire.AppendControlBatch(nil, wire.ControlConfChange, []byte{8, 1})
	wire.SetBatchLeaderEpoch(ctl, 4)
	wire.SetBatchRaftIndex(ctl, 9)
	wire.SetBaseOffset(ctl, 20)
	f.Add(ctl, uint64(9), int64(20))
	f.Add(wire.AppendControlBatch(nil, 7, nil), uint64(0), int64(0))
	f.Add(wire.AppendControlBatch(nil, wire.ControlEmptyEntry, []byte("x")), uint64(0), int64(0))
	f.Fuzz(func(t *testing.T, b []byte, index uint64, off int64) {
		e, next, err := decodeEntry(b, index, off, 1<<20, "fuzz")
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		h := wire.PeekBatchHeaderUnchecked(b)
		if e.Index != index || h.RaftIndex != index || h.BaseOffset != off || e.Term != uint64(h.LeaderEpoch) || next != h.NextOffset() {
			t.Fatalf("entry %+v from header %+v (index %d offset %d), next %d", e, h, index, off, next)
		}
		bt, _ := wire.ParseBatch(b, 1<<20)
		if !bt.IsControl() {
			if e.Type != raftpb.EntryNormal || !bytes.Equal(e.Data, b) {
				t.Fatalf("record batch gave %v with %d bytes", e.Type, len(e.Data))
			}
			return
		}
		typ, value, err := wire.ParseControl(&bt)
		if err != nil || uint8(e.Type) != typ && typ != wire.ControlEmptyEntry || !bytes.Equal(e.Data, value) {
			t.Fatalf("control batch (type %d, %d bytes, %v) gave %v with %d bytes", typ, len(value), err, e.Type, len(e.Data))
		}
	})
}
