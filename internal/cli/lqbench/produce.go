package lqbench

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/internal/pace"
)

// produceStats is what the producers measured.
type produceStats struct {
	sent     atomic.Int64
	failed   atomic.Int64
	sends    *sendLog      // at a fixed rate: when each message was actually sent
	acks     *ackLatencies // at a fixed rate with acknowledgements: produce-to-ack latency
	firstErr atomic.Value
	start    time.Time
	end      time.Time
}

// produceAll runs cfg.Producers producers to completion.
func produceAll(ctx context.Context, cfg *Config, sends *sendLog, progress func(int64)) (*produceStats, error) {
	st := &produceStats{sends: sends}
	if cfg.Rate > 0 && cfg.Acks != client.AckNone {
		st.acks = newAckLatencies()
	}
	conns := make([]*client.Conn, cfg.Producers)
	for i := range conns {
		c, err := dial(ctx, cfg, fmt.Sprintf("lqbench-producer-%d", i))
		if err != nil {
			return nil, fmt.Errorf("producer connection: %w", err)
		}
		defer c.Close()
		conns[i] = c
	}
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Producers)
	st.start = time.Now()
	for i, c := range conns {
		wg.Add(1)
		go func(id int, c *client.Conn) {
			defer wg.Done()
			if err := produceOne(ctx, cfg, c, id, st, progress); err != nil {
				errs <- err
			}
		}(i, c)
	}
	wg.Wait()
	st.end = time.Now()
	close(errs)
	if err := <-errs; err != nil {
		return st, err
	}
	return st, nil
}

func produceOne(ctx context.Context, cfg *Config, c *client.Conn, id int, st *produceStats, progress func(int64)) error {
	p, err := c.NewProducer(client.ProducerOptions{
		Topic: cfg.Topic, Acks: cfg.Acks, BatchBytes: cfg.BatchBytes, Linger: cfg.Linger,
		MaxInFlight: cfg.MaxInFlight, Compression: cfg.Compression,
		// --inflight is per producer: one partition may hold all of them, up to the
		// broker's deduplication window (INIT_PRODUCER's answer) when idempotent.
		MaxInFlightPerPartition: cfg.MaxInFlight,
		DisableIdempotence:      cfg.NoIdempotence,
	})
	if err != nil {
		return err
	}
	value := make([]byte, cfg.Size)
	for i := range value[StampSize:] {
		value[StampSize+i] = byte('a' + i%26)
	}
	msg := client.Message{Value: value}
	var interval time.Duration
	if cfg.Rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(cfg.Producers) / float64(cfg.Rate))
	}
	// The pacer pins this goroutine to its thread, which only a fixed rate needs: pinned,
	// every wait for an in-flight slot hands the thread's P over and takes it back (two
	// thread switches), a few percent of the producer's CPU when it sends as fast as it can.
	var pacer *pace.Pacer
	if interval > 0 {
		pacer = pace.New()
		defer pacer.Close()
	}
	start := time.Now()
	var ackLat *ackLatency // the callbacks' own: they run one at a time
	if st.acks != nil && interval > 0 {
		ackLat = newAckLatency(id, start, interval, st.sends)
	}
	onAck := func(_ client.Ack, err error) {
		if err != nil {
			st.failed.Add(1)
			st.firstErr.CompareAndSwap(nil, err)
		}
		if ackLat != nil {
			ackLat.acked(time.Now().UnixNano(), err == nil)
		}
	}
	const progressEvery = 4096
	stamp := start
	for i := 0; i < cfg.Messages; i++ {
		var stampNs int64
		switch {
		case interval > 0:
			intended := start.Add(time.Duration(i) * interval)
			if d := time.Until(intended); d > 0 {
				pace.Until(intended, pacer)
			}
			stamp = intended
			stampNs = stamp.UnixNano()
		case i%sampleEvery == 0 || i == cfg.Messages-1:
			stamp = time.Now()
			stampNs = stamp.UnixNano()
		}
		binary.BigEndian.PutUint64(value[0:], uint64(stampNs))
		binary.BigEndian.PutUint64(value[8:], uint64(id)<<48|uint64(i))
		st.sends.note(id, i)
		msg.Timestamp = stamp // the record's timestamp too (the last stamp): saves Send a clock read
		if err := p.Send(ctx, &msg, onAck); err != nil {
			return fmt.Errorf("send: %w", err)
		}
		if i%progressEvery == progressEvery-1 {
			st.sent.Add(progressEvery)
			if progress != nil {
				progress(progressEvery)
			}
		}
	}
	rest := int64(cfg.Messages % progressEvery)
	st.sent.Add(rest)
	if progress != nil {
		progress(rest)
	}
	if err := p.Close(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	st.acks.add(ackLat) // Close has waited for every callback
	return nil
}

func runProduce(ctx context.Context, cfg *Config) (*Result, error) {
	bar := newProgress(cfg, int64(cfg.Messages*cfg.Producers), "producing")
	var sends *sendLog
	if cfg.Rate > 0 {
		sends = newSendLog(cfg.Producers, cfg.Messages)
	}
	st, err := produceAll(ctx, cfg, sends, bar.add)
	bar.finish()
	if err != nil {
		return nil, err
	}
	r := &Result{Mode: "produce", Messages: st.sent.Load(), Size: cfg.Size, Failed: st.failed.Load()}
	r.setWindow(st.start, st.end)
	st.acks.setResult(r)
	if e, ok := st.firstErr.Load().(error); ok {
		r.FirstError = e.Error()
	}
	return r, nil
}
