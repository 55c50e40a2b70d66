package group

import (
	"fmt"
	"testing"
)

// TestRebalance: from a given target assignment, the new one is balanced and moves exactly
// the partitions of members over their quota (their excess) and those without a target.
func TestRebalance(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members int
		target  []int // member index per partition, -1: none
	}{
		{"first member", 1, []int{-1, -1, -1, -1}},
		{"second joins", 2, []int{0, 0, 0, 0, 0}},
		{"third joins 8", 3, []int{0, 0, 0, 0, 1, 1, 1, 1}},
		{"one left", 2, []int{0, 0, -1, -1, 1, 1}},
		{"more members than partitions", 5, []int{0, 1, -1}},
		{"already balanced", 3, []int{0, 1, 2, 0, 1, 2, 0}},
		{"uneven", 3, []int{0, 0, 0, 0, 0, 0, 1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &group{target: make([]*member, len(tc.target)), holder: make([]*member, len(tc.target))}
			for i := 0; i < tc.members; i++ {
				g.order = append(g.order, &member{g: g, id: mid(byte(i))})
			}
			before := map[*member]int{}
			for p, i := range tc.target {
				if i >= 0 {
					g.target[p] = g.order[i]
					before[g.order[i]]++
				}
			}
			old := append([]*member(nil), g.target...)
			g.rebalance()
			n, k := len(tc.target), tc.members
			after := map[*member]int{}
			for _, m := range g.target {
				if m == nil {
					t.Fatal("a partition without a target")
				}
				after[m]++
			}
			lo, hi := n, 0
			for _, m := range g.order {
				lo, hi = min(lo, after[m]), max(hi, after[m])
			}
			if hi-lo > 1 || hi > (n+k-1)/k {
				t.Fatalf("counts from %d to %d", lo, hi)
			}
			moved := 0
			for p := range old {
				if old[p] != nil && old[p] != g.target[p] {
					moved++
				}
			}
			// The least a balanced result can move: what members hold above ceil(n/k), plus,
			// when fewer members can stay at ceil than hold more than floor, the rest above floor.
			floor, ceil, big := n/k, (n+k-1)/k, n%k
			if big == 0 {
				big = k
			}
			want, overFloor := 0, 0
			for _, m := range g.order {
				if before[m] > ceil {
					want += before[m] - ceil
				}
				if before[m] > floor {
					overFloor++
				}
			}
			if ceil > floor && overFloor > big {
				want += overFloor - big
			}
			if moved != want {
				t.Fatalf("moved %d partitions, want %d (%s)", moved, want, fmt.Sprint(tc.target))
			}
		})
	}
}
