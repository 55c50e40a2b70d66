package compare

import (
	"context"
	"fmt"

	"github.com/lightq/lightq/wire"
)

// The cases: what each family measures, its table rows and the targets.

// rowDef is one line of the table: a value of a case's samples.
type rowDef struct {
	key, label  string
	lowerBetter bool
	noRatio     bool // a sanity figure, not a comparison
	lightqOnly  bool // NATS's tool has no such figure: "-" on its side
	// ref: the LightQ column shows the value of the case's reference measurement
	// (caseDef.ref), with no NATS figure and no ratio.
	ref bool
	// share: the row compares a value with a reference measured in the same rounds.
	share  *shareDef
	target *target
}

// shareDef makes a row a comparison with a reference measured in the same rounds (the disk,
// raw TCP, the latency floor): the LightQ and NATS columns show the row's key in case num,
// and the ratio column LightQ's value over the reference's, paired round by round: the
// median of those ratios and their min-max. A target is checked on that median.
type shareDef struct {
	num          string // case of the row's key; "" = the row's own case
	den, denSide string // the reference: case ("" = the row's own) and side ("lightq" or "ref")
	denKey       string
	of           string // what the ratio is read against: "TCP" gives "16% of TCP", "the floor" "3.20x the floor"
	pct          bool   // a percentage rather than a multiple
	title        string // the line's title; "" = the case's
}

// target is a goal from the issue, checked on the medians (on a share row: check gets the
// median share and 1).
type target struct {
	text  string
	check func(lq, nats float64) bool
}

func ratioAtLeast(x float64) *target {
	return &target{text: fmt.Sprintf(">= %gx", x), check: func(l, n float64) bool { return n > 0 && l/n >= x }}
}

// caseDef is one measured case. nats is nil when NATS has no counterpart; ref, when set, is
// a reference measured just before LightQ's side in every round (so the two alternate), on
// the LightQ side's terms (it runs when LightQ does).
type caseDef struct {
	id, family, title string
	size              int
	rows              []rowDef
	lightq, nats, ref func(ctx context.Context) (sample, error)
}

func plotCount(bytes, size int) int {
	return min(max(bytes/size, 10_000), 1_000_000)
}

func (r *runner) cases() []caseDef {
	cfg := r.cfg
	var out []caseDef
	want := func(f string) bool { return contains(cfg.Cases, f) }
	subRow := func(t *target) []rowDef {
		return []rowDef{{key: "sub", label: "msgs/s (subscriber)", target: t}, {key: "pub", label: "msgs/s (publisher)"},
			{key: "delivered_pct", label: "% delivered (rest dropped: subscriber behind the ring)", noRatio: true}}
	}
	transient := func(size, msgs int, t *target, family string) caseDef {
		rows := subRow(t)
		if size == 1024 {
			rows = append(rows, cpuGBRows()...)
		}
		return caseDef{id: fmt.Sprintf("transient-%d", size), family: family, size: size,
			title: fmt.Sprintf("transient %d B (NATS core)", size), rows: rows,
			lightq: func(ctx context.Context) (sample, error) { return r.lqTransient(ctx, plain, size, msgs, 1) },
			nats:   func(ctx context.Context) (sample, error) { return r.natsCore(ctx, plain, size, msgs, 1) }}
	}
	if want("transient") {
		out = append(out, transient(100, cfg.Msgs100, ratioAtLeast(3), "transient"), transient(1024, cfg.Msgs1K, ratioAtLeast(2), "transient"))
		// The same 1024 B case with NATS core's guarantee: no acknowledgement of a publish
		// (LightQ's default, acks=written, answers every batch once it is in the ring).
		out = append(out, caseDef{id: "transient-1024-acks-none", family: "transient", size: 1024,
			title: "transient 1024 B, LightQ acks=none as NATS core (no publish acks)", rows: subRow(nil),
			lightq: func(ctx context.Context) (sample, error) {
				return r.lqTransient(ctx, plain, 1024, cfg.Msgs1K, 1, "--acks", "none")
			},
			nats: func(ctx context.Context) (sample, error) { return r.natsCore(ctx, plain, 1024, cfg.Msgs1K, 1) }})
	}
	if want("fanout") {
		k := cfg.FanoutSubs
		out = append(out, caseDef{id: fmt.Sprintf("fanout%d-100", k), family: "fanout", size: 100,
			title: fmt.Sprintf("fan-out to %d, 100 B (NATS core)", k),
			rows: []rowDef{{key: "sub", label: "msgs/s per subscriber", target: ratioAtLeast(3)}, {key: "pub", label: "msgs/s (publisher)"},
				{key: "delivered_pct", label: "% delivered (rest dropped: subscriber behind the ring)", noRatio: true}},
			lightq: func(ctx context.Context) (sample, error) {
				return r.lqTransient(ctx, plain, 100, cfg.FanoutMsgs, k)
			},
			nats: func(ctx context.Context) (sample, error) { return r.natsCore(ctx, plain, 100, cfg.FanoutMsgs, k) }})
	}
	if want("tls") {
		// 1024 B over TLS, both brokers serving one certificate (r.pki): LightQ on its TLS
		// port (tls-addr), NATS with a tls block; the clients verify it. The durable case is
		// sustained like the plaintext ones.
		out = append(out, caseDef{id: "tls-transient-1024", family: "tls", size: 1024,
			title: "TLS, transient 1024 B (NATS core over TLS)", rows: subRow(ratioAtLeast(1.5)),
			lightq: func(ctx context.Context) (sample, error) { return r.lqTransient(ctx, overTLS, 1024, cfg.Msgs1K, 1) },
			nats:   func(ctx context.Context) (sample, error) { return r.natsCore(ctx, overTLS, 1024, cfg.Msgs1K, 1) }})
		out = append(out, r.tlsDurableCase())
	}
	out = append(out, r.sustainedCases()...)  // durable and fsync: sustained.go
	out = append(out, r.replicatedCases()...) // replicated.go
	if want("latency") {
		rows := func(transient bool) []rowDef {
			var t *target
			if transient {
				t = &target{text: "<= NATS, < 1000 us", check: func(l, n float64) bool { return l < 1000 && (n == 0 || l <= n) }}
			}
			const send = " from the actual send"
			return []rowDef{{key: "p50", label: "p50 us", lowerBetter: true}, {key: "p99", label: "p99 us", lowerBetter: true, target: t},
				{key: "p999", label: "p99.9 us", lowerBetter: true},
				{key: "send_p50", label: "p50 us" + send, lowerBetter: true, lightqOnly: true},
				{key: "send_p99", label: "p99 us" + send, lowerBetter: true, lightqOnly: true},
				{key: "send_p999", label: "p99.9 us" + send, lowerBetter: true, lightqOnly: true}}
		}
		rate := fmt.Sprintf("%dK msg/s x %v, LightQ linger %s", cfg.LatencyRate/1000, cfg.LatencyDuration, cfg.LatencyLinger)
		out = append(out, caseDef{id: "latency-transient", family: "latency", size: 100,
			title: "latency, transient 100 B at " + rate + " (NATS core)", rows: rows(true),
			lightq: func(ctx context.Context) (sample, error) { return r.lqLatency(ctx, wire.KindTransient) },
			nats:   func(ctx context.Context) (sample, error) { return r.natsLatency(ctx) }},
			// NATS core's publish and the floor's producer get no acknowledgement; LightQ's
			// default (acks=written) answers every batch, on the producer's process and
			// the broker's loop, beside the delivery. This row is the same run without them.
			caseDef{id: "latency-transient-acks-none", family: "latency", size: 100,
				title: "latency, transient 100 B at " + rate + ", LightQ acks=none as NATS core and the floor (no publish acks)", rows: rows(false),
				lightq: func(ctx context.Context) (sample, error) {
					return r.lqLatency(ctx, wire.KindTransient, "--acks", "none")
				}},
			caseDef{id: "latency-durable", family: "latency", size: 100,
				title: "latency, durable 100 B at " + rate + " (no NATS tool)", rows: rows(false),
				lightq: func(ctx context.Context) (sample, error) { return r.lqLatency(ctx, wire.KindDurable) }},
			caseDef{id: "latency-floor", family: "latency", size: 100,
				title: fmt.Sprintf("latency floor: paced producer -> plain Go relay -> consumer, 100 B at %dK msg/s x %v", cfg.LatencyRate/1000, cfg.LatencyDuration),
				rows: append(rows(false),
					rowDef{key: "p50", label: "LightQ p50 / floor p50", target: &target{text: "<= 1.5x the floor", check: func(q, _ float64) bool { return q > 0 && q <= 1.5 }},
						share: &shareDef{num: "latency-transient", denSide: "lightq", denKey: "p50", of: "the floor", title: "latency, transient vs the floor"}},
					rowDef{key: "p99", label: "LightQ p99 / floor p99",
						share: &shareDef{num: "latency-transient", denSide: "lightq", denKey: "p99", of: "the floor", title: "latency, transient vs the floor"}},
					rowDef{key: "p50", label: "LightQ acks=none p50 / floor p50", target: &target{text: "<= 1.5x the floor", check: func(q, _ float64) bool { return q > 0 && q <= 1.5 }},
						share: &shareDef{num: "latency-transient-acks-none", denSide: "lightq", denKey: "p50", of: "the floor", title: "latency, transient acks=none vs the floor"}},
					rowDef{key: "p99", label: "LightQ acks=none p99 / floor p99", target: &target{text: "<= the floor", check: func(q, _ float64) bool { return q > 0 && q <= 1 }},
						share: &shareDef{num: "latency-transient-acks-none", denSide: "lightq", denKey: "p99", of: "the floor", title: "latency, transient acks=none vs the floor"}}),
				lightq: func(ctx context.Context) (sample, error) { return r.latencyFloor(ctx) }})
	}
	if want("tcp") {
		out = append(out, caseDef{id: "tcp", family: "tcp", title: "raw TCP, 512 KiB writes, 1 MiB socket buffers",
			rows: []rowDef{{key: "mb", label: "MB/s (1e6 B)"},
				{key: "sub_mb", label: "LightQ subscriber MB/s / TCP MB/s", target: &target{text: ">= 50% of TCP", check: func(q, _ float64) bool { return q >= 0.5 }},
					share: &shareDef{num: "transient-1024", denSide: "lightq", denKey: "mb", of: "TCP", pct: true, title: "transient 1024 B vs raw TCP"}},
				{key: "cpu_gb_send", label: "CPU s/GB, sender (measured interval)", lowerBetter: true},
				{key: "cpu_gb_recv", label: "CPU s/GB, receiver", lowerBetter: true},
				{key: "cpu_gb_total", label: "CPU s/GB, both (one loopback hop; a broker has two)", lowerBetter: true},
				{key: "cpu_gb_total", label: "CPU s/GB, all three / raw TCP's (both)", lowerBetter: true,
					share: &shareDef{num: "transient-1024", denSide: "lightq", denKey: "cpu_gb_total", of: "TCP's", title: "transient 1024 B CPU vs raw TCP"}}},
			lightq: func(ctx context.Context) (sample, error) { return r.tcpLimit(ctx) }})
	}
	if want("sizes") {
		for _, size := range cfg.PlotSizes {
			if size == 100 || size == 1024 {
				continue
			}
			out = append(out, transient(size, plotCount(cfg.PlotBytes, size), nil, "sizes"))
		}
	}
	return out
}
