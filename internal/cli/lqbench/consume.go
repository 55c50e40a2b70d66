package lqbench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// consumer is one subscription's measurements. Only its goroutine writes them until done.
type consumer struct {
	received  int64        // the handler goroutine's count
	seen      atomic.Int64 // received, published for the watchdog
	dropped   uint64
	first     time.Time // first message received
	last      time.Time // last message received
	hist      *hdrhistogram.Histogram
	sendHist  *hdrhistogram.Histogram // from the actual send, when sends is set
	sends     *sendLog
	errCount  int64
	progress  func(int64)
	sinceProg int64
}

func newHistogram() *hdrhistogram.Histogram {
	// 1 µs to 100 s at 3 significant digits.
	return hdrhistogram.New(1, 100_000_000, 3)
}

// handle records one message. It runs per message: no allocation.
func (c *consumer) handle(m *client.Received) error {
	var sent int64
	if len(m.Value) >= StampSize {
		sent = int64(binary.BigEndian.Uint64(m.Value))
	}
	// The clock is read for stamped messages (all of them at a fixed rate, one in sampleEvery
	// otherwise, always the first and last of each producer), for the first message received
	// and for every sampleEvery-th: first and last bound the rate, and last is off by fewer
	// than sampleEvery messages even when the producers' last messages were dropped.
	var now time.Time
	if sent != 0 || c.received%sampleEvery == 0 {
		now = time.Now()
		if c.received == 0 {
			c.first = now
		}
		c.last = now
	}
	c.received++
	c.dropped += m.Dropped
	if sent != 0 {
		us := (now.UnixNano() - sent) / 1000
		if us < 1 {
			us = 1
		}
		if c.hist.RecordValue(us) != nil {
			c.errCount++
		}
		if at := c.sends.sentAt(binary.BigEndian.Uint64(m.Value[8:])); at > 0 {
			_ = c.sendHist.RecordValue(max((now.UnixNano()-at)/1000, 1))
		}
	}
	c.seen.Store(c.received)
	if c.sinceProg++; c.sinceProg == 4096 && c.progress != nil {
		c.progress(c.sinceProg)
		c.sinceProg = 0
	}
	return nil
}

// source is what a benchmark consumer reads: a push subscription (transient topics) or a
// fetching consumer (durable topics).
type source interface {
	Each(ctx context.Context, fn func(*client.Received) error) error
	Close() error
	Dropped() uint64
}

// durableSource adapts a durable-topic Consumer: nothing is ever dropped.
type durableSource struct{ *client.Consumer }

func (durableSource) Dropped() uint64 { return 0 }

// openSource subscribes (transient) or starts a consumer (durable): in consume mode from the
// beginning of the log, in e2e mode from its end.
func openSource(ctx context.Context, cfg *Config, c *client.Conn) (source, error) {
	if cfg.Kind != wire.KindDurable {
		// The handler only records a figure: it runs on the connection's reader, saving the
		// hand-off of every batch to the goroutine in Each (latency at a fixed rate).
		s, err := c.Subscribe(ctx, client.SubscribeOptions{Topic: cfg.Topic, QueueGroup: cfg.Group, Window: cfg.Window, InlineHandler: true})
		if err != nil {
			return nil, fmt.Errorf("subscribe: %w", err)
		}
		return s, nil
	}
	start := client.Earliest()
	if cfg.Mode == "e2e" {
		start = client.Latest()
	}
	k, err := c.NewConsumer(ctx, client.ConsumerOptions{Topic: cfg.Topic, Group: cfg.Group, Start: start,
		Prefetch: cfg.Window, MaxBytes: 1 << 20, AutoCommit: -1})
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	return durableSource{k}, nil
}

// consumeAll subscribes cfg.Consumers times and receives until each has accounted for the
// expected number of messages (received or dropped), it was idle for IdleTimeout, or ctx
// ends. ready is closed once every subscription is in place.
func consumeAll(ctx context.Context, cfg *Config, expect int64, sends *sendLog, ready chan<- struct{}, progress func(int64)) ([]*consumer, error) {
	type sub struct {
		conn *client.Conn
		s    source
	}
	subs := make([]sub, cfg.Consumers)
	for i := range subs {
		c, err := dial(ctx, cfg, fmt.Sprintf("lqbench-consumer-%d", i))
		if err != nil {
			return nil, fmt.Errorf("consumer connection: %w", err)
		}
		defer c.Close()
		s, err := openSource(ctx, cfg, c)
		if err != nil {
			return nil, err
		}
		defer s.Close()
		subs[i] = sub{c, s}
	}
	if ready != nil {
		close(ready)
	}
	if cfg.Group != "" {
		expect = (expect + int64(cfg.Consumers) - 1) / int64(cfg.Consumers) // roughly; idle ends the rest
	}
	out := make([]*consumer, len(subs))
	var wg sync.WaitGroup
	var groupTotal atomic.Int64
	for i, sb := range subs {
		cs := &consumer{hist: newHistogram(), progress: progress, sends: sends}
		if sends != nil {
			cs.sendHist = newHistogram()
		}
		out[i] = cs
		wg.Add(1)
		go func() {
			defer wg.Done()
			runCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			var lastCount int64
			lastChange := time.Now()
			done := make(chan struct{})
			go func() { // idle and completion watchdog
				t := time.NewTicker(10 * time.Millisecond)
				defer t.Stop()
				for {
					select {
					case <-done:
						return
					case <-t.C:
						n := cs.seen.Load()
						if n != lastCount {
							lastCount, lastChange = n, time.Now()
						}
						total := n + int64(sb.s.Dropped())
						if cfg.Group != "" {
							total = groupTotal.Load() + n
						}
						if total >= expect || time.Since(lastChange) > cfg.IdleTimeout {
							cancel()
							return
						}
					}
				}
			}()
			err := sb.s.Each(runCtx, cs.handle)
			close(done)
			cs.seen.Store(cs.received)
			if cfg.Group != "" {
				groupTotal.Add(cs.received)
			}
			if err != nil && !errors.Is(err, context.Canceled) {
				cs.errCount++
			}
			cs.dropped = sb.s.Dropped()
		}()
	}
	wg.Wait()
	return out, nil
}

func runConsume(ctx context.Context, cfg *Config, ready chan<- struct{}) (*Result, error) {
	bar := newProgress(cfg, int64(cfg.Messages*cfg.Producers*cfg.Consumers), "consuming")
	cons, err := consumeAll(ctx, cfg, int64(cfg.Messages*cfg.Producers), nil, ready, bar.add)
	bar.finish()
	if err != nil {
		return nil, err
	}
	r := &Result{Mode: "consume", Size: cfg.Size}
	r.addConsumers(cons)
	return r, nil
}

func runE2E(ctx context.Context, cfg *Config) (*Result, error) {
	ready := make(chan struct{})
	type consumeOut struct {
		cons []*consumer
		err  error
	}
	outc := make(chan consumeOut, 1)
	bar := newProgress(cfg, int64(cfg.Messages*cfg.Producers*cfg.Consumers), "end to end")
	var sends *sendLog
	if cfg.Rate > 0 {
		sends = newSendLog(cfg.Producers, cfg.Messages)
	}
	go func() {
		cons, err := consumeAll(ctx, cfg, int64(cfg.Messages*cfg.Producers), sends, ready, bar.add)
		outc <- consumeOut{cons, err}
	}()
	select {
	case <-ready:
	case out := <-outc:
		return nil, out.err
	}
	st, perr := produceAll(ctx, cfg, sends, nil)
	out := <-outc
	bar.finish()
	if perr != nil {
		return nil, perr
	}
	if out.err != nil {
		return nil, out.err
	}
	r := &Result{Mode: "e2e", Size: cfg.Size, Failed: st.failed.Load()}
	r.addConsumers(out.cons)
	r.Produced = st.sent.Load()
	st.acks.setResult(r)
	r.ProduceSeconds = st.end.Sub(st.start).Seconds()
	// The original's figures: from the first send to the last receive.
	var lastRecv time.Time
	var firstRecv time.Time
	for _, c := range out.cons {
		if c.last.After(lastRecv) {
			lastRecv = c.last
		}
		if firstRecv.IsZero() || (!c.first.IsZero() && c.first.Before(firstRecv)) {
			firstRecv = c.first
		}
	}
	if r.Messages > 0 {
		r.setWindow(st.start, lastRecv)
		r.FirstMessageDelayUs = float64(firstRecv.Sub(st.start).Microseconds())
		r.AverageLatencyUs = float64(lastRecv.Sub(st.start).Nanoseconds()) / 1000 / float64(r.Messages)
	}
	if e, ok := st.firstErr.Load().(error); ok {
		r.FirstError = e.Error()
	}
	return r, nil
}
