package meta

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/lightq/lightq/wire"
)

// step is one command applied in a scenario and the refusal it must meet (nil: applied).
type step struct {
	cmd  Command
	want error
}

// run applies steps to st in order, each with a fresh request id, checking each outcome, and
// that a refused command changes nothing but the index and that no state already made
// changes afterwards. It returns the final state.
func run(t *testing.T, st *State, steps ...step) *State {
	t.Helper()
	for i, s := range steps {
		before := appendState(nil, st)
		var id [16]byte
		id[0], id[1], id[2] = byte(st.index>>8), byte(st.index), 0x5a
		next, res, err := Apply(st, st.index+1, id, s.cmd)
		if s.want == nil && err != nil || s.want != nil && !errors.Is(err, s.want) {
			t.Fatalf("step %d (%T %+v): %v, want %v", i, s.cmd, s.cmd, err, s.want)
		}
		if res.Index != st.index+1 || next.index != st.index+1 {
			t.Fatalf("step %d: result index %d, state index %d, want %d", i, res.Index, next.index, st.index+1)
		}
		if string(appendState(nil, st)) != string(before) {
			t.Fatalf("step %d: applying changed the state it started from", i)
		}
		if err != nil {
			if content(st) != content(next) {
				t.Fatalf("step %d: refused (%v) but the state changed", i, err)
			}
		}
		st = next
	}
	return st
}

// content is the encoding of s's metadata without its index and request ids.
func content(s *State) string {
	c := &State{nextGroup: s.nextGroup, brokers: s.brokers, topics: s.topics, users: s.users, coordinators: s.coordinators}
	return string(appendState(nil, c))
}

func brokers(ids ...uint64) []step {
	var out []step
	for _, id := range ids {
		out = append(out, step{&AddBroker{ID: id, ClientAddr: fmt.Sprintf("b%d:7070", id), ClusterAddr: fmt.Sprintf("b%d:7071", id)}, nil})
	}
	return out
}

func topic(name string, placement ...[]uint64) *CreateTopic {
	return &CreateTopic{Name: name, Kind: wire.KindDurable, CreatedAt: 1_700_000_000_000, Placement: placement}
}

func TestApplyBrokers(t *testing.T) {
	st := run(t, emptyState(), brokers(1, 2, 3)...)
	st = run(t, st,
		step{&AddBroker{ID: 1, ClientAddr: "b1:7070", ClusterAddr: "b1:7071"}, nil}, // announced again: no change
		step{&AddBroker{ID: 0, ClientAddr: "x:1", ClusterAddr: "x:2"}, ErrInvalid},
		step{&AddBroker{ID: 4, ClusterAddr: "x:2"}, ErrInvalid},
		step{topic("t", []uint64{1, 2}), nil},
		step{&RemoveBroker{ID: 2}, ErrBrokerInUse},
		step{&RemoveBroker{ID: 9}, ErrUnknownBroker},
		step{&DrainBroker{ID: 9}, ErrUnknownBroker},
		step{&DrainBroker{ID: 2}, nil},
		step{&AddBroker{ID: 2, ClientAddr: "new:7070", ClusterAddr: "new:7071"}, nil}, // new addresses, still removing
		step{topic("u", []uint64{2}), ErrBrokerInUse},                                 // not active
		step{&SetReplicas{Topic: "t", Partition: 0, From: []uint64{1, 2}, To: []uint64{1, 3}}, nil},
		step{&SetCoordinator{Group: "g", Node: 2}, ErrBrokerInUse},
		step{&SetCoordinator{Group: "g", Node: 3}, nil},
		step{&RemoveBroker{ID: 3}, ErrBrokerInUse}, // replicas, and it coordinates g
		step{&RemoveBroker{ID: 2}, ErrBrokerInUse}, // the move off it has not finished
		step{&FinishMove{Topic: "t", Partition: 0, Group: 2, Replicas: []uint64{1, 3}}, nil},
		step{&RemoveBroker{ID: 2}, nil},
	)
	if _, ok := st.Broker(2); ok {
		t.Fatal("broker 2 not removed")
	}
	if b, _ := st.Broker(1); b.State != BrokerActive || b.ClientAddr != "b1:7070" {
		t.Fatalf("broker 1: %+v", b)
	}
	if n, ok := st.Coordinator("g"); !ok || n != 3 {
		t.Fatalf("coordinator of g: %d %v", n, ok)
	}
	st = run(t, st, step{&SetCoordinator{Group: "g"}, nil}, step{&SetCoordinator{Group: "g"}, nil})
	if _, ok := st.Coordinator("g"); ok {
		t.Fatal("coordinator not cleared")
	}
	// Re-announcing a draining broker keeps it draining.
	st = run(t, st, step{&DrainBroker{ID: 1}, nil}, step{&AddBroker{ID: 1, ClientAddr: "moved:1", ClusterAddr: "moved:2"}, nil})
	if b, _ := st.Broker(1); b.State != BrokerRemoving || b.ClientAddr != "moved:1" {
		t.Fatalf("broker 1 after its move: %+v", b)
	}
}

func TestApplyTopics(t *testing.T) {
	st := run(t, emptyState(), brokers(1, 2, 3)...)
	st = run(t, st,
		step{topic("a", []uint64{1, 2}, []uint64{2, 3}), nil},
		step{topic("a", []uint64{1}), ErrTopicExists},
		step{topic("b", []uint64{1, 4}), ErrUnknownBroker},
		step{topic("b", []uint64{1, 1}), ErrInvalid},
		step{topic("b"), ErrInvalid},
		step{topic("bad/name", []uint64{1}), ErrInvalid},
		step{&CreateTopic{Name: "b", Kind: 9, Placement: [][]uint64{{1}}}, ErrInvalid},
		step{&CreateTopic{Name: "b", Kind: wire.KindDurable, Placement: [][]uint64{{1}}, Options: []wire.Option{{Key: "k"}, {Key: "k"}}}, ErrInvalid},
		step{topic("b", []uint64{3}), nil},
		step{&CreateUser{Name: "u", Hash: []byte("h")}, nil},
		step{&Grant{User: "u", Topic: "a", Roles: wire.RolesProduce}, nil},
		step{&Grant{User: "u", Topic: "b", Roles: wire.RolesBoth}, nil},
		step{&DeleteTopic{Name: "a"}, nil},
		step{&DeleteTopic{Name: "a"}, ErrUnknownTopic},
		step{&SetReplicas{Topic: "a", Partition: 0, From: []uint64{1}, To: []uint64{2}}, ErrUnknownTopic},
		step{&SetReplicas{Topic: "b", Partition: 1, From: []uint64{3}, To: []uint64{2}}, ErrInvalid},
		step{&SetReplicas{Topic: "b", Partition: 0, From: []uint64{1}, To: []uint64{2}}, ErrConflict},
		step{&SetReplicas{Topic: "b", Partition: 0, From: []uint64{3}, To: []uint64{2, 9}}, ErrUnknownBroker},
		step{&SetReplicas{Topic: "b", Partition: 0, From: []uint64{3}, To: []uint64{2, 3}}, nil},
	)
	if _, ok := st.Topic("a"); ok {
		t.Fatal("topic a not deleted")
	}
	u, _ := st.User("u")
	if len(u.Grants) != 1 || u.Grants["b"] != wire.RolesBoth {
		t.Fatalf("grants after deleting a: %v", u.Grants)
	}
	b, _ := st.Topic("b")
	// a took groups 2 and 3, b group 4: ids are never reused.
	if len(b.Partitions) != 1 || b.Partitions[0].Group != 4 || !slices.Equal(b.Partitions[0].Replicas, []uint64{2, 3}) || st.NextGroup() != 5 {
		t.Fatalf("topic b: %+v, next group %d", b.Partitions, st.NextGroup())
	}
	if a, ok := st.Partition(4); !ok || a.Topic != "b" || a.Partition != 0 {
		t.Fatalf("group 4: %+v %v", a, ok)
	}
	if as := st.Assignments(2); len(as) != 1 || as[0].Group != 4 {
		t.Fatalf("assignments of broker 2: %+v", as)
	}
}

func TestApplyCreateTopicResult(t *testing.T) {
	st := run(t, emptyState(), brokers(1, 2)...)
	_, res, err := Apply(st, 10, testID, topic("t", []uint64{1}, []uint64{2}, []uint64{1, 2}))
	if err != nil || !slices.Equal(res.Groups, []uint64{2, 3, 4}) || res.Index != 10 {
		t.Fatalf("result %+v, %v", res, err)
	}
}

func TestApplyTopicUser(t *testing.T) {
	st := run(t, emptyState(), brokers(1)...)
	withUser := func(name, user string, hash []byte) *CreateTopic {
		c := topic(name, []uint64{1})
		c.User, c.UserHash = user, hash
		return c
	}
	st = run(t, st,
		step{withUser("a", "shop", []byte("hash")), nil},            // creates shop
		step{withUser("b", "shop", []byte("hash2")), ErrUserExists}, // created meanwhile: refused
		step{withUser("b", "nobody", nil), ErrUnknownUser},
		step{withUser("b", "", []byte("h")), ErrInvalid},
		step{withUser("b", "shop", nil), nil}, // an existing user
	)
	u, _ := st.User("shop")
	if string(u.Hash) != "hash" || u.Grants["a"] != wire.RolesBoth || u.Grants["b"] != wire.RolesBoth {
		t.Fatalf("shop: %+v", u)
	}
	st = run(t, st, step{&DeleteUser{Name: "shop"}, nil})
	if a, _ := st.Topic("a"); a.User != "" {
		t.Fatalf("topic a's user after the user was deleted: %q", a.User)
	}
}

func TestApplyUsers(t *testing.T) {
	st := run(t, emptyState(), brokers(1)...)
	st = run(t, st,
		step{topic("t", []uint64{1}), nil},
		step{&CreateUser{Name: "u", Hash: []byte("h1")}, nil},
		step{&CreateUser{Name: "u", Hash: []byte("h2")}, ErrUserExists},
		step{&CreateUser{Name: "v"}, ErrInvalid},
		step{&CreateUser{Name: "bad\x00name", Hash: []byte("h")}, ErrInvalid},
		step{&SetPassword{Name: "u", Hash: []byte("h3")}, nil},
		step{&SetPassword{Name: "nobody", Hash: []byte("h")}, ErrUnknownUser},
		step{&Grant{User: "u", Topic: "t", Roles: wire.RolesProduce}, nil},
		step{&Grant{User: "u", Topic: "t", Roles: wire.RolesConsume}, nil},
		step{&Grant{User: "u", Topic: "nope", Roles: wire.RolesConsume}, ErrUnknownTopic},
		step{&Grant{User: "nobody", Topic: "t", Roles: wire.RolesConsume}, ErrUnknownUser},
		step{&Grant{User: "u", Topic: "t", Roles: wire.RolesAdmin}, ErrInvalid},
		step{&Grant{User: "u", Roles: wire.RolesProduce}, ErrInvalid},
		step{&Grant{User: "u", Roles: wire.RolesAdmin}, nil},
		step{&Revoke{User: "u", Topic: "t", Roles: wire.RolesProduce}, nil},
	)
	u, _ := st.User("u")
	if string(u.Hash) != "h3" || !u.Admin || len(u.Grants) != 1 || u.Grants["t"] != wire.RolesConsume {
		t.Fatalf("u: %+v", u)
	}
	st = run(t, st, step{&Revoke{User: "u", Topic: "t", Roles: wire.RolesBoth}, nil}, step{&Revoke{User: "u", Roles: wire.RolesAdmin}, nil})
	if u, _ := st.User("u"); u.Admin || len(u.Grants) != 0 || st.GrantCount() != 0 {
		t.Fatalf("u after the revokes: %+v", u)
	}
	st = run(t, st, step{&DeleteUser{Name: "u"}, nil}, step{&DeleteUser{Name: "u"}, ErrUnknownUser})
	if st.UserCount() != 0 {
		t.Fatal("user not deleted")
	}
}

// TestApplyDuplicate: a command delivered twice (the same request id) is applied once, even
// when other commands came between: a second DeleteTopic does not delete the topic created
// again meanwhile.
func TestApplyDuplicate(t *testing.T) {
	st := run(t, emptyState(), append(brokers(1), step{topic("t", []uint64{1}), nil})...)
	del := &DeleteTopic{Name: "t"}
	dupID := [16]byte{1, 2, 3}
	st, _, err := Apply(st, st.index+1, dupID, del)
	if err != nil {
		t.Fatal(err)
	}
	st = run(t, st, step{topic("t", []uint64{1}), nil})
	st, _, err = Apply(st, st.index+1, dupID, del)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.Topic("t"); !ok {
		t.Fatal("the duplicate delete was applied")
	}
	// The window is bounded: after dedupWindow other commands the id is forgotten.
	for range dedupWindow {
		st = run(t, st, step{&SetCoordinator{Group: "g"}, nil})
	}
	if len(st.recent) != dedupWindow || st.seen(dupID) {
		t.Fatalf("window of %d ids, still holding the old one: %v", len(st.recent), st.seen(dupID))
	}
}
