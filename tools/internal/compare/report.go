package compare

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// report holds every measurement and turns them into the table, the doc section and the
// plot.
type report struct {
	cfg      Config
	cases    []caseDef
	hasNATS  bool                           // a NATS column: Run sets it when the peers run, loadRaw when the file has NATS samples
	data     map[string]map[string][]sample // case id -> side -> per round (nil: failed)
	failed   int
	date     time.Time
	duration time.Duration
	machine  string
}

func newReport(cfg Config, cases []caseDef) *report {
	return &report{cfg: cfg, cases: cases, data: map[string]map[string][]sample{},
		date: time.Now().UTC(), machine: machine()}
}

func (r *report) add(caseID, side string, round int, s sample) {
	if r.data[caseID] == nil {
		r.data[caseID] = map[string][]sample{}
	}
	v := r.data[caseID][side]
	for len(v) <= round {
		v = append(v, nil)
	}
	v[round] = s
	r.data[caseID][side] = v
}

func (r *report) finish(d time.Duration) { r.duration = d }

// values returns key's value per round (NaN where missing).
func (r *report) values(caseID, side, key string) []float64 {
	out := make([]float64, r.cfg.Rounds)
	for i := range out {
		out[i] = math.NaN()
	}
	for i, s := range r.data[caseID][side] {
		if v, ok := s[key]; ok && s != nil && i < len(out) {
			out[i] = v
		}
	}
	return out
}

func median(v []float64) float64 {
	var x []float64
	for _, f := range v {
		if !math.IsNaN(f) {
			x = append(x, f)
		}
	}
	if len(x) == 0 {
		return math.NaN()
	}
	sort.Float64s(x)
	if len(x)%2 == 1 {
		return x[len(x)/2]
	}
	return (x[len(x)/2-1] + x[len(x)/2]) / 2
}

// ratios pairs rounds: a[i] / b[i]; returns the min and max over rounds where both exist.
func ratioRange(a, b []float64) (lo, hi float64, ok bool) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for i := range a {
		if i < len(b) && !math.IsNaN(a[i]) && !math.IsNaN(b[i]) && b[i] != 0 {
			q := a[i] / b[i]
			lo, hi, ok = math.Min(lo, q), math.Max(hi, q), true
		}
	}
	return lo, hi, ok
}

// line is one row of the result table.
type line struct {
	title, metric     string
	lq, nats          float64 // medians, NaN when missing
	ratio, rmin, rmax float64 // LightQ / NATS, or LightQ / the reference on a share line; NaN when missing
	target, verdict   string
	of                string // a share line: what the ratio is read against ("TCP")
	pct               bool   // ... as a percentage
}

// sides are where a case's samples come from, in the order each round runs them.
var sides = []string{"ref", "lightq", "nats"}

func (r *report) lines() []line { return r.linesOf(func(caseDef) bool { return true }) }

// linesOf is the lines of the cases keep selects.
func (r *report) linesOf(keep func(caseDef) bool) []line {
	var out []line
	for _, c := range r.cases {
		if c.family == "sizes" || !keep(c) {
			continue
		}
		for _, row := range c.rows {
			switch {
			case row.share != nil:
				out = append(out, r.shareLine(c, row))
			case row.ref:
				out = append(out, line{title: c.title, metric: row.label, lq: median(r.values(c.id, "ref", row.key)),
					nats: math.NaN(), ratio: math.NaN(), rmin: math.NaN(), rmax: math.NaN()})
			default:
				out = append(out, r.valueLine(c, row))
			}
		}
	}
	return out
}

// valueLine is a row of LightQ's and NATS's figures and their ratio.
func (r *report) valueLine(c caseDef, row rowDef) line {
	lqv, nv := r.values(c.id, "lightq", row.key), r.values(c.id, "nats", row.key)
	l := line{title: c.title, metric: row.label, lq: median(lqv), nats: median(nv), ratio: math.NaN(), rmin: math.NaN(), rmax: math.NaN()}
	if lo, hi, ok := ratioRange(lqv, nv); ok && !row.noRatio {
		l.ratio, l.rmin, l.rmax = l.lq/l.nats, lo, hi
	}
	if row.target != nil {
		l.target = row.target.text
		switch {
		case math.IsNaN(l.lq) || (c.nats != nil && math.IsNaN(l.nats) && !strings.Contains(row.target.text, "1000")):
			l.verdict = "n/a"
		case row.target.check(l.lq, nanToZero(l.nats)):
			l.verdict = "met"
		default:
			l.verdict = "MISSED"
		}
	}
	return l
}

// shareLine is a row comparing a figure with a reference measured in the same rounds.
func (r *report) shareLine(c caseDef, row rowDef) line {
	sh := row.share
	num, den := or(sh.num, c.id), or(sh.den, c.id)
	a := r.values(num, "lightq", row.key)
	l := line{title: or(sh.title, c.title), metric: row.label, lq: median(a), nats: median(r.values(num, "nats", row.key)),
		ratio: math.NaN(), rmin: math.NaN(), rmax: math.NaN(), of: sh.of, pct: sh.pct}
	if q, lo, hi, ok := pairedRatio(a, r.values(den, sh.denSide, sh.denKey)); ok {
		l.ratio, l.rmin, l.rmax = q, lo, hi
	}
	if row.target != nil {
		l.target, l.verdict = row.target.text, "n/a"
		if !math.IsNaN(l.ratio) {
			l.verdict = "MISSED"
			if row.target.check(l.ratio, 1) {
				l.verdict = "met"
			}
		}
	}
	return l
}

// pairedRatio divides a by b round by round and returns the median of the ratios and
// their min and max; ok is false when no round has both.
func pairedRatio(a, b []float64) (med, lo, hi float64, ok bool) {
	var q []float64
	for i := range a {
		if i < len(b) && !math.IsNaN(a[i]) && !math.IsNaN(b[i]) && b[i] != 0 {
			q = append(q, a[i]/b[i])
		}
	}
	if len(q) == 0 {
		return math.NaN(), math.NaN(), math.NaN(), false
	}
	return median(q), slices.Min(q), slices.Max(q), true
}

// or is s, or dflt when s is empty.
func or(s, dflt string) string {
	if s == "" {
		return dflt
	}
	return s
}

// fmtBytes prints a byte count in GB or MB (powers of 1000).
func fmtBytes(n int64) string {
	if n >= 1e9 {
		return strconv.FormatFloat(float64(n)/1e9, 'f', -1, 64) + " GB"
	}
	return strconv.FormatFloat(float64(n)/1e6, 'f', -1, 64) + " MB"
}

func nanToZero(f float64) float64 {
	if math.IsNaN(f) {
		return 0
	}
	return f
}

// fmtNum prints rates with thousands separators and small values with a few digits.
func fmtNum(f float64) string {
	switch {
	case math.IsNaN(f):
		return "-"
	case math.Abs(math.Round(f)) >= 1000:
		s := strconv.FormatInt(int64(math.Round(f)), 10)
		neg := strings.HasPrefix(s, "-")
		s = strings.TrimPrefix(s, "-")
		var b strings.Builder
		for i, ch := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(ch)
		}
		if neg {
			return "-" + b.String()
		}
		return b.String()
	case math.Abs(f) >= 100:
		return strconv.FormatFloat(f, 'f', 0, 64)
	case math.Abs(f) >= 10:
		return strconv.FormatFloat(f, 'f', 1, 64)
	default:
		return strconv.FormatFloat(f, 'f', 2, 64)
	}
}

func fmtRatio(l line) string {
	if math.IsNaN(l.ratio) {
		return "-"
	}
	switch {
	case l.of != "" && l.pct:
		return fmt.Sprintf("%.0f%% of %s (%.0f-%.0f%%)", 100*l.ratio, l.of, 100*l.rmin, 100*l.rmax)
	case l.of != "":
		return fmt.Sprintf("%sx %s (%s-%s)", fmtRatioNum(l.ratio), l.of, fmtRatioNum(l.rmin), fmtRatioNum(l.rmax))
	}
	return fmt.Sprintf("%sx (%s-%s)", fmtRatioNum(l.ratio), fmtRatioNum(l.rmin), fmtRatioNum(l.rmax))
}

func fmtRatioNum(f float64) string {
	if f >= 10 {
		return strconv.FormatFloat(f, 'f', 0, 64)
	}
	return strconv.FormatFloat(f, 'f', 2, 64)
}

func (r *report) writeText(w io.Writer) {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "case\tmetric\tLightQ\tNATS\tLightQ/NATS (min-max)\ttarget\t\n")
	for _, l := range r.lines() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s %s\t\n", l.title, l.metric, fmtNum(l.lq), fmtNum(l.nats), fmtRatio(l), l.target, l.verdict)
	}
	_ = tw.Flush()
	fmt.Fprint(w, r.shortNote())
	fmt.Fprintln(w)
	r.writeCPUText(w)
}

// cpuRoles are the per-process CPU figures a measurement may have.
var cpuRoles = []struct{ key, label string }{
	{"server_cpu_pct", "broker"}, {"leader_cpu_pct", "leader"}, {"follower1_cpu_pct", "follower 1"}, {"follower2_cpu_pct", "follower 2"},
	{"relay_cpu_pct", "relay"}, {"pub_cpu_pct", "pub"}, {"sub_cpu_pct", "sub"}, {"clients_cpu_pct", "pub+sub"},
}

func (r *report) cpuCell(caseID, side string) string {
	var parts []string
	for _, role := range cpuRoles {
		if v := median(r.values(caseID, side, role.key)); !math.IsNaN(v) {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", role.label, v))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func (r *report) noiseCell(caseID string) string {
	others, steal := math.Inf(-1), math.Inf(-1)
	for _, side := range sides {
		for _, s := range r.data[caseID][side] {
			if s != nil {
				others, steal = math.Max(others, s["others_cpu_pct"]), math.Max(steal, s["steal_pct"])
			}
		}
	}
	if math.IsInf(others, -1) {
		return "-"
	}
	return fmt.Sprintf("%.0f%% / %.0f%%", others, steal)
}

func (r *report) writeCPUText(w io.Writer) {
	fmt.Fprintln(w, "CPU during each measurement (median, % of one core; window = first client start .. last client exit):")
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprint(tw, "case\tLightQ\tNATS\tmax others/steal (% of machine)\t\n")
	for _, c := range r.cases {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", c.id, r.cpuCell(c.id, "lightq"), r.cpuCell(c.id, "nats"), r.noiseCell(c.id))
	}
	_ = tw.Flush()
}

// docSection is a generated section of docs/PERFORMANCE.md: the cases it shows, between its
// markers.
type docSection struct {
	begin, end string
	has        func(caseDef) bool
}

const (
	docBegin     = "<!-- compare:begin (generated by go run ./tools/compare -doc; edits between the markers are overwritten) -->"
	docEnd       = "<!-- compare:end -->"
	docReplBegin = "<!-- compare-replicated:begin (generated by go run ./tools/compare -doc; edits between the markers are overwritten) -->"
	docReplEnd   = "<!-- compare-replicated:end -->"
)

// docSections: the main table, and the replicated cases' own (they take as long as the rest
// together, so they are often run alone: -cases replicated -doc rewrites only theirs).
var docSections = []docSection{
	{begin: docBegin, end: docEnd, has: func(c caseDef) bool { return c.family != "replicated" }},
	{begin: docReplBegin, end: docReplEnd, has: func(c caseDef) bool { return c.family == "replicated" }},
}

// markdownOf renders a generated section: the run, the counts, the table of its cases and
// their CPU.
func (r *report) markdownOf(sec docSection) string {
	var b strings.Builder
	c := r.cfg
	fmt.Fprintf(&b, "Run %s, %d round(s)", r.date.Format("2006-01-02 15:04 UTC"), c.Rounds)
	if r.duration > 0 {
		fmt.Fprintf(&b, ", %v in all", r.duration.Round(time.Second))
	}
	fmt.Fprintf(&b, ", on %s.\n\n", r.machine)
	if r.hasNATS {
		fmt.Fprintf(&b, "Peer: nats-server %s, nats CLI %s. ", natsServerVersion, natsCLIVersion)
	}
	if sec.begin == docReplBegin {
		repl := c.ReplBytes
		if repl <= 0 {
			repl = c.SustainBytes
		}
		fmt.Fprintf(&b, "Counts: replicated and single-node LightQ %s per measurement, NATS publishing for at least %v; latency %d msg/s for %v.\n\n",
			fmtBytes(repl), c.SustainTime, c.LatencyRate, c.LatencyDuration)
	} else {
		fmt.Fprintf(&b, "Counts: transient 100 B %d, 1024 B %d; fan-out %d x %d; durable and fsync=always: LightQ and the disk reference %s per measurement, NATS publishing for at least %v; latency %d msg/s for %v; raw TCP %d MiB.\n\n",
			c.Msgs100, c.Msgs1K, c.FanoutMsgs, c.FanoutSubs, fmtBytes(c.SustainBytes), c.SustainTime, c.LatencyRate, c.LatencyDuration, c.TCPBytes>>20)
	}
	b.WriteString("| case | metric | LightQ | NATS | LightQ / NATS (min-max over rounds) | target |\n|---|---|---:|---:|---|---|\n")
	for _, l := range r.linesOf(sec.has) {
		t := ""
		if l.target != "" {
			t = l.target + ": **" + l.verdict + "**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", l.title, l.metric, fmtNum(l.lq), fmtNum(l.nats), fmtRatio(l), t)
	}
	if note := r.shortNoteOf(sec.has); note != "" {
		b.WriteString("\n" + note)
	}
	b.WriteString("\nCPU during each measurement (median over rounds, % of one core; the window runs from the first client's start to the last client's exit, so a phase that waits, such as a subscriber before the publisher starts, lowers it):\n\n")
	b.WriteString("| case | LightQ | NATS | max CPU of others / stolen (% of machine) |\n|---|---|---|---|\n")
	for _, cs := range r.cases {
		if sec.has(cs) {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", cs.id, r.cpuCell(cs.id, "lightq"), r.cpuCell(cs.id, "nats"), r.noiseCell(cs.id))
		}
	}
	if sec.begin == docReplBegin {
		b.WriteString("\nSingle-node LightQ, the reference of each case (same rounds):\n\n| case | CPU |\n|---|---|\n")
		for _, cs := range r.cases {
			if sec.has(cs) {
				fmt.Fprintf(&b, "| %s | %s |\n", cs.id, r.cpuCell(cs.id, "ref"))
			}
		}
	}
	if pts := r.sizePoints(); len(pts) > 0 && sec.begin == docBegin {
		b.WriteString("\nTransient throughput by message size (1 publisher, 1 subscriber; subscriber rate, median):\n\n")
		b.WriteString("| size | LightQ msgs/s | NATS msgs/s | LightQ MB/s | NATS MB/s | LightQ / NATS |\n|---:|---:|---:|---:|---:|---:|\n")
		for _, p := range pts {
			q := "-"
			if !math.IsNaN(p.lq) && !math.IsNaN(p.nats) && p.nats > 0 {
				q = fmtRatioNum(p.lq/p.nats) + "x"
			}
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s |\n", p.size, fmtNum(p.lq), fmtNum(p.nats),
				fmtNum(p.lq*float64(p.size)/1e6), fmtNum(p.nats*float64(p.size)/1e6), q)
		}
	}
	return b.String()
}

// updateDocs writes the generated sections: the replicated one into replPath when it is set
// (docs/PERFORMANCE-REPLICATION.md), every section into mainPath otherwise.
func (r *report) updateDocs(mainPath, replPath string) error {
	if replPath == "" || replPath == mainPath {
		return r.updateDoc(mainPath, docSections)
	}
	if err := r.updateDoc(mainPath, docSections[:1]); err != nil {
		return err
	}
	return r.updateDoc(replPath, docSections[1:])
}

// updateDoc replaces the text between the markers of each of sections that has cases in
// this run (appending the section when its markers are missing); the others are left alone.
// A file without any section of this run is not touched.
func (r *report) updateDoc(path string, sections []docSection) error {
	if !slices.ContainsFunc(sections, func(sec docSection) bool { return slices.ContainsFunc(r.cases, sec.has) }) {
		return nil
	}
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	s := string(old)
	for _, sec := range sections {
		if !slices.ContainsFunc(r.cases, sec.has) {
			continue
		}
		section := sec.begin + "\n" + r.markdownOf(sec) + sec.end
		open, _, _ := strings.Cut(sec.begin, " (")
		i := strings.Index(s, open+" ")
		j := strings.Index(s, sec.end)
		if i >= 0 && j > i {
			s = s[:i] + section + s[j+len(sec.end):]
			continue
		}
		if s != "" && !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		s += "\n" + section + "\n"
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

// rawRecord is one measurement in the -raw file.
type rawRecord struct {
	Round  int    `json:"round"`
	Case   string `json:"case"`
	Broker string `json:"broker"`
	Values sample `json:"values"`
}

type rawFile struct {
	Date         time.Time   `json:"date"`
	Machine      string      `json:"machine"`
	Rounds       int         `json:"rounds"`
	DurationS    float64     `json:"duration_s"`
	Measurements []rawRecord `json:"measurements"`
}

// loadRaw fills the report from a -raw file (to render it again without measuring).
func (r *report) loadRaw(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var f rawFile
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	r.date, r.machine, r.cfg.Rounds = f.Date, f.Machine, f.Rounds
	r.duration = time.Duration(f.DurationS * float64(time.Second))
	r.hasNATS = false
	for _, m := range f.Measurements {
		m.Values.deriveCPU()
		r.add(m.Case, m.Broker, m.Round-1, m.Values)
		r.hasNATS = r.hasNATS || m.Broker == "nats"
	}
	return nil
}

func (r *report) writeRaw(path string) error {
	var out []rawRecord
	for _, c := range r.cases {
		for _, side := range sides {
			for i, s := range r.data[c.id][side] {
				if s != nil {
					out = append(out, rawRecord{i + 1, c.id, side, s})
				}
			}
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rawFile{Date: r.date, Machine: r.machine, Rounds: r.cfg.Rounds, DurationS: r.duration.Seconds(), Measurements: out}); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func sortedKeys(s sample) []string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// machine describes this machine in one line.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, ln := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(ln, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %g kB", &kb); err == nil {
			mem = fmt.Sprintf(", %.0f GiB RAM", kb/1048576)
		}
	}
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = ", Linux " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%d CPUs (%s)%s%s, %s", runtime.NumCPU(), model, mem, kernel, runtime.Version())
}
