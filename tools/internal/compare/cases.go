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
	target      *target
}

// target is a goal from the issue, checked on the medians.
type target struct {
	text  string
	check func(lq, nats float64) bool
}

func ratioAtLeast(x float64) *target {
	return &target{text: fmt.Sprintf(">= %gx", x), check: func(l, n float64) bool { return n > 0 && l/n >= x }}
}

// caseDef is one measured case. nats is nil when NATS has no counterpart.
type caseDef struct {
	id, family, title string
	size              int
	rows              []rowDef
	lightq, nats      func(ctx context.Context) (sample, error)
}

// readBack says whether a durable case reads its messages back after producing them.
type readBack int

const (
	produceOnly  readBack = iota // the publisher's rate only
	thenReadBack                 // and then a consumer's, from the beginning
)

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
		return caseDef{id: fmt.Sprintf("transient-%d", size), family: family, size: size,
			title: fmt.Sprintf("transient %d B (NATS core)", size), rows: subRow(t),
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
	if want("durable") {
		for _, size := range []int{100, 1024} {
			var tp, ts *target
			if size == 100 {
				tp, ts = ratioAtLeast(10), ratioAtLeast(5)
			}
			out = append(out, caseDef{id: fmt.Sprintf("durable-%d", size), family: "durable", size: size,
				title: fmt.Sprintf("durable %d B, acks=written (JetStream file, async pub)", size),
				rows:  []rowDef{{key: "pub", label: "msgs/s produce", target: tp}, {key: "sub", label: "msgs/s read-back", target: ts}},
				lightq: func(ctx context.Context) (sample, error) {
					// interval=2m: acknowledged after the write, fsync every 2 min = JetStream's default.
					return r.lqDurable(ctx, plain, size, cfg.DurableMsgs, "interval=2m", "written", thenReadBack)
				},
				nats: func(ctx context.Context) (sample, error) {
					return r.natsJS(ctx, plain, size, cfg.DurableMsgs, "", thenReadBack)
				}})
		}
	}
	if want("tls") {
		// The same 1024 B cases over TLS, both brokers serving one certificate (r.pki): LightQ
		// on its TLS port (tls-addr), NATS with a tls block; the clients verify it.
		out = append(out, caseDef{id: "tls-transient-1024", family: "tls", size: 1024,
			title: "TLS, transient 1024 B (NATS core over TLS)", rows: subRow(ratioAtLeast(1.5)),
			lightq: func(ctx context.Context) (sample, error) { return r.lqTransient(ctx, overTLS, 1024, cfg.Msgs1K, 1) },
			nats:   func(ctx context.Context) (sample, error) { return r.natsCore(ctx, overTLS, 1024, cfg.Msgs1K, 1) }},
			caseDef{id: "tls-durable-1024", family: "tls", size: 1024,
				title: "TLS, durable 1024 B, acks=written, read back (JetStream file over TLS)",
				rows:  []rowDef{{key: "pub", label: "msgs/s produce"}, {key: "sub", label: "msgs/s read-back", target: ratioAtLeast(1.5)}},
				lightq: func(ctx context.Context) (sample, error) {
					return r.lqDurable(ctx, overTLS, 1024, cfg.DurableMsgs, "interval=2m", "written", thenReadBack)
				},
				nats: func(ctx context.Context) (sample, error) {
					return r.natsJS(ctx, overTLS, 1024, cfg.DurableMsgs, "", thenReadBack)
				}})
	}
	if want("fsync") {
		out = append(out, caseDef{id: "fsync-100", family: "fsync", size: 100,
			title: "durable 100 B, fsync before ack (fsync=always vs sync_interval=always)",
			rows:  []rowDef{{key: "pub", label: "msgs/s produce", target: ratioAtLeast(100)}},
			lightq: func(ctx context.Context) (sample, error) {
				return r.lqDurable(ctx, plain, 100, cfg.FsyncMsgs, "always", "durable", produceOnly)
			},
			nats: func(ctx context.Context) (sample, error) {
				return r.natsJS(ctx, plain, 100, cfg.FsyncMsgsNATS, "always", produceOnly)
			}})
	}
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
			caseDef{id: "latency-durable", family: "latency", size: 100,
				title: "latency, durable 100 B at " + rate + " (no NATS tool)", rows: rows(false),
				lightq: func(ctx context.Context) (sample, error) { return r.lqLatency(ctx, wire.KindDurable) }},
			caseDef{id: "latency-floor", family: "latency", size: 100,
				title:  fmt.Sprintf("latency floor: paced producer -> plain Go relay -> consumer, 100 B at %dK msg/s x %v", cfg.LatencyRate/1000, cfg.LatencyDuration),
				rows:   rows(false),
				lightq: func(ctx context.Context) (sample, error) { return r.latencyFloor(ctx) }})
	}
	if want("tcp") {
		out = append(out, caseDef{id: "tcp", family: "tcp", title: "raw TCP, 512 KiB writes, 1 MiB socket buffers",
			rows:   []rowDef{{key: "mb", label: "MB/s (1e6 B)"}},
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
