package broker

import (
	"fmt"
	"testing"
	"time"

	"github.com/lightq/lightq/wire"
)

func (c *rawClient) createDurable(name string, partitions uint32, opts ...wire.Option) {
	c.t.Helper()
	m := wire.CreateTopic{Name: name, Kind: wire.KindDurable, Partitions: partitions, User: "d-user", Password: "d-pw", Options: opts}
	c.expectResponse(wire.OpCreateTopic, c.send(wire.OpCreateTopic, m.AppendTo(nil)))
}

func (c *rawClient) produceAcks(topic string, partition int32, acks wire.Acks, batch []byte) wire.ProduceResponse {
	c.t.Helper()
	corr := c.send(wire.OpProduce, produceBody(topic, partition, acks, batch))
	var resp wire.ProduceResponse
	if err := resp.Decode(c.expectResponse(wire.OpProduce, corr)); err != nil {
		c.t.Fatal(err)
	}
	return resp
}

// fetchAll fetches from offset until it has want records, checking every batch.
func (c *rawClient) fetchValues(topic string, partition uint32, offset int64, maxWait uint32) (wire.FetchResponse, []string) {
	c.t.Helper()
	return c.fetchedValues(c.sendFetch(topic, partition, offset, maxWait), offset)
}

// sendFetch sends a FETCH without waiting for its answer (read it with fetchedValues).
func (c *rawClient) sendFetch(topic string, partition uint32, offset int64, maxWait uint32) uint32 {
	m := wire.Fetch{Topic: topic, Partition: partition, Offset: offset, MaxBytes: 1 << 20, MaxWaitMs: maxWait}
	return c.send(wire.OpFetch, m.AppendTo(nil))
}

// fetchedValues reads the answer to the FETCH corr from offset and returns its values.
func (c *rawClient) fetchedValues(corr uint32, offset int64) (wire.FetchResponse, []string) {
	c.t.Helper()
	body := c.expectResponse(wire.OpFetch, corr)
	var resp wire.FetchResponse
	if err := resp.Decode(body); err != nil {
		c.t.Fatal(err)
	}
	var values []string
	rest := resp.Batches
	for len(rest) > 0 {
		n := wire.BatchSize(rest)
		bt, err := wire.ParseBatch(rest[:n], 1<<20)
		if err != nil {
			c.t.Fatalf("fetched batch corrupt: %v", err)
		}
		it := wire.NewRecordIter(bt.Records, bt.RecordCount, bt.BaseOffset, bt.FirstTimestamp)
		var rec wire.Record
		for it.Next(&rec) {
			if rec.Offset >= offset {
				values = append(values, string(rec.Value))
			}
		}
		if it.Err() != nil {
			c.t.Fatal(it.Err())
		}
		rest = rest[n:]
	}
	return resp, values
}

func TestDurableProduceFetch(t *testing.T) {
	for _, fsync := range []string{"always", "interval=5ms", "never"} {
		t.Run(fsync, func(t *testing.T) {
			srv := startBroker(t, nil)
			admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
			admin.createDurable("events", 2, wire.Option{Key: "fsync", Value: fsync}, wire.Option{Key: "segment.bytes", Value: "2097152"})
			c := login(t, srv.Addr(), "d-user", "d-pw")
			var next int64
			for i := 0; i < 100; i++ {
				acks := []wire.Acks{wire.AcksWritten, wire.AcksDurable}[i%2]
				resp := c.produceAcks("events", 0, acks, testBatch(t, fmt.Sprint(i), fmt.Sprint(i)+"b"))
				if resp.BaseOffset != next {
					t.Fatalf("batch %d at offset %d, want %d", i, resp.BaseOffset, next)
				}
				next += 2
			}
			var got []string
			for off := int64(0); off < next; {
				resp, values := c.fetchValues("events", 0, off, 1000)
				if len(values) == 0 {
					t.Fatalf("no data at %d (high watermark %d)", off, resp.HighWatermark)
				}
				got = append(got, values...)
				off += int64(len(values))
			}
			for i := 0; i < 100; i++ {
				if got[2*i] != fmt.Sprint(i) || got[2*i+1] != fmt.Sprint(i)+"b" {
					t.Fatalf("record %d: %q", 2*i, got[2*i])
				}
			}
			// From the middle of a batch: the batch is sent whole, the client skips.
			_, values := c.fetchValues("events", 0, 51, 0)
			if values[0] != "25b" {
				t.Fatalf("fetch at 51 starts with %q", values[0])
			}
			// At the end: a long poll that new data answers early. The PING behind it is
			// answered once the FETCH has found nothing and waits.
			p := login(t, srv.Addr(), "d-user", "d-pw")
			start := time.Now()
			poll := c.sendFetch("events", 0, next, 5000)
			c.ping()
			p.produceAcks("events", 0, wire.AcksWritten, testBatch(t, "late"))
			if _, v := c.fetchedValues(poll, next); len(v) != 1 || v[0] != "late" {
				t.Fatalf("long poll got %v", v)
			}
			if el := time.Since(start); el >= 5*time.Second {
				t.Fatalf("long poll answered after %v, at its deadline, not by the new data", el)
			}
			// An empty long poll ends at its deadline.
			start = time.Now()
			if _, v := c.fetchValues("events", 1, 0, 100); len(v) != 0 || time.Since(start) < 90*time.Millisecond {
				t.Fatalf("empty fetch: %v after %v", v, time.Since(start))
			}
		})
	}
}

func TestDurableOffsetsAndRestart(t *testing.T) {
	cfg := testConfig(t)
	srv := startWith(t, cfg)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createDurable("log", 1, wire.Option{Key: "segment.bytes", Value: "2097152"})
	c := login(t, srv.Addr(), "d-user", "d-pw")
	before := time.Now().UnixMilli()
	for i := 0; i < 20; i++ {
		c.produceAcks("log", 0, wire.AcksWritten, testBatch(t, fmt.Sprint(i)))
	}
	list := func(c *rawClient, mode wire.OffsetMode, ts int64) int64 {
		m := wire.ListOffsets{Topic: "log", Partition: 0, Mode: mode, Timestamp: ts}
		var r wire.OffsetResponse
		if err := r.Decode(c.expectResponse(wire.OpListOffsets, c.send(wire.OpListOffsets, m.AppendTo(nil)))); err != nil {
			t.Fatal(err)
		}
		return r.Offset
	}
	if e, l := list(c, wire.OffsetEarliest, 0), list(c, wire.OffsetLatest, 0); e != 0 || l != 20 {
		t.Fatalf("earliest %d latest %d", e, l)
	}
	if o := list(c, wire.OffsetTimestamp, before); o != 0 {
		t.Fatalf("offset for a time before everything: %d", o)
	}
	if o := list(c, wire.OffsetTimestamp, time.Now().Add(time.Hour).UnixMilli()); o != 20 {
		t.Fatalf("offset for a future time: %d", o)
	}
	cm := wire.CommitOffset{Group: "g1", Topic: "log", Partition: 0, Offset: 7}
	c.expectResponse(wire.OpCommitOffset, c.send(wire.OpCommitOffset, cm.AppendTo(nil)))
	fc := wire.FetchCommitted{Group: "g1", Topic: "log", Partition: 0}
	var r wire.OffsetResponse
	_ = r.Decode(c.expectResponse(wire.OpFetchCommitted, c.send(wire.OpFetchCommitted, fc.AppendTo(nil))))
	if r.Offset != 7 {
		t.Fatalf("committed %d", r.Offset)
	}
	bad := wire.CommitOffset{Group: "g1", Topic: "log", Partition: 0, Offset: 999}
	c.expectError(c.send(wire.OpCommitOffset, bad.AppendTo(nil)), wire.CodeOffsetOutOfRange)
	if err := srv.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}

	cfg.Addr = "127.0.0.1:0"
	srv2 := startWith(t, cfg)
	c2 := login(t, srv2.Addr(), "d-user", "d-pw")
	_ = r.Decode(c2.expectResponse(wire.OpFetchCommitted, c2.send(wire.OpFetchCommitted, fc.AppendTo(nil))))
	if r.Offset != 7 {
		t.Fatalf("committed offset after restart %d", r.Offset)
	}
	_, values := c2.fetchValues("log", 0, 7, 0)
	if len(values) == 0 || values[0] != "7" {
		t.Fatalf("after restart fetch at 7: %v", values)
	}
	if resp := c2.produceAcks("log", 0, wire.AcksDurable, testBatch(t, "x")); resp.BaseOffset != 20 {
		t.Fatalf("after restart the next batch got offset %d", resp.BaseOffset)
	}
}

// TestListOffsetsByTimeIsPerRecord: the answer is the first record at or after the time, even
// inside a batch.
func TestListOffsetsByTimeIsPerRecord(t *testing.T) {
	srv := startBroker(t, nil)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createDurable("times", 1)
	c := login(t, srv.Addr(), "d-user", "d-pw")
	var b wire.BatchBuilder
	for _, ts := range []int64{1000, 2000, 3000} {
		b.Append(ts, nil, []byte("v"), nil)
	}
	batch, err := b.Finish(wire.CodecNone, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.produceAcks("times", 0, wire.AcksWritten, append([]byte(nil), batch...))
	for ts, want := range map[int64]int64{0: 0, 1000: 0, 1500: 1, 2000: 1, 3000: 2, 3001: 3} {
		m := wire.ListOffsets{Topic: "times", Partition: 0, Mode: wire.OffsetTimestamp, Timestamp: ts}
		var r wire.OffsetResponse
		if err := r.Decode(c.expectResponse(wire.OpListOffsets, c.send(wire.OpListOffsets, m.AppendTo(nil)))); err != nil {
			t.Fatal(err)
		}
		if r.Offset != want {
			t.Errorf("offset for time %d: %d, want %d", ts, r.Offset, want)
		}
	}
}

// TestPipelinedFetches: many FETCHes in one write are all answered, in order of their
// transfers, whatever the number (a connection yields its loop every few transfers and must
// resume by itself).
func TestPipelinedFetches(t *testing.T) {
	srv := startBroker(t, nil)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createDurable("pipe", 1, wire.Option{Key: "fsync", Value: "never"})
	c := login(t, srv.Addr(), "d-user", "d-pw")
	for i := 0; i < 30; i++ {
		c.produceAcks("pipe", 0, wire.AcksWritten, testBatch(t, fmt.Sprint(i)))
	}
	var stream []byte
	for i := 0; i < 30; i++ {
		m := wire.Fetch{Topic: "pipe", Partition: 0, Offset: int64(i), MaxBytes: 1}
		stream = wire.AppendFrame(stream, wire.OpFetch, 0, uint32(1000+i), m.AppendTo(nil))
	}
	c.write(stream)
	for i := 0; i < 30; i++ {
		f := c.mustRead()
		if f.h.Op != wire.OpFetch || f.h.Corr != uint32(1000+i) {
			t.Fatalf("answer %d: %s corr %d", i, f.h.Op, f.h.Corr)
		}
		var resp wire.FetchResponse
		if err := resp.Decode(f.body); err != nil {
			t.Fatal(err)
		}
		bt, err := wire.ParseBatch(resp.Batches, 1<<20)
		if err != nil || bt.BaseOffset != int64(i) {
			t.Fatalf("answer %d: batch at %d, %v", i, bt.BaseOffset, err)
		}
	}
}

// TestPartitionAnyRoundRobin: PRODUCE to PartitionAny spreads batches evenly over the
// partitions of durable and transient topics alike (the direct transient path and the general
// path must not both advance the round robin).
func TestPartitionAnyRoundRobin(t *testing.T) {
	srv := startBroker(t, nil)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createDurable("rr-durable", 2)
	admin.createTopic("rr-transient", 2, "d-user", "d-pw")
	c := login(t, srv.Addr(), "d-user", "d-pw")
	for _, topic := range []string{"rr-durable", "rr-transient"} {
		seen := map[uint32]int{}
		for i := 0; i < 8; i++ {
			seen[c.produceAcks(topic, wire.PartitionAny, wire.AcksWritten, testBatch(t, "x")).Partition]++
		}
		if seen[0] != 4 || seen[1] != 4 {
			t.Errorf("%s: PartitionAny spread 8 batches as %v", topic, seen)
		}
	}
}
