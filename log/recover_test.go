package log

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lightq/lightq/wire"
)

// fixture is a closed log with sealed segments and an active one.
type fixture struct {
	dir     string
	opts    Options
	batches []stored
	active  string // path of the active segment
	actBase int64  // its base offset
}

func newFixture(t *testing.T, seed uint64, n int) fixture {
	t.Helper()
	dir := t.TempDir()
	opts := Options{SegmentBytes: 16 << 10, IndexIntervalBytes: 512, Logf: t.Logf}
	l := mustOpen(t, dir, opts)
	f := fixture{dir: dir, opts: opts}
	f.batches = appendN(t, l, rand.New(rand.NewPCG(seed, 1)), n, 4, 120, 1_000)
	act := l.segs[len(l.segs)-1]
	f.active, f.actBase = act.path, act.base
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return f
}

// clone copies the fixture's directory, so one fixture serves many cases.
func (f fixture) clone(t *testing.T) fixture {
	t.Helper()
	dir := t.TempDir()
	ents, err := os.ReadDir(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(f.dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g := f
	g.dir, g.active = dir, filepath.Join(dir, filepath.Base(f.active))
	return g
}

// positions returns the byte position of every batch in the active segment.
func (f fixture) activeBatches() (pos []int64, bs []stored) {
	var p int64
	for _, b := range f.batches {
		if b.base >= f.actBase {
			pos, bs = append(pos, p), append(bs, b)
			p += int64(len(b.data))
		}
	}
	return pos, bs
}

func brokenFiles(t *testing.T, dir string) [][]byte {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "*"+brokenInfix+"*"))
	var out [][]byte
	for _, p := range m {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// checkRecovered opens the log and checks that it holds exactly want, that the .broken copy
// holds cut, and that appends continue at the right offset.
func checkRecovered(t *testing.T, f fixture, want []stored, cut []byte) {
	t.Helper()
	l, err := Open(f.dir, f.opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer l.Close()
	sameBatches(t, readAll(t, l), want)
	if br := brokenFiles(t, f.dir); len(cut) == 0 && len(br) != 0 || len(cut) > 0 && (len(br) != 1 || !bytes.Equal(br[0], cut)) {
		t.Fatalf(".broken files: %d, want one holding the %d cut bytes", len(br), len(cut))
	}
	st, _ := os.Stat(f.active)
	if int64(st.Size()) != l.segs[len(l.segs)-1].size {
		t.Fatalf("active file %d bytes, log %d", st.Size(), l.segs[len(l.segs)-1].size)
	}
	next := want[len(want)-1].next()
	b := makeBatch(rand.New(rand.NewPCG(9, 9)), 2, 10, 0)
	if base, err := l.Append(b, 2); err != nil || base != next {
		t.Fatalf("Append after recovery: %d %v, want %d", base, err, next)
	}
	if cs, err := Verify(f.dir, nil, 0); err != nil || len(cs) != 0 {
		t.Fatalf("Verify after recovery: %v %v", cs, err)
	}
}

func TestTornTailRandomTruncation(t *testing.T) {
	f := newFixture(t, 1, 400)
	orig, err := os.ReadFile(f.active)
	if err != nil {
		t.Fatal(err)
	}
	pos, act := f.activeBatches()
	sealed := f.batches[:len(f.batches)-len(act)]
	if len(sealed) == 0 || len(act) < 20 {
		t.Fatalf("fixture: %d sealed, %d active batches", len(sealed), len(act))
	}
	n := 60
	if long {
		n = 1000
	}
	rng := rand.New(rand.NewPCG(2, 2))
	for i := range n {
		cutAt := rng.Int64N(int64(len(orig)))
		if i == 0 {
			cutAt = 1
		}
		g := f.clone(t)
		if err := os.Truncate(g.active, cutAt); err != nil {
			t.Fatal(err)
		}
		k := 0 // whole batches before the cut
		for k < len(act) && pos[k]+int64(len(act[k].data)) <= cutAt {
			k++
		}
		whole := int64(0)
		if k > 0 {
			whole = pos[k-1] + int64(len(act[k-1].data))
		}
		want := append(append([]stored(nil), sealed...), act[:k]...)
		t.Run("", func(t *testing.T) { checkRecovered(t, g, want, orig[whole:cutAt]) })
	}
}

func TestGarbageTails(t *testing.T) {
	f := newFixture(t, 3, 200)
	_, act := f.activeBatches()
	last := act[len(act)-1]
	rng := rand.New(rand.NewPCG(4, 4))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	valid := func(base int64) []byte {
		b := makeBatch(rng, 3, 50, 0)
		wire.SetBaseOffset(b, base)
		return b
	}
	cases := []struct {
		name    string
		garbage func() []byte
	}{
		{"zeros", func() []byte { return make([]byte, 1+rng.IntN(64<<10)) }},
		{"ones", func() []byte { return bytes.Repeat([]byte{0xff}, 1+rng.IntN(64<<10)) }},
		{"random", func() []byte { return random(1 + rng.IntN(64<<10)) }},
		{"partial header", func() []byte { return append([]byte(nil), valid(last.next())[:1+rng.IntN(43)]...) }},
		{"partial batch", func() []byte { b := valid(last.next()); return b[:len(b)-1-rng.IntN(len(b)-45)] }},
		{"huge length", func() []byte {
			b := valid(last.next())
			binary.BigEndian.PutUint32(b[8:], 0xfffffff0)
			return b
		}},
		{"bad crc", func() []byte { b := valid(last.next()); b[len(b)-1] ^= 1; return b }},
		{"wrong base lower", func() []byte { return valid(last.next() - 1) }},
		{"replayed old batch", func() []byte { return append([]byte(nil), act[0].data...) }},
		{"zeros then random", func() []byte { return append(make([]byte, 512), random(1000)...) }},
	}
	for _, tc := range cases {
		for range 5 {
			t.Run(tc.name, func(t *testing.T) {
				g := f.clone(t)
				garbage := tc.garbage()
				fh, err := os.OpenFile(g.active, os.O_APPEND|os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				fh.Write(garbage)
				fh.Close()
				checkRecovered(t, g, f.batches, garbage)
			})
		}
	}
}

// A valid-looking batch with a later base offset than expected, alone at the tail: nothing
// valid follows the damage (the batch itself is the damage), so it is a torn tail.
func TestGarbageTailHigherBase(t *testing.T) {
	f := newFixture(t, 5, 50)
	g := f.clone(t)
	b := makeBatch(rand.New(rand.NewPCG(5, 5)), 2, 20, 0)
	wire.SetBaseOffset(b, f.batches[len(f.batches)-1].next()+5)
	fh, _ := os.OpenFile(g.active, os.O_APPEND|os.O_WRONLY, 0)
	fh.Write(b)
	fh.Close()
	checkRecovered(t, g, f.batches, b)
}

func TestMidActiveCorruption(t *testing.T) {
	f := newFixture(t, 6, 200)
	pos, act := f.activeBatches()
	rng := rand.New(rand.NewPCG(6, 6))
	for i := range 20 {
		g := f.clone(t)
		k := rng.IntN(len(act) - 1) // not the last batch: valid ones follow
		at := pos[k] + 12 + rng.Int64N(int64(len(act[k].data))-12)
		data, _ := os.ReadFile(g.active)
		data[at] ^= 1 << rng.IntN(8)
		os.WriteFile(g.active, data, 0o644)
		before := snapshot(t, g.dir)
		_, err := Open(g.dir, g.opts)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), g.active) ||
			!strings.Contains(err.Error(), "byte "+itoa(pos[k])) {
			t.Fatalf("case %d: flip at %d in batch at %d: %v", i, at, pos[k], err)
		}
		if after := snapshot(t, g.dir); after != before {
			t.Fatalf("files changed:\n%s\n%s", before, after)
		}
	}
}

func itoa(n int64) string   { return strconv.FormatInt(n, 10) }
func fmtInt(n int64) string { return strconv.FormatInt(n, 10) }

// snapshot describes every file in dir (name, size, checksum).
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	var sb strings.Builder
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		sb.WriteString(e.Name() + " " + fmtInt(int64(len(b))) + " " + fmtInt(int64(wire.Checksum(b))) + "\n")
	}
	return sb.String()
}

func TestBitFlipsInSealedSegments(t *testing.T) {
	f := newFixture(t, 7, 400)
	rng := rand.New(rand.NewPCG(7, 7))
	// Where each sealed batch lives.
	type loc struct {
		file string
		pos  int64
	}
	var locs []loc
	var p int64
	var segBase int64 = -1
	for i, b := range f.batches {
		if b.base >= f.actBase {
			break
		}
		if _, err := os.Stat(filepath.Join(f.dir, segmentName(b.base, logSuffix))); err == nil {
			segBase, p = b.base, 0
		}
		locs = append(locs, loc{segmentName(segBase, logSuffix), p})
		p += int64(len(f.batches[i].data))
	}
	rounds := 10
	if long {
		rounds = 100
	}
	for r := range rounds {
		g := f.clone(t)
		flipped := map[int]bool{}
		for range 1 + rng.IntN(8) {
			k := rng.IntN(len(locs))
			flipped[k] = true
			path := filepath.Join(g.dir, locs[k].file)
			data, _ := os.ReadFile(path)
			// Anywhere but the base offset and length fields, which framing relies on.
			at := locs[k].pos + 12 + rng.Int64N(int64(len(f.batches[k].data))-12)
			data[at] ^= 1 << rng.IntN(8)
			os.WriteFile(path, data, 0o644)
		}
		l, err := Open(g.dir, g.opts)
		if err != nil {
			t.Fatalf("round %d: Open: %v", r, err)
		}
		cs, err := Verify(g.dir, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		reported := map[loc]bool{}
		for _, c := range cs {
			reported[loc{filepath.Base(c.File), c.Pos}] = true
		}
		for k := range flipped {
			if !reported[locs[k]] {
				t.Fatalf("round %d: flip in %v not reported: %v", r, locs[k], cs)
			}
		}
		if len(reported) != len(flipped) {
			t.Fatalf("round %d: %d batches flipped, %d reported: %v", r, len(flipped), len(reported), cs)
		}
		// Every batch is still readable; the undamaged ones byte for byte.
		for k, b := range f.batches {
			c, err := l.Read(b.base, l.NextOffset(), 1)
			if err != nil {
				t.Fatalf("round %d: Read(%d): %v", r, b.base, err)
			}
			got := make([]byte, c.Len)
			c.File.ReadAt(got, c.Pos)
			c.Release()
			if !flipped[k] && !bytes.Equal(got, b.data) || len(got) != len(b.data) {
				t.Fatalf("round %d: batch %d differs", r, k)
			}
		}
		l.Close()
	}
}

func TestIndexRebuild(t *testing.T) {
	f := newFixture(t, 8, 300)
	corrupt := []struct {
		name string
		fn   func(dir string)
	}{
		{"index missing (crash during roll)", func(dir string) {
			m, _ := filepath.Glob(filepath.Join(dir, "*"+indexSuffix))
			for _, p := range m {
				os.Remove(p)
			}
		}},
		{"time index missing", func(dir string) {
			m, _ := filepath.Glob(filepath.Join(dir, "*"+timeIndexSuffix))
			for _, p := range m {
				os.Remove(p)
			}
		}},
		{"index torn", func(dir string) {
			m, _ := filepath.Glob(filepath.Join(dir, "*"+indexSuffix))
			for _, p := range m {
				b, _ := os.ReadFile(p)
				os.WriteFile(p, b[:len(b)-3], 0o644)
			}
		}},
		{"index zeroed", func(dir string) {
			m, _ := filepath.Glob(filepath.Join(dir, "*"+indexSuffix))
			for _, p := range m {
				b, _ := os.ReadFile(p)
				os.WriteFile(p, make([]byte, len(b)), 0o644)
			}
		}},
		{"index points at the wrong batch", func(dir string) {
			m, _ := filepath.Glob(filepath.Join(dir, "*"+indexSuffix))
			for _, p := range m {
				b, _ := os.ReadFile(p)
				if len(b) >= 8 {
					binary.BigEndian.PutUint32(b[len(b)-4:], binary.BigEndian.Uint32(b[len(b)-4:])+1)
				}
				os.WriteFile(p, b, 0o644)
			}
		}},
		{"leftover temp files", func(dir string) {
			os.WriteFile(filepath.Join(dir, segmentName(0, indexSuffix)+tmpSuffix), []byte("x"), 0o644)
			os.WriteFile(filepath.Join(dir, segmentName(99999, indexSuffix)), []byte("orphan"), 0o644)
		}},
	}
	for _, tc := range corrupt {
		t.Run(tc.name, func(t *testing.T) {
			g := f.clone(t)
			tc.fn(g.dir)
			checkRecovered(t, g, f.batches, nil)
			if m, _ := filepath.Glob(filepath.Join(g.dir, "*"+tmpSuffix)); len(m) != 0 {
				t.Fatalf("temp files left: %v", m)
			}
			if _, err := os.Stat(filepath.Join(g.dir, segmentName(99999, indexSuffix))); err == nil {
				t.Fatal("orphan index left")
			}
		})
	}
}

func TestSegmentGap(t *testing.T) {
	f := newFixture(t, 9, 300)
	segs := segFiles(t, f.dir)
	if len(segs) < 4 {
		t.Fatalf("%d segments", len(segs))
	}
	for _, tc := range []struct {
		name string
		fn   func(dir string) (string, string)
	}{
		{"middle segment missing", func(dir string) (string, string) {
			os.Remove(filepath.Join(dir, filepath.Base(segs[1])))
			return filepath.Base(segs[0]), filepath.Base(segs[2])
		}},
		{"overlap", func(dir string) (string, string) {
			// Rename segment 2 one offset lower: it overlaps segment 1.
			base, _ := parseSegmentName(filepath.Base(segs[2]), logSuffix)
			to := segmentName(base-1, logSuffix)
			os.Rename(filepath.Join(dir, filepath.Base(segs[2])), filepath.Join(dir, to))
			os.Remove(filepath.Join(dir, segmentName(base, indexSuffix)))
			return filepath.Base(segs[1]), to
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := f.clone(t)
			a, b := tc.fn(g.dir)
			_, err := Open(g.dir, g.opts)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), a) || !strings.Contains(err.Error(), b) {
				t.Fatalf("want ErrCorrupt naming %s and %s, got %v", a, b, err)
			}
		})
	}
}
