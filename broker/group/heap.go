package group

import "container/heap"

// memberHeap orders members by their next deadline (member.eventAt): the end of a held
// heartbeat, or the expiry of the session. Each member is in it once, at member.heapIdx
// (-1: not in it). Under Coordinator.mu.
type memberHeap []*member

func (h memberHeap) Len() int           { return len(h) }
func (h memberHeap) Less(i, j int) bool { return h[i].eventAt.Before(h[j].eventAt) }
func (h memberHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx, h[j].heapIdx = i, j
}

func (h *memberHeap) Push(x any) {
	m := x.(*member)
	m.heapIdx = len(*h)
	*h = append(*h, m)
}

func (h *memberHeap) Pop() any {
	old := *h
	m := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	m.heapIdx = -1
	return m
}

// update files m under its current eventAt, adding it when it is not in the heap.
func (h *memberHeap) update(m *member) {
	if m.heapIdx < 0 {
		heap.Push(h, m)
		return
	}
	heap.Fix(h, m.heapIdx)
}

// remove takes m out of the heap, if it is in it.
func (h *memberHeap) remove(m *member) {
	if m.heapIdx >= 0 {
		heap.Remove(h, m.heapIdx)
	}
}
