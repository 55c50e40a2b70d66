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
// Concurrency: the mover's goroutine, as for moves.

// healAll heals, at most every healEvery unless a heal is under way, every partition not
// moving whose group this broker leads and lacks a voter the metadata lists. It marks the
// groups it heals in live (their pending steps are kept) and reports whether any is healing.
func (m *mover) healAll(st *cmeta.State, live map[uint64]bool) bool {
	if !m.healing && time.Since(m.lastHeal) < healEvery {
		return false
	}
	m.lastHeal = time.Now()
	m.healing = false
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
