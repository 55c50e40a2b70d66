package broker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lightq/lightq/wire"
)

// valueFor is the deterministic content of the record at offset o, so a reader can check
// every byte it gets.
func valueFor(o int64, size int) []byte {
	v := make([]byte, size)
	binary.BigEndian.PutUint64(v, uint64(o))
	for i := 8; i < size; i++ {
		v[i] = byte(o*31 + int64(i))
	}
	return v
}

// offsetBatch builds a batch of n records for offsets first..first+n-1.
func offsetBatch(t testing.TB, first int64, n, size int) []byte {
	var b wire.BatchBuilder
	for i := 0; i < n; i++ {
		b.Append(time.Now().UnixMilli(), nil, valueFor(first+int64(i), size), nil)
	}
	out, err := b.Finish(wire.CodecNone, nil)
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), out...)
}

// appender produces batches of known content to partition 0 until stop (or until limit
// records), in order, waiting for each ack so the offsets are known. It returns the next
// offset when stopped.
func appender(t *testing.T, addr, topic string, recs, size int, limit int64, stop <-chan struct{}, produced *atomic.Int64) <-chan int64 {
	out := make(chan int64, 1)
	c := login(t, addr, "d-user", "d-pw")
	go func() {
		var next int64
		for {
			select {
			case <-stop:
				out <- next
				return
			default:
			}
			if next >= limit {
				<-stop
				out <- next
				return
			}
			resp := c.produceAcks(topic, 0, wire.AcksWritten, offsetBatch(t, next, recs, size))
			if resp.BaseOffset != next {
				t.Errorf("batch acked at %d, want %d", resp.BaseOffset, next)
			}
			next += int64(recs)
			produced.Store(next)
		}
	}()
	return out
}

// checkBatches verifies every record in a FETCH response's batches against valueFor and
// returns the offset after the last one.
func checkBatches(t *testing.T, batches []byte, from int64) int64 {
	next := from
	var rec wire.Record
	for len(batches) > 0 {
		n := wire.BatchSize(batches)
		bt, err := wire.ParseBatch(batches[:n], 1<<20)
		if err != nil {
			t.Fatalf("batch at %d corrupt: %v", next, err)
		}
		it := wire.NewRecordIter(bt.Records, bt.RecordCount, bt.BaseOffset, bt.FirstTimestamp)
		for it.Next(&rec) {
			if !bytes.Equal(rec.Value, valueFor(rec.Offset, len(rec.Value))) {
				t.Fatalf("record %d has the wrong bytes", rec.Offset)
			}
			if rec.Offset >= next {
				next = rec.Offset + 1
			}
		}
		if it.Err() != nil {
			t.Fatal(it.Err())
		}
		batches = batches[n:]
	}
	return next
}

// TestFetchExactWithTinyReceiveBuffer: a consumer with a tiny socket buffer that reads at a
// random pace gets every byte exactly, while a producer appends across segment rolls, so
// sendfile keeps hitting EAGAIN and resuming. LIGHTQ_SENDFILE_MIB sets the volume (default
// 48 MiB; `make soak` reads 512). The buffer is 16 KiB: with 4 KiB, Linux loopback TCP (64 KiB
// MSS) falls into zero-window probing and moves a few KB per second.
func TestFetchExactWithTinyReceiveBuffer(t *testing.T) {
	mib := 48
	if v, err := strconv.Atoi(os.Getenv("LIGHTQ_SENDFILE_MIB")); err == nil && v > 0 {
		mib = v
	}
	t.Run("sendfile", func(t *testing.T) { fetchExact(t, mib, false) })
	t.Run("copy", func(t *testing.T) { fetchExact(t, min(mib, 16), true) })
}

func fetchExact(t *testing.T, mib int, copyPath bool) {
	srv := startBroker(t, func(c *Config) { c.FetchCopy = copyPath })
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createDurable("exact", 1, wire.Option{Key: "fsync", Value: "never"}, wire.Option{Key: "segment.bytes", Value: "2097152"})
	stop := make(chan struct{})
	var produced atomic.Int64
	const recs, size = 60, 1000
	want := int64(mib) << 20 / (size + 10)
	done := appender(t, srv.Addr(), "exact", recs, size, want+recs, stop, &produced)

	c := login(t, srv.Addr(), "d-user", "d-pw")
	if err := c.conn.(*net.TCPConn).SetReadBuffer(16 << 10); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	deadline := time.Now().Add(90 * time.Second)
	var off, bytesRead int64
	for off < want && time.Now().Before(deadline) {
		m := wire.Fetch{Topic: "exact", Partition: 0, Offset: off, MaxBytes: uint32(64<<10 + rng.Intn(1<<20)), MaxWaitMs: 200, Isolation: wire.IsolationWritten}
		corr := c.send(wire.OpFetch, m.AppendTo(nil))
		if rng.Intn(4) == 0 {
			time.Sleep(time.Duration(rng.Intn(2000)) * time.Microsecond)
		}
		var resp wire.FetchResponse
		if err := resp.Decode(c.expectResponse(wire.OpFetch, corr)); err != nil {
			t.Fatal(err)
		}
		bytesRead += int64(len(resp.Batches))
		off = checkBatches(t, resp.Batches, off)
	}
	close(stop)
	<-done
	if off < want {
		t.Fatalf("read up to offset %d of %d in the time allowed", off, want)
	}
	t.Logf("read %d MiB byte-exact through a 16 KiB receive buffer", bytesRead>>20)
}

// TestFetchRandomOffsetsDuringRetention: fetches at random offsets across segment boundaries,
// while the producer appends and retention deletes old segments, either get exactly the right
// bytes or OFFSET_OUT_OF_RANGE for data already deleted.
func TestFetchRandomOffsetsDuringRetention(t *testing.T) {
	srv := startBroker(t, nil)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createDurable("ret", 1, wire.Option{Key: "fsync", Value: "never"}, wire.Option{Key: "segment.bytes", Value: "2097152"},
		wire.Option{Key: "retention.bytes", Value: "6291456"})
	stop := make(chan struct{})
	var produced atomic.Int64
	done := appender(t, srv.Addr(), "ret", 40, 1500, 1<<62, stop, &produced)
	// Every fetch below has data to aim at (a loaded machine may take a while to produce).
	waitUntil(t, "producing", func() bool { return produced.Load() > 0 })
	var wg sync.WaitGroup
	var served, outOfRange atomic.Int64
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			c := login(t, srv.Addr(), "d-user", "d-pw")
			rng := rand.New(rand.NewSource(seed))
			for i := 0; i < 300; i++ {
				off := rng.Int63n(produced.Load())
				m := wire.Fetch{Topic: "ret", Partition: 0, Offset: off, MaxBytes: 256 << 10, Isolation: wire.IsolationWritten}
				corr := c.send(wire.OpFetch, m.AppendTo(nil))
				f := c.mustRead()
				if f.h.Corr != corr {
					t.Errorf("answer to %d, want %d", f.h.Corr, corr)
					return
				}
				if f.h.Op == wire.OpError {
					var eb wire.ErrorBody
					_ = eb.Decode(f.body)
					if eb.Code != wire.CodeOffsetOutOfRange {
						t.Errorf("fetch at %d: %s %s", off, eb.Code, eb.Message)
						return
					}
					outOfRange.Add(1)
					continue
				}
				var resp wire.FetchResponse
				if err := resp.Decode(f.body); err != nil {
					t.Error(err)
					return
				}
				if next := checkBatches(t, resp.Batches, off); next <= off {
					t.Errorf("fetch at %d returned nothing (log start %d)", off, resp.LogStartOffset)
					return
				}
				served.Add(1)
			}
		}(int64(r))
	}
	wg.Wait()
	close(stop)
	<-done
	t.Logf("%d fetches served exactly, %d refused as deleted by retention", served.Load(), outOfRange.Load())
	if served.Load() == 0 {
		t.Fatal("no fetch was served")
	}
}

// TestFetchDisconnectsLeakNothing: hundreds of consumers hang up in the middle of a transfer;
// the broker's open descriptors return to where they were.
func TestFetchDisconnectsLeakNothing(t *testing.T) {
	srv := startBroker(t, nil)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createDurable("big", 1, wire.Option{Key: "fsync", Value: "never"}, wire.Option{Key: "segment.bytes", Value: "2097152"})
	p := login(t, srv.Addr(), "d-user", "d-pw")
	var next int64
	for next < 8<<20/1000 {
		p.produceAcks("big", 0, wire.AcksWritten, offsetBatch(t, next, 60, 1000))
		next += 60
	}
	before := openFDs(t)
	for i := 0; i < 300; i++ {
		c := login(t, srv.Addr(), "d-user", "d-pw")
		_ = c.conn.(*net.TCPConn).SetReadBuffer(4096)
		m := wire.Fetch{Topic: "big", Partition: 0, Offset: int64(i*97) % next, MaxBytes: 1 << 20, Isolation: wire.IsolationWritten}
		c.send(wire.OpFetch, m.AppendTo(nil))
		if i%2 == 0 {
			head := make([]byte, 100)
			_, _ = c.conn.Read(head) // part of the response, then hang up
		}
		_ = c.conn.(*net.TCPConn).SetLinger(0) // reset, mid-transfer
		c.conn.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	after := openFDs(t)
	for after > before+2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		after = openFDs(t)
	}
	if after > before+2 {
		t.Fatalf("open descriptors: %d before, %d after 300 aborted transfers", before, after)
	}
	p.ping()
}

func openFDs(t *testing.T) int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	return len(entries)
}

// TestStuckTransferIsClosed: a consumer that stops reading in the middle of a FETCH response
// is disconnected after the transfer timeout, which releases the segment it pinned.
func TestStuckTransferIsClosed(t *testing.T) {
	srv := startBroker(t, func(c *Config) { c.TransferTimeout = 300 * time.Millisecond })
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createDurable("stuck", 1, wire.Option{Key: "fsync", Value: "never"})
	p := login(t, srv.Addr(), "d-user", "d-pw")
	var next int64
	for next < 16<<20/1000 {
		p.produceAcks("stuck", 0, wire.AcksWritten, offsetBatch(t, next, 60, 1000))
		next += 60
	}
	c := login(t, srv.Addr(), "d-user", "d-pw")
	for i := 0; i < 16; i++ { // 16 MiB: more than the socket buffers hold
		m := wire.Fetch{Topic: "stuck", Partition: 0, Offset: int64(i) * 1000, MaxBytes: 1 << 20, Isolation: wire.IsolationWritten}
		c.send(wire.OpFetch, m.AppendTo(nil))
	}
	// Never read, until the broker has hung up (openConns counts admin, p and c).
	waitUntil(t, "closing the stuck consumer", func() bool { return openConns(srv) == 2 })
	// After what was buffered, the stream ends.
	_ = c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1<<20)
	for {
		_, err := c.conn.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the connection is still open after the transfer timeout")
			}
			break
		}
	}
	p.ping()
}
