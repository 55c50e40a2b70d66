package raftlog

import (
	"bytes"
	"sync"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/log"
	"github.com/lightq/lightq/wire"
)

// TestPrepareAppend: entries PrepareAppend wrote into are stored byte for byte as Append
// alone stores them (the same log as a Storage given the same entries without it), across
// segment rolls, control entries and a term change, while other goroutines read the entries'
// bytes during the Append (the race detector finds any write Append would still make).
func TestPrepareAppend(t *testing.T) {
	opts := Options{Window: 4, Log: log.Options{SegmentBytes: 2 << 10}}
	plain := mustOpen(t, t.TempDir(), opts)
	defer plain.Close()
	prep := mustOpen(t, t.TempDir(), opts)
	defer prep.Close()
	ents := mixedEntries(1, 90, 1, 30)
	want := clone(ents)
	for i := 0; i < len(want); i += 6 {
		mustAppend(t, plain, want[i:min(i+6, len(want))])
	}
	got := clone(ents)
	for i := 0; i < len(got); i += 6 {
		ready := got[i:min(i+6, len(got))]
		if !prep.PrepareAppend(ready) {
			t.Fatalf("PrepareAppend(%d-%d) refused entries that extend the log", ready[0].Index, ready[len(ready)-1].Index)
		}
		for _, e := range ready {
			if e.Type != raftpb.EntryNormal || len(e.Data) == 0 {
				continue
			}
			h, err := wire.PeekBatchHeader(e.Data)
			if err != nil || h.RaftIndex != e.Index || uint64(h.LeaderEpoch) != e.Term {
				t.Fatalf("entry %d after PrepareAppend: index %d epoch %d (%v)", e.Index, h.RaftIndex, h.LeaderEpoch, err)
			}
		}
		var wg sync.WaitGroup
		for _, e := range ready { // as the transport marshals them meanwhile
			wg.Go(func() { _ = bytes.Clone(e.Data) })
		}
		mustAppend(t, prep, ready)
		wg.Wait()
	}
	checkLog(t, prep, want)
	a, b := storedBatches(t, plain), storedBatches(t, prep)
	if len(a) != len(b) {
		t.Fatalf("%d batches stored with PrepareAppend, %d without", len(b), len(a))
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			t.Fatalf("batch %d differs from the one Append alone stores", i)
		}
	}
}

// TestPrepareAppendRefuses: PrepareAppend declines what does not simply extend the log, and
// an Append that finds a prepared field changed fails rather than storing it.
func TestPrepareAppendRefuses(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{})
	defer s.Close()
	mustAppend(t, s, clone(mixedEntries(1, 5, 1, 0)))
	for name, ents := range map[string][]raftpb.Entry{
		"replacement": {dataEntry(5, 2, 1)},
		"gap":         {dataEntry(7, 1, 1)},
		"older term":  {dataEntry(6, 1, 1), dataEntry(7, 0, 1)},
		"not a batch": {{Index: 6, Term: 1, Type: raftpb.EntryNormal, Data: []byte("not a batch")}},
		"none":        nil,
	} {
		if s.PrepareAppend(ents) {
			t.Errorf("%s: PrepareAppend accepted it", name)
		}
	}
	ents := []raftpb.Entry{dataEntry(6, 1, 2), dataEntry(7, 1, 1)}
	if !s.PrepareAppend(ents) {
		t.Fatal("PrepareAppend refused entries that extend the log")
	}
	wire.SetBatchRaftIndex(ents[1].Data, 99)
	if err := s.Append(ents); err == nil {
		t.Fatal("Append stored an entry whose prepared raft index changed")
	}
}
