package lqcat

// lqcat -P fed from a pipe while its broker restarts: in-process brokers on one data
// directory behind one address (proxytest), stopped gracefully (Shutdown, as SIGTERM does)
// and abruptly (connections reset, as kill -9 looks to a client). test/crash runs the same
// against the real binary killed with SIGKILL.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/broker/brokertest"
	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/internal/proxytest"
	"github.com/lightq/lightq/wire"
)

// restartEnv is a broker that restarts on the same data directory behind a proxy.
type restartEnv struct {
	t     *testing.T
	proxy *proxytest.Proxy
	dir   string
	srv   *broker.Server
}

func (r *restartEnv) start() {
	r.srv = brokertest.Start(r.t, func(cfg *broker.Config) {
		cfg.AdminUser, cfg.AdminPassword = "admin", adminPass
		cfg.DataDir = r.dir
		cfg.ShutdownDrain = 200 * time.Millisecond
	})
	r.proxy.SetBackend(r.srv.Addr())
}

func (r *restartEnv) stop(abrupt bool) {
	r.proxy.SetBackend("")
	if abrupt {
		r.proxy.Cut()
	}
	if err := r.srv.Shutdown(context.Background()); err != nil {
		r.t.Fatal(err)
	}
}

// messagesIn is the topic's messages_in counter on the current broker.
func (r *restartEnv) messagesIn(topic string) uint64 {
	c, err := client.Dial(context.Background(), r.srv.Addr(), client.Options{User: "admin", Password: adminPass})
	if err != nil {
		r.t.Fatal(err)
	}
	defer c.Close()
	st, err := c.Stats(context.Background(), topic)
	if err != nil {
		r.t.Fatal(err)
	}
	v, _ := st[0].Get("messages_in")
	return v
}

// readAll returns the values of every record of a durable topic's partitions.
func readAll(t *testing.T, addr, topic string, parts int) [][]string {
	t.Helper()
	c, err := client.Dial(context.Background(), addr, client.Options{User: "admin", Password: adminPass})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	out := make([][]string, parts)
	for part := range parts {
		for off := int64(0); ; {
			res, err := c.Fetch(context.Background(), wire.Fetch{Topic: topic, Partition: uint32(part), Offset: off, MaxBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			if off >= res.HighWatermark {
				break
			}
			it := res.Iter()
			for it.Next() {
				recs, err := it.Records(nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				bt := it.Batch()
				ri := wire.NewRecordIter(recs, bt.RecordCount, bt.BaseOffset, bt.FirstTimestamp)
				var rec wire.Record
				for ri.Next(&rec) {
					if rec.Offset >= off {
						out[part] = append(out[part], string(rec.Value))
						off = rec.Offset + 1
					}
				}
			}
			if err := it.Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

// TestProduceSurvivesRestarts: lines piped into lqcat -P while the broker is shut down and
// started again, then cut off abruptly and started again, are all stored, in order per
// partition, and lqcat exits 0 once every line is acknowledged. No flag is needed.
func TestProduceSurvivesRestarts(t *testing.T) {
	r := &restartEnv{t: t, proxy: proxytest.Start(t), dir: t.TempDir()}
	r.start()
	e := &env{t: t, addr: r.proxy.Addr(), vars: map[string]string{
		"LIGHTQ_BROKER": r.proxy.Addr(), "LIGHTQ_USER": userName, "LIGHTQ_PASSWORD": userPass, "LIGHTQ_ADMIN_PASSWORD": adminPass,
	}}
	e.topic("events", "durable", 2, "-X", "fsync=never")

	const n = 30000
	pr, pw := io.Pipe()
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var out, errb bytes.Buffer
		code := Main(ctx, []string{"-P", "-t", "events"}, func(k string) string { return e.vars[k] }, pr, &out, &errb)
		done <- result{out.String(), errb.String(), code}
	}()
	// One writer, pausing at n/3 and 2n/3 until the test has restarted the broker. While the
	// broker is down, lqcat keeps reading lines up to its producer's memory bound.
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
	next := func() {
		select {
		case resume <- struct{}{}:
		case res := <-done:
			t.Fatalf("lqcat -P ended early: exit %d\nstderr: %s", res.code, res.err)
		}
	}
	waitStored := func(k uint64) {
		deadline := time.Now().Add(30 * time.Second)
		poll := time.NewTicker(5 * time.Millisecond) // a condition polled until the deadline
		defer poll.Stop()
		for r.messagesIn("events") < k {
			if time.Now().After(deadline) {
				t.Fatalf("the broker never stored %d messages", k)
			}
			<-poll.C
		}
	}
	waitStored(n / 6)
	r.stop(false) // as SIGTERM: answers what it stored, then SHUTTING_DOWN
	r.start()
	next()
	waitStored(n / 6) // the new broker has lqcat's re-sent and new messages
	r.stop(true)      // as kill -9, seen from the client
	r.start()
	next()
	if err := <-writeErr; err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.code != 0 {
		t.Fatalf("lqcat -P: exit %d\nstderr: %s", res.code, res.err)
	}
	got := readAll(t, r.srv.Addr(), "events", 2)
	seen := make([]int, n)
	dups := 0
	for part, vals := range got {
		last := -1
		for off, v := range vals {
			var i int
			if _, err := fmt.Sscanf(v, "line-%06d", &i); err != nil || i < 0 || i >= n {
				t.Fatalf("partition %d offset %d: %q", part, off, v)
			}
			if seen[i]++; seen[i] > 1 {
				dups++
				continue
			}
			if i <= last {
				t.Fatalf("partition %d offset %d: line %d after line %d", part, off, i, last)
			}
			last = i
		}
	}
	for i, k := range seen {
		if k == 0 {
			t.Fatalf("line %d was not stored", i)
		}
	}
	t.Logf("%d lines through two restarts: none lost, %d stored twice (the abrupt one's unanswered batches)", n, dups)
}

// A broker that does not come back within the delivery timeout: lqcat -P exits 3 and says
// which messages were not acknowledged and why.
func TestProduceDeliveryTimeout(t *testing.T) {
	r := &restartEnv{t: t, proxy: proxytest.Start(t), dir: t.TempDir()}
	r.start()
	e := &env{t: t, addr: r.proxy.Addr(), vars: map[string]string{
		"LIGHTQ_BROKER": r.proxy.Addr(), "LIGHTQ_USER": userName, "LIGHTQ_PASSWORD": userPass, "LIGHTQ_ADMIN_PASSWORD": adminPass,
	}}
	e.topic("events", "durable", 1)
	pr, pw := io.Pipe()
	done := make(chan result, 1)
	go func() {
		var out, errb bytes.Buffer
		code := Main(context.Background(), []string{"-P", "-t", "events", "-X", "delivery.timeout.ms=700"},
			func(k string) string { return e.vars[k] }, pr, &out, &errb)
		done <- result{out.String(), errb.String(), code}
	}()
	fmt.Fprintln(pw, "first")
	deadline := time.Now().Add(30 * time.Second)
	poll := time.NewTicker(5 * time.Millisecond) // a condition polled until the deadline
	defer poll.Stop()
	for r.messagesIn("events") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the first line never arrived")
		}
		<-poll.C
	}
	r.stop(false) // and it stays down
	fmt.Fprintln(pw, "second")
	pw.Close()
	res := <-done
	t.Logf("stderr: %s", res.err)
	if res.code != ExitConnect || !strings.Contains(res.err, "delivery timeout") ||
		!strings.Contains(res.err, "1 of 2 messages were not acknowledged") || !strings.Contains(res.err, "not stored") {
		t.Fatalf("exit %d, stderr %q; want exit %d, the delivery timeout, 1 of 2 not acknowledged, not stored", res.code, res.err, ExitConnect)
	}
}
