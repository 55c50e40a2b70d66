package meta

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
)

// spread returns max-min of the counts of the brokers named.
func spread(counts map[uint64]int, ids []uint64) int {
	lo, hi := counts[ids[0]], counts[ids[0]]
	for _, id := range ids {
		lo, hi = min(lo, counts[id]), max(hi, counts[id])
	}
	return hi - lo
}

func checkPlacement(t *testing.T, st *State, pl [][]uint64, partitions, rf int) {
	t.Helper()
	if len(pl) != partitions {
		t.Fatalf("%d partitions placed, want %d", len(pl), partitions)
	}
	for i, p := range pl {
		if len(p) != rf {
			t.Fatalf("partition %d: %v, want %d replicas", i, p, rf)
		}
		if err := activeBrokers(st, "placement", p); err != nil {
			t.Fatalf("partition %d: %v", i, err)
		}
		if err := checkReplicas("placement", p); err != nil {
			t.Fatalf("partition %d: %v", i, err)
		}
	}
}

func TestPlaceTable(t *testing.T) {
	three := run(t, emptyState(), brokers(1, 2, 3)...)
	loaded := run(t, three, step{topic("old", []uint64{1, 2}, []uint64{2, 3}, []uint64{3, 1}, []uint64{1, 2}, []uint64{2, 3}, []uint64{3, 1}), nil})
	withNew := run(t, loaded, brokers(4)...)
	drained := run(t, three, append(brokers(4), step{&DrainBroker{ID: 2}, nil})...)
	for _, tc := range []struct {
		name           string
		st             *State
		partitions, rf int
		want           [][]uint64
		err            error
	}{
		{"three brokers, three partitions, rf 3: every broker leads one", three, 3, 3, [][]uint64{{1, 2, 3}, {2, 1, 3}, {3, 1, 2}}, nil},
		{"rf 1 round robin", three, 4, 1, [][]uint64{{1}, {2}, {3}, {1}}, nil},
		{"rf 2: each broker two replicas, one leader", three, 3, 2, [][]uint64{{1, 2}, {3, 1}, {2, 3}}, nil},
		{"a new broker takes the new replicas and leads them", withNew, 2, 2, [][]uint64{{4, 1}, {4, 2}}, nil},
		{"a draining broker is not chosen", drained, 3, 2, [][]uint64{{1, 3}, {4, 1}, {3, 4}}, nil},
		{"more replicas than active brokers", drained, 1, 4, nil, ErrNotEnoughBrokers},
		{"no brokers", emptyState(), 1, 1, nil, ErrNotEnoughBrokers},
		{"no partitions", three, 0, 1, nil, ErrInvalid},
		{"too many partitions", three, 1025, 1, nil, ErrInvalid},
		{"rf 0", three, 1, 0, nil, ErrInvalid},
		{"rf over the limit", three, 1, MaxReplicas + 1, nil, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Place(tc.st, tc.partitions, tc.rf)
			if !errors.Is(err, tc.err) || tc.err == nil && err != nil {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if tc.err != nil {
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("placed %v, want %v", got, tc.want)
			}
			checkPlacement(t, tc.st, got, tc.partitions, tc.rf)
			again, _ := Place(tc.st, tc.partitions, tc.rf)
			if !reflect.DeepEqual(again, got) {
				t.Fatalf("not deterministic: %v then %v", got, again)
			}
			// What Place computes, apply accepts.
			if _, _, err := Apply(tc.st, tc.st.index+1, testID, topic("new", got...)); err != nil {
				t.Fatalf("apply refused the placement: %v", err)
			}
		})
	}
}

// TestPlaceEven: on an empty cluster of n brokers, the replicas and the leaders of any
// topic differ by at most one between two brokers; and topic after topic the totals stay
// that even.
func TestPlaceEven(t *testing.T) {
	for n := 1; n <= 7; n++ {
		ids := make([]uint64, n)
		for i := range ids {
			ids[i] = uint64(10 + i)
		}
		for rf := 1; rf <= min(n, 5); rf++ {
			for partitions := 1; partitions <= 24; partitions++ {
				st := run(t, emptyState(), brokers(ids...)...)
				for round := range 3 { // three topics in a row
					pl, err := Place(st, partitions, rf)
					if err != nil {
						t.Fatal(err)
					}
					checkPlacement(t, st, pl, partitions, rf)
					st = run(t, st, step{topic(fmt.Sprintf("t%d", round), pl...), nil})
					replicas, leaders := st.replicaCounts()
					if s := spread(replicas, ids); s > 1 {
						t.Fatalf("%d brokers, rf %d, %d partitions, topic %d: replicas %v (spread %d)", n, rf, partitions, round, replicas, s)
					}
					if s := spread(leaders, ids); s > 1 {
						t.Fatalf("%d brokers, rf %d, %d partitions, topic %d: leaders %v (spread %d)", n, rf, partitions, round, leaders, s)
					}
				}
			}
		}
	}
}

// TestPlaceCatchUp: brokers added to a loaded cluster get the new replicas until they hold as
// many as the others.
func TestPlaceCatchUp(t *testing.T) {
	st := run(t, emptyState(), brokers(1, 2, 3)...)
	pl, _ := Place(st, 12, 3)
	st = run(t, st, step{topic("big", pl...), nil})
	st = run(t, st, brokers(4, 5)...)
	pl, err := Place(st, 12, 2)
	if err != nil {
		t.Fatal(err)
	}
	st = run(t, st, step{topic("more", pl...), nil})
	replicas, _ := st.replicaCounts()
	// 36 + 24 replicas over 5 brokers: 12 each.
	for _, id := range []uint64{1, 2, 3, 4, 5} {
		if replicas[id] != 12 {
			t.Fatalf("replicas per broker %v, want 12 each", replicas)
		}
	}
	for _, p := range pl[:6] {
		if !slices.Contains(p, 4) && !slices.Contains(p, 5) {
			t.Fatalf("an early partition of the second topic on the old brokers only: %v", pl)
		}
	}
}
