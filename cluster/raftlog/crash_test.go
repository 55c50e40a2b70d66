package raftlog

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/log"
	"github.com/lightq/lightq/log/vfs/crashfs"
	"github.com/lightq/lightq/wire"
)

// TestStoragePowerLoss: appends (with conflicting tails replaced), hard-state saves (synced
// and not), membership saves, retention and snapshots, with the power cut at a random file
// system operation (crashfs: every unsynced write applied, dropped, torn or garbled). After
// the crash the storage opens; its indexes are consecutive (Entries checks every batch's index
// and CRC); its hard state is one that was saved, no older than the last synced one; and
// nothing acknowledged is lost: every entry an Append returned for (SyncEachAppend) and no
// later operation replaced or compacted is there, byte for byte, except what the operation
// the crash interrupted was replacing.
//
// 300 iterations, 3000 with LIGHTQ_LONG=1, 40 with -short. A failure names its seed.
func TestStoragePowerLoss(t *testing.T) {
	iters := 300
	if os.Getenv("LIGHTQ_LONG") == "1" {
		iters = 3000
	}
	if testing.Short() {
		iters = 40
	}
	var st powerStats
	for i := range iters {
		seed := uint64(7000 + i)
		if !t.Run("", func(t *testing.T) { powerLossOnce(t, seed, &st) }) {
			t.Fatalf("seed %d failed", seed)
		}
	}
	t.Logf("power loss: %d runs, %d entries acknowledged, %d found again after the crash, lost 0; interrupted: %v",
		iters, st.acked, st.present, st.interrupted)
}

type powerStats struct {
	acked, present int
	interrupted    map[string]int
}

// powerModel is what the storage must hold: what every operation that returned nil left.
type powerModel struct {
	snapIndex, snapTerm uint64
	ents                []raftpb.Entry // snapIndex+1 ...
	term                uint64         // the highest term used
	hs                  raftpb.HardState
	saves               []raftpb.HardState // the hard state of every state file save, in order
	lastSynced          int                // index in saves of the last synced one
}

func (m *powerModel) last() uint64 { return m.snapIndex + uint64(len(m.ents)) }

func (m *powerModel) termOf(i uint64) uint64 {
	if i == m.snapIndex {
		return m.snapTerm
	}
	return m.ents[i-m.snapIndex-1].Term
}

// saved notes a state file save of the hard state hs.
func (m *powerModel) saved(hs raftpb.HardState, synced bool) {
	m.saves = append(m.saves, hs)
	if synced {
		m.lastSynced = len(m.saves) - 1
	}
}

// pending is the operation the crash interrupted.
type pending struct {
	kind     string
	from     uint64 // append: the first index
	ents     []raftpb.Entry
	hs       raftpb.HardState // set-hard-state, and the hard state of every other save
	snap     raftpb.SnapshotMetadata
	snapOff  int64
	hasState bool // the operation saves the state file
}

func powerLossOnce(t *testing.T, seed uint64, stats *powerStats) {
	rng := rand.New(rand.NewPCG(seed, 31))
	dir := t.TempDir()
	fsys := crashfs.New()
	opts := Options{
		SyncEachAppend: true,
		Window:         1 + rng.IntN(8),
		Log: log.Options{FS: fsys, SegmentBytes: int64(1<<10 + rng.IntN(3<<10)), CheckpointInterval: -1,
			RetentionBytes: int64(2<<10 + rng.IntN(6<<10))},
	}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	m := &powerModel{term: 1}
	m.saved(raftpb.HardState{}, true) // Open's first save
	// A quarter of the runs die inside a retention (rare otherwise: few of the operations are
	// retention's); the rest anywhere.
	killInRetention := rng.IntN(4) == 0
	if !killInRetention {
		fsys.KillAfter(1 + rng.IntN(400))
	}
	var p pending
	newEntries := func(from uint64, n int, term uint64) []raftpb.Entry {
		var out []raftpb.Entry
		for i := from; i < from+uint64(n); i++ {
			switch r := rng.IntN(10); {
			case r == 0:
				out = append(out, emptyEntry(i, term))
			case r == 1:
				out = append(out, confEntry(i, term, 1+uint64(rng.IntN(5))))
			default:
				out = append(out, dataEntry(i, term, 1+rng.IntN(4)))
			}
		}
		return out
	}
	for step := 0; step < 120 || killInRetention && step < 400; step++ {
		var err error
		switch r := rng.IntN(20); {
		case r < 10: // append after the last entry, sometimes replacing an uncommitted tail
			from := m.last() + 1
			if lo := max(m.hs.Commit, m.snapIndex) + 1; rng.IntN(4) == 0 && lo <= m.last() {
				from = lo + uint64(rng.IntN(int(m.last()-lo+1)))
				m.term++ // a new leader replaces the tail
			}
			p = pending{kind: "append", from: from, ents: newEntries(from, 1+rng.IntN(5), m.term)}
			if from <= m.last() {
				p.kind = "replace"
			}
			if err = s.Append(p.ents); err == nil {
				m.ents = append(m.ents[:from-m.snapIndex-1], p.ents...)
			}
		case r < 15: // a hard state: a new term or vote (synced), or the commit index moving
			hs := m.hs
			if rng.IntN(3) == 0 {
				m.term++
				hs.Term, hs.Vote = m.term, 1+uint64(rng.IntN(3))
			} else if m.last() > hs.Commit {
				hs.Commit += 1 + uint64(rng.IntN(int(m.last()-hs.Commit)))
			}
			p = pending{kind: "hard-state", hs: hs, hasState: true}
			if err = s.SetHardState(hs); err == nil && hs != m.hs {
				m.saved(hs, hs.Term != m.hs.Term || hs.Vote != m.hs.Vote)
				m.hs = hs
			}
		case r < 16:
			p = pending{kind: "membership", hs: m.hs, hasState: true}
			if err = s.SetConfState(raftpb.ConfState{Voters: []uint64{1, 2, 3}}, m.hs.Commit); err == nil {
				m.saved(m.hs, true)
			}
		case r < 19: // retention up to the commit index
			p = pending{kind: "retention", hs: m.hs, hasState: true}
			if killInRetention && !s.Log().InActiveSegment(s.Log().StartOffset()) && s.Log().Size() > opts.Log.RetentionBytes {
				// Commit everything first, so that this retention deletes segments.
				hs := m.hs
				hs.Commit = m.last()
				if err := s.SetHardState(hs); err != nil {
					t.Fatal(err)
				}
				m.saved(hs, false)
				m.hs, p.hs = hs, hs
				fsys.KillAfter(1 + rng.IntN(8))
				killInRetention = false
			}
			before := s.State().SnapIndex
			if err = s.EnforceRetention(m.hs.Commit); err == nil {
				if after := s.State(); after.SnapIndex != before {
					if after.SnapTerm != m.termOf(after.SnapIndex) {
						t.Fatalf("seed %d: retention to entry %d recorded term %d, the entry's is %d", seed, after.SnapIndex, after.SnapTerm, m.termOf(after.SnapIndex))
					}
					m.ents = m.ents[after.SnapIndex-m.snapIndex:]
					m.snapIndex, m.snapTerm = after.SnapIndex, after.SnapTerm
					m.saved(m.hs, true)
				}
			}
		default: // a snapshot from a leader far ahead
			m.term++
			meta := raftpb.SnapshotMetadata{Index: m.last() + 1 + uint64(rng.IntN(20)), Term: m.term, ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}}}
			off := s.Log().NextOffset() + int64(rng.IntN(100))
			hs := m.hs
			hs.Commit = max(hs.Commit, meta.Index)
			p = pending{kind: "snapshot", hs: hs, snap: meta, snapOff: off, hasState: true}
			if err = s.ApplySnapshot(raftpb.Snapshot{Data: appendSnapshotData(nil, off), Metadata: meta}); err == nil {
				m.snapIndex, m.snapTerm, m.ents = meta.Index, meta.Term, nil
				m.hs = hs
				m.saved(hs, true)
				m.saved(hs, true)
			}
		}
		if err != nil {
			if dead, _, _ := fsys.Killed(); !dead {
				t.Fatalf("seed %d step %d %s: error before the kill: %v", seed, step, p.kind, err)
			}
			break
		}
		p = pending{}
	}
	if p.kind != "" {
		if stats.interrupted == nil {
			stats.interrupted = map[string]int{}
		}
		stats.interrupted[p.kind]++
	}
	if err := fsys.Crash(rng); err != nil {
		t.Fatal(err)
	}

	s2, err := Open(dir, Options{Window: opts.Window, Log: log.Options{FS: fsys}})
	if err != nil {
		t.Fatalf("seed %d: Open after the crash (interrupted %q): %v", seed, p.kind, err)
	}
	defer s2.Close()
	checkPowerLoss(t, seed, s2, m, &p, stats)
	// The recovered storage takes the next entry at the next offset.
	last, _ := s2.LastIndex()
	lastTerm, _ := s2.Term(last)
	next := dataEntry(last+1, max(lastTerm, 1), 1)
	if err := s2.Append([]raftpb.Entry{next}); err != nil {
		t.Fatalf("seed %d: append after recovery: %v", seed, err)
	}
	if bt, _ := wire.ParseBatch(next.Data, 1<<20); bt.NextOffset() != s2.Log().NextOffset() {
		t.Fatalf("seed %d: the entry after recovery ends at %d, the log at %d", seed, bt.NextOffset(), s2.Log().NextOffset())
	}
}

// checkPowerLoss checks the recovered storage s against the model and the interrupted
// operation p.
func checkPowerLoss(t *testing.T, seed uint64, s *Storage, m *powerModel, p *pending, stats *powerStats) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d (interrupted %q): %s", seed, p.kind, fmt.Sprintf(format, args...))
	}
	st := s.State()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	var got []raftpb.Entry
	if last >= first {
		var err error
		if got, err = s.Entries(first, last+1, 1<<62); err != nil {
			fail("Entries(%d, %d): %v", first, last+1, err)
		}
	}
	for i, e := range got {
		if e.Index != first+uint64(i) {
			fail("entry %d at position %d", e.Index, i)
		}
		if term, err := s.Term(e.Index); err != nil || term != e.Term {
			fail("Term(%d) = %d, %v; the batch says %d", e.Index, term, err, e.Term)
		}
	}
	// The hard state is one that was saved, no older than the last synced one.
	saves := m.saves
	if p.hasState {
		saves = append(slices.Clone(saves), p.hs)
	}
	found := slices.Index(saves[m.lastSynced:], st.HardState) >= 0
	if !found {
		fail("hard state %+v: none saved since the last synced one (%+v); saves %v", st.HardState, m.saves[m.lastSynced], saves)
	}

	if p.kind == "snapshot" && st.SnapIndex == p.snap.Index {
		if len(got) != 0 || st.FirstOffset != p.snapOff || s.Log().NextOffset() != p.snapOff || st.SnapTerm != p.snap.Term {
			fail("after the snapshot at %d: %d entries, state %+v, log ends at %d", p.snap.Index, len(got), st, s.Log().NextOffset())
		}
		return
	}
	// Entries below the model's start may be gone (retention), and an interrupted retention
	// may have moved the start further: entries from max of the two on must be the model's,
	// but for a tail the interrupted append was replacing.
	if first < m.snapIndex+1 || p.kind != "retention" && first != m.snapIndex+1 {
		fail("first index %d, the model's is %d", first, m.snapIndex+1)
	}
	if st.SnapIndex >= m.snapIndex && st.SnapIndex <= m.last() && st.SnapTerm != m.termOf(st.SnapIndex) {
		fail("snapshot term %d at %d, the entry's term is %d", st.SnapTerm, st.SnapIndex, m.termOf(st.SnapIndex))
	}
	cut := m.last() + 1 // from here on, the interrupted append may have replaced entries
	if p.kind == "append" || p.kind == "replace" {
		cut = p.from
	}
	for i := first; i <= m.last() && i < cut; i++ {
		stats.acked++
		if i > last || !sameEntry(got[i-first], m.ents[i-m.snapIndex-1]) {
			fail("acknowledged entry %d lost or changed (the log ends at %d)", i, last)
		}
		stats.present++
	}
	// From cut on: the model's old tail (what the interrupted append was replacing, all of
	// it unless the cut had begun) or a prefix of the interrupted append's entries.
	var rest, old []raftpb.Entry
	if last >= cut {
		rest = got[cut-first:]
	}
	if cut <= m.last() {
		old = m.ents[cut-m.snapIndex-1:]
	}
	switch {
	case len(rest) > 0 && isPrefix(rest, p.ents):
	case isPrefix(rest, old) && (len(rest) == len(old) || p.kind == "replace"):
		if p.kind != "replace" { // else: the tail being replaced, which nothing acknowledged
			stats.acked += len(old)
			stats.present += len(rest)
		}
	default:
		fail("entries %d-%d are neither the acknowledged tail (%d entries) nor the interrupted append's", cut, last, len(old))
	}
}

func isPrefix(got, of []raftpb.Entry) bool {
	if len(got) > len(of) {
		return false
	}
	for i := range got {
		if !sameEntry(got[i], of[i]) {
			return false
		}
	}
	return true
}
