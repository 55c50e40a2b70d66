package partition

import (
	"cmp"
	"slices"
)

// Status is a replica's view of its partition.
type Status struct {
	NodeID, Group uint64
	Leader        uint64 // 0 while none is known
	Term          uint64
	IsLeader      bool
	// Ready: the leader applied every entry of earlier terms, so it takes idempotent
	// batches (until then it answers them ErrNotReady).
	Ready     bool
	Commit    uint64 // raft indexes
	Applied   uint64
	LastIndex uint64
	// HighWatermark is the offset after the last applied committed batch; LogStart and
	// LogEnd the offsets the segment log holds (LogEnd is past the high watermark by the
	// uncommitted tail).
	HighWatermark, LogStart, LogEnd int64
	// Voters and Learners are the group's membership as this replica last applied it;
	// Outgoing the voters of the configuration being left while a joint change is under
	// way (nil otherwise).
	Voters, Learners, Outgoing []uint64
	Pending                    int   // batches proposed here, not settled
	PendingBytes               int64 // their bytes
	// LeaderChanges counts the terms in which this replica learned of a leader since Open
	// (each election it saw won, the first included; a leader elected again in a new term
	// counts again).
	LeaderChanges uint64
	// The scrub and repair since Open (scrub.go): bytes of sealed segments verified, passes
	// over all of them, damaged batches found (by the scrub or raft's reads; one damage met
	// twice before its repair counts twice) and repairs made (the log cut there, to be filled
	// again from the other replicas).
	ScrubbedBytes, ScrubPasses, DamagedBatches, Repairs int64
	// Counts are the catch-up, snapshot and damage counters (counters.go).
	Counts Counts
	// Replicas is, on the leader, every member's replication (itself included); nil on a
	// follower.
	Replicas []ReplicaStatus
}

// ReplicaStatus is the leader's view of one member.
type ReplicaStatus struct {
	ID    uint64
	Match uint64 // the highest raft index known stored there
	// Lag is how many offsets the member's log is behind the leader's (LogEnd minus the
	// offset after Match); -1 when Match is below the leader's log start (a snapshot is
	// bringing it up).
	Lag    int64
	State  string // raft's: StateProbe, StateReplicate, StateSnapshot
	Active bool   // heard from within an election timeout
}

// Status reports the partition. On the leader it waits for one turn of the replica's loop
// (to read raft's progress): call it for reports, not per request. Safe for concurrent use.
func (p *Partition) Status() Status {
	rs := p.st.State()
	l := p.st.Log()
	p.mu.Lock()
	st := p.status
	s := Status{
		NodeID: p.cfg.NodeID, Group: p.cfg.Group, Leader: st.Leader, Term: st.Term, IsLeader: st.IsLeader,
		Ready: p.ready && p.term == st.Term, Commit: st.Commit, Applied: st.Applied, LastIndex: st.LastIndex,
		HighWatermark: p.hw.Load(), Voters: slices.Clone(rs.ConfState.Voters),
		Learners: slices.Clone(rs.ConfState.Learners), Outgoing: slices.Clone(rs.ConfState.VotersOutgoing),
		Pending: p.count, PendingBytes: p.bytes, LeaderChanges: p.leaderChanges,
		ScrubbedBytes: p.scrubbed.Load(), ScrubPasses: p.scrubPasses.Load(),
	}
	cu := p.cu
	p.mu.Unlock()
	s.Counts = p.counts(cu)
	s.DamagedBatches = s.Counts.DamageFound[FoundByScrub] + s.Counts.DamageFound[FoundByRead]
	s.Repairs = s.Counts.DamageRepaired[FoundByScrub] + s.Counts.DamageRepaired[FoundByRead]
	s.LogStart, s.LogEnd = l.StartOffset(), l.NextOffset()
	if !s.IsLeader {
		return s
	}
	for _, pr := range p.rep.Progress() {
		r := ReplicaStatus{ID: pr.ID, Match: pr.Match, State: pr.State, Active: pr.Active, Lag: -1}
		if off, err := p.st.OffsetAfter(pr.Match); err == nil {
			r.Lag = max(s.LogEnd-off, 0)
		}
		s.Replicas = append(s.Replicas, r)
	}
	slices.SortFunc(s.Replicas, func(a, b ReplicaStatus) int { return cmp.Compare(a.ID, b.ID) })
	return s
}
