package client_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lightq/lightq/client"
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
