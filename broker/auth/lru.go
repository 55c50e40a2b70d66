package auth

import "container/list"

// boundedTable is a map with at most max entries: past it the least recently used entry is
// dropped, unless pinned says it is in use (an entry a login attempt in flight points to),
// in which case the next one is tried. The caller bounds the pinned entries (Throttle: by
// MaxPending), so eviction always ends; while more than max entries are pinned the table
// holds them all, and it shrinks back to max at the next addition. Values live in list elements, so a *V stays valid until its entry is
// dropped.
//
// A boundedTable is not safe for concurrent use: Throttle guards its tables with its mutex.
type boundedTable[K comparable, V any] struct {
	max    int
	pinned func(*V) bool // nil: nothing is pinned
	lru    list.List     // of *tableEntry[K, V], most recently used at the front
	byKey  map[K]*list.Element
}

type tableEntry[K comparable, V any] struct {
	key K
	val V
}

func newBoundedTable[K comparable, V any](max int, pinned func(*V) bool) *boundedTable[K, V] {
	return &boundedTable[K, V]{max: max, pinned: pinned, byKey: make(map[K]*list.Element)}
}

// get returns k's value, marking it used, or nil.
func (t *boundedTable[K, V]) get(k K) *V {
	el, ok := t.byKey[k]
	if !ok {
		return nil
	}
	t.lru.MoveToFront(el)
	return &el.Value.(*tableEntry[K, V]).val
}

// peek returns k's value without marking it used, or nil.
func (t *boundedTable[K, V]) peek(k K) *V {
	if el, ok := t.byKey[k]; ok {
		return &el.Value.(*tableEntry[K, V]).val
	}
	return nil
}

// getOrAdd returns k's value, adding init's when k is absent (which may evict another).
func (t *boundedTable[K, V]) getOrAdd(k K, init func() V) *V {
	if v := t.get(k); v != nil {
		return v
	}
	e := &tableEntry[K, V]{key: k, val: init()}
	added := t.lru.PushFront(e)
	t.byKey[k] = added
	t.evict(added)
	return &e.val
}

// evict drops least recently used, unpinned entries other than keep until at most max
// remain.
func (t *boundedTable[K, V]) evict(keep *list.Element) {
	for skipped := 0; t.lru.Len() > t.max && skipped < t.lru.Len(); {
		back := t.lru.Back()
		e := back.Value.(*tableEntry[K, V])
		if back == keep || (t.pinned != nil && t.pinned(&e.val)) {
			t.lru.MoveToFront(back)
			skipped++
			continue
		}
		delete(t.byKey, e.key)
		t.lru.Remove(back)
	}
}

// remove drops k if present.
func (t *boundedTable[K, V]) remove(k K) {
	if el, ok := t.byKey[k]; ok {
		delete(t.byKey, k)
		t.lru.Remove(el)
	}
}

func (t *boundedTable[K, V]) len() int { return t.lru.Len() }
