package offsetlog

import (
	"slices"
	"testing"
)

// TestGroups: each group with a commit once, sorted, cut at max; a reopened store has the
// groups it replayed.
func TestGroups(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, Options{})
	if g := s.Groups(10); len(g) != 0 {
		t.Fatalf("empty store: %q", g)
	}
	for _, c := range []struct {
		group string
		part  uint32
	}{{"b", 0}, {"a", 1}, {"b", 1}, {"c", 0}, {"a", 0}} {
		if err := commitWait(t, s, c.group, c.part, 1); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		max  int
		want []string
	}{{10, []string{"a", "b", "c"}}, {2, []string{"a", "b"}}, {0, nil}, {-1, nil}} {
		if got := s.Groups(tc.max); !slices.Equal(got, tc.want) {
			t.Fatalf("Groups(%d) = %q, want %q", tc.max, got, tc.want)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, dir, Options{})
	defer s.Close()
	if got := s.Groups(10); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("reopened: %q", got)
	}
}
