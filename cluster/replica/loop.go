package replica

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
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
			if r.ticks++; len(r.resets) > 0 && r.ticks%uint64(r.cfg.ElectionTicks) == 0 {
				r.addBack() // a proposed add raft turned into an empty entry: again
			}
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
		case req := <-r.restarts:
			err := r.restart(req)
			req.done <- err
			if err != nil {
				r.cfg.Logger.Errorf("replica %d of group %d stops: %v", r.cfg.ID, r.cfg.Group, err)
				return
			}
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
	switch m.Type {
	case raftpb.MsgVote, raftpb.MsgPreVote:
		if r.short() {
			return // abstain: see Config.LostCommit
		}
	case raftpb.MsgHeartbeat:
		// A leader's heartbeat carries the commit index up to what this replica
		// acknowledged; one that lost entries since would make raft panic (commit past the
		// log). Commit what is here; the leader re-adds this replica (resetMember).
		if last, _ := r.cfg.Storage.LastIndex(); m.Commit > last {
			m.Commit = last
		}
	case raftpb.MsgAppResp:
		if m.Reject && r.term != 0 {
			r.checkLost(m)
		}
	}
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
	for _, c := range cc.Changes {
		if c.Type != raftpb.ConfChangeAddLearnerNode {
			continue
		}
		if _, voter := r.rn.Status().Config.Voters[0][c.NodeID]; voter {
			return fmt.Errorf("%w: node %d of group %d", ErrStaleChange, c.NodeID, r.cfg.Group)
		}
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
			clear(r.resets) // a later leader finds its own (checkLost)
			// Proposals not yet in the log will never be: raft dropped them with the leadership.
			for _, p := range r.unassigned {
				p.finish(&NotLeaderError{Leader: rd.SoftState.Lead})
			}
			r.unassigned = r.unassigned[:0]
		}
	}
	if !raft.IsEmptySnap(rd.Snapshot) {
		if err := r.cfg.Storage.ApplySnapshot(rd.Snapshot); err != nil {
			if errors.Is(err, ErrAbandonSnapshot) {
				return r.restartRaft(rd.Snapshot.Metadata.Index, err)
			}
			return fmt.Errorf("apply snapshot: %w", err)
		}
		r.snapshotCovers(rd.Snapshot.Metadata.Index)
	}
	var snaps []snapSent
	if r.sendFirst(rd) {
		// A leader's own new entries go to the followers while it writes them (see
		// sendFirst); the HardState is saved before anything is sent.
		if err := r.saveHardState(rd); err != nil {
			return err
		}
		snaps = r.send(rd)
		if err := r.appendEntries(rd); err != nil {
			return err
		}
	} else {
		if err := r.appendEntries(rd); err != nil {
			return err
		}
		if err := r.saveHardState(rd); err != nil {
			return err
		}
		snaps = r.send(rd)
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
			cs := r.rn.ApplyConfChange(cc)
			if err := r.saveConfState(cs, e.Index); err != nil {
				return err
			}
			r.applyReset(cs)
		case raftpb.EntryConfChangeV2:
			var cc raftpb.ConfChangeV2
			if err := cc.Unmarshal(e.Data); err != nil {
				return fmt.Errorf("conf change at %d: %w", e.Index, err)
			}
			cs := r.rn.ApplyConfChange(cc)
			if err := r.saveConfState(cs, e.Index); err != nil {
				return err
			}
			r.applyReset(cs)
		}
		r.settle(e)
	}
	r.rn.Advance(rd)
	r.addBack()
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
	clear(r.envs) // do not pin the last message's entries
	st := r.publishStatus()
	if r.cfg.Advanced != nil {
		r.cfg.Advanced(st)
	}
	return nil
}

// sendFirst reports whether rd's messages may go out before its entries are stored, and
// makes them ready to: raft allows a Ready's messages to be sent while its entries are being
// persisted (not before its HardState is), so a leader sends its new entries to the
// followers first and their write overlaps its own. Only a leader's Ready whose entries are
// all of its own term, with no snapshot, and only with a Storage that can write into the
// entries beforehand what Append would (AppendPreparer: the messages carry the same bytes,
// which the transport reads while Append stores them, so Append must find nothing left to
// write). A follower must store entries before it acknowledges them, so its Readies keep the
// order.
func (r *Replica) sendFirst(rd raft.Ready) bool {
	if r.term == 0 || len(rd.Entries) == 0 || !raft.IsEmptySnap(rd.Snapshot) {
		return false
	}
	p, ok := r.cfg.Storage.(AppendPreparer)
	if !ok {
		return false
	}
	for _, e := range rd.Entries {
		if e.Term != r.term {
			return false
		}
	}
	return p.PrepareAppend(rd.Entries)
}

// appendEntries stores rd's entries and gives the leader's waiting proposals their indexes.
func (r *Replica) appendEntries(rd raft.Ready) error {
	if len(rd.Entries) == 0 {
		return nil
	}
	if err := r.cfg.Storage.Append(rd.Entries); err != nil {
		return fmt.Errorf("append %d entries at %d: %w", len(rd.Entries), rd.Entries[0].Index, err)
	}
	r.assign(rd.Entries)
	return nil
}

func (r *Replica) saveHardState(rd raft.Ready) error {
	if raft.IsEmptyHardState(rd.HardState) {
		return nil
	}
	if err := r.cfg.Storage.SetHardState(rd.HardState); err != nil {
		return fmt.Errorf("save hard state: %w", err)
	}
	return nil
}

// send hands rd's messages to the Sender and returns the snapshots among them (r.snapSent's
// room).
func (r *Replica) send(rd raft.Ready) []snapSent {
	snaps := r.snapSent[:0]
	for _, m := range rd.Messages {
		if m.Type == raftpb.MsgAppResp && m.Reject && r.short() {
			m.Context = lostEntries // the leader tells this from a stale refusal (checkLost)
		}
		r.envs = append(r.envs[:0], transport.Envelope{Group: r.cfg.Group, Msg: m}) // the sender copies it
		ok := r.cfg.Sender.Send(m.To, r.envs...)
		if m.Type == raftpb.MsgSnap {
			snaps = append(snaps, snapSent{to: m.To, ok: ok})
		}
	}
	return snaps
}

// restartRaft replaces the RawNode with one opened from the storage (newRawNode, as Start
// and Restart do), dropping the Ready at hand unpersisted, unsent and not advanced
// (ErrAbandonSnapshot). The storage is unchanged, so unlike Restart nothing is repaired and
// the proposals this replica waits for stay: later committed entries or snapshots settle
// them.
func (r *Replica) restartRaft(index uint64, cause error) error {
	// A snapshot's restore leaves applied as it was: it moves at Advance.
	rn, err := newRawNode(&r.cfg, r.rn.BasicStatus().Applied)
	if err != nil {
		return fmt.Errorf("restart raft after abandoning the snapshot at %d: %w", index, err)
	}
	r.rn = rn
	r.term, r.termStart = 0, 0
	r.cfg.Logger.Warningf("group %d: %v; raft restarted from the storage (the leader sends a snapshot again)", r.cfg.Group, cause)
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

// checkLost looks at a follower's refusal of an append: refusing an index at or below what it
// acknowledged means it lost entries it had (a damaged or truncated log, a power loss under
// fsync=never). Raft never lowers a member's acknowledged index, so it would never send them
// again: the member is removed and added back (resetMember), which starts it afresh.
func (r *Replica) checkLost(m raftpb.Message) {
	if r.resets[m.From] || !bytes.Equal(m.Context, lostEntries) {
		// Without the follower's word, a refusal at or below its acknowledged index is a
		// stale one (a delayed or duplicated message), which raft ignores rightly.
		return
	}
	pr, ok := r.rn.Status().Progress[m.From]
	if !ok || m.Index > pr.Match || pr.Match == 0 {
		return
	}
	r.cfg.Logger.Warningf("group %d: node %d refused index %d after acknowledging up to %d: it lost entries; removing and adding it back so it is brought up again", r.cfg.Group, m.From, m.Index, pr.Match)
	r.resetMember(m.From)
}

// resetMember removes node from the group, then (once that is applied: applyReset) adds it
// back as a new member, whose copy raft then rebuilds from the leader's log or a snapshot.
// Two changes, not one joint change, because a joint change that removes and adds the same
// node keeps its progress. Meanwhile the other members form the quorum.
func (r *Replica) resetMember(node uint64) {
	cc := raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeRemoveNode, NodeID: node}}}
	if err := r.rn.ProposeConfChange(cc); err != nil {
		r.cfg.Logger.Warningf("group %d: removing node %d to bring it up again: %v", r.cfg.Group, node, err)
		return
	}
	if r.resets == nil {
		r.resets = map[uint64]bool{}
	}
	r.resets[node] = true
}

// applyReset notes, as a membership change is applied, which members resetMember removed
// are gone now (to be added back by addBack, after Advance: raft refuses a change proposed
// while the last one is not yet marked applied) and which are back.
func (r *Replica) applyReset(cs *raftpb.ConfState) {
	r.voters = append(r.voters[:0], cs.Voters...)
	for node, removing := range r.resets {
		switch voter := slices.Contains(cs.Voters, node); {
		case voter && !removing:
			delete(r.resets, node) // added back
		case !voter && removing:
			r.resets[node] = false // removed: add it back
		}
	}
}

// addBack proposes adding back every member resetMember removed that is not a voter yet.
func (r *Replica) addBack() {
	for node, removing := range r.resets {
		if removing || slices.Contains(r.voters, node) {
			continue
		}
		if r.term == 0 {
			// The group's next leader adds it back: the broker heals a group that lacks a
			// replica the metadata lists, and the metadata group when it lacks a broker the
			// metadata lists as active (broker/clusterheal.go).
			r.cfg.Logger.Warningf("group %d: node %d was removed to be brought up again, and this replica lost the leadership before adding it back: the group's next leader adds it back", r.cfg.Group, node)
			delete(r.resets, node)
			continue
		}
		cc := raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeAddNode, NodeID: node}}}
		if err := r.rn.ProposeConfChange(cc); err != nil {
			r.cfg.Logger.Errorf("group %d: adding node %d back: %v", r.cfg.Group, node, err)
			continue
		}
		r.cfg.Logger.Warningf("group %d: node %d removed; adding it back", r.cfg.Group, node)
	}
}

// lostEntries marks a refusal of an append from a replica that knows it lost entries it had
// acknowledged (Config.LostCommit), in the message's Context, which raft does not use for
// append responses.
var lostEntries = []byte("lightq:lost-entries")

// short reports whether this replica still lacks entries it had acknowledged before it lost
// them (Config.LostCommit), and forgets the loss once its log holds them again.
func (r *Replica) short() bool {
	if r.cfg.LostCommit == 0 {
		return false
	}
	if last, _ := r.cfg.Storage.LastIndex(); last < r.cfg.LostCommit {
		return true
	}
	r.cfg.LostCommit = 0 // whole again
	return false
}
