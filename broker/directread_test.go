package broker

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lightq/lightq/wire"
)

// TestLargeBatchesReadFromSocket: pipelined PRODUCEs far larger than one of gnet's reads
// (256 KiB), whose rest the broker reads from the socket straight into the ring whenever the
// socket holds it (produceDirect), are stored and delivered byte for byte, in order, however
// the reads fall.
func TestLargeBatchesReadFromSocket(t *testing.T) {
	// The ring holds every batch: the subscriber reads only once all are acknowledged.
	srv := startBroker(t, func(c *Config) { c.RingBytes = 16 << 20 })
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createTopic("big", 1, "big-user", "big-pw")
	sub := login(t, srv.Addr(), "big-user", "big-pw")
	sub.subscribe("big", 0, "", 64<<20)
	prod := login(t, srv.Addr(), "big-user", "big-pw")

	const batches, perBatch = 12, 600
	rng := rand.New(rand.NewPCG(7, 8))
	want := make([][]string, batches)
	var stream []byte
	first := prod.corr + 1
	for i := range want {
		var b wire.BatchBuilder
		for j := 0; j < perBatch; j++ {
			v := make([]byte, 1000+rng.IntN(100))
			for k := range v {
				v[k] = byte(rng.Uint32())
			}
			want[i] = append(want[i], string(v))
			b.Append(time.Now().UnixMilli(), nil, v, nil)
		}
		batch, err := b.Finish(wire.CodecNone, nil)
		if err != nil {
			t.Fatal(err)
		}
		stream = wire.AppendFrame(stream, wire.OpProduce, 0, prod.nextCorr(), produceBody("big", 0, wire.AcksWritten, batch))
	}
	// One write, from another goroutine: the broker reads while the rest piles up in the socket.
	werr := make(chan error, 1)
	go func() {
		_ = prod.conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
		_, err := prod.conn.Write(stream)
		werr <- err
	}()
	for i := range batches {
		var pr wire.ProduceResponse
		if err := pr.Decode(prod.expectResponse(wire.OpProduce, first+uint32(i))); err != nil {
			t.Fatal(err)
		}
		if pr.BaseOffset != int64(i*perBatch) {
			t.Fatalf("batch %d stored at %d, want %d", i, pr.BaseOffset, i*perBatch)
		}
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	for i := range batches {
		d := sub.readDeliver()
		if d.dropped != 0 || len(d.values) != perBatch {
			t.Fatalf("delivery %d: %d values, %d dropped", i, len(d.values), d.dropped)
		}
		for j, v := range d.values {
			if v != want[i][j] {
				t.Fatalf("delivery %d, record %d: %d bytes differ from the %d produced", i, j, len(v), len(want[i][j]))
			}
		}
	}
	prod.ping() // the connection still frames its input
}
