package meta

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lightq/lightq/wire"
)

// compacting makes members snapshot every 5 commands in 1 KiB segments (about eight
// commands each), so a few dozen commands compact the log.
func compacting(cfg *Config) { cfg.SnapshotEvery, cfg.SegmentBytes = 5, 1024 }

func (c *testCluster) users(on uint64, prefix string, n int) {
	c.t.Helper()
	for i := range n {
		c.mustPropose(on, &CreateUser{Name: fmt.Sprintf("%s-%d", prefix, i), Hash: []byte("h")})
	}
}

// TestRestartFromOwnSnapshot: every member stops and starts again from its snapshot file and
// the log after it, with the same state (no command applied twice), and goes on.
func TestRestartFromOwnSnapshot(t *testing.T) {
	c := newTestCluster(t, 4, 3, compacting)
	c.users(2, "u", 23)
	before := c.converged()
	for _, id := range c.ids {
		// Past the bootstrap's membership snapshots: one every five commands.
		if snap, err := c.members[id].st.stor.Snapshot(); err != nil || snap.Metadata.Index < 20 {
			t.Fatalf("member %d's latest snapshot is at %d (%v), want one past 20 of %d entries", id, snap.Metadata.Index, err, before.Index())
		}
		c.stop(id)
	}
	for _, id := range c.ids {
		c.start(id)
		if st := c.members[id].st.State(); st.Index() > before.Index() || st.UserCount() > before.UserCount() {
			t.Fatalf("member %d restarted at index %d with %d users, beyond the state before (%d, %d)", id, st.Index(), st.UserCount(), before.Index(), before.UserCount())
		}
	}
	c.waitUntil("the members to replay the log", func() bool {
		for _, id := range c.ids {
			if c.members[id].st.State().Index() < before.Index() {
				return false
			}
		}
		return true
	})
	for _, id := range c.ids {
		if st := c.members[id].st.State(); st.UserCount() != 23 {
			t.Fatalf("member %d: %d users after the restart", id, st.UserCount())
		}
	}
	c.users(3, "after", 3)
	if st := c.converged(); st.UserCount() != 26 {
		t.Fatalf("%d users", st.UserCount())
	}
}

// TestLateMemberCatchesUpFromSnapshot: a member stopped while the others apply enough to
// compact their logs past what it has comes back, receives the leader's snapshot and the
// entries after it, and holds the same state.
func TestLateMemberCatchesUpFromSnapshot(t *testing.T) {
	c := newTestCluster(t, 5, 3, compacting)
	c.users(1, "early", 3)
	c.converged()
	late := c.ids[0]
	if c.leader().id == late {
		late = c.ids[1]
	}
	lastBefore, _ := c.members[late].st.stor.LastIndex()
	c.stop(late)
	var rest []uint64
	for _, id := range c.ids {
		if id != late {
			rest = append(rest, id)
		}
	}
	c.users(rest[0], "while-down", 60)
	for _, id := range rest {
		if first, _ := c.members[id].st.stor.FirstIndex(); first <= lastBefore+1 {
			t.Fatalf("member %d's log starts at %d: not compacted past the late member's last entry %d", id, first, lastBefore)
		}
	}
	c.start(late)
	st := c.converged()
	if st.UserCount() != 63 {
		t.Fatalf("%d users", st.UserCount())
	}
	if n := c.members[late].st.installed.Load(); n == 0 {
		t.Fatal("the late member caught up without a snapshot")
	}
	// Its snapshot file is the leader's: it restarts from it.
	c.stop(late)
	c.start(late)
	if got := c.members[late].st.State(); got.Index() < c.members[late].st.stor.Latest().Index || got.UserCount() < 3 {
		t.Fatalf("restarted at index %d with %d users", got.Index(), got.UserCount())
	}
	c.users(late, "back", 2)
	if st := c.converged(); st.UserCount() != 65 {
		t.Fatalf("%d users", st.UserCount())
	}
}

// TestLeaderStops: the leader stops; proposals go on on the others' new leader, from a
// follower too; the old leader comes back and catches up.
func TestLeaderStops(t *testing.T) {
	c := newTestCluster(t, 6, 3, nil)
	c.users(1, "before", 5)
	old := c.leader()
	c.stop(old.id)
	var rest []uint64
	for _, id := range c.ids {
		if id != old.id {
			rest = append(rest, id)
		}
	}
	start := time.Now()
	c.mustPropose(rest[0], &CreateUser{Name: "after-0", Hash: []byte("h")})
	t.Logf("the first command after the leader stopped applied in %v (election timeout %v-%v)", time.Since(start), 10*testTick, 20*testTick)
	nl := c.leader(rest...)
	for _, id := range rest {
		c.mustPropose(id, &CreateUser{Name: fmt.Sprintf("after-%d", id), Hash: []byte("h")})
	}
	c.start(old.id)
	st := c.converged()
	if st.UserCount() != 8 {
		t.Fatalf("%d users", st.UserCount())
	}
	t.Logf("old leader %d, new leader %d", old.id, nl.id)
}

// TestMinorityCannotApply: a leader cut off from the others cannot apply anything; its
// proposal ends with an unknown outcome and is never applied, while the majority goes on;
// after the heal every member holds the majority's state.
func TestMinorityCannotApply(t *testing.T) {
	c := newTestCluster(t, 7, 3, nil)
	c.users(1, "before", 3)
	before := c.converged()
	old := c.leader()
	c.faults.Isolate(old.id)
	ctx, cancel := context.WithTimeout(context.Background(), 40*testTick)
	_, err := old.st.Propose(ctx, &CreateUser{Name: "minority", Hash: []byte("h")})
	cancel()
	if !errors.Is(err, ErrOutcomeUnknown) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the isolated leader's proposal: %v", err)
	}
	if st := old.st.State(); st.Index() != before.Index() {
		t.Fatalf("the isolated member applied something: index %d, was %d", st.Index(), before.Index())
	}
	var rest []uint64
	for _, id := range c.ids {
		if id != old.id {
			rest = append(rest, id)
		}
	}
	c.mustPropose(rest[1], &CreateUser{Name: "majority", Hash: []byte("h")})
	c.waitUntil("the isolated leader to step down", func() bool { return !old.st.Status().IsLeader })
	if _, ok := old.st.State().User("majority"); ok {
		t.Fatal("the isolated member applied the majority's command while cut off")
	}
	c.faults.Heal()
	st := c.converged()
	if _, ok := st.User("minority"); ok {
		t.Fatal("the isolated leader's command was applied")
	}
	if _, ok := st.User("majority"); !ok || st.UserCount() != 4 {
		t.Fatalf("%d users", st.UserCount())
	}
	if c.faults.Cut == 0 {
		t.Fatal("nothing was cut")
	}
}

// TestDuplicatedForwards: messages are delayed, some past Propose's re-proposal (two
// election timeouts) and duplicated, so a follower's command can reach the leader twice, the
// late copy after later commands; each command is applied once: a topic deleted and created
// again, over and over, is there at the end, and every delete found it.
func TestDuplicatedForwards(t *testing.T) {
	c := newTestCluster(t, 8, 3, nil)
	c.mustPropose(1, addBroker(1))
	c.converged()
	c.faults.SetDuplicate(0.2)
	c.faults.SetDelay(0.2, 30*testTick)
	on := c.ids[0]
	if on == c.leader().id {
		on = c.ids[1]
	}
	for range 20 {
		c.mustPropose(on, &CreateTopic{Name: "t", Kind: 2, Placement: [][]uint64{{1}}})
		c.mustPropose(on, &DeleteTopic{Name: "t"})
	}
	c.mustPropose(on, &CreateTopic{Name: "t", Kind: 2, Placement: [][]uint64{{1}}})
	c.faults.Heal()
	c.faults.Stop() // the copies still delayed are dropped
	st := c.converged()
	if _, ok := st.Topic("t"); !ok {
		t.Fatal("a late copy of a delete removed the topic")
	}
	if c.faults.Duplicated == 0 || c.faults.Delayed == 0 {
		t.Fatal("nothing was duplicated or delayed")
	}
	t.Logf("%d messages duplicated, %d delayed", c.faults.Duplicated, c.faults.Delayed)
}

// TestStalledByUnknownCommand: a committed entry no member can decode (as a command of a newer
// release would be) stops applying on every member, rather than each skipping it; Propose
// then fails at once.
func TestStalledByUnknownCommand(t *testing.T) {
	c := newTestCluster(t, 9, 3, nil)
	c.mustPropose(1, addBroker(1))
	before := c.converged()
	unknown := &rawCommand{opcode: 200}
	data, err := encodeEntry([16]byte{9}, unknown)
	if err != nil {
		t.Fatal(err)
	}
	l := c.leader()
	p, err := l.st.Replica().Propose(data)
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	for _, id := range c.ids {
		m := c.members[id]
		c.waitUntil(fmt.Sprintf("member %d to stall", id), func() bool { return errors.Is(m.st.Err(), ErrStalled) })
		if !m.st.State().Equal(before) {
			t.Fatalf("member %d's state changed", id)
		}
	}
	if _, err := c.propose(2, addBroker(2)); !errors.Is(err, ErrStalled) {
		t.Fatalf("Propose on a stalled store: %v", err)
	}
	t.Log(c.members[1].st.Err())
}

// rawCommand is a command of an op this release does not know.
type rawCommand struct{ opcode op }

func (r *rawCommand) op() op                        { return r.opcode }
func (r *rawCommand) appendBody(dst []byte) []byte  { return append(dst, 1, 2, 3) }
func (r *rawCommand) check() error                  { return nil }
func (r *rawCommand) apply(*editor) (Result, error) { return Result{}, nil }
func (r *rawCommand) decodeBody(*wire.Reader)       {}

// TestJoinMember: a fourth broker starts empty with Join; a follower adds it (AddBroker, then
// AddMember); the leader's log being compacted, it catches up from a snapshot, and takes part:
// with one of the first three stopped the group goes on, and a member removed (RemoveMember)
// is out of the membership everywhere.
func TestJoinMember(t *testing.T) {
	c := newTestCluster(t, 10, 3, compacting)
	c.users(1, "early", 30)
	c.converged()
	c.addMember(4)
	st4 := c.members[4].st
	if st4.State().Index() != 0 || st4.Status().Commit != 0 {
		t.Fatal("the joining member has state before it was added")
	}
	on := c.ids[0]
	if on == c.leader().id {
		on = c.ids[1]
	}
	c.mustPropose(on, addBroker(4))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.members[on].st.AddMember(ctx, 4); err != nil {
		t.Fatal(err)
	}
	if err := c.members[on].st.AddMember(ctx, 4); err != nil {
		t.Fatalf("adding it again: %v", err)
	}
	st := c.converged()
	if st.UserCount() != 30 || st4.installed.Load() == 0 {
		t.Fatalf("member 4: %d users, %d snapshots installed", st4.State().UserCount(), st4.installed.Load())
	}
	c.waitUntil("member 4 to know the four voters", func() bool { return len(st4.Members().Voters) == 4 })
	stopped := c.ids[2]
	c.stop(stopped)
	running := []uint64{c.ids[0], c.ids[1], 4}
	c.ids = running // the ones converged waits for
	c.mustPropose(4, &CreateUser{Name: "from-4", Hash: []byte("h")})
	if err := c.members[4].st.RemoveMember(ctx, stopped); err != nil {
		t.Fatal(err)
	}
	c.mustPropose(c.ids[0], &CreateUser{Name: "after-removal", Hash: []byte("h")})
	if st := c.converged(running...); st.UserCount() != 32 {
		t.Fatalf("%d users", st.UserCount())
	}
	for _, id := range running {
		m := c.members[id]
		c.waitUntil(fmt.Sprintf("member %d to apply the removal", id), func() bool {
			return !slices.Contains(m.st.Members().Voters, stopped) && len(m.st.Members().Voters) == 3
		})
	}
	if err := c.members[4].st.AddMember(ctx, 99); !errors.Is(err, ErrUnknownBroker) {
		t.Fatalf("adding a node that is no broker: %v", err)
	}
}
