package chaos

import (
	"fmt"
	"hash/crc64"
	"slices"
	"sort"
	"time"
)

// The checker: after a run, what the clients were told against what the cluster holds.
//
//   - lost: acknowledged messages not at their acknowledged (partition, offset) in the final
//     read from the partition's leader, or not there in a replica's committed log (counted
//     once per message however many places miss it);
//   - duplicated: messages stored more than once, in the leader's read or in a replica's
//     committed log (probes aside: they carry no producer id, and a re-sent probe may be
//     stored twice, PROTOCOL.md section 16);
//   - divergent: replicas whose committed logs are not byte for byte the same as the others':
//     per partition, every replica's batches from the highest first offset to the smallest
//     committed offset of all replicas are compared (offsets, size and a CRC-64 of each
//     batch's bytes), and each replica outside the largest group of identical ones counts;
//     so does a replica whose raft state commits entries its log no longer holds (a damaged
//     or truncated replica that was never repaired).
//
// It also counts what must be zero besides: records whose payload CRC fails (corrupt),
// messages nobody sent (phantom), messages the client failed as not stored
// (failed-but-present), records a consumer read during the run that are not at
// that offset in the final log (inconsistent: read, then gone or changed), and replicas
// whose log ends below the leader's high watermark (behind).

// Acked is one acknowledged message (or probe): where the broker said it stored it.
type Acked struct {
	ID        MsgID
	Probe     bool
	Partition int32
	Offset    int64
}

// ackKey tells messages and probes apart: their ids are numbered apart.
type ackKey struct {
	id    MsgID
	probe bool
}

func (a *Acked) key() ackKey { return ackKey{a.ID, a.Probe} }

// matches reports whether rec is the acknowledged message.
func (a *Acked) matches(rec Record) bool {
	if a.Probe {
		return rec.Kind == KindProbe && rec.ID == a.ID
	}
	return rec.Kind == KindMessage && rec.ID == a.ID
}

// LiveRead is one record a consumer read while the faults ran.
type LiveRead struct {
	Partition int32
	Offset    int64
	ID        MsgID
	Kind      Kind
}

// Input is what Check compares.
type Input struct {
	Acked []Acked
	// Sent reports whether a message was ever handed to a producer: a message in the log
	// that was not is a phantom. Nil: every message counts as sent.
	Sent func(MsgID) bool
	// NotStored reports whether the client failed a message as not stored
	// (client.ErrNotStored): found in the log, it is failed-but-present. Nil: none.
	NotStored func(MsgID) bool
	// Leader holds the final read of each partition from its leader, in offset order, up to
	// its high watermark HW.
	Leader map[int32][]Record
	HW     map[int32]int64
	// Replicas holds each partition's replicas as read from their files.
	Replicas map[int32][]*Replica
	Live     []LiveRead
	// Failover holds the time from each leader kill until a produce succeeded on the new
	// leader.
	Failover []time.Duration
}

// Result is what Check found. Problems describes the first few findings of each kind.
type Result struct {
	Acked, Lost, Duplicated, Divergent int
	// Breakdown and the other findings that must be zero.
	Misplaced     int // acked messages found at another offset than acknowledged (counted in Lost)
	LostOnReplica int // acked messages missing from some replica's committed log (counted in Lost)
	Corrupt       int
	Phantom       int
	FailedPresent int // messages the client failed as not stored, found in the log
	Inconsistent  int
	Behind        int
	Records       int                // messages in the leader's read
	Compared      map[int32][2]int64 // per partition, the offsets [from, to) compared byte for byte
	FailoverP99   time.Duration
	FailoverMax   time.Duration
	Problems      []string
	problemsKind  map[string]int
}

// Failed reports whether anything that must be zero is not.
func (r *Result) Failed() bool {
	return r.Lost+r.Duplicated+r.Divergent+r.Corrupt+r.Phantom+r.FailedPresent+r.Inconsistent+r.Behind > 0
}

// maxProblemsPerKind bounds Problems.
const maxProblemsPerKind = 5

func (r *Result) problem(kind, format string, args ...any) {
	if r.problemsKind == nil {
		r.problemsKind = map[string]int{}
	}
	r.problemsKind[kind]++
	if n := r.problemsKind[kind]; n <= maxProblemsPerKind {
		r.Problems = append(r.Problems, kind+": "+fmt.Sprintf(format, args...))
	} else if n == maxProblemsPerKind+1 {
		r.Problems = append(r.Problems, kind+": (more not shown)")
	}
}

// Percentile is the p-quantile (0 < p <= 1) of ds by the nearest-rank method; 0 for none.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// recordAt finds the record at offset off in recs (sorted by offset).
func recordAt(recs []Record, off int64) (Record, bool) {
	i := sort.Search(len(recs), func(i int) bool { return recs[i].Offset >= off })
	if i < len(recs) && recs[i].Offset == off {
		return recs[i], true
	}
	return Record{}, false
}

// Check compares in and returns the counts.
func Check(in Input) Result {
	res := Result{Acked: len(in.Acked), Compared: map[int32][2]int64{}}
	res.FailoverP99 = Percentile(in.Failover, 0.99)
	res.FailoverMax = Percentile(in.Failover, 1)

	// Where each message is in the leader's read, and its copies.
	where := map[MsgID][]pos{}
	for p, recs := range in.Leader {
		for _, rec := range recs {
			switch rec.Kind {
			case KindMessage:
				res.Records++
				where[rec.ID] = append(where[rec.ID], pos{p, rec.Offset})
				if in.Sent != nil && !in.Sent(rec.ID) {
					res.Phantom++
					res.problem("phantom", "partition %d offset %d holds message %v, never sent", p, rec.Offset, rec.ID)
				}
				if in.NotStored != nil && in.NotStored(rec.ID) {
					res.FailedPresent++
					res.problem("failed-but-present", "partition %d offset %d holds message %v, which the client failed as not stored", p, rec.Offset, rec.ID)
				}
			case KindCorrupt:
				res.Corrupt++
				res.problem("corrupt", "partition %d offset %d: the leader served a payload failing its CRC", p, rec.Offset)
			case KindForeign:
				res.Phantom++
				res.problem("phantom", "partition %d offset %d: the leader served a record no producer of the run wrote", p, rec.Offset)
			}
		}
	}
	dup := map[MsgID]bool{}
	for id, ps := range where {
		if len(ps) > 1 {
			dup[id] = true
			res.problem("duplicated", "message %v stored %d times: %v", id, len(ps), ps)
		}
	}

	lost := map[ackKey]bool{}
	for _, a := range in.Acked {
		rec, ok := recordAt(in.Leader[a.Partition], a.Offset)
		if ok && a.matches(rec) {
			continue
		}
		lost[a.key()] = true
		if ps := where[a.ID]; len(ps) > 0 && !a.Probe {
			res.Misplaced++
			res.problem("lost", "message %v acknowledged at partition %d offset %d is at %v instead", a.ID, a.Partition, a.Offset, ps)
		} else {
			res.problem("lost", "message %v acknowledged at partition %d offset %d is not in the leader's log (hw %d)", a.ID, a.Partition, a.Offset, in.HW[a.Partition])
		}
	}

	// Each replica's committed log on its own.
	for p, reps := range in.Replicas {
		for _, r := range reps {
			seen := map[MsgID]int64{}
			for _, rec := range r.Records {
				if rec.Offset >= r.Committed {
					break
				}
				switch rec.Kind {
				case KindMessage:
					if prev, ok := seen[rec.ID]; ok && !dup[rec.ID] {
						dup[rec.ID] = true
						res.problem("duplicated", "node %d partition %d: message %v at offsets %d and %d", r.Node, p, rec.ID, prev, rec.Offset)
					}
					seen[rec.ID] = rec.Offset
				case KindCorrupt:
					res.Corrupt++
					res.problem("corrupt", "node %d partition %d offset %d: a stored payload fails its CRC", r.Node, p, rec.Offset)
				}
			}
			if hw, ok := in.HW[p]; ok && r.End < hw && !r.CommitBeyond { // a replica that lost committed entries counts as divergent
				res.Behind++
				res.problem("behind", "node %d partition %d: the log ends at %d, below the leader's high watermark %d", r.Node, p, r.End, hw)
			}
		}
		for _, a := range in.Acked {
			if a.Partition != p {
				continue
			}
			for _, r := range reps {
				if a.Offset < r.First() || a.Offset >= r.Committed {
					continue
				}
				rec, ok := recordAt(r.Records, a.Offset)
				if ok && a.matches(rec) {
					continue
				}
				if !lost[a.key()] {
					lost[a.key()] = true
					res.LostOnReplica++
				}
				res.problem("lost", "node %d partition %d: acknowledged message %v is not at offset %d of its committed log", r.Node, p, a.ID, a.Offset)
			}
		}
		compareReplicas(p, reps, &res)
	}
	res.Lost = len(lost)
	res.Duplicated = len(dup)

	for _, l := range in.Live {
		rec, ok := recordAt(in.Leader[l.Partition], l.Offset)
		if ok && rec.ID == l.ID && rec.Kind == l.Kind {
			continue
		}
		res.Inconsistent++
		if ok {
			res.problem("inconsistent", "a consumer read %s %v at partition %d offset %d; the final log holds %s %v there", l.Kind, l.ID, l.Partition, l.Offset, rec.Kind, rec.ID)
		} else {
			res.problem("inconsistent", "a consumer read %s %v at partition %d offset %d, which the final log does not hold", l.Kind, l.ID, l.Partition, l.Offset)
		}
	}
	return res
}

type pos struct {
	Partition int32
	Offset    int64
}

func (p pos) String() string { return fmt.Sprintf("%d/%d", p.Partition, p.Offset) }

// compareReplicas counts the replicas of partition p whose committed logs differ from the
// others' (see the package comment at the top of this file).
func compareReplicas(p int32, reps []*Replica, res *Result) {
	if len(reps) == 0 {
		return
	}
	var from, to int64 = 0, -1
	var healthy []*Replica
	for _, r := range reps {
		if r.CommitBeyond {
			res.Divergent++
			res.problem("divergent", "node %d partition %d: raft state commits index %d, its log holds entries to %d only (%v)",
				r.Node, p, r.CommitIndex, lastIndex(r), r.Damage)
			continue
		}
		healthy = append(healthy, r)
		from = max(from, r.First())
		if to < 0 || r.Committed < to {
			to = r.Committed
		}
	}
	if len(healthy) == 0 || to <= from {
		res.Compared[p] = [2]int64{from, max(from, to)}
		return
	}
	res.Compared[p] = [2]int64{from, to}
	type group struct {
		sum     uint64
		members []*Replica
	}
	var groups []*group
	for _, r := range healthy {
		sum := rangeSum(r, from, to)
		var g *group
		for _, x := range groups {
			if x.sum == sum {
				g = x
			}
		}
		if g == nil {
			g = &group{sum: sum}
			groups = append(groups, g)
		}
		g.members = append(g.members, r)
	}
	if len(groups) == 1 {
		return
	}
	sort.SliceStable(groups, func(i, j int) bool { return len(groups[i].members) > len(groups[j].members) })
	ref := groups[0].members[0]
	for _, g := range groups[1:] {
		for _, r := range g.members {
			res.Divergent++
			res.problem("divergent", "node %d partition %d: committed log differs from node %d's in [%d, %d), first at offset %d",
				r.Node, p, ref.Node, from, to, firstDifference(ref, r, from, to))
		}
	}
}

// rangeSum is a CRC-64 over the batches of r that lie within [from, to): base, size and hash
// of each, so that two replicas agree exactly when they hold the same batches there.
func rangeSum(r *Replica, from, to int64) uint64 {
	var sum uint64
	var b [24]byte
	for _, bs := range r.Batches {
		if bs.Base < from {
			continue
		}
		if bs.Next > to {
			break
		}
		put := func(i int, v uint64) {
			for k := 0; k < 8; k++ {
				b[i+k] = byte(v >> (56 - 8*k))
			}
		}
		put(0, uint64(bs.Base))
		put(8, uint64(bs.Size))
		put(16, bs.Hash)
		sum = crc64.Update(sum, crcTable, b[:])
	}
	return sum
}

// firstDifference is the first offset in [from, to) where a and b hold different batches.
func firstDifference(a, b *Replica, from, to int64) int64 {
	in := func(r *Replica) []BatchSum {
		var out []BatchSum
		for _, bs := range r.Batches {
			if bs.Base >= from && bs.Next <= to {
				out = append(out, bs)
			}
		}
		return out
	}
	x, y := in(a), in(b)
	for i := 0; i < min(len(x), len(y)); i++ {
		if x[i] != y[i] {
			return min(x[i].Base, y[i].Base)
		}
	}
	if len(x) != len(y) {
		if len(x) > len(y) {
			x, y = y, x
		}
		return y[len(x)].Base
	}
	return from
}

func lastIndex(r *Replica) uint64 {
	if len(r.Batches) == 0 {
		return 0
	}
	return r.Batches[len(r.Batches)-1].RaftIndex
}
