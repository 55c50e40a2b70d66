package client_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/internal/proxytest"
)

// A member cut off for longer than its session: B takes everything; when A's Conn
// reconnects, A must not deliver records of partitions the broker gave to B (A drops them
// at its local session deadline, before the link is back). It failed 4 times in 10 under
// -race before the member kept that deadline.
func TestGroupMemberOutageLongerThanSession(t *testing.T) {
	srv, c := gmBroker(t, "events", 4)
	proxy := proxytest.Start(t)
	proxy.SetBackend(srv.Addr())
	var acks []client.Ack
	ckProduce(t, c, client.ProducerOptions{Topic: "events"}, 0, 400, &acks, nil)
	d := newDelivery()
	const session = 500 * time.Millisecond
	opts := client.ConsumerOptions{Topic: "events", Group: "g", SessionTimeout: session, OnError: func(err error) { t.Logf("A OnError: %v", err) }}
	ca := itDial(t, proxy.Addr(), itUser, itPass)
	ka, err := ca.NewConsumer(itCtx(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ka.Close() })
	optsB := opts
	optsB.OnError = func(error) {}
	b := startMember(t, itDial(t, srv.Addr(), itUser, itPass), "b", optsB, d)
	var bad, aAfter atomic.Int64
	var armed atomic.Bool
	var badMu sync.Mutex
	var badEx []string
	go ka.Each(context.Background(), func(r *client.Received) error {
		d.add("a", r)
		if armed.Load() {
			aAfter.Add(1)
			if len(b.k.Partitions()) == 4 {
				bad.Add(1)
				badMu.Lock()
				if len(badEx) < 5 {
					badEx = append(badEx, time.Now().Format("15:04:05.000")+" p"+string(rune('0'+r.Partition)))
				}
				badMu.Unlock()
			}
		}
		return nil
	})
	a := &member{name: "a", k: ka}
	waitSplit(t, 4, a, b)
	itEventually(t, "400 delivered", func() bool { return d.distinct() == 400 })
	aParts := ka.Partitions()
	proxy.SetBackend("")
	proxy.Cut()
	cut := time.Now()
	itEventually(t, "b to hold all 4", func() bool { return len(b.k.Partitions()) == 4 })
	t.Logf("b holds all 4 after %v; A still reports partitions %v (had %v)", time.Since(cut), ka.Partitions(), aParts)
	ckProduce(t, c, client.ProducerOptions{Topic: "events"}, 400, 800, &acks, nil)
	itEventually(t, "800 delivered", func() bool { return d.distinct() == 800 })
	t.Logf("outage %v (session %v); A partitions now %v", time.Since(cut), session, ka.Partitions())
	armed.Store(true)
	proxy.SetBackend(srv.Addr())
	itEventually(t, "A reconnected", func() bool { ok, _ := ca.Connected(); return ok })
	waitSplit(t, 4, a, b)
	t.Logf("A delivered %d records after reconnect, %d of them while B held all 4 partitions: %v", aAfter.Load(), bad.Load(), badEx)
	if bad.Load() > 0 {
		t.Errorf("A delivered %d records of partitions the broker had given to B", bad.Load())
	}
}
