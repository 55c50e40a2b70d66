package lqbench

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/schollz/progressbar/v3"

	"github.com/lightq/lightq/wire"
)

// Result is what one run measured. Field names double as the --json keys.
type Result struct {
	Mode           string  `json:"mode"`
	Kind           string  `json:"kind"`     // the topic's kind: transient or durable
	Messages       int64   `json:"messages"` // received (consume, e2e) or sent (produce)
	Size           int     `json:"size"`
	Seconds        float64 `json:"seconds"`
	MsgsPerSec     float64 `json:"msgs_per_sec"`
	MBPerSec       float64 `json:"mb_per_sec"`
	Produced       int64   `json:"produced,omitempty"`
	ProduceSeconds float64 `json:"produce_seconds,omitempty"`
	Dropped        uint64  `json:"dropped"`
	Failed         int64   `json:"failed"`
	FirstError     string  `json:"first_error,omitempty"`
	// The measured interval on the wall clock (unix ns), so that another process can count
	// what happened within it (make compare's CPU seconds per GB): produce from the first
	// send to the last acknowledgement, consume from the first to the last message received,
	// e2e from the first send to the last message received.
	StartUnixNs int64 `json:"start_unix_ns,omitempty"`
	EndUnixNs   int64 `json:"end_unix_ns,omitempty"`

	FirstMessageDelayUs float64 `json:"first_message_delay_us,omitempty"`
	// AverageLatencyUs is the original LightQ's "average latency": the time from the first
	// send to the last receive divided by the message count. It is a throughput figure.
	AverageLatencyUs float64 `json:"original_average_latency_us,omitempty"`

	P50Us  float64 `json:"p50_us"`
	P90Us  float64 `json:"p90_us"`
	P99Us  float64 `json:"p99_us"`
	P999Us float64 `json:"p999_us"`
	MaxUs  float64 `json:"max_us"`

	// Send*: e2e at a fixed rate, latency from the moment the producer actually called Send
	// instead of the intended slot: the pacer's own late wake-ups left out, as `nats latency`
	// measures. The P* figures above include them.
	SendP50Us  float64 `json:"send_p50_us,omitempty"`
	SendP99Us  float64 `json:"send_p99_us,omitempty"`
	SendP999Us float64 `json:"send_p999_us,omitempty"`
	SendMaxUs  float64 `json:"send_max_us,omitempty"`

	// Ack*: produce and e2e at a fixed rate with acknowledgements (acklat.go): latency from
	// each message's slot until its acknowledgement reached the producer, AckCount messages;
	// AckSend* from the moment Send took it instead.
	AckCount      int64   `json:"ack_count,omitempty"`
	AckP50Us      float64 `json:"ack_p50_us,omitempty"`
	AckP90Us      float64 `json:"ack_p90_us,omitempty"`
	AckP99Us      float64 `json:"ack_p99_us,omitempty"`
	AckP999Us     float64 `json:"ack_p999_us,omitempty"`
	AckMaxUs      float64 `json:"ack_max_us,omitempty"`
	AckSendP50Us  float64 `json:"ack_send_p50_us,omitempty"`
	AckSendP99Us  float64 `json:"ack_send_p99_us,omitempty"`
	AckSendP999Us float64 `json:"ack_send_p999_us,omitempty"`
	AckSendMaxUs  float64 `json:"ack_send_max_us,omitempty"`
}

// setWindow records the measured interval [start, end] and the rates over it.
func (r *Result) setWindow(start, end time.Time) {
	if !start.IsZero() && !end.IsZero() {
		r.StartUnixNs, r.EndUnixNs = start.UnixNano(), end.UnixNano()
	}
	r.setRate(end.Sub(start))
}

func (r *Result) setRate(d time.Duration) {
	r.Seconds = d.Seconds()
	if r.Seconds > 0 {
		r.MsgsPerSec = float64(r.Messages) / r.Seconds
		r.MBPerSec = float64(r.Messages) * float64(r.Size) / r.Seconds / 1e6
	}
}

// addConsumers merges the consumers' counts and latency histograms into r.
func (r *Result) addConsumers(cons []*consumer) {
	h, sh := newHistogram(), newHistogram()
	var first, last time.Time
	for _, c := range cons {
		r.Messages += c.received
		r.Dropped += c.dropped
		h.Merge(c.hist)
		if c.sendHist != nil {
			sh.Merge(c.sendHist)
		}
		if !c.first.IsZero() && (first.IsZero() || c.first.Before(first)) {
			first = c.first
		}
		if c.last.After(last) {
			last = c.last
		}
	}
	r.setWindow(first, last)
	r.setPercentiles(h)
	if sh.TotalCount() > 0 {
		r.SendP50Us = float64(sh.ValueAtQuantile(50))
		r.SendP99Us = float64(sh.ValueAtQuantile(99))
		r.SendP999Us = float64(sh.ValueAtQuantile(99.9))
		r.SendMaxUs = float64(sh.Max())
	}
}

func (r *Result) setPercentiles(h *hdrhistogram.Histogram) {
	if h.TotalCount() == 0 {
		return
	}
	r.P50Us = float64(h.ValueAtQuantile(50))
	r.P90Us = float64(h.ValueAtQuantile(90))
	r.P99Us = float64(h.ValueAtQuantile(99))
	r.P999Us = float64(h.ValueAtQuantile(99.9))
	r.MaxUs = float64(h.Max())
}

// WriteText prints the result the way the original's tools did, then the percentiles.
func (r *Result) WriteText(w io.Writer) {
	fmt.Fprintf(w, "Total Messages: %d, Time Taken: %.3f seconds.\n", r.Messages, r.Seconds)
	fmt.Fprintf(w, "%.0f messages per second.\n", r.MsgsPerSec)
	fmt.Fprintf(w, "%.2f MB per second.\n", r.MBPerSec)
	if r.Mode == "e2e" {
		fmt.Fprintf(w, "Produced %d messages in %.3f seconds (%.0f per second).\n", r.Produced, r.ProduceSeconds, float64(r.Produced)/r.ProduceSeconds)
		fmt.Fprintf(w, "First message delay: %.0f us.\n", r.FirstMessageDelayUs)
		fmt.Fprintf(w, "Average latency (original's definition: first send to last receive / messages): %.3f us.\n", r.AverageLatencyUs)
	}
	if r.Mode != "produce" {
		fmt.Fprintf(w, "End-to-end latency (us): p50 %.0f  p90 %.0f  p99 %.0f  p99.9 %.0f  max %.0f\n", r.P50Us, r.P90Us, r.P99Us, r.P999Us, r.MaxUs)
		if r.SendP50Us > 0 {
			fmt.Fprintf(w, "  from the actual send (the pacer's lateness left out): p50 %.0f  p99 %.0f  p99.9 %.0f  max %.0f\n", r.SendP50Us, r.SendP99Us, r.SendP999Us, r.SendMaxUs)
		}
		if r.Kind != wire.KindDurable.String() { // a durable topic drops nothing: consumers read the log
			fmt.Fprintf(w, "Dropped (subscriber fell behind the ring): %d\n", r.Dropped)
		}
	}
	if r.AckCount > 0 {
		fmt.Fprintf(w, "Produce-to-ack latency (us, %d messages): p50 %.0f  p90 %.0f  p99 %.0f  p99.9 %.0f  max %.0f\n", r.AckCount, r.AckP50Us, r.AckP90Us, r.AckP99Us, r.AckP999Us, r.AckMaxUs)
		if r.AckSendP50Us > 0 {
			fmt.Fprintf(w, "  from the actual send: p50 %.0f  p99 %.0f  p99.9 %.0f  max %.0f\n", r.AckSendP50Us, r.AckSendP99Us, r.AckSendP999Us, r.AckSendMaxUs)
		}
	}
	if r.Failed > 0 {
		fmt.Fprintf(w, "Failed sends: %d (first: %s)\n", r.Failed, r.FirstError)
	}
}

// WriteJSON prints the result as one JSON object.
func (r *Result) WriteJSON(w io.Writer) error {
	return json.NewEncoder(w).Encode(r)
}

// progressDelay is how long a run goes before it shows a progress bar.
const progressDelay = 2 * time.Second

// progress is an optional progress bar that appears once a run has lasted progressDelay. A
// nil *progress does nothing. Safe for concurrent use.
type progress struct {
	mu    sync.Mutex
	cfg   *Config
	total int64
	what  string
	start time.Time
	done  int64
	bar   *progressbar.ProgressBar
}

func newProgress(cfg *Config, total int64, what string) *progress {
	if cfg.Progress == nil {
		return nil
	}
	return &progress{cfg: cfg, total: total, what: what, start: time.Now()}
}

func (p *progress) add(n int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	if p.bar == nil {
		if time.Since(p.start) < progressDelay {
			return
		}
		p.bar = newBar(p.cfg, p.total, p.what)
		_ = p.bar.Add64(p.done)
		return
	}
	_ = p.bar.Add64(n)
}

func (p *progress) finish() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}

func newBar(cfg *Config, total int64, what string) *progressbar.ProgressBar {
	return progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(cfg.Progress),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("msg"),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
}
