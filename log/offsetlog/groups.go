package offsetlog

import "sort"

// Groups returns the names of the groups with a committed offset, sorted, at most max of
// them (the first in that order; max <= 0: none). It walks every stored pair holding the
// store's mutex, so it is for rare use (the broker calls it once per topic at start), not
// for a commit path. Safe for concurrent use.
func (s *Store) Groups(max int) []string {
	if max <= 0 {
		return nil
	}
	s.mu.Lock()
	seen := make(map[string]struct{})
	for k := range s.entries {
		seen[k.group] = struct{}{}
	}
	s.mu.Unlock()
	out := make([]string, 0, len(seen))
	for g := range seen {
		out = append(out, g)
	}
	sort.Strings(out)
	return out[:min(len(out), max)]
}
