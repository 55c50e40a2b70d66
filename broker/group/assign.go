package group

import "sort"

// rebalance recomputes g's targets for its members: balanced (member counts differ by at
// most 1) and sticky (a partition keeps its target unless that member has more than its
// quota, or left). Members that currently have more targets get the larger quotas, ties by
// join order, so that joining and leaving move as few partitions as the balance allows. A
// member over its quota keeps first the partitions it holds (they are being processed), then
// the lowest. The freed partitions and those without a target go, lowest first, to the
// members under their quota, in join order. It reports whether any target changed. Caller
// holds the coordinator's mutex.
func (g *group) rebalance() bool {
	n := len(g.target)
	k := len(g.order)
	if k == 0 {
		changed := false
		for p := range g.target {
			if g.target[p] != nil {
				g.target[p], changed = nil, true
			}
		}
		return changed
	}
	cur := make(map[*member][]int, k)
	for p, m := range g.target {
		if m != nil {
			cur[m] = append(cur[m], p)
		}
	}
	byCount := append([]*member(nil), g.order...)
	sort.SliceStable(byCount, func(i, j int) bool { return len(cur[byCount[i]]) > len(cur[byCount[j]]) })
	quota := make(map[*member]int, k)
	for i, m := range byCount {
		quota[m] = n / k
		if i < n%k {
			quota[m]++
		}
	}
	next := make([]*member, n)
	count := make(map[*member]int, k)
	for _, m := range g.order {
		ps := cur[m]
		sort.SliceStable(ps, func(i, j int) bool {
			hi, hj := g.holder[ps[i]] == m, g.holder[ps[j]] == m
			if hi != hj {
				return hi
			}
			return ps[i] < ps[j]
		})
		for _, p := range ps[:min(len(ps), quota[m])] {
			next[p] = m
			count[m]++
		}
	}
	p := 0
	for _, m := range g.order {
		for count[m] < quota[m] {
			for next[p] != nil {
				p++
			}
			next[p] = m
			count[m]++
		}
	}
	changed := false
	for i := range next {
		if g.target[i] != next[i] {
			changed = true
		}
	}
	g.target = next
	return changed
}
