package broker

import (
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/rs/zerolog"
	"go.etcd.io/raft/v3/raftpb"

	cmeta "github.com/lightq/lightq/cluster/meta"
	"github.com/lightq/lightq/cluster/replica"
)

// The mover drives the moves of partitions (PROTOCOL.md section 16.2). A move is in the
// metadata (cmeta.SetReplicas: the new replicas, and the old ones in Previous); the
// partition's Raft group then changes its membership, one change at a time, each committed
// before the next is proposed (etcd raft's single-change rule keeps any two successive
// majorities overlapping, so no step can elect two leaders or lose a committed entry):
//
//  1. each new replica is added as a learner: it receives the log (or a snapshot) and
//     counts for no quorum while it catches up;
//  2. once its replication is within promoteLag entries of the commit index, it is
//     promoted to voter; only when every new replica is a voter does anything leave, so the
//     group never has fewer up-to-date voters than before the move;
//  3. the old replicas are removed, followers first; a leader that is to leave hands its
//     leadership to the most caught-up new voter (TransferLeadership) and the new leader's
//     mover goes on;
//  4. when the group's voters are the new replicas and it has no learners, the leader
//     proposes cmeta.FinishMove: every broker then stops counting the old replicas, and those
//     that held one close it and remove its data (clusterreplicas.go).
//
// It reads the group's membership and each member's replication from raft's progress on the
// leader (replica.Progress: voters and learners). It proposes single-node changes only, so
// the group never enters joint consensus.
//
// Every broker runs a mover, and each acts on the moving partitions whose replica here leads,
// so a leader change in the middle of a move (or a restart of every broker) only hands the
// next step to the new leader: the state of a move is the metadata and the group's
// membership, nothing else. Producers go on throughout: membership changes are entries like
// batches, and a leader transfer makes the partition refuse batches for at most an election
// timeout (RESOURCE_LIMIT, then NOT_LEADER from the old leader), which clients retry.
//
// The mover also heals a partition that is not moving whose group lacks a replica the
// metadata lists, with the same first two steps (clusterheal.go).
//
// Concurrency: the mover's goroutine owns its fields. It reads the topic table and the
// metadata (immutable snapshots) and calls the replicas' concurrency-safe methods.
type mover struct {
	n       *clusterNode
	pending map[uint64]pendingStep // by group: the step proposed and not seen applied yet
	done    chan struct{}

	lastHeal time.Time // the last look for partitions to heal (clusterheal.go)
	healing  bool      // some partition was healing then: look again at the next step
}

// pendingStep is a membership change proposed (or a transfer asked, or FinishMove proposed)
// and the membership it was proposed in: until the membership differs, or moveRetry passes,
// the mover proposes nothing else for the group (raft takes one change at a time, and a
// second proposed meanwhile would be dropped).
type pendingStep struct {
	voters, learners []uint64
	at               time.Time
}

const (
	// moveTick is how often the mover looks at the partitions it moves while any is moving,
	// or heals while any is healing.
	moveTick = 100 * time.Millisecond
	// healEvery is how often, at least, the mover looks for partitions to heal
	// (clusterheal.go): a leadership change, which can leave a group short of a member, shows
	// in no metadata.
	healEvery = time.Second
	// moveRetry is how long a step may go unapplied before it is proposed again (a proposal
	// lost with a leader change, a transfer that did not happen).
	moveRetry = 3 * time.Second
	// promoteLag is how far (in Raft entries) behind the commit index a learner may be and be
	// promoted: close enough that the entries in flight to it bring it level within a round
	// trip, so that the quorum it joins is not held up waiting for it.
	promoteLag = 64
)

func newMover(n *clusterNode) *mover {
	return &mover{n: n, pending: map[uint64]pendingStep{}, done: make(chan struct{})}
}

// run steps the moves and heals whenever the metadata changes, every moveTick while any
// partition is moving or healing (a learner's catching up shows in no metadata), and every
// healEvery otherwise (nor does a leadership change).
func (m *mover) run() {
	defer close(m.done)
	timer := time.NewTimer(healEvery)
	defer timer.Stop()
	for {
		watch := m.n.meta.Watch()
		wait := healEvery
		if m.step() {
			wait = moveTick
		}
		timer.Reset(wait)
		select {
		case <-m.n.stop:
			return
		case <-watch:
		case <-timer.C:
		}
	}
}

// step takes the next step of every move whose partition this broker leads, and of every
// heal (healAll), and reports whether any partition is moving or healing. The partitions of
// the offsets topic (coordinator.go) move the same way as a topic's.
func (m *mover) step() bool {
	st := m.n.meta.State()
	moving := st.Moving()
	live := map[uint64]bool{}
	for _, a := range moving {
		live[a.Group] = true
		rep := m.leading(a)
		if rep == nil {
			continue // not held here (yet), or led elsewhere
		}
		m.drive(a, rep)
		select {
		case <-m.n.stop:
			return true
		default:
		}
	}
	healing := m.healAll(st, live)
	for g := range m.pending {
		if !live[g] {
			delete(m.pending, g)
		}
	}
	return len(moving) > 0 || healing
}

// leading is this broker's replica of a's partition when it leads the partition's group, else
// nil (not held here, or led elsewhere).
func (m *mover) leading(a cmeta.Assignment) *replica.Replica {
	var rep *replica.Replica
	if a.Topic == offsetsTopicName {
		offsets := m.n.offsets.Load()
		if offsets != nil && a.Partition < len(offsets.parts) && offsets.parts[a.Partition].group == a.Group && offsets.parts[a.Partition].store != nil {
			rep = offsets.parts[a.Partition].store.Replica()
		}
	} else if t := (*m.n.srv.topics.Load())[a.Topic]; t != nil && t.cluster != nil && a.Partition < len(t.parts) && t.parts[a.Partition].repl != nil && t.parts[a.Partition].repl.group == a.Group {
		if part := t.parts[a.Partition].repl.part.Load(); part != nil {
			rep = part.Replica()
		}
	}
	if rep == nil || !rep.Status().IsLeader {
		return nil
	}
	return rep
}

// groupView is a group's membership and replication as its leader sees them (raft's
// progress of every member).
type groupView struct {
	commit           uint64
	voters, learners []uint64
	progress         []replica.Progress
}

func viewOf(rep *replica.Replica) (groupView, bool) {
	st := rep.Status()
	prs := rep.Progress()
	if !st.IsLeader || prs == nil {
		return groupView{}, false
	}
	v := groupView{commit: st.Commit, progress: prs}
	for _, pr := range prs {
		if pr.Voter {
			v.voters = append(v.voters, pr.ID)
		} else {
			v.learners = append(v.learners, pr.ID)
		}
	}
	slices.Sort(v.voters)
	slices.Sort(v.learners)
	return v, true
}

// turn is one step of the mover on one partition's group, on its leader: the group as the
// leader sees it, and how a step is proposed and remembered (pendingStep).
type turn struct {
	m     *mover
	a     cmeta.Assignment
	rep   *replica.Replica
	ps    groupView
	log   zerolog.Logger
	doing string // what the log lines say: "moving the partition", "healing the partition"
}

// begin starts a turn on a's group, led here by rep as ps shows it; false while the last
// step is not applied yet.
func (m *mover) begin(a cmeta.Assignment, rep *replica.Replica, ps groupView, doing string) (*turn, bool) {
	if p, ok := m.pending[a.Group]; ok && slices.Equal(p.voters, ps.voters) && slices.Equal(p.learners, ps.learners) && time.Since(p.at) < moveRetry {
		return nil, false // the last step is not applied yet
	}
	delete(m.pending, a.Group)
	log := m.n.log.With().Str("topic", a.Topic).Int("partition", a.Partition).Uint64("group", a.Group).Logger()
	return &turn{m: m, a: a, rep: rep, ps: ps, log: log, doing: doing}, true
}

// mark remembers that a step was taken in the membership seen.
func (t *turn) mark() {
	t.m.pending[t.a.Group] = pendingStep{voters: t.ps.voters, learners: t.ps.learners, at: time.Now()}
}

// propose proposes one single-node membership change.
func (t *turn) propose(what string, typ raftpb.ConfChangeType, node uint64) {
	t.mark()
	err := t.rep.ProposeConfChange(raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{{Type: typ, NodeID: node}}})
	var nl *replica.NotLeaderError
	switch {
	case err == nil:
		t.log.Info().Uints64("voters", t.ps.voters).Uints64("learners", t.ps.learners).Uints64("target", t.a.Replicas).Msg(t.doing + ": " + what)
	case errors.As(err, &nl), errors.Is(err, replica.ErrBusy), errors.Is(err, replica.ErrStopped), errors.Is(err, replica.ErrStaleChange):
		delete(t.m.pending, t.a.Group) // not taken: the next turn sees who leads, and the group as it is
	default:
		delete(t.m.pending, t.a.Group)
		t.log.Warn().Err(err).Msg(t.doing + ": " + what)
	}
}

// grow takes steps 1 and 2 towards the group holding every replica of a.Replicas as a
// voter: each one missing added as a learner (they catch up side by side), each learner
// promoted once caught up. It reports whether any replica is not a voter yet.
func (t *turn) grow() bool {
	for _, id := range t.a.Replicas {
		if !slices.Contains(t.ps.voters, id) && !slices.Contains(t.ps.learners, id) {
			t.propose("adding node "+itoa(id)+" as a learner", raftpb.ConfChangeAddLearnerNode, id)
			return true
		}
	}
	waiting := false
	for _, id := range t.a.Replicas {
		switch {
		case slices.Contains(t.ps.voters, id):
		case t.ps.caughtUp(id):
			t.propose("promoting node "+itoa(id)+" to voter (caught up)", raftpb.ConfChangeAddNode, id)
			return true
		default:
			waiting = true // a learner still catching up
		}
	}
	return waiting
}

// drive takes the next step of one move on the partition's leader.
func (m *mover) drive(a cmeta.Assignment, rep *replica.Replica) {
	ps, ok := viewOf(rep)
	if !ok {
		return
	}
	t, ok := m.begin(a, rep, ps, "moving the partition")
	if !ok {
		return
	}
	target := a.Replicas
	// 1 and 2; nothing leaves before every new replica is a voter.
	if t.grow() {
		return
	}
	// 3: the old replicas leave, learners and followers first, the leader last.
	for _, id := range ps.learners {
		if !slices.Contains(target, id) {
			t.propose("removing learner "+itoa(id), raftpb.ConfChangeRemoveNode, id)
			return
		}
	}
	for _, id := range ps.voters {
		if id != m.n.id && !slices.Contains(target, id) {
			t.propose("removing node "+itoa(id), raftpb.ConfChangeRemoveNode, id)
			return
		}
	}
	if !slices.Contains(target, m.n.id) {
		to := ps.transferTarget(target)
		if to == 0 {
			return // no new voter caught up yet
		}
		t.mark()
		rep.TransferLeadership(to)
		t.log.Info().Uint64("to", to).Msg("moving the partition: this broker leaves it, handing the leadership over")
		return
	}
	// 4: the group is the target.
	t.mark()
	ctx, cancel := m.n.stopContext(metaTimeout)
	defer cancel()
	_, err := m.n.meta.Propose(ctx, &cmeta.FinishMove{Topic: a.Topic, Partition: a.Partition, Group: a.Group, Replicas: target})
	switch {
	case err == nil:
		t.log.Info().Uints64("replicas", target).Msg("moved the partition: its group's voters are its new replicas")
	case errors.Is(err, cmeta.ErrConflict):
		t.log.Info().Err(err).Msg("the partition's move changed meanwhile; moving on to the new replicas")
	default:
		delete(m.pending, a.Group)
		t.log.Warn().Err(err).Msg("finishing the move of the partition; will retry")
	}
}

// caughtUp reports whether the leader's view of member id has it replicating, heard from,
// and within promoteLag entries of the commit index.
func (v groupView) caughtUp(id uint64) bool {
	for _, pr := range v.progress {
		if pr.ID == id {
			return pr.State == "StateReplicate" && pr.Active && pr.Match+promoteLag >= v.commit
		}
	}
	return false
}

// transferTarget chooses the voter of target the leadership goes to: caught up, the preferred
// leader if it is as caught up as any, else the one with the highest match; 0 when none is.
func (v groupView) transferTarget(target []uint64) uint64 {
	var best, bestMatch uint64
	for _, id := range target {
		if !slices.Contains(v.voters, id) || !v.caughtUp(id) {
			continue
		}
		for _, pr := range v.progress {
			if pr.ID == id && (best == 0 || pr.Match > bestMatch) {
				best, bestMatch = id, pr.Match
			}
		}
	}
	return best
}

func itoa(id uint64) string { return strconv.FormatUint(id, 10) }
