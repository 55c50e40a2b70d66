package broker

import (
	"slices"
	"time"

	cmeta "github.com/lightq/lightq/cluster/meta"
	"github.com/lightq/lightq/cluster/replica"
)

// Healing: a partition that is not moving whose group lacks a replica the metadata lists for
// it gets that replica back, on whichever broker leads the group, the way a move adds one:
// as a learner, promoted to voter once caught up (turn.grow).
//
// How a group comes to lack one: a replica whose log lost entries it had acknowledged (a
// damaged or cut segment) says so in its refusals of appends, and its leader removes it and
// adds it back, two membership changes (cluster/replica checkLost). A leader that loses its
// leadership between the two leaves the replica removed, and nothing in the group remembers
// that it is to come back; the metadata does. So every leader compares, and the repair
// outlives any leader change: the next leader of the group, here or on another broker, finds
// the same difference and makes the same changes.
//
// The leader's own re-add and a heal cannot undo each other: raft takes one membership change
// at a time (a change proposed while another is pending becomes an empty entry), and a
// learner added by a view older than the group's re-add is refused by the replica
// (replica.ErrStaleChange) rather than demoting the voter it has become. Healing never
// removes anything: a group member the metadata does not list is left to a move.
//
// The metadata group heals the same way (healMeta): every broker the metadata lists as active
// is to be a voter of it. It is reset like a partition's group (checkLost runs in every
// replica), and a metadata leader that loses its leadership between the removal and the
// re-add leaves the broker out of the group, listed and active in the metadata but receiving
// none of it (cluster/replica addBack names the case). A broker on its way out is marked
// removing before it leaves the group (removeBroker), so an interrupted REMOVE_BROKER, which
// leaves a removing broker listed but out of the group, is not undone: REMOVE_BROKER again
// finishes it.
//
// Concurrency: the mover's goroutine, as for moves.

// healAll heals, at most every healEvery unless a heal is under way, every partition not
// moving whose group this broker leads and lacks a voter the metadata lists. It marks the
// groups it heals in live (their pending steps are kept) and reports whether any is healing.
func (m *mover) healAll(st *cmeta.State, live map[uint64]bool) bool {
	if !m.healing && time.Since(m.lastHeal) < healEvery {
		return false
	}
	m.lastHeal = time.Now()
	m.healing = m.healMeta(st, live)
	for _, t := range st.Topics() {
		for i, p := range t.Partitions {
			if p.Moving() || !slices.Contains(p.Replicas, m.n.id) {
				continue // a move's steps are drive's; a partition not replicated here is not led here
			}
			a := cmeta.Assignment{Topic: t.Name, Partition: i, Group: p.Group, Replicas: p.Replicas}
			rep := m.leading(a)
			if rep == nil {
				continue
			}
			if m.heal(a, rep) {
				m.healing = true
				live[a.Group] = true
			}
		}
		select {
		case <-m.n.stop:
			return m.healing
		default:
		}
	}
	return m.healing
}

// metaTopic names the metadata group in a heal's log lines (it is no topic's).
const metaTopic = "(cluster metadata)"

// healMeta heals the metadata group when this broker leads it: each broker the metadata lists
// as active that is not a voter is added as a learner, then promoted once caught up, as a
// partition's missing replica is. It marks the group in live and reports whether it is
// healing.
func (m *mover) healMeta(st *cmeta.State, live map[uint64]bool) bool {
	rep := m.n.meta.Replica()
	if !rep.Status().IsLeader {
		return false
	}
	var want []uint64
	for _, b := range st.Brokers() {
		if b.State == cmeta.BrokerActive {
			want = append(want, b.ID)
		}
	}
	a := cmeta.Assignment{Topic: metaTopic, Partition: -1, Group: cmeta.Group, Replicas: want}
	if !m.heal(a, rep) {
		return false
	}
	live[cmeta.Group] = true
	return true
}

// heal takes the next step of healing a's group on its leader rep; it reports whether the
// group lacks a voter of a.Replicas.
func (m *mover) heal(a cmeta.Assignment, rep *replica.Replica) bool {
	ps, ok := viewOf(rep)
	if !ok || !ps.lacksVoter(a.Replicas) {
		return false
	}
	if t, ok := m.begin(a, rep, ps, "healing the partition (its group lacks a replica the metadata lists)"); ok {
		t.grow()
	}
	return true
}

// lacksVoter reports whether some node of replicas is not a voter of the group.
func (v groupView) lacksVoter(replicas []uint64) bool {
	for _, id := range replicas {
		if !slices.Contains(v.voters, id) {
			return true
		}
	}
	return false
}
