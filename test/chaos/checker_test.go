package chaos

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/cluster/raftlog"
	"github.com/lightq/lightq/log/vfs"
	"github.com/lightq/lightq/wire"
)

// The checker's self-test: a checker that cannot fail proves nothing, so each violation is
// planted in replicas written to disk as a broker would (segment files of format-2 batches
// with terms and raft indexes, a raft.state), read back with ReadReplica, and must be counted.

// batchSpec is one batch of a synthetic replicated log: its messages, or a control batch.
type batchSpec struct {
	ids     []MsgID
	control bool
	term    int32
}

// buildLog encodes specs as the stored batches of a replicated partition from offset 0: raft
// index i+1 for batch i, offsets one after the other.
func buildLog(t testing.TB, specs []batchSpec) [][]byte {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	var out [][]byte
	var off int64
	for i, s := range specs {
		var b []byte
		if s.control {
			b = wire.AppendControlBatch(nil, wire.ControlEmptyEntry, nil)
		} else {
			var bb wire.BatchBuilder
			bb.SetMagic(wire.BatchMagic2)
			for _, id := range s.ids {
				v := make([]byte, MinPayload+rng.IntN(40))
				FillPayload(v, false, id, rng.Uint64)
				bb.Append(1700000000000, nil, v, nil)
			}
			var err error
			if b, err = bb.Finish(wire.CodecNone, nil); err != nil {
				t.Fatal(err)
			}
			b = slices.Clone(b)
		}
		wire.SetBaseOffset(b, off)
		wire.SetBatchLeaderEpoch(b, max(s.term, 1))
		wire.SetBatchRaftIndex(b, uint64(i+1))
		bt, err := wire.ParseBatch(b, MaxBatch)
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		off = bt.NextOffset()
		out = append(out, b)
	}
	return out
}

// writeReplica writes batches as a partition directory under root (two segments: the first
// split of batches and the rest) and, when commit > 0, a raft.state with that commit index.
func writeReplica(t *testing.T, root string, node uint32, batches [][]byte, commit uint64) string {
	t.Helper()
	dir := PartitionDir(filepath.Join(root, fmt.Sprint(node)), "t", 0)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	split := len(batches) / 2
	for _, seg := range [][][]byte{batches[:split], batches[split:]} {
		if len(seg) == 0 {
			continue
		}
		name := fmt.Sprintf("%020d.log", wire.BatchBaseOffset(seg[0]))
		var data []byte
		for _, b := range seg {
			data = append(data, b...)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if commit > 0 {
		sf, _, err := raftlog.OpenState(vfs.OS, filepath.Join(dir, raftlog.StateFileName))
		if err != nil {
			t.Fatal(err)
		}
		if err := sf.Save(raftlog.State{HardState: raftpb.HardState{Term: 1, Commit: commit}}, true); err != nil {
			t.Fatal(err)
		}
		sf.Close()
	}
	return dir
}

func cloneBatches(bs [][]byte) [][]byte {
	out := make([][]byte, len(bs))
	for i, b := range bs {
		out[i] = slices.Clone(b)
	}
	return out
}

// scenario is three replicas of partition 0 and what the clients were told.
type scenario struct {
	t        *testing.T
	specs    []batchSpec
	replicas [3][][]byte
	commit   [3]uint64
	acked    []Acked
	live     []LiveRead
	sent     map[MsgID]bool
	failed   map[MsgID]bool
	leader   int // the replica whose records are the leader's read
}

// newScenario: producer 1's messages 0-9 in batches of 1-3, a control batch (a new leader's
// entry) in the middle, every message acknowledged at its offset, every replica identical and
// fully committed.
func newScenario(t *testing.T) *scenario {
	s := &scenario{t: t, sent: map[MsgID]bool{}, failed: map[MsgID]bool{}}
	seq := uint64(0)
	for i, n := range []int{2, 1, 3, 0, 2, 2} {
		if n == 0 {
			s.specs = append(s.specs, batchSpec{control: true, term: 2})
			continue
		}
		var ids []MsgID
		for k := 0; k < n; k++ {
			ids = append(ids, MsgID{1, seq})
			s.sent[MsgID{1, seq}] = true
			seq++
		}
		s.specs = append(s.specs, batchSpec{ids: ids, term: int32(1 + i/3)})
	}
	log := buildLog(t, s.specs)
	for i := range s.replicas {
		s.replicas[i] = cloneBatches(log)
		s.commit[i] = uint64(len(log))
	}
	var off int64
	for _, sp := range s.specs {
		if sp.control {
			off++
			continue
		}
		for _, id := range sp.ids {
			s.acked = append(s.acked, Acked{ID: id, Partition: 0, Offset: off})
			off++
		}
	}
	return s
}

func (s *scenario) check() Result {
	root := s.t.TempDir()
	var reps []*Replica
	for i, bs := range s.replicas {
		dir := writeReplica(s.t, root, uint32(i+1), bs, s.commit[i])
		r, err := ReadReplica(dir, uint32(i+1), true)
		if err != nil {
			s.t.Fatal(err)
		}
		reps = append(reps, r)
	}
	lead := reps[s.leader]
	var leader []Record
	for _, rec := range lead.Records {
		if rec.Offset < lead.Committed {
			leader = append(leader, rec)
		}
	}
	return Check(Input{
		Acked:     s.acked,
		Sent:      func(id MsgID) bool { return s.sent[id] },
		NotStored: func(id MsgID) bool { return s.failed[id] },
		Leader:    map[int32][]Record{0: leader},
		HW:        map[int32]int64{0: lead.Committed},
		Replicas:  map[int32][]*Replica{0: reps},
		Live:      s.live,
		Failover:  []time.Duration{300 * time.Millisecond, time.Second, 700 * time.Millisecond},
	})
}

// expect checks the counts that must be zero against want (the others zero).
func expect(t *testing.T, r Result, want map[string]int) {
	t.Helper()
	got := map[string]int{"lost": r.Lost, "duplicated": r.Duplicated, "divergent": r.Divergent, "corrupt": r.Corrupt,
		"phantom": r.Phantom, "failed-but-present": r.FailedPresent, "inconsistent": r.Inconsistent, "behind": r.Behind, "misplaced": r.Misplaced, "lost-on-replica": r.LostOnReplica}
	for k, v := range got {
		if v != want[k] {
			t.Errorf("%s = %d, want %d; problems:\n  %s", k, v, want[k], strings.Join(r.Problems, "\n  "))
		}
	}
	if r.Failed() != (len(want) > 0) {
		t.Errorf("Failed() = %v with %v", r.Failed(), want)
	}
}

func TestCheckClean(t *testing.T) {
	s := newScenario(t)
	s.live = []LiveRead{{Partition: 0, Offset: 0, ID: MsgID{1, 0}, Kind: KindMessage}}
	r := s.check()
	expect(t, r, nil)
	if r.Acked != 10 || r.Records != 10 {
		t.Errorf("acked %d, records %d; want 10 and 10", r.Acked, r.Records)
	}
	if got := r.Compared[0]; got != [2]int64{0, 11} {
		t.Errorf("compared %v, want [0 11): ten messages and one control batch", got)
	}
	if r.FailoverP99 != time.Second || r.FailoverMax != time.Second {
		t.Errorf("failover p99 %v max %v, want 1s", r.FailoverP99, r.FailoverMax)
	}
}

// TestCheckLoss: an acknowledged message the log does not hold (acked at an offset past the
// end), and one acknowledged at an offset that holds another message.
func TestCheckLoss(t *testing.T) {
	s := newScenario(t)
	s.acked = append(s.acked, Acked{ID: MsgID{1, 10}, Partition: 0, Offset: 11})
	s.sent[MsgID{1, 10}] = true
	r := s.check()
	expect(t, r, map[string]int{"lost": 1})

	s = newScenario(t)
	s.acked[3].Offset++ // message 3 acknowledged where message 4 is
	r = s.check()
	expect(t, r, map[string]int{"lost": 1, "misplaced": 1})
}

// TestCheckLossOnReplica: the leader holds everything, but one replica's committed log has
// another message (with a valid CRC) at an acknowledged offset.
func TestCheckLossOnReplica(t *testing.T) {
	s := newScenario(t)
	other := buildLog(t, []batchSpec{{ids: []MsgID{{1, 0}, {2, 99}}}})
	s.replicas[2][0] = other[0]
	s.sent[MsgID{2, 99}] = true
	r := s.check()
	// The batch differs too, so the replica diverges as well.
	expect(t, r, map[string]int{"lost": 1, "lost-on-replica": 1, "divergent": 1})
}

// TestCheckDuplicate: a message stored twice (a re-sent batch stored again), on every replica.
func TestCheckDuplicate(t *testing.T) {
	s := newScenario(t)
	s.specs = append(s.specs, batchSpec{ids: []MsgID{{1, 8}, {1, 9}}, term: 3})
	log := buildLog(t, s.specs)
	for i := range s.replicas {
		s.replicas[i] = cloneBatches(log)
		s.commit[i] = uint64(len(log))
	}
	r := s.check()
	expect(t, r, map[string]int{"duplicated": 2})
}

// TestCheckDivergence: one replica's committed batch carries another term (a field outside
// the CRC): every record reads the same, but the bytes differ.
func TestCheckDivergence(t *testing.T) {
	s := newScenario(t)
	wire.SetBatchLeaderEpoch(s.replicas[1][4], 9)
	r := s.check()
	expect(t, r, map[string]int{"divergent": 1})
	if !strings.Contains(strings.Join(r.Problems, "\n"), "node 2 partition 0: committed log differs from node 1's in [0, 11), first at offset 7") {
		t.Errorf("problems do not name the replica and offset:\n%s", strings.Join(r.Problems, "\n"))
	}

	// The divergence beyond the smallest committed offset is not compared: an uncommitted
	// tail may differ.
	s = newScenario(t)
	wire.SetBatchLeaderEpoch(s.replicas[1][5], 9)
	s.commit[2] = 5
	r = s.check()
	expect(t, r, nil)
	if got := r.Compared[0]; got != [2]int64{0, 9} {
		t.Errorf("compared %v, want [0 9): up to node 3's committed offset", got)
	}
}

// TestCheckDamagedReplica: a bit flipped in a committed batch of one replica stops its walk
// there; its raft state commits entries it no longer holds, and it counts as divergent.
func TestCheckDamagedReplica(t *testing.T) {
	s := newScenario(t)
	s.replicas[2][1][wire.BatchHeaderSize2+3] ^= 0x10
	r := s.check()
	expect(t, r, map[string]int{"divergent": 1})

	// A truncated replica (its last committed batch half gone) likewise.
	s = newScenario(t)
	last := len(s.replicas[1]) - 1
	s.replicas[1][last] = s.replicas[1][last][:30]
	r = s.check()
	expect(t, r, map[string]int{"divergent": 1})
}

// TestCheckCorruptPhantomInconsistentBehind plants the other findings: a payload failing its
// CRC in a valid batch, a message nobody sent, one the client failed as not stored, a live
// read the final log contradicts, and a replica whose log ends below the high watermark.
func TestCheckCorruptPhantomInconsistentBehind(t *testing.T) {
	s := newScenario(t)
	delete(s.sent, MsgID{1, 9})
	r := s.check()
	expect(t, r, map[string]int{"phantom": 1})

	s = newScenario(t)
	s.acked = s.acked[1:]
	s.failed[MsgID{1, 0}] = true
	r = s.check()
	expect(t, r, map[string]int{"failed-but-present": 1})

	s = newScenario(t)
	s.live = []LiveRead{{Partition: 0, Offset: 2, ID: MsgID{1, 7}, Kind: KindMessage}, {Partition: 0, Offset: 40, ID: MsgID{1, 40}, Kind: KindMessage}}
	r = s.check()
	expect(t, r, map[string]int{"inconsistent": 2})

	s = newScenario(t)
	s.replicas[1] = s.replicas[1][:4]
	s.commit[1] = 4
	r = s.check()
	expect(t, r, map[string]int{"behind": 1})

	s = newScenario(t)
	bad := buildLog(t, []batchSpec{{ids: []MsgID{{1, 0}, {1, 1}}}})[0]
	// Damage the payload of the first record, then reseal the batch: the batch is valid,
	// its record is not.
	bad[wire.BatchHeaderSize2+4+8] ^= 1
	binaryPutCRC(bad)
	for i := range s.replicas {
		s.replicas[i][0] = slices.Clone(bad)
	}
	r = s.check()
	// The leader's read and all three replicas hold it: one corrupt record each, and the
	// message it carried is lost.
	expect(t, r, map[string]int{"corrupt": 4, "lost": 1})
}

// binaryPutCRC recomputes a batch's CRC after a change.
func binaryPutCRC(b []byte) {
	c := wire.BatchChecksum(b)
	b[12], b[13], b[14], b[15] = byte(c>>24), byte(c>>16), byte(c>>8), byte(c)
}

// TestCheckProbes: acknowledged probes must be present; probes stored twice are allowed.
func TestCheckProbes(t *testing.T) {
	s := newScenario(t)
	probe := func(seq uint64) []byte {
		var bb wire.BatchBuilder
		bb.SetMagic(wire.BatchMagic2)
		v := make([]byte, MinPayload)
		FillPayload(v, true, MsgID{1, seq}, func() uint64 { return 7 })
		bb.Append(1, nil, v, nil)
		b, err := bb.Finish(wire.CodecNone, nil)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Clone(b)
	}
	for i := range s.replicas {
		n := len(s.replicas[i])
		for k, b := range [][]byte{probe(0), probe(0)} {
			wire.SetBaseOffset(b, 11+int64(k))
			wire.SetBatchLeaderEpoch(b, 3)
			wire.SetBatchRaftIndex(b, uint64(n+k+1))
			s.replicas[i] = append(s.replicas[i], b)
		}
		s.commit[i] += 2
	}
	s.acked = append(s.acked, Acked{ID: MsgID{1, 0}, Probe: true, Partition: 0, Offset: 12})
	r := s.check()
	expect(t, r, nil)

	s.acked = append(s.acked, Acked{ID: MsgID{1, 1}, Probe: true, Partition: 0, Offset: 13})
	r = s.check()
	expect(t, r, map[string]int{"lost": 1})
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}, {0.5, 50 * time.Millisecond}, {0.001, time.Millisecond}} {
		if got := Percentile(ds, tc.p); got != tc.want {
			t.Errorf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if Percentile(nil, 0.99) != 0 {
		t.Error("p99 of nothing is not 0")
	}
	if got := Percentile(ds[:3], 0.99); got != 3*time.Millisecond {
		t.Errorf("p99 of 3 = %v, want the largest", got)
	}
}
