package log

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDump(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 2 << 10})
	appendN(t, l, rand.New(rand.NewPCG(1, 1)), 20, 3, 100, 1_700_000_000_000)
	l.Close()
	// Damage one byte of the first segment's first batch payload.
	p := filepath.Join(dir, segmentName(0, logSuffix))
	b, _ := os.ReadFile(p)
	b[50] ^= 0xff
	os.WriteFile(p, b, 0o644)
	var out strings.Builder
	if err := Dump(&out, dir, nil, 0); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if !strings.Contains(s, "segment 00000000000000000000.log") || strings.Count(s, "BAD") != 1 ||
		!strings.Contains(s, "pos=0 offset=0") || !strings.Contains(s, "2023-11-14T22:13:20") {
		t.Fatalf("dump:\n%s", s)
	}
}
