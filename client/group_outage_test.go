package client_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/internal/proxytest"
	"github.com/lightq/lightq/wire"
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

// A member whose broker goes silent (no answer, no close: a machine lost, a network cut)
// while it holds a heartbeat there: it must drop its partitions, without committing, at its
// local session deadline (nine tenths of the session the broker granted), not when the
// request timeout ends the wait for the heartbeat's answer; in a cluster the new coordinator
// may give them to another member from then on. It runs in a synctest bubble: the fake
// joins the member with a 1 s session and never answers a HEARTBEAT.
func TestGroupMemberSilentBrokerDropsAtSessionEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := startPipeFake(t)
		fb.AddDurable("events", func(m *wire.Fetch) []byte {
			time.Sleep(time.Duration(m.MaxWaitMs) * time.Millisecond) // a long poll at the end of an empty log
			return (&wire.FetchResponse{HighWatermark: 0}).AppendTo(nil)
		})
		joins := make(chan struct{}, 8)
		fb.set(func(fb *fakeBroker) {
			fb.opHook = func(fc *fakeConn, h wire.Header, body []byte) bool {
				switch h.Op {
				case wire.OpJoinGroup:
					joins <- struct{}{}
					r := wire.JoinGroupResponse{Generation: 1, SessionTimeoutMs: 1000, HeartbeatIntervalMs: 333, Partitions: []uint32{0}}
					fc.reply(h.Op, h.Corr, r.AppendTo(nil))
				case wire.OpFetchCommitted:
					fc.reply(h.Op, h.Corr, (&wire.OffsetResponse{Offset: 0}).AppendTo(nil))
				case wire.OpLeaveGroup:
					fc.reply(h.Op, h.Corr, nil)
				case wire.OpHeartbeat:
					// held for ever: the broker went silent
				default:
					return false
				}
				return true
			}
		})
		c := dialPipe(t, fb)
		revoked := make(chan bool, 8)
		start := time.Now()
		k, err := c.NewConsumer(testCtx(t), client.ConsumerOptions{Topic: "events", Group: "g", AutoCommit: -1,
			OnRevoke: func(_ []int32, lost bool) map[int32]int64 { revoked <- lost; return nil }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { k.Close() })
		if got := k.Partitions(); len(got) != 1 {
			t.Fatalf("partitions %v after the join", got)
		}
		<-joins
		lost := <-revoked
		if took := time.Since(start); !lost || took < 900*time.Millisecond || took > 1100*time.Millisecond {
			t.Fatalf("partition dropped (lost %v) %v after the join; want lost at the local deadline, 900 ms", lost, took)
		}
		<-joins // and the member joins again
	})
}

// TestGroupMemberRefusedHeartbeatsDropAtSessionEnd: a coordinator that refuses every
// HEARTBEAT with a retryable code (INTERNAL) makes the member back off between tries, but
// the backoff never carries it past its local session deadline: its partition is dropped as
// lost at 900 ms of a 1 s session (the backoff alone would have taken it to 1.55 s).
func TestGroupMemberRefusedHeartbeatsDropAtSessionEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := startPipeFake(t)
		fb.AddDurable("events", func(*wire.Fetch) []byte { return (&wire.FetchResponse{HighWatermark: 0}).AppendTo(nil) })
		stop := make(chan struct{})
		t.Cleanup(func() { close(stop) })
		joins := make(chan struct{}, 8)
		fb.set(func(fb *fakeBroker) {
			fb.opHook = func(fc *fakeConn, h wire.Header, body []byte) bool {
				switch h.Op {
				case wire.OpJoinGroup:
					joins <- struct{}{}
					r := wire.JoinGroupResponse{Generation: 1, SessionTimeoutMs: 1000, HeartbeatIntervalMs: 333, Partitions: []uint32{0}}
					fc.reply(h.Op, h.Corr, r.AppendTo(nil))
				case wire.OpFetchCommitted:
					fc.reply(h.Op, h.Corr, (&wire.OffsetResponse{Offset: 0}).AppendTo(nil))
				case wire.OpLeaveGroup:
					fc.reply(h.Op, h.Corr, nil)
				case wire.OpHeartbeat:
					fc.fail(h.Corr, wire.CodeInternal, "the coordinator cannot answer")
				case wire.OpFetch:
					// A long poll answered from its own goroutine, so that the fake reads on
					// (a pipe's writer waits for its reader).
					var m wire.Fetch
					if err := m.Decode(body); err != nil {
						return false
					}
					go func() {
						select {
						case <-time.After(time.Duration(m.MaxWaitMs) * time.Millisecond):
							fc.reply(h.Op, h.Corr, (&wire.FetchResponse{HighWatermark: 0}).AppendTo(nil))
						case <-stop:
						}
					}()
				default:
					return false
				}
				return true
			}
		})
		c := dialPipe(t, fb)
		revoked := make(chan bool, 8)
		start := time.Now()
		k, err := c.NewConsumer(testCtx(t), client.ConsumerOptions{Topic: "events", Group: "g", AutoCommit: -1,
			OnRevoke: func(_ []int32, lost bool) map[int32]int64 { revoked <- lost; return nil }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { k.Close() })
		<-joins
		lost := <-revoked
		if took := time.Since(start); !lost || took < 900*time.Millisecond || took > 950*time.Millisecond {
			t.Fatalf("partition dropped (lost %v) %v after the join; want lost at the local deadline, 900 ms", lost, took)
		}
		<-joins
	})
}
