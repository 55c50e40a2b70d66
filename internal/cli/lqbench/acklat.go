package lqbench

import (
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Produce-to-ack latency at a fixed rate: how long each message waited, from its slot in the
// open-loop schedule (and from the moment Send actually took it), until the broker's
// acknowledgement reached the producer's callback. It is what a replicated topic adds to a
// produce (the quorum's write) without the consumer's side, and it is measured only with
// --rate: a run as fast as possible has no schedule, and the clock read per acknowledgement
// would cost what the stamp sampling saves.

// ackLatency records one producer's acknowledgements. The producer's callbacks run one at a
// time in send order (client.Producer's contract), exactly once for each message Send took, so
// the n-th callback is message n: its slot is start + n*interval and its send time is in the
// send log. Not safe for concurrent use; each producer has its own, merged by ackLatencies.
type ackLatency struct {
	id       int
	startNs  int64
	interval time.Duration
	sends    *sendLog
	n        int // callbacks so far
	fromSlot *hdrhistogram.Histogram
	fromSend *hdrhistogram.Histogram
}

func newAckLatency(id int, start time.Time, interval time.Duration, sends *sendLog) *ackLatency {
	return &ackLatency{id: id, startNs: start.UnixNano(), interval: interval, sends: sends,
		fromSlot: newHistogram(), fromSend: newHistogram()}
}

// acked records the acknowledgement of the next message, received at nowNs (unix ns); ok is
// false for a message that failed, which is counted but not recorded.
func (a *ackLatency) acked(nowNs int64, ok bool) {
	seq := a.n
	a.n++
	if !ok {
		return
	}
	slot := a.startNs + int64(time.Duration(seq)*a.interval)
	_ = a.fromSlot.RecordValue(clampUs(nowNs - slot))
	if at := a.sends.sentAt(uint64(a.id)<<48 | uint64(seq)); at > 0 {
		_ = a.fromSend.RecordValue(clampUs(nowNs - at))
	}
}

// clampUs turns nanoseconds into whole microseconds within the histogram's range (1 us to
// 100 s): a value outside it would be refused and lost from the count.
func clampUs(ns int64) int64 {
	return min(max(ns/1000, 1), 100_000_000)
}

// ackLatencies merges the producers' recorders. Safe for concurrent use.
type ackLatencies struct {
	mu       sync.Mutex
	fromSlot *hdrhistogram.Histogram
	fromSend *hdrhistogram.Histogram
}

func newAckLatencies() *ackLatencies {
	return &ackLatencies{fromSlot: newHistogram(), fromSend: newHistogram()}
}

// add merges a producer's recorder once its producer is closed (all callbacks done).
func (l *ackLatencies) add(a *ackLatency) {
	if l == nil || a == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fromSlot.Merge(a.fromSlot)
	l.fromSend.Merge(a.fromSend)
}

// setResult fills r's Ack* figures; nothing when nothing was recorded.
func (l *ackLatencies) setResult(r *Result) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if h := l.fromSlot; h.TotalCount() > 0 {
		r.AckP50Us, r.AckP90Us = float64(h.ValueAtQuantile(50)), float64(h.ValueAtQuantile(90))
		r.AckP99Us, r.AckP999Us = float64(h.ValueAtQuantile(99)), float64(h.ValueAtQuantile(99.9))
		r.AckMaxUs = float64(h.Max())
		r.AckCount = h.TotalCount()
	}
	if h := l.fromSend; h.TotalCount() > 0 {
		r.AckSendP50Us, r.AckSendP99Us = float64(h.ValueAtQuantile(50)), float64(h.ValueAtQuantile(99))
		r.AckSendP999Us, r.AckSendMaxUs = float64(h.ValueAtQuantile(99.9)), float64(h.Max())
	}
}
