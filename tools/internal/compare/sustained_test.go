package compare

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSustainMsgs(t *testing.T) {
	for _, c := range []struct {
		bytes int64
		size  int
		want  int
	}{{2e9, 100, 20_000_000}, {2e9, 1024, 1_953_125}, {2e9, 3, 666_666_667}, {1, 100, 1}} {
		if got := sustainMsgs(c.bytes, c.size); got != c.want {
			t.Errorf("sustainMsgs(%d, %d) = %d, want %d", c.bytes, c.size, got, c.want)
		}
	}
}

// TestNATSProduceFor: chunks are added until their publishing time reaches the minimum,
// each sized from the last rate; a failing or rateless chunk ends it.
func TestNATSProduceFor(t *testing.T) {
	cases := []struct {
		name    string
		rates   []float64 // rate of each successive chunk
		minSecs float64
		chunks  []int // sizes asked for
		secs    float64
		err     bool
	}{
		// 2,000 at 100K/s = 0.02 s; then 100K x 9.98 x 1.1 = 1,097,800 messages (10.978 s).
		{"steady", []float64{1e5, 1e5}, 10, []int{2000, 1_097_800}, 10.998, false},
		// The rate rises tenfold after the first chunk (0.2 s): the second (10K x 9.8 x 1.1
		// messages, 1.078 s) falls short, a third (100K x 8.722 x 1.1) fills in.
		{"speeding up", []float64{1e4, 1e5, 1e5}, 10, []int{2000, 107_800, 959_420}, 10.8722, false},
		{"first chunk enough", []float64{100}, 10, []int{2000}, 20, false},
		{"never enough: at most natsMaxChunks", []float64{1e9, 1e9, 1e9, 1e9, 1e9, 1e9, 1e9, 1e9}, 1e6,
			[]int{2000, natsMaxChunk, natsMaxChunk, natsMaxChunk, natsMaxChunk, natsMaxChunk, natsMaxChunk, natsMaxChunk}, 0.350002, false},
		{"zero rate", []float64{0}, 10, []int{2000}, 0, true},
		{"error", nil, 10, []int{2000}, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var asked []int
			total, secs, err := natsProduceFor(c.minSecs, func(n int) (float64, error) {
				asked = append(asked, n)
				if len(asked) > len(c.rates) {
					return 0, errors.New("chunk failed")
				}
				return c.rates[len(asked)-1], nil
			})
			if c.err != (err != nil) {
				t.Fatalf("err = %v, want error %v", err, c.err)
			}
			if !nearInts(asked, c.chunks) {
				t.Errorf("chunks %v, want %v", asked, c.chunks)
			}
			if err == nil {
				sum := 0
				for _, n := range asked {
					sum += n
				}
				if total != sum || math.Abs(secs-c.secs) > 1e-3 {
					t.Errorf("total %d (chunks %d), secs %v; want secs %v", total, sum, secs, c.secs)
				}
			}
		})
	}
	if n := natsAtOnceCount(1e5, 10); n != 1_250_000 {
		t.Errorf("natsAtOnceCount(100K/s, 10 s) = %d", n)
	}
	if n := natsAtOnceCount(1, 10); n != natsFirstChunk {
		t.Errorf("natsAtOnceCount(1/s, 10 s) = %d, want the floor %d", n, natsFirstChunk)
	}
}

// nearInts: the same sizes give or take one (a ceiling of a float product).
func nearInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] < b[i]-1 || a[i] > b[i]+1 {
			return false
		}
	}
	return true
}

func TestSetProduced(t *testing.T) {
	s := sample{}
	s.setProduced(2_000_000, 4, 1000)
	want := sample{"pub": 500_000, "pub_mb": 500, "pub_s": 4, "pub_gb": 2}
	for k, v := range want {
		if math.Abs(s[k]-v) > 1e-9 {
			t.Errorf("%s = %v, want %v", k, s[k], v)
		}
	}
}

// TestCheckDiskRefuses: a sustained measurement that does not fit is refused with what was
// asked, where, and what earlier runs left behind.
func TestCheckDiskRefuses(t *testing.T) {
	parent := t.TempDir()
	ours := filepath.Join(parent, workPrefix+"ours")
	stale := filepath.Join(parent, workPrefix+"old", "lightq-1")
	for _, d := range []string{ours, stale} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(stale, "00000000000000000000.log"), make([]byte, 3_000_000), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &runner{cfg: Config{SustainBytes: 2e9}, work: ours}
	if err := r.checkDisk(); err != nil && !strings.Contains(err.Error(), "not enough free disk space") {
		t.Fatalf("2 GB: %v", err) // the machine may lack 2.75 GB: then it must say so
	}
	r.cfg.SustainBytes = 1 << 60
	err := r.checkDisk()
	if err == nil {
		t.Skip("this platform cannot tell free space")
	}
	for _, want := range []string{"not enough free disk space in " + ours, "-sustain-bytes 1152921504606846976",
		"1 earlier run(s) left 0.00 GB in " + filepath.Join(parent, workPrefix+"*")} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if n, gb := staleRuns(parent, ours); n != 1 || math.Abs(gb-0.003) > 1e-9 {
		t.Errorf("staleRuns = %d, %v GB; want 1, 0.003", n, gb)
	}
}

// TestShareLines: a share row pairs rounds, reports the median share and its range, and
// checks its target on the median; a reference row shows the reference's median.
func TestShareLines(t *testing.T) {
	nan := math.NaN()
	c := caseDef{id: "d", title: "durable", rows: []rowDef{
		{key: "pub_mb", label: "produce MB/s / disk reference MB/s", share: &shareDef{denSide: "ref", denKey: "mb", of: "the disk", pct: true},
			target: &target{text: ">= 50% of the disk", check: func(q, _ float64) bool { return q >= 0.5 }}},
		{key: "mb", label: "disk MB/s", ref: true},
		{key: "cpu", label: "CPU s/GB / TCP's", share: &shareDef{num: "t", den: "tcp", denSide: "lightq", denKey: "cpu", of: "TCP's", title: "CPU vs TCP"}},
	}}
	rep := newReport(Config{Rounds: 3}, []caseDef{c, {id: "t"}, {id: "tcp"}})
	for i, v := range []struct{ lq, nats, ref, tcp, t float64 }{{200, 10, 400, 0.5, 1.5}, {300, 12, 1000, 0.4, 1.6}, {120, 9, 200, nan, 1.2}} {
		rep.add("d", "lightq", i, sample{"pub_mb": v.lq})
		rep.add("d", "nats", i, sample{"pub_mb": v.nats})
		rep.add("d", "ref", i, sample{"mb": v.ref})
		rep.add("t", "lightq", i, sample{"cpu": v.t})
		if !math.IsNaN(v.tcp) {
			rep.add("tcp", "lightq", i, sample{"cpu": v.tcp})
		}
	}
	lines := rep.lines()
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3: %+v", len(lines), lines)
	}
	disk, ref, cpu := lines[0], lines[1], lines[2]
	// Shares 0.5, 0.3, 0.6: median 0.5, range 0.3-0.6; the medians of the columns are 200 and 10.
	if disk.lq != 200 || disk.nats != 10 || disk.ratio != 0.5 || disk.rmin != 0.3 || disk.rmax != 0.6 || disk.verdict != "met" {
		t.Errorf("disk share line %+v", disk)
	}
	if got := fmtRatio(disk); got != "50% of the disk (30-60%)" {
		t.Errorf("disk share reads %q", got)
	}
	if ref.lq != 400 || !math.IsNaN(ref.nats) || !math.IsNaN(ref.ratio) {
		t.Errorf("reference line %+v", ref)
	}
	// Only rounds 1 and 2 have both: 1.5/0.5 = 3 and 1.6/0.4 = 4, median 3.5.
	if cpu.title != "CPU vs TCP" || cpu.lq != 1.5 || cpu.ratio != 3.5 || cpu.rmin != 3 || cpu.rmax != 4 {
		t.Errorf("CPU share line %+v", cpu)
	}
	if got := fmtRatio(cpu); got != "3.50x TCP's (3.00-4.00)" {
		t.Errorf("CPU share reads %q", got)
	}
	if q, lo, hi, ok := pairedRatio([]float64{1, nan}, []float64{0, 2}); ok || !math.IsNaN(q) || !math.IsNaN(lo) || !math.IsNaN(hi) {
		t.Errorf("pairedRatio with no usable round = %v %v %v %v", q, lo, hi, ok)
	}
}

func TestShortNote(t *testing.T) {
	cfg := Config{Rounds: 2, SustainBytes: 2e9, SustainTime: 10 * time.Second}
	for _, c := range []struct {
		s    sample
		want bool
	}{
		{sample{"pub_gb": 2, "pub_s": 3}, false},     // the bytes
		{sample{"pub_gb": 0.1, "pub_s": 10}, false},  // the time
		{sample{"pub_gb": 0.1, "pub_s": 4.1}, true},  // neither
		{sample{"pub_gb": 1.99, "pub_s": 9.9}, true}, // neither, narrowly
	} {
		if got := c.s.short(cfg); got != c.want {
			t.Errorf("%v: short %v, want %v", c.s, got, c.want)
		}
	}
	rep := newReport(cfg, []caseDef{{id: "fsync-100-at-once"}})
	rep.add("fsync-100-at-once", "nats", 1, sample{"pub_gb": 0.0017, "pub_s": 4.1, "short": 1})
	rep.add("fsync-100-at-once", "lightq", 1, sample{"pub_gb": 2, "pub_s": 6})
	if got, want := rep.shortNote(), "Not sustained (below both the bytes and the time asked): fsync-100-at-once nats round 2 (0.002 GB in 4.10 s).\n"; got != want {
		t.Errorf("shortNote = %q, want %q", got, want)
	}
}
