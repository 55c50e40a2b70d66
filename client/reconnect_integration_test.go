package client_test

// Reconnects against real brokers: a broker shut down (as SIGTERM does) or cut off abruptly
// (as kill -9 looks to a client) mid-stream, and a new one started on the same data
// directory behind the same address (proxytest).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/internal/proxytest"
	"github.com/lightq/lightq/wire"
)

// restartable is a broker on a data directory that survives restarts, behind a proxy.
type restartable struct {
	t     *testing.T
	proxy *proxytest.Proxy
	dir   string
	srv   *broker.Server
}

func startRestartable(t *testing.T) *restartable {
	r := &restartable{t: t, proxy: proxytest.Start(t), dir: t.TempDir()}
	r.srv = startBroker(t, r.config)
	r.proxy.SetBackend(r.srv.Addr())
	return r
}

func (r *restartable) config(cfg *broker.Config) { cfg.DataDir = r.dir }

// restart stops the broker, gracefully (Shutdown: SHUTTING_DOWN after the last answers) or
// abruptly (every client connection reset first, answers unread), and starts a new one.
func (r *restartable) restart(abrupt bool) {
	r.t.Helper()
	r.proxy.SetBackend("")
	if abrupt {
		r.proxy.Cut()
	}
	if err := r.srv.Shutdown(itCtx(r.t)); err != nil {
		r.t.Fatal(err)
	}
	r.srv = startBroker(r.t, r.config)
	r.proxy.SetBackend(r.srv.Addr())
}

// A broker restart fails the requests in flight (a FETCH waiting for data) and ends
// subscriptions with ErrConnectionLost; the Conn reconnects by itself: new requests, a new
// subscription and the producer work on the new connection, and Err stays nil.
func TestIntegrationConnSurvivesRestart(t *testing.T) {
	t.Parallel()
	r := startRestartable(t)
	admin := itDial(t, r.srv.Addr(), itAdminUser, itAdminPass)
	itTopic(t, admin, "going", 1)
	ckDurable(t, admin, "waiting", 1)
	ctx := itCtx(t)
	c := itDial(t, r.proxy.Addr(), itUser, itPass)
	s := itSubscribe(t, c, client.SubscribeOptions{Topic: "going"})
	p := itProducer(t, c, client.ProducerOptions{Topic: "going"})
	eachErr := make(chan error, 1)
	go func() { eachErr <- s.Each(ctx, func(*client.Received) error { return nil }) }()
	fetchErr := make(chan error, 1)
	req := wire.Fetch{Topic: "waiting", Offset: 0, MaxBytes: 1 << 20, MaxWaitMs: 20000}
	in := r.proxy.BytesIn()
	go func() {
		_, err := c.Fetch(ctx, req)
		fetchErr <- err
	}()
	// The FETCH has left the client once the proxy forwarded its frame; the broker holds it
	// (long poll: the topic is empty).
	itEventually(t, "the FETCH sent", func() bool { return r.proxy.BytesIn() >= in+int64(wire.HeaderSize+len(req.AppendTo(nil))) })
	r.restart(true)

	if err := <-fetchErr; !errors.Is(err, client.ErrConnectionLost) {
		t.Errorf("FETCH in flight during the restart: %v, want ErrConnectionLost", err)
	}
	if err := <-eachErr; !errors.Is(err, client.ErrConnectionLost) {
		t.Errorf("Each: %v, want ErrConnectionLost", err)
	}
	if !errors.Is(s.Err(), client.ErrConnectionLost) {
		t.Errorf("Subscription.Err() = %v", s.Err())
	}
	if _, err := c.Metadata(ctx, "going"); err != nil {
		t.Fatalf("Metadata after the restart: %v", err)
	}
	s2 := itSubscribe(t, c, client.SubscribeOptions{Topic: "going"})
	var ack client.Ack
	var ackErr error
	if err := p.Send(ctx, &client.Message{Value: []byte("after")}, func(a client.Ack, err error) { ack, ackErr = a, err }); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil || ackErr != nil {
		t.Fatalf("Flush after the restart: %v, ack %v", err, ackErr)
	}
	recs, err := collect(ctx, s2, 1)
	if err != nil || len(recs) != 1 || string(recs[0].Value) != "after" || recs[0].Offset != ack.Offset {
		t.Fatalf("received %+v, %v (ack %+v)", recs, err, ack)
	}
	if err := c.Err(); err != nil {
		t.Errorf("Conn.Err() = %v after a reconnect", err)
	}
	if ok, _ := c.Connected(); !ok {
		t.Error("not Connected after the reconnect")
	}
}

// TestIntegrationProducerSurvivesRestart: a producer sending a stream to a durable topic
// while its broker restarts, gracefully or abruptly, loses nothing: every message is
// acknowledged, at an offset that holds it, and the partitions hold the messages in the order
// sent. A graceful shutdown answers what it stored and says SHUTTING_DOWN, so nothing is
// stored twice; an abrupt one may leave batches whose answer was lost, which the idempotent
// producer (the default) re-sends and the broker answers with their original offsets:
// counted by FETCH, every message is stored exactly once.
func TestIntegrationProducerSurvivesRestart(t *testing.T) {
	t.Parallel()
	for _, abrupt := range []bool{false, true} {
		name := map[bool]string{false: "shutdown", true: "abrupt"}[abrupt]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := startRestartable(t)
			admin := itDial(t, r.srv.Addr(), itAdminUser, itAdminPass)
			ckDurable(t, admin, "stream", 2, wire.Option{Key: "fsync", Value: "never"})
			c := itDial(t, r.proxy.Addr(), itUser, itPass)
			p := itProducer(t, c, client.ProducerOptions{Topic: "stream", BatchBytes: 4 << 10})
			const n = 20000
			acks := make([]client.Ack, n)
			errs := make([]error, n)
			var acked atomic.Int64
			var wg sync.WaitGroup
			sendErr := make(chan error, 1)
			wg.Go(func() {
				ctx := itCtx(t)
				for i := range n {
					m := client.Message{Key: fmt.Appendf(nil, "k-%d", i%13), Value: ckValue(i)}
					if err := p.Send(ctx, &m, func(a client.Ack, err error) { acks[i], errs[i] = a, err; acked.Add(1) }); err != nil {
						sendErr <- fmt.Errorf("Send %d: %w", i, err)
						return
					}
				}
				sendErr <- p.Flush(ctx)
			})
			itEventually(t, "a third acknowledged", func() bool { return acked.Load() >= n/3 })
			r.restart(abrupt)
			wg.Wait()
			if err := <-sendErr; err != nil {
				t.Fatal(err)
			}
			for i, err := range errs {
				if err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
			}
			lost, dups := itCheckLog(t, itDial(t, r.srv.Addr(), itUser, itPass), "stream", 2, acks)
			t.Logf("%s restart: %d messages, %d lost, %d stored twice", name, n, lost, dups)
			if lost != 0 {
				t.Errorf("%d acknowledged messages not found", lost)
			}
			if dups != 0 { // the producer is idempotent: re-sends are answered, not stored
				t.Errorf("%d messages stored twice", dups)
			}
		})
	}
}

// itCheckLog reads the partitions of a durable topic and checks them against acks (message i
// is ckValue(i)): every ack names an offset holding its message, and within a partition the
// first copies of the messages are in the order sent. It returns the messages not found and
// the copies beyond the first.
func itCheckLog(t *testing.T, c *client.Conn, topic string, parts int, acks []client.Ack) (lost, dups int) {
	t.Helper()
	found := make([]int, len(acks))
	for part := range parts {
		var vals [][]byte
		for off := int64(0); ; {
			res, err := c.Fetch(itCtx(t), wire.Fetch{Topic: topic, Partition: uint32(part), Offset: off, MaxBytes: 1 << 20})
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
						vals = append(vals, bytes.Clone(rec.Value))
						off = rec.Offset + 1
					}
				}
			}
			if err := it.Err(); err != nil {
				t.Fatal(err)
			}
		}
		last := -1
		for off, v := range vals {
			i := ckIndex(t, v)
			found[i]++
			if found[i] > 1 {
				dups++
				continue
			}
			if i <= last {
				t.Errorf("partition %d offset %d: message %d after message %d", part, off, i, last)
			}
			last = i
		}
		for i, a := range acks {
			if int(a.Partition) == part && (a.Offset < 0 || a.Offset >= int64(len(vals)) || ckIndex(t, vals[a.Offset]) != i) {
				t.Errorf("message %d acknowledged at partition %d offset %d, which does not hold it", i, part, a.Offset)
			}
		}
	}
	for _, k := range found {
		if k == 0 {
			lost++
		}
	}
	return lost, dups
}

var _ = context.Background

// A consumer made with NewConsumer on a shared Conn resumes at its positions after the Conn
// reconnects, like a DialConsumer: nothing skipped, nothing delivered twice.
func TestIntegrationNewConsumerSurvivesRestart(t *testing.T) {
	t.Parallel()
	r := startRestartable(t)
	admin := itDial(t, r.srv.Addr(), itAdminUser, itAdminPass)
	ckDurable(t, admin, "dur", 2)
	c := itDial(t, r.proxy.Addr(), itUser, itPass)
	const n = 3000
	var acks []client.Ack
	ckProduce(t, c, client.ProducerOptions{Topic: "dur", BatchBytes: 4 << 10}, 0, n, &acks, nil)
	var emu sync.Mutex
	var reported []error
	k, err := c.NewConsumer(itCtx(t), client.ConsumerOptions{Topic: "dur", MaxBytes: 8 << 10, Prefetch: 32 << 10,
		OnError: func(err error) { emu.Lock(); reported = append(reported, err); emu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	var got []itRecord
	restarted := false
	err = k.Each(itCtx(t), func(m *client.Received) error {
		got = append(got, copyReceived(m))
		if len(got) == n/3 && !restarted {
			restarted = true
			r.restart(true)
		}
		if len(got) == n {
			return errItDone
		}
		return nil
	})
	if !errors.Is(err, errItDone) {
		t.Fatalf("Each: %v after %d records", err, len(got))
	}
	ckVerify(t, got, acks, ckRange(0, n))
	emu.Lock()
	defer emu.Unlock()
	if len(reported) == 0 || !errors.Is(reported[0], client.ErrConnectionLost) {
		t.Errorf("OnError got %v, want the connection loss", reported)
	}
}
