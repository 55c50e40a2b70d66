package crash

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/internal/cli/lqcat"
	"github.com/lightq/lightq/internal/proxytest"
	"github.com/lightq/lightq/wire"
)

// terminate sends SIGTERM (a graceful shutdown: the broker answers what it stored, then
// SHUTTING_DOWN) and waits for the process to exit.
func (b *brokerProc) terminate(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(b.pid, syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM %d: %v", b.pid, err)
	}
	select {
	case <-b.exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("broker %d still running 15 s after SIGTERM", b.pid)
	}
}

// stored is the sum of the partitions' written ends (isolation written).
func stored(t *testing.T, c *client.Conn) int64 {
	t.Helper()
	var n int64
	for part := 0; part < partitions; part++ {
		res, err := c.Fetch(context.Background(), wire.Fetch{Topic: topicName, Partition: uint32(part), Offset: 0,
			MaxBytes: 1, Isolation: wire.IsolationWritten})
		if err != nil {
			t.Fatal(err)
		}
		n += res.HighWatermark
	}
	return n
}

// TestCrashLqcatProduce: lqcat -P fed from a pipe survives the real broker killed with
// SIGKILL and stopped with SIGTERM mid-stream, each time started again on the same data
// directory (behind one address): with no flag, it stores every line, in order per
// partition, and exits 0 once every line is acknowledged, each line stored once (lqcat's
// producer is idempotent: its re-sends after the kill are deduplicated).
func TestCrashLqcatProduce(t *testing.T) {
	if testing.Short() {
		t.Skip("kill -9 of the real binary; skipped with -short")
	}
	bin := brokerBinary(t)
	dataDir := dataBase(t)
	proxy := proxytest.Start(t)
	b, admin, _ := startBroker(t, bin, dataDir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := admin.CreateTopic(ctx, client.TopicConfig{Name: topicName, Kind: wire.KindDurable, Partitions: partitions,
		User: "crash", Password: "crash-user-pw", Options: []wire.Option{{Key: "fsync", Value: "always"}}})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	proxy.SetBackend(b.addr)

	const n = 60000
	pr, pw := io.Pipe()
	type result struct {
		code        int
		stderr      string
		elapsedTime time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		env := map[string]string{"LIGHTQ_BROKER": proxy.Addr(), "LIGHTQ_USER": "crash", "LIGHTQ_PASSWORD": "crash-user-pw"}
		var out, errb bytes.Buffer
		code := lqcat.Main(context.Background(), []string{"-P", "-t", topicName}, func(k string) string { return env[k] }, pr, &out, &errb)
		done <- result{code, errb.String(), time.Since(start)}
	}()
	// One writer, pausing at n/3 and 2n/3 until the test has restarted the broker.
	resume := make(chan struct{})
	writeErr := make(chan error, 1)
	go func() {
		defer pw.Close()
		for i := 0; i < n; i++ {
			if i == n/3 || i == 2*n/3 {
				<-resume
			}
			if _, err := fmt.Fprintf(pw, "line-%06d\n", i); err != nil {
				writeErr <- err
				return
			}
		}
		writeErr <- nil
	}()
	waitStored := func(k int64) {
		deadline := time.Now().Add(30 * time.Second)
		poll := time.NewTicker(2 * time.Millisecond) // a condition polled until the deadline
		defer poll.Stop()
		for stored(t, admin) < k {
			if time.Now().After(deadline) {
				t.Fatalf("the broker never held %d messages", k)
			}
			<-poll.C
		}
	}
	restart := func(how string) {
		admin.Close()
		switch how {
		case "kill":
			b.kill(t)
		case "term":
			b.terminate(t)
		}
		b, admin, _ = startBroker(t, bin, dataDir)
		proxy.SetBackend(b.addr)
	}
	waitStored(n / 6) // lqcat reads as the pipe fills: the kill comes mid-stream
	restart("kill")
	resume <- struct{}{}
	waitStored(n / 2)
	restart("term")
	resume <- struct{}{}
	if err := <-writeErr; err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.code != 0 {
		t.Fatalf("lqcat -P: exit %d\nstderr: %s", res.code, res.stderr)
	}

	seen := make([]int, n)
	dups := 0
	for part := 0; part < partitions; part++ {
		last := -1
		for off := int64(0); ; {
			hw, _, batches, err := connFetcher(admin)(context.Background(), part, off)
			if err != nil {
				t.Fatal(err)
			}
			if off >= hw {
				break
			}
			for len(batches) > 0 {
				bt, err := wire.ParseBatch(batches[:wire.BatchSize(batches)], maxBatchParse)
				if err != nil {
					t.Fatal(err)
				}
				batches = batches[wire.BatchSize(batches):]
				ri := wire.NewRecordIter(bt.Records, bt.RecordCount, bt.BaseOffset, bt.FirstTimestamp)
				var rec wire.Record
				for ri.Next(&rec) {
					if rec.Offset < off {
						continue
					}
					off = rec.Offset + 1
					i, err := strconv.Atoi(string(bytes.TrimPrefix(rec.Value, []byte("line-"))))
					if err != nil || i < 0 || i >= n {
						t.Fatalf("partition %d offset %d: %q", part, rec.Offset, rec.Value)
					}
					if seen[i]++; seen[i] > 1 {
						dups++
						continue
					}
					if i <= last {
						t.Fatalf("partition %d offset %d: line %d after line %d", part, rec.Offset, i, last)
					}
					last = i
				}
			}
		}
	}
	lost := 0
	for _, k := range seen {
		if k == 0 {
			lost++
		}
	}
	t.Logf("crash: lqcat -P through kill -9 and SIGTERM: lines=%d lost=%d duplicated=%d, exit 0 after %v",
		n, lost, dups, res.elapsedTime.Round(time.Millisecond))
	if lost > 0 {
		t.Errorf("%d lines acknowledged (lqcat exited 0) but not stored", lost)
	}
	if dups > 0 {
		t.Errorf("%d lines stored twice", dups)
	}
}
