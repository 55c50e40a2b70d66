package replica

import (
	"fmt"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"github.com/lightq/lightq/cluster/transport"
)

// run is the replica's goroutine: the only one that touches r.rn.
func (r *Replica) run() {
	defer close(r.stopped)
	defer r.failAll(ErrStopped)
	tick := time.NewTicker(r.cfg.Tick)
	defer tick.Stop()
	r.publishStatus()
	for {
		select {
		case <-r.stop:
			return
		case <-tick.C:
			r.rn.Tick()
		case m := <-r.inbox:
			r.step(m)
			r.drainInbox()
		case p := <-r.proposals:
			r.propose(p)
			r.drainProposals()
		case req := <-r.confChanges:
			req.done <- r.proposeConfChange(req.cc)
		case node := <-r.unreachable:
			r.rn.ReportUnreachable(node)
		case req := <-r.progressReq:
			req <- r.progress()
		case f := <-r.ctl:
			f(r.rn)
		}
		if r.rn.HasReady() {
			if err := r.handleReady(); err != nil {
				// A replica that cannot persist must not vote or acknowledge again: stop it,
				// and let the broker report the partition's storage error.
				r.cfg.Logger.Errorf("replica %d of group %d stops: %v", r.cfg.ID, r.cfg.Group, err)
				return
			}
		}
	}
}

func (r *Replica) step(m raftpb.Message) {
	if err := r.rn.Step(m); err != nil && err != raft.ErrStepPeerNotFound && err != raft.ErrStepLocalMsg {
		r.cfg.Logger.Debugf("group %d: step %s from %d: %v", r.cfg.Group, m.Type, m.From, err)
	}
}

// drainInbox steps what else is queued (bounded by the queue), so one Ready covers many
// messages.
func (r *Replica) drainInbox() {
	for range cap(r.inbox) {
		select {
		case m := <-r.inbox:
			r.step(m)
		default:
			return
		}
	}
}

func (r *Replica) drainProposals() {
	for range cap(r.proposals) {
		select {
		case p := <-r.proposals:
			r.propose(p)
		default:
			return
		}
	}
}

func (r *Replica) propose(p *Proposal) {
	if r.cfg.ForwardProposals {
		r.forward(p)
		return
	}
	if r.term == 0 || p.wantTerm != 0 && p.wantTerm != r.term {
		p.finish(&NotLeaderError{Leader: r.rn.BasicStatus().Lead})
		return
	}
	switch err := r.rn.Propose(p.Data); err {
	case nil:
		r.unassigned = append(r.unassigned, p)
	case raft.ErrProposalDropped:
		// Dropped: a leader transfer is under way, or the uncommitted bytes are over the cap.
		if st := r.rn.BasicStatus(); st.RaftState != raft.StateLeader {
			p.finish(&NotLeaderError{Leader: st.Lead})
		} else {
			p.finish(ErrBusy)
		}
	default:
		p.finish(fmt.Errorf("propose: %w", err))
	}
}

// forward hands p to raft, which appends it (leader) or sends it to the leader (follower),
// and ends p there: with forwarding, raft gives no index for a proposal (see
// Config.ForwardProposals).
func (r *Replica) forward(p *Proposal) {
	switch err := r.rn.Propose(p.Data); err {
	case nil:
		p.finish(nil)
	case raft.ErrProposalDropped:
		// No leader known (an election), a leader transfer, or the uncommitted bytes over the cap.
		if st := r.rn.BasicStatus(); st.RaftState == raft.StateLeader {
			p.finish(ErrBusy)
		} else {
			p.finish(&NotLeaderError{Leader: st.Lead})
		}
	default:
		p.finish(fmt.Errorf("propose: %w", err))
	}
}

func (r *Replica) proposeConfChange(cc raftpb.ConfChangeV2) error {
	if r.term == 0 && !r.cfg.ForwardProposals {
		return &NotLeaderError{Leader: r.rn.BasicStatus().Lead}
	}
	switch err := r.rn.ProposeConfChange(cc); err {
	case nil:
		return nil
	case raft.ErrProposalDropped:
		st := r.rn.BasicStatus()
		if st.RaftState == raft.StateLeader {
			return ErrBusy
		}
		return &NotLeaderError{Leader: st.Lead}
	default:
		return fmt.Errorf("propose a membership change: %w", err)
	}
}

// handleReady does what one Ready asks, in the order raft requires: persist, send, apply,
// advance.
func (r *Replica) handleReady() error {
	rd := r.rn.Ready()
	if rd.SoftState != nil {
		if rd.SoftState.RaftState == raft.StateLeader {
			r.term, r.termStart = r.rn.BasicStatus().Term, 0
		} else {
			r.term, r.termStart = 0, 0
			// Proposals not yet in the log will never be: raft dropped them with the leadership.
			for _, p := range r.unassigned {
				p.finish(&NotLeaderError{Leader: rd.SoftState.Lead})
			}
			r.unassigned = r.unassigned[:0]
		}
	}
	if !raft.IsEmptySnap(rd.Snapshot) {
		if err := r.cfg.Storage.ApplySnapshot(rd.Snapshot); err != nil {
			return fmt.Errorf("apply snapshot: %w", err)
		}
		r.snapshotCovers(rd.Snapshot.Metadata.Index)
	}
	if len(rd.Entries) > 0 {
		if err := r.cfg.Storage.Append(rd.Entries); err != nil {
			return fmt.Errorf("append %d entries at %d: %w", len(rd.Entries), rd.Entries[0].Index, err)
		}
		r.assign(rd.Entries)
	}
	if !raft.IsEmptyHardState(rd.HardState) {
		if err := r.cfg.Storage.SetHardState(rd.HardState); err != nil {
			return fmt.Errorf("save hard state: %w", err)
		}
	}
	snaps := r.snapSent[:0]
	for _, m := range rd.Messages {
		ok := r.cfg.Sender.Send(m.To, transport.Envelope{Group: r.cfg.Group, Msg: m})
		if m.Type == raftpb.MsgSnap {
			snaps = append(snaps, snapSent{to: m.To, ok: ok})
		}
	}
	for _, e := range rd.CommittedEntries {
		switch e.Type {
		case raftpb.EntryNormal:
			if len(e.Data) > 0 {
				r.cfg.Apply(e)
			}
		case raftpb.EntryConfChange:
			var cc raftpb.ConfChange
			if err := cc.Unmarshal(e.Data); err != nil {
				return fmt.Errorf("conf change at %d: %w", e.Index, err)
			}
			if err := r.saveConfState(r.rn.ApplyConfChange(cc), e.Index); err != nil {
				return err
			}
		case raftpb.EntryConfChangeV2:
			var cc raftpb.ConfChangeV2
			if err := cc.Unmarshal(e.Data); err != nil {
				return fmt.Errorf("conf change at %d: %w", e.Index, err)
			}
			if err := r.saveConfState(r.rn.ApplyConfChange(cc), e.Index); err != nil {
				return err
			}
		}
		r.settle(e)
	}
	r.rn.Advance(rd)
	// A snapshot sent is reported at once (the transport does not confirm delivery): raft
	// then probes the follower from the snapshot on, and sends a newer snapshot if the
	// follower did not get this one or retention went past it meanwhile. Unreported, the
	// follower's progress would stay paused in StateSnapshot.
	for _, sn := range snaps {
		status := raft.SnapshotFinish
		if !sn.ok {
			status = raft.SnapshotFailure
		}
		r.rn.ReportSnapshot(sn.to, status)
	}
	r.snapSent = snaps[:0]
	st := r.publishStatus()
	if r.cfg.Advanced != nil {
		r.cfg.Advanced(st)
	}
	return nil
}

// snapshotCovers ends the waiting proposals at or below index, which a snapshot installed:
// their entries will never be applied here, so their outcome is unknown to this replica.
func (r *Replica) snapshotCovers(index uint64) {
	n := 0
	for _, p := range r.waiting {
		if p.Index > index {
			break
		}
		p.finish(ErrSnapshotCovered)
		n++
	}
	if n > 0 {
		clear(r.waiting[:n])
		r.waiting = r.waiting[n:]
	}
}

// progress is Progress on the replica's goroutine.
func (r *Replica) progress() []Progress {
	if r.term == 0 {
		return nil
	}
	var out []Progress
	r.rn.WithProgress(func(id uint64, typ raft.ProgressType, pr tracker.Progress) {
		out = append(out, Progress{ID: id, Match: pr.Match, Next: pr.Next, State: pr.State.String(),
			Active: pr.RecentActive, Voter: typ == raft.ProgressTypePeer})
	})
	return out
}

// saveConfState records the membership after the change at index, when the storage keeps it.
func (r *Replica) saveConfState(cs *raftpb.ConfState, index uint64) error {
	if s, ok := r.cfg.Storage.(ConfStateSaver); ok {
		if err := s.SetConfState(*cs, index); err != nil {
			return fmt.Errorf("save the membership after the change at %d: %w", index, err)
		}
	}
	return nil
}

// assign gives the leader's waiting proposals the indexes of its new entries. Only the
// leader's own proposals are normal entries with data in its own term (the empty entry of
// its election has none; forwarding is off, or else nothing waits here), in the order it
// proposed them.
func (r *Replica) assign(entries []raftpb.Entry) {
	for _, e := range entries {
		if r.term != 0 && r.termStart == 0 && e.Term == r.term {
			r.termStart = e.Index // the empty entry of the election
		}
		if r.term == 0 || e.Term != r.term || e.Type != raftpb.EntryNormal || len(e.Data) == 0 || len(r.unassigned) == 0 {
			continue
		}
		p := r.unassigned[0]
		r.unassigned = r.unassigned[1:]
		p.Index, p.Term = e.Index, e.Term
		r.waiting = append(r.waiting, p)
	}
}

// settle ends the waiting proposals that committed entry e decides.
func (r *Replica) settle(e raftpb.Entry) {
	n := 0
	for _, p := range r.waiting {
		if p.Index > e.Index {
			break
		}
		if p.Index == e.Index && p.Term == e.Term {
			p.finish(nil)
		} else {
			p.finish(ErrReplaced)
		}
		n++
	}
	if n > 0 {
		clear(r.waiting[:n])
		r.waiting = r.waiting[n:]
	}
}

func (r *Replica) failAll(err error) {
	r.statusMu.Lock()
	r.closed = true
	r.statusMu.Unlock()
	for _, p := range r.unassigned {
		p.finish(err)
	}
	for _, p := range r.waiting {
		p.finish(err)
	}
	r.unassigned, r.waiting = nil, nil
	// Proposals still queued never reached raft.
	for {
		select {
		case p := <-r.proposals:
			p.finish(err)
		case req := <-r.confChanges:
			req.done <- err
		default:
			return
		}
	}
}

func (r *Replica) publishStatus() Status {
	bs := r.rn.BasicStatus()
	last, _ := r.cfg.Storage.LastIndex() // an error shows on the next append
	st := Status{Leader: bs.Lead, Term: bs.Term, Commit: bs.Commit, Applied: bs.Applied, IsLeader: bs.RaftState == raft.StateLeader, LastIndex: last}
	if st.IsLeader && r.term == bs.Term {
		st.TermStart = r.termStart
	}
	r.statusMu.Lock()
	r.status = st
	r.statusMu.Unlock()
	return st
}
