package meta

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/lightq/lightq/wire"
)

// TestApplyMoves: a move keeps the replicas it started from in Previous until FinishMove; a
// move changed before it finished keeps every broker that may hold a replica; FinishMove is
// refused for a move that changed and is a no-op once finished; Moves counts every move.
func TestApplyMoves(t *testing.T) {
	st := run(t, emptyState(), brokers(1, 2, 3, 4, 5)...)
	st = run(t, st,
		step{topic("t", []uint64{1, 2, 3}), nil},
		step{&SetReplicas{Topic: "t", Partition: 0, From: []uint64{1, 2, 3}, To: []uint64{1, 2, 3}}, nil}, // no change
	)
	part := func() Partition { tp, _ := st.Topic("t"); return tp.Partitions[0] }
	if p := part(); p.Moving() || p.Moves != 0 {
		t.Fatalf("a move to the same replicas: %+v", p)
	}
	st = run(t, st, step{&SetReplicas{Topic: "t", Partition: 0, From: []uint64{1, 2, 3}, To: []uint64{2, 3, 4}}, nil})
	if p := part(); !slices.Equal(p.Replicas, []uint64{2, 3, 4}) || !slices.Equal(p.Previous, []uint64{1, 2, 3}) || p.Moves != 1 ||
		!slices.Equal(p.Holders(), []uint64{2, 3, 4, 1}) {
		t.Fatalf("moving: %+v", p)
	}
	if as := st.Assignments(1); len(as) != 1 || !slices.Equal(as[0].Previous, []uint64{1, 2, 3}) {
		t.Fatalf("broker 1 still holds the partition while it moves: %+v", as)
	}
	if h := st.HeldBy(1); h.Replicas != 0 || h.Leaving != 1 || h.First != "t/0" {
		t.Fatalf("held by 1: %+v", h)
	}
	if m := st.Moving(); len(m) != 1 || m[0].Topic != "t" {
		t.Fatalf("moving: %+v", m)
	}
	st = run(t, st,
		// Changed before it finished: broker 4 may hold a replica by now, and 1 still.
		step{&SetReplicas{Topic: "t", Partition: 0, From: []uint64{2, 3, 4}, To: []uint64{2, 3, 5}}, nil},
		step{&FinishMove{Topic: "t", Partition: 0, Group: 2, Replicas: []uint64{2, 3, 4}}, ErrConflict},
		step{&FinishMove{Topic: "t", Partition: 0, Group: 9, Replicas: []uint64{2, 3, 5}}, ErrConflict},
		step{&FinishMove{Topic: "u", Partition: 0, Group: 2, Replicas: []uint64{2, 3, 5}}, ErrUnknownTopic},
		step{&FinishMove{Topic: "t", Partition: 1, Group: 2, Replicas: []uint64{2, 3, 5}}, ErrInvalid},
		step{&FinishMove{Topic: "t", Partition: 0, Group: 2, Replicas: nil}, ErrInvalid},
	)
	if p := part(); !slices.Equal(p.Previous, []uint64{1, 2, 3, 4}) || p.Moves != 2 {
		t.Fatalf("moved again: %+v", p)
	}
	st = run(t, st,
		step{&FinishMove{Topic: "t", Partition: 0, Group: 2, Replicas: []uint64{2, 3, 5}}, nil},
		step{&FinishMove{Topic: "t", Partition: 0, Group: 2, Replicas: []uint64{2, 3, 5}}, nil}, // finished: no-op
	)
	if p := part(); p.Moving() || p.Moves != 2 || len(st.Assignments(1)) != 0 || len(st.Moving()) != 0 {
		t.Fatalf("finished: %+v", p)
	}
	st = run(t, st,
		step{&RemoveBroker{ID: 1}, nil},
		step{&DrainBroker{ID: 4}, nil},
		step{&SetReplicas{Topic: "t", Partition: 0, From: []uint64{2, 3, 5}, To: []uint64{2, 4}}, ErrBrokerInUse}, // to a removing broker
	)
}

// TestMoveHoldersLimit: a move that would involve more than MaxReplicas brokers is refused.
func TestMoveHoldersLimit(t *testing.T) {
	var ids []uint64
	for i := uint64(1); i <= 12; i++ {
		ids = append(ids, i)
	}
	st := run(t, emptyState(), brokers(ids...)...)
	st = run(t, st, step{topic("t", ids[:5]), nil})
	_, _, err := Apply(st, st.index+1, testID, &SetReplicas{Topic: "t", Partition: 0, From: ids[:5], To: ids[5:10]})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "involve 10 brokers") {
		t.Fatalf("a move of 5 to 5 others: %v", err)
	}
}

// TestPlanDrain: each partition of the drained broker goes to the least loaded active broker
// that is not yet its replica, appended last; the plan applies; a partition with nowhere to
// go fails the plan.
func TestPlanDrain(t *testing.T) {
	st := run(t, emptyState(), brokers(1, 2, 3, 4, 5)...)
	st = run(t, st,
		step{topic("a", []uint64{3, 1, 2}, []uint64{1, 2, 4}, []uint64{2, 3, 4}), nil},
		step{topic("b", []uint64{3, 5}), nil},
		step{&DrainBroker{ID: 3}, nil},
	)
	plan, err := PlanDrain(st, 3)
	if err != nil {
		t.Fatal(err)
	}
	// Load before: 1:2 2:3 4:2 5:1 (3 is drained). a/0 {3,1,2} -> 5 (load 1, then 2);
	// a/2 {2,3,4} -> 1 (1 and 5 have 2: the lower id); b/0 {3,5} -> 4 (4:2 vs 1:3, 2:3).
	want := []SetReplicas{
		{Topic: "a", Partition: 0, From: []uint64{3, 1, 2}, To: []uint64{1, 2, 5}},
		{Topic: "a", Partition: 2, From: []uint64{2, 3, 4}, To: []uint64{2, 4, 1}},
		{Topic: "b", Partition: 0, From: []uint64{3, 5}, To: []uint64{5, 4}},
	}
	if len(plan) != len(want) {
		t.Fatalf("plan %+v", plan)
	}
	for i := range want {
		if plan[i].Topic != want[i].Topic || plan[i].Partition != want[i].Partition || !slices.Equal(plan[i].From, want[i].From) || !slices.Equal(plan[i].To, want[i].To) {
			t.Errorf("move %d: %+v, want %+v", i, plan[i], want[i])
		}
	}
	for i := range plan {
		st = run(t, st, step{&plan[i], nil})
	}
	if h := st.HeldBy(3); h.Replicas != 0 || h.Leaving != 3 {
		t.Fatalf("after the plan, broker 3 holds %+v", h)
	}
	if _, err := PlanDrain(st, 9); !errors.Is(err, ErrUnknownBroker) {
		t.Fatalf("unknown broker: %v", err)
	}
	small := run(t, emptyState(), brokers(1, 2, 3)...)
	small = run(t, small, step{topic("c", []uint64{1, 2, 3}), nil})
	if _, err := PlanDrain(small, 2); !errors.Is(err, ErrNotEnoughBrokers) || !strings.Contains(err.Error(), `topic "c" partition 0`) {
		t.Fatalf("no broker to move to: %v", err)
	}
}

// TestPlanDrainSkipsTransient: a transient topic's partition lives in its home's memory, so a
// drain plans no move of it (the home stays in use until the topic is deleted), while the
// durable partitions of the same broker are moved.
func TestPlanDrainSkipsTransient(t *testing.T) {
	st := run(t, emptyState(), brokers(1, 2, 3)...)
	tt := topic("ticks", []uint64{2}, []uint64{3})
	tt.Kind = wire.KindTransient
	st = run(t, st, step{tt, nil}, step{topic("d", []uint64{2, 1}), nil}, step{&DrainBroker{ID: 2}, nil})
	plan, err := PlanDrain(st, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 1 || plan[0].Topic != "d" || !slices.Equal(plan[0].To, []uint64{1, 3}) {
		t.Fatalf("plan %+v: want d/0 moved to [1 3] alone", plan)
	}
	st = run(t, st, step{&plan[0], nil})
	if h := st.HeldBy(2); h.Replicas != 1 || h.Leaving != 1 {
		t.Fatalf("after the plan broker 2 holds %+v: want the transient partition ticks/0, and d/0 leaving", h)
	}
}
