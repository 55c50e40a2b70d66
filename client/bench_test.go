package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

func BenchmarkProducerSend(b *testing.B) {
	for _, size := range []int{100, 1024} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			fb := startFake(b)
			fb.AddTopic("bench", 4)
			fb.discard = true
			c := dial(b, fb)
			p, err := c.NewProducer(client.ProducerOptions{Topic: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			ctx := context.Background()
			m := client.Message{Value: bytes.Repeat([]byte("v"), size)}
			cb := func(_ client.Ack, err error) {
				if err != nil {
					b.Error(err)
				}
			}
			b.ReportAllocs()
			b.SetBytes(int64(size))
			start := time.Now()
			for b.Loop() {
				if err := p.Send(ctx, &m, cb); err != nil {
					b.Fatal(err)
				}
			}
			if err := p.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
		})
	}
}

// TestProducerSendAllocs checks the steady state of Send allocates nothing. The fake broker
// runs in this process and allocates per batch, which the average absorbs.
func TestProducerSendAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation count")
	}
	fb := startFake(t)
	fb.AddTopic("bench", 2)
	c := dial(t, fb)
	p := newProducer(t, c, client.ProducerOptions{Topic: "bench"})
	ctx := context.Background()
	m := client.Message{Key: []byte("k"), Value: bytes.Repeat([]byte("v"), 100)}
	cb := func(client.Ack, error) {}
	for range 10000 { // warm up: batch buffers, callback slices, maps
		if err := p.Send(ctx, &m, cb); err != nil {
			t.Fatal(err)
		}
	}
	allocs := testing.AllocsPerRun(20000, func() {
		if err := p.Send(ctx, &m, cb); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0.05 {
		t.Fatalf("Send allocates %.3f times per message", allocs)
	}
}

func BenchmarkConsumerEach(b *testing.B) {
	_, c := ckSetup(b, nil, "dur", 1, wire.Option{Key: "fsync", Value: "never"})
	const n = 200_000
	var acks []client.Ack
	ckProduce(b, c, client.ProducerOptions{Topic: "dur", BatchBytes: 256 << 10}, 0, n, &acks, func(i int, m *client.Message) {
		m.Headers = nil
		m.Value = m.Value[:16]
	})
	errEnd := errors.New("end of the log")
	b.ReportAllocs()
	b.ResetTimer()
	for read := 0; read < b.N; {
		k, err := c.NewConsumer(itCtx(b), client.ConsumerOptions{Topic: "dur"})
		if err != nil {
			b.Fatal(err)
		}
		err = k.Each(itCtx(b), func(m *client.Received) error {
			read++
			if read == b.N || m.Offset == n-1 {
				return errEnd
			}
			return nil
		})
		if !errors.Is(err, errEnd) {
			b.Fatal(err)
		}
		k.Close()
	}
}
