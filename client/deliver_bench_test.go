package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/lightq/lightq/wire"
)

// BenchmarkDeliverDecode measures the consumer path of one DELIVER: queueing the batch as the
// reader goroutine does, then parsing, decompressing and walking its records through Each.
// One op is one message.
func BenchmarkDeliverDecode(b *testing.B) {
	const perBatch = 500
	for _, codec := range []wire.Codec{wire.CodecNone, wire.CodecS2, wire.CodecZstd} {
		b.Run(codec.String(), func(b *testing.B) {
			var bb wire.BatchBuilder
			var comp wire.Compressor
			defer comp.Close()
			for i := range perBatch {
				bb.Append(1700000000000+int64(i), fmt.Appendf(nil, "key-%d", i%10), fmt.Appendf(nil, "value-%06d-padding-padding-padding-padding-padding-padding-padding", i), nil)
			}
			batch, err := bb.Finish(codec, &comp)
			if err != nil {
				b.Fatal(err)
			}
			d := wire.Deliver{Partition: 0, Batch: batch}
			body := d.AppendTo(nil)

			s := &Subscription{
				// window: never grant credit, there is no Conn
				topic: "bench", window: math.MaxInt, maxBatch: wire.DefaultLimits().MaxBatch,
				signal: make(chan struct{}, 1), done: make(chan struct{}),
			}
			ctx := context.Background()
			errBatchDone := errors.New("batch done")
			n, bytes := 0, 0
			handler := func(m *Received) error {
				bytes += len(m.Value)
				if n++; n == perBatch {
					return errBatchDone
				}
				return nil
			}
			b.ReportAllocs()
			b.SetBytes(int64(bb.Size() / perBatch)) // uncompressed bytes
			for i := 0; b.Loop(); i++ {
				if i%perBatch == 0 {
					if err := s.deliver(body); err != nil {
						b.Fatal(err)
					}
					n = 0
					if err := s.Each(ctx, handler); err != errBatchDone {
						b.Fatal(err)
					}
				}
			}
			_ = bytes
		})
	}
}
