package broker

import (
	"testing"

	"github.com/lightq/lightq/wire"
)

// BenchmarkProduceFormats is the broker's side of a producer: PRODUCE frames of 500 records
// of 100 bytes, 64 pipelined per round trip over loopback, in format 1, format 2 without a
// producer and format 2 with a producer id (deduplication checked and recorded), to a
// transient and a durable (fsync=never) partition. The client here is a raw connection that
// only writes prepared frames and reads acks, so the figures are what the broker's checks
// cost, not a client's (allocations counted include the test client's reads).
func BenchmarkProduceFormats(b *testing.B) {
	for _, kind := range []string{"transient", "durable"} {
		for _, format := range []string{"magic1", "magic2", "magic2-idempotent"} {
			b.Run(kind+"/"+format, func(b *testing.B) {
				srv := startBroker(b, nil)
				admin := login(b, srv.Addr(), testAdminUser, testAdminPass)
				if kind == "durable" {
					admin.createDurable("bench", 1, wire.Option{Key: "fsync", Value: "never"}, wire.Option{Key: "retention.bytes", Value: "268435456"})
				} else {
					m := wire.CreateTopic{Name: "bench", Kind: wire.KindTransient, Partitions: 1, User: "d-user", Password: "d-pw"}
					admin.expectResponse(wire.OpCreateTopic, admin.send(wire.OpCreateTopic, m.AppendTo(nil)))
				}
				c := login(b, srv.Addr(), "d-user", "d-pw")
				p := c.initProducer(wire.NoProducer, wire.NoProducer)
				value := make([]byte, 100)
				const records, pipeline = 500, 64
				seq := int32(0)
				build := func() []byte {
					var bb wire.BatchBuilder
					if format != "magic1" {
						bb.SetMagic(wire.BatchMagic2)
					}
					for i := range records {
						bb.Append(int64(i), nil, value, nil)
					}
					if format == "magic2-idempotent" {
						bb.SetProducer(p.ProducerID, 0, seq)
						seq += records
					}
					out, err := bb.Finish(wire.CodecNone, nil)
					if err != nil {
						b.Fatal(err)
					}
					return produceBody("bench", 0, wire.AcksWritten, out)
				}
				// Frames are prepared outside the timed loop, a few rounds at a time.
				var round []byte
				next := func() []byte {
					round = round[:0]
					for i := range pipeline {
						round = wire.AppendFrame(round, wire.OpProduce, 0, uint32(1+i), build())
					}
					return round
				}
				b.SetBytes(int64(len(next()))) // one op is a round of pipeline frames
				seq = 0
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					b.StopTimer()
					frames := next()
					b.StartTimer()
					c.write(frames)
					for range pipeline {
						if f := c.mustRead(); f.h.Op != wire.OpProduce {
							b.Fatalf("answer %s", f.h.Op)
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*pipeline*records), "ns/record")
			})
		}
	}
}
