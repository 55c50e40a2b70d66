package raftlog

import (
	"bytes"
	"fmt"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/cluster/replica"
	"github.com/lightq/lightq/wire"
)

var _ replica.Storage = (*Storage)(nil)

// recordBatch is a format-2 batch of one record per value, as a producer sends it.
func recordBatch(values ...string) []byte {
	var bb wire.BatchBuilder
	bb.SetMagic(wire.BatchMagic2)
	for i, v := range values {
		bb.Append(1_700_000_000_000+int64(i), nil, []byte(v), nil)
	}
	b, err := bb.Finish(wire.CodecNone, nil)
	if err != nil {
		panic(err)
	}
	return bytes.Clone(b)
}

// dataEntry is a normal entry holding a batch of n records.
func dataEntry(index, term uint64, n int) raftpb.Entry {
	values := make([]string, n)
	for i := range values {
		values[i] = fmt.Sprintf("e%d-r%d", index, i)
	}
	return raftpb.Entry{Index: index, Term: term, Type: raftpb.EntryNormal, Data: recordBatch(values...)}
}

func emptyEntry(index, term uint64) raftpb.Entry {
	return raftpb.Entry{Index: index, Term: term, Type: raftpb.EntryNormal}
}

func confEntry(index, term, node uint64) raftpb.Entry {
	cc := raftpb.ConfChange{Type: raftpb.ConfChangeAddNode, NodeID: node}
	data, err := cc.Marshal()
	if err != nil {
		panic(err)
	}
	return raftpb.Entry{Index: index, Term: term, Type: raftpb.EntryConfChange, Data: data}
}

func confV2Entry(index, term uint64) raftpb.Entry {
	cc := raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeAddLearnerNode, NodeID: 9}}}
	data, err := cc.Marshal()
	if err != nil {
		panic(err)
	}
	return raftpb.Entry{Index: index, Term: term, Type: raftpb.EntryConfChangeV2, Data: data}
}

// mixedEntries are entries from..to: a leader's empty entry at each term change, a
// membership change now and then, batches of 1-4 records otherwise; the term goes up by one
// every termEvery entries.
func mixedEntries(from, to, term uint64, termEvery int) []raftpb.Entry {
	var out []raftpb.Entry
	for i := from; i <= to; i++ {
		n := int(i - from)
		if termEvery > 0 && n > 0 && n%termEvery == 0 {
			term++
		}
		switch {
		case termEvery > 0 && n%termEvery == 0:
			out = append(out, emptyEntry(i, term))
		case i%11 == 0:
			out = append(out, confEntry(i, term, i))
		case i%13 == 0:
			out = append(out, confV2Entry(i, term))
		default:
			out = append(out, dataEntry(i, term, 1+int(i%4)))
		}
	}
	return out
}

// clone deep-copies entries (Append writes into the data of normal entries).
func clone(ents []raftpb.Entry) []raftpb.Entry {
	out := make([]raftpb.Entry, len(ents))
	for i, e := range ents {
		out[i] = e
		out[i].Data = bytes.Clone(e.Data)
	}
	return out
}

func mustOpen(t testing.TB, dir string, opts Options) *Storage {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func mustAppend(t testing.TB, s *Storage, ents []raftpb.Entry) {
	t.Helper()
	if err := s.Append(ents); err != nil {
		t.Fatalf("Append %d-%d: %v", ents[0].Index, ents[len(ents)-1].Index, err)
	}
}

// sameEntry compares a stored entry with what was appended (whose data Append filled in).
func sameEntry(got, want raftpb.Entry) bool {
	return got.Index == want.Index && got.Term == want.Term && got.Type == want.Type && bytes.Equal(got.Data, want.Data)
}

// checkLog checks that s holds exactly want (which Append was given), through Entries and
// Term, and that every batch of the log is the entry's stored batch.
func checkLog(t testing.TB, s *Storage, want []raftpb.Entry) {
	t.Helper()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if len(want) == 0 {
		if last != first-1 {
			t.Fatalf("first %d last %d, want an empty log", first, last)
		}
		return
	}
	if first != want[0].Index || last != want[len(want)-1].Index {
		t.Fatalf("first %d last %d, want %d %d", first, last, want[0].Index, want[len(want)-1].Index)
	}
	got, err := s.Entries(first, last+1, 1<<62)
	if err != nil {
		t.Fatalf("Entries(%d, %d): %v", first, last+1, err)
	}
	if len(got) != len(want) {
		t.Fatalf("Entries gave %d entries, want %d", len(got), len(want))
	}
	for i := range got {
		if !sameEntry(got[i], want[i]) {
			t.Fatalf("entry %d: got %+v, want %+v", want[i].Index, got[i], want[i])
		}
		if term, err := s.Term(want[i].Index); err != nil || term != want[i].Term {
			t.Fatalf("Term(%d) = %d, %v; want %d", want[i].Index, term, err, want[i].Term)
		}
	}
}

// storedBatches reads every batch of s's log, in order.
func storedBatches(t testing.TB, s *Storage) [][]byte {
	t.Helper()
	l := s.Log()
	var out [][]byte
	for off := l.StartOffset(); off < l.NextOffset(); {
		c, err := l.Read(off, l.NextOffset(), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, c.Len)
		if _, err := c.File.ReadAt(buf, c.Pos); err != nil {
			t.Fatal(err)
		}
		off = c.NextOffset
		c.Release()
		for len(buf) > 0 {
			n := wire.BatchSize(buf)
			out = append(out, buf[:n])
			buf = buf[n:]
		}
	}
	return out
}
