package compare

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// sizePoint is the median transient subscriber rate at one message size.
type sizePoint struct {
	size     int
	lq, nats float64 // msgs/s, NaN when missing
}

func (r *report) sizePoints() []sizePoint {
	var pts []sizePoint
	for _, c := range r.cases {
		if c.family != "transient" && c.family != "sizes" || strings.HasSuffix(c.id, "-acks-none") {
			continue // one point per size: LightQ's default acks
		}
		p := sizePoint{size: c.size, lq: median(r.values(c.id, "lightq", "sub")), nats: median(r.values(c.id, "nats", "sub"))}
		if !math.IsNaN(p.lq) || !math.IsNaN(p.nats) {
			pts = append(pts, p)
		}
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].size < pts[j].size })
	return pts
}

// svg draws transient throughput by message size, LightQ and NATS core, in two panels
// (messages/s and MB/s, both log-log), with the raw TCP limit on the MB/s panel. Hand-built
// SVG: no plotting dependency.
func (r *report) svg() []byte {
	pts := r.sizePoints()
	tcp := median(r.values("tcp", "lightq", "mb"))
	const w, h = 960, 420
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="22" text-anchor="middle" font-size="15" font-weight="bold">Transient throughput by message size, 1 publisher -&gt; broker -&gt; 1 subscriber, loopback (median of %d rounds)</text>`+"\n", w/2, r.cfg.Rounds)
	fmt.Fprintf(&b, `<text x="%d" y="40" text-anchor="middle" fill="#555">%s, %s</text>`+"\n", w/2, xmlEscape(r.machine), r.date.Format("2006-01-02"))
	type series struct {
		name, color string
		get         func(sizePoint) float64
	}
	msgs := []series{
		{"LightQ", "#d62728", func(p sizePoint) float64 { return p.lq }},
		{"NATS core " + natsServerVersion, "#1f77b4", func(p sizePoint) float64 { return p.nats }},
	}
	mb := []series{
		{"LightQ", "#d62728", func(p sizePoint) float64 { return p.lq * float64(p.size) / 1e6 }},
		{"NATS core " + natsServerVersion, "#1f77b4", func(p sizePoint) float64 { return p.nats * float64(p.size) / 1e6 }},
	}
	panel := func(x0 int, title, unit string, ss []series, limit float64) {
		const pw, ph, top = 400, 300, 70
		left := x0 + 70
		// Axis ranges: sizes and values, log scale, padded to whole decades.
		minS, maxS := math.Inf(1), math.Inf(-1)
		minV, maxV := math.Inf(1), math.Inf(-1)
		for _, p := range pts {
			minS, maxS = math.Min(minS, float64(p.size)), math.Max(maxS, float64(p.size))
			for _, s := range ss {
				if v := s.get(p); !math.IsNaN(v) && v > 0 {
					minV, maxV = math.Min(minV, v), math.Max(maxV, v)
				}
			}
		}
		if limit > 0 {
			maxV = math.Max(maxV, limit)
		}
		if math.IsInf(minS, 1) || math.IsInf(minV, 1) {
			fmt.Fprintf(&b, `<text x="%d" y="%d">no data</text>`+"\n", left+pw/2, top+ph/2)
			return
		}
		lx0, lx1 := math.Log10(minS)-0.1, math.Log10(maxS)+0.1
		ly0, ly1 := math.Floor(math.Log10(minV)), math.Ceil(math.Log10(maxV))
		if ly1 == ly0 {
			ly1++
		}
		px := func(s float64) float64 { return float64(left) + (math.Log10(s)-lx0)/(lx1-lx0)*pw }
		py := func(v float64) float64 { return float64(top+ph) - (math.Log10(v)-ly0)/(ly1-ly0)*ph }
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" font-weight="bold">%s</text>`+"\n", left+pw/2, top-10, title)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", left, top, pw, ph)
		for e := ly0; e <= ly1; e++ {
			for _, m := range []float64{1, 2, 5} {
				v := m * math.Pow(10, e)
				if math.Log10(v) > ly1+1e-9 {
					break
				}
				y := py(v)
				fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`+"\n", left, y, left+pw, y)
				fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#444">%s</text>`+"\n", left-5, y+4, siNum(v))
			}
		}
		lastLabel := math.Inf(-1)
		for _, p := range pts {
			x := px(float64(p.size))
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/>`+"\n", x, top, x, top+ph)
			if x-lastLabel >= 30 { // skip a label that would overlap the previous one
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#444">%s</text>`+"\n", x, top+ph+16, sizeLabel(p.size))
				lastLabel = x
			}
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">message size (bytes, log scale)</text>`+"\n", left+pw/2, top+ph+34)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" transform="rotate(-90 %d %d)">%s (log scale)</text>`+"\n", x0+14, top+ph/2, x0+14, top+ph/2, unit)
		if limit > 0 {
			y := py(limit)
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#2ca02c" stroke-dasharray="6,4" stroke-width="1.5"/>`+"\n", left, y, left+pw, y)
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" fill="#2ca02c">raw TCP limit %s MB/s</text>`+"\n", left+6, y-5, fmtNum(limit))
		}
		for i, s := range ss {
			var path []string
			for _, p := range pts {
				if v := s.get(p); !math.IsNaN(v) && v > 0 {
					path = append(path, fmt.Sprintf("%.1f,%.1f", px(float64(p.size)), py(v)))
				}
			}
			if len(path) > 0 {
				fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(path, " "), s.color)
				for _, pt := range path {
					x, y, _ := strings.Cut(pt, ",")
					fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3.5" fill="%s"/>`+"\n", x, y, s.color)
				}
			}
			ly := top + 16 + 18*i
			fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", left+pw-150, ly-4, left+pw-125, ly-4, s.color)
			fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", left+pw-120, ly, xmlEscape(s.name))
		}
	}
	panel(0, "messages per second (subscriber)", "messages/s", msgs, 0)
	panel(w/2, "payload MB per second (subscriber)", "MB/s (1e6 bytes)", mb, tcp)
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

func siNum(v float64) string {
	switch {
	case v >= 1e6:
		return trimZero(v/1e6) + "M"
	case v >= 1e3:
		return trimZero(v/1e3) + "K"
	default:
		return trimZero(v)
	}
}

func trimZero(v float64) string {
	s := fmt.Sprintf("%.1f", v)
	return strings.TrimSuffix(s, ".0")
}

func sizeLabel(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%dK", n/1024)
	}
	return fmt.Sprint(n)
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
