package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// The workload: idempotent producers on connections that follow the leaders, recording the
// outcome of every message, and a consumer reading every partition from the leaders.

// status is what a producer learned about one message.
type status uint8

const (
	stAttempted     status = iota // handed to Send, no outcome yet
	stAcked                       // acknowledged at (partition, offset)
	stFailed                      // failed, not stored (client.ErrNotStored)
	stUnsent                      // Send refused it: never taken
	stIndeterminate               // failed, may be stored (client.ErrMaybeStored)
)

type msgState struct {
	part   int32
	off    int64
	status status
}

// prodHist is one producer's messages, indexed by seq.
type prodHist struct {
	id    uint32
	acked *atomic.Int64 // the workload's count of acknowledged messages
	mu    sync.Mutex
	msgs  []msgState
}

func (h *prodHist) add(part int32) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, msgState{part: part, off: -1})
	return uint64(len(h.msgs) - 1)
}

func (h *prodHist) resolve(seq uint64, a client.Ack, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := &h.msgs[seq]
	switch {
	case m.status != stAttempted:
		m.status = stIndeterminate // two outcomes: trust neither
	case err == nil:
		m.status, m.part, m.off = stAcked, a.Partition, a.Offset
		h.acked.Add(1)
	case errors.Is(err, client.ErrNotStored) && !errors.Is(err, client.ErrMaybeStored):
		m.status = stFailed
	default:
		m.status = stIndeterminate
	}
}

// workloadConfig sizes a workload.
type workloadConfig struct {
	producers   int
	acks        client.AckLevel
	rate        int // messages a second per producer
	maxMessages int // per producer: the count bound
	maxPayload  int
}

// workload is the producers and the consumer of one run.
type workload struct {
	cfg    workloadConfig
	c      *cluster
	prods  []*prodHist
	cancel context.CancelFunc
	wg     sync.WaitGroup
	conns  []*client.Conn
	ps     []*client.Producer

	ackCount atomic.Int64

	mu       sync.Mutex
	live     []LiveRead
	sendErrs map[string]int
	liveErr  error
	consumed int
}

// clientOptions are the options of every client connection of the harness.
func clientOptions(name string) client.Options {
	return client.Options{User: "admin", Password: adminPass, ClientName: name,
		DialTimeout: 5 * time.Second, RequestTimeout: 10 * time.Second}
}

// producerDeliveryTimeout is how long a message may wait for its acknowledgement across the
// faults (each fault cycle ends healthy well within it).
const producerDeliveryTimeout = 3 * time.Minute

// startWorkload dials the producers and the consumer at the cluster's seed list and starts
// them; they run until stop.
func startWorkload(ctx context.Context, c *cluster, cfg workloadConfig, seed uint64) (*workload, error) {
	w := &workload{cfg: cfg, c: c, sendErrs: map[string]int{}}
	rctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	for i := 0; i < cfg.producers; i++ {
		conn, err := client.Dial(ctx, c.seeds(), clientOptions(fmt.Sprintf("chaos-p%d", i+1)))
		if err != nil {
			w.abort()
			return nil, fmt.Errorf("producer %d: dial %s: %w", i+1, c.seeds(), err)
		}
		w.conns = append(w.conns, conn)
		p, err := conn.NewProducer(client.ProducerOptions{Topic: c.topic, Acks: cfg.acks, MaxInFlight: 16,
			DeliveryTimeout: producerDeliveryTimeout})
		if err != nil {
			w.abort()
			return nil, fmt.Errorf("producer %d: %w", i+1, err)
		}
		w.ps = append(w.ps, p)
		h := &prodHist{id: uint32(i + 1), acked: &w.ackCount}
		w.prods = append(w.prods, h)
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			if err := w.produce(rctx, p, h, rand.New(rand.NewPCG(seed, uint64(i)))); err != nil {
				w.mu.Lock()
				w.sendErrs[err.Error()]++
				w.mu.Unlock()
			}
		}()
	}
	cconn, err := client.Dial(ctx, c.seeds(), clientOptions("chaos-consumer"))
	if err != nil {
		w.abort()
		return nil, fmt.Errorf("consumer: dial: %w", err)
	}
	w.conns = append(w.conns, cconn)
	k, err := cconn.NewConsumer(ctx, client.ConsumerOptions{Topic: c.topic, Start: client.Earliest(), MaxWait: 100 * time.Millisecond})
	if err != nil {
		w.abort()
		return nil, fmt.Errorf("consumer: %w", err)
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer k.Close()
		err := k.Each(rctx, func(r *client.Received) error {
			kind, id := ParsePayload(r.Value)
			w.mu.Lock()
			w.live = append(w.live, LiveRead{Partition: r.Partition, Offset: r.Offset, ID: id, Kind: kind})
			w.consumed++
			w.mu.Unlock()
			return nil
		})
		if err != nil && rctx.Err() == nil {
			w.mu.Lock()
			w.liveErr = err
			w.mu.Unlock()
		}
	}()
	return w, nil
}

func (w *workload) abort() {
	w.cancel()
	w.wg.Wait()
	for _, p := range w.ps {
		_ = p.Close()
	}
	for _, c := range w.conns {
		c.Close()
	}
}

// produce sends paced messages of random size to random partitions until ctx ends, the
// count bound is reached or Send fails (its error is returned).
func (w *workload) produce(ctx context.Context, p *client.Producer, h *prodHist, rng *rand.Rand) error {
	buf := make([]byte, w.cfg.maxPayload)
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for i := 0; i < w.cfg.maxMessages; i++ {
		// Pace at rate messages a second, in bursts of up to 5 ms worth.
		due := start.Add(time.Duration(float64(i) / float64(w.cfg.rate) * float64(time.Second)))
		for time.Until(due) > 5*time.Millisecond {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		size := 64 + rng.IntN(w.cfg.maxPayload-64+1)
		part := int32(rng.IntN(w.c.parts))
		seq := h.add(part)
		v := buf[:size]
		FillPayload(v, false, MsgID{h.id, seq}, rng.Uint64)
		err := p.Send(ctx, &client.Message{Value: v, Partition: part, HasPartition: true}, func(a client.Ack, err error) {
			h.resolve(seq, a, err)
		})
		if err != nil {
			h.mu.Lock()
			h.msgs[seq].status = stUnsent
			h.mu.Unlock()
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	return nil
}

// acked counts the messages acknowledged so far.
func (w *workload) acked() int64 { return w.ackCount.Load() }

// waitProgress waits until k more messages are acknowledged than when it was called: the
// producers got through to the leaders. It reports false after timeout.
func (w *workload) waitProgress(ctx context.Context, k int64, timeout time.Duration) bool {
	base := w.acked()
	return pollUntil(ctx, timeout, 10*time.Millisecond, func() bool { return w.acked() >= base+k }) == nil
}

// stop ends the sends and the consumer, flushes the producers (every message then has its
// outcome) and closes the connections. It returns the producers' flush errors by kind.
func (w *workload) stop(timeout time.Duration) map[string]int {
	w.cancel()
	w.wg.Wait()
	errs := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range w.ps {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			if err := p.Flush(ctx); err != nil {
				mu.Lock()
				errs[errClass(err)]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, p := range w.ps {
		_ = p.Close()
	}
	for _, c := range w.conns {
		c.Close()
	}
	return errs
}

// errClass names an error by its broker code or client sentinel, for the summary.
func errClass(err error) string {
	var we *wire.Error
	switch {
	case errors.As(err, &we):
		return we.Code.String()
	case errors.Is(err, client.ErrDeliveryTimeout):
		return "delivery-timeout"
	case errors.Is(err, client.ErrConnectionLost):
		return "connection-lost"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	}
	return err.Error()
}

// outcome is what the producers learned, for the checker and the summary.
type outcome struct {
	acked                                []Acked
	sent, notStored                      map[MsgID]bool
	attempted, failed, unsent, undecided int
	indeterminate                        int
}

func (w *workload) outcome() outcome {
	o := outcome{sent: map[MsgID]bool{}, notStored: map[MsgID]bool{}}
	for _, h := range w.prods {
		h.mu.Lock()
		for seq, m := range h.msgs {
			id := MsgID{h.id, uint64(seq)}
			o.attempted++
			switch m.status {
			case stAcked:
				o.acked = append(o.acked, Acked{ID: id, Partition: m.part, Offset: m.off})
			case stFailed:
				o.failed++
				o.notStored[id] = true
			case stUnsent:
				o.unsent++
				continue // never handed over: not sent
			case stIndeterminate:
				o.indeterminate++
			case stAttempted:
				o.undecided++
			}
			o.sent[id] = true
		}
		h.mu.Unlock()
	}
	sort.Slice(o.acked, func(i, j int) bool {
		a, b := o.acked[i], o.acked[j]
		return a.Partition < b.Partition || a.Partition == b.Partition && a.Offset < b.Offset
	})
	return o
}

// liveReads returns what the consumer read and its error, if it stopped by itself.
func (w *workload) liveReads() ([]LiveRead, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.live, w.liveErr
}
