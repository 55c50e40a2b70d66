package broker

import (
	"fmt"
	"testing"
	"time"

	"github.com/lightq/lightq/wire"
)

// splitStream is one connection's pipelined requests, corr ids 1..6: HELLO, AUTH, PING,
// PRODUCE (2 records to partition 0 of "split"), METADATA ("split"), PING.
func splitStream(t *testing.T) ([]byte, []wire.Op) {
	hello := wire.Hello{ClientName: "split", ClientVersion: "1"}
	auth := wire.Auth{User: "split-user", Password: "split-pw"}
	md := wire.MetadataRequest{Topics: []string{"split"}}
	reqs := []struct {
		op   wire.Op
		body []byte
	}{
		{wire.OpHello, hello.AppendTo(nil)},
		{wire.OpAuth, auth.AppendTo(nil)},
		{wire.OpPing, nil},
		{wire.OpProduce, produceBody("split", 0, wire.AcksWritten, testBatch(t, "first", "second"))},
		{wire.OpMetadata, md.AppendTo(nil)},
		{wire.OpPing, nil},
	}
	var stream []byte
	var ops []wire.Op
	for i, r := range reqs {
		stream = wire.AppendFrame(stream, r.op, 0, uint32(i+1), r.body)
		ops = append(ops, r.op)
	}
	return stream, ops
}

// checkSplitAnswers reads the six answers of splitStream and checks them; the PRODUCE must be
// stored at wantOffset.
func checkSplitAnswers(t *testing.T, c *rawClient, ops []wire.Op, wantOffset int64) {
	t.Helper()
	for i, op := range ops {
		body := c.expectResponse(op, uint32(i+1))
		switch op {
		case wire.OpProduce:
			var pr wire.ProduceResponse
			if err := pr.Decode(body); err != nil {
				t.Fatal(err)
			}
			if pr.Partition != 0 || pr.BaseOffset != wantOffset {
				t.Fatalf("produce stored at %d/%d, want 0/%d", pr.Partition, pr.BaseOffset, wantOffset)
			}
		case wire.OpMetadata:
			var md wire.MetadataResponse
			if err := md.Decode(body); err != nil {
				t.Fatal(err)
			}
			if len(md.Topics) != 1 || md.Topics[0].Name != "split" || md.Topics[0].Partitions[0].EndOffset != wantOffset+2 {
				t.Fatalf("metadata %+v, want split with end offset %d", md.Topics, wantOffset+2)
			}
		case wire.OpHello:
			var hr wire.HelloResponse
			if err := hr.Decode(body); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestFramesSplitAtEveryByte: the same pipelined stream, cut in two at every possible byte,
// always gives the same answers in the same order.
func TestFramesSplitAtEveryByte(t *testing.T) {
	srv := startBroker(t, nil)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createTopic("split", 1, "split-user", "split-pw")
	stream, ops := splitStream(t)
	t.Logf("stream of %d bytes, %d frames", len(stream), len(ops))

	deadline := time.Now().Add(60 * time.Second)
	var offset int64
	for k := 1; k < len(stream); k++ {
		if time.Now().After(deadline) {
			t.Fatalf("gave up at cut %d of %d: too slow", k, len(stream)-1)
		}
		c := dialRaw(t, srv.Addr())
		c.write(stream[:k])
		time.Sleep(time.Millisecond)
		c.write(stream[k:])
		func() {
			defer func() {
				if t.Failed() {
					t.Logf("failed at cut %d", k)
				}
			}()
			checkSplitAnswers(t, c, ops, offset)
		}()
		offset += 2
		if f, err := c.readFrame(time.Millisecond); err == nil {
			t.Fatalf("cut %d: extra frame %s corr %d", k, f.h.Op, f.h.Corr)
		}
		c.conn.Close()
	}
	admin.ping()
}

// TestFramesOneBytePerWrite: the whole stream written one byte at a time.
func TestFramesOneBytePerWrite(t *testing.T) {
	srv := startBroker(t, nil)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createTopic("split", 1, "split-user", "split-pw")
	stream, ops := splitStream(t)
	for round := 0; round < 2; round++ {
		c := dialRaw(t, srv.Addr())
		for i := range stream {
			c.write(stream[i : i+1])
			if i%8 == 0 {
				time.Sleep(100 * time.Microsecond) // let some bytes arrive on their own
			}
		}
		checkSplitAnswers(t, c, ops, int64(2*round))
	}
}

// TestPipelinedRequestsInOneWrite: 1000 PINGs and 200 PRODUCEs in one write are all answered,
// in order, with their corr ids; the batches are stored in the order sent.
func TestPipelinedRequestsInOneWrite(t *testing.T) {
	srv := startBroker(t, nil)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createTopic("pipe", 1, "pipe-user", "pipe-pw")
	c := login(t, srv.Addr(), "pipe-user", "pipe-pw")

	type req struct {
		op    wire.Op
		corr  uint32
		value string
	}
	var reqs []req
	var buf []byte
	// Every sixth request is a PRODUCE: 1000 PINGs and 200 PRODUCEs.
	for i := 0; i < 1200; i++ {
		corr := c.nextCorr()
		if i%6 != 5 {
			buf = wire.AppendFrame(buf, wire.OpPing, 0, corr, nil)
			reqs = append(reqs, req{op: wire.OpPing, corr: corr})
			continue
		}
		v := fmt.Sprintf("v%03d", i/6)
		buf = wire.AppendFrame(buf, wire.OpProduce, 0, corr, produceBody("pipe", 0, wire.AcksWritten, testBatch(t, v, v+"b")))
		reqs = append(reqs, req{wire.OpProduce, corr, v})
	}
	t.Logf("%d requests, %d bytes in one write", len(reqs), len(buf))
	sub := login(t, srv.Addr(), "pipe-user", "pipe-pw")
	sub.subscribe("pipe", 0, "", 1<<30)

	c.write(buf)
	var next int64
	for i, r := range reqs {
		body := c.expectResponse(r.op, r.corr)
		if r.op == wire.OpProduce {
			var pr wire.ProduceResponse
			if err := pr.Decode(body); err != nil {
				t.Fatal(err)
			}
			if pr.BaseOffset != next {
				t.Fatalf("request %d (%s): stored at %d, want %d", i, r.value, pr.BaseOffset, next)
			}
			next += 2
		}
	}
	if f, err := c.readFrame(20 * time.Millisecond); err == nil {
		t.Fatalf("extra frame %s corr %d", f.h.Op, f.h.Corr)
	}
	// The subscriber sees the batches in the order they were written.
	k := 0
	for _, r := range reqs {
		if r.op != wire.OpProduce {
			continue
		}
		d := sub.readDeliver()
		if len(d.values) != 2 || d.values[0] != r.value || d.batch.BaseOffset != int64(2*k) {
			t.Fatalf("delivery %d: offset %d values %v, want %s at %d", k, d.batch.BaseOffset, d.values, r.value, 2*k)
		}
		k++
	}
	st := statsOf(t, admin, "pipe")
	if v, _ := st.Get("batches_in"); v != 200 {
		t.Fatalf("batches_in %d, want 200", v)
	}
}

// TestLargeProduceSpanningReads: PRODUCE frames of ~200 KiB written in pieces with pauses,
// so each reaches the broker over several reads and is stored from gnet's buffers straight
// into the ring: good batches arrive intact, in order, and a corrupt one among them is refused
// (CORRUPT_BATCH, connection open) without touching the batches around it.
func TestLargeProduceSpanningReads(t *testing.T) {
	srv := startBroker(t, nil)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createTopic("big", 1, "big-user", "big-pw")
	sub := login(t, srv.Addr(), "big-user", "big-pw")
	sub.subscribe("big", 0, "", 64<<20)
	pub := login(t, srv.Addr(), "big-user", "big-pw")

	value := func(batch, i int) string { return fmt.Sprintf("%d-%d-%0950d", batch, i, i) }
	makeBatch := func(n int) []byte {
		vals := make([]string, 200)
		for i := range vals {
			vals[i] = value(n, i)
		}
		return testBatch(t, vals...)
	}
	const batches = 4
	corrupt := 2 // this one's CRC is broken
	for n := 0; n < batches; n++ {
		batch := makeBatch(n)
		if n == corrupt {
			batch[len(batch)-1] ^= 0xff
		}
		corr := pub.nextCorr()
		frame := wire.AppendFrame(nil, wire.OpProduce, 0, corr, produceBody("big", 0, wire.AcksWritten, batch))
		for off := 0; off < len(frame); off += 48 << 10 {
			pub.write(frame[off:min(off+48<<10, len(frame))])
			time.Sleep(5 * time.Millisecond)
		}
		if n == corrupt {
			pub.expectError(corr, wire.CodeCorruptBatch)
			continue
		}
		var resp wire.ProduceResponse
		if err := resp.Decode(pub.expectResponse(wire.OpProduce, corr)); err != nil {
			t.Fatal(err)
		}
		stored := n
		if n > corrupt {
			stored-- // the corrupt batch took no offsets
		}
		if resp.BaseOffset != int64(stored*200) {
			t.Fatalf("batch %d stored at %d, want %d", n, resp.BaseOffset, stored*200)
		}
	}
	for n := 0; n < batches; n++ {
		if n == corrupt {
			continue
		}
		d := sub.readDeliver()
		if len(d.values) != 200 || d.dropped != 0 {
			t.Fatalf("batch %d: %d values, %d dropped", n, len(d.values), d.dropped)
		}
		for i, v := range d.values {
			if v != value(n, i) {
				t.Fatalf("batch %d value %d = %.20q..., want %.20q...", n, i, v, value(n, i))
			}
		}
	}
	pub.ping() // still open
}
