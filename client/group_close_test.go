package client_test

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// Close ends a membership the way a rebalance does: OnRevoke with the partitions held, the
// offsets it returns committed, then LEAVE_GROUP, so the other member gets the partitions
// at once and starts them where OnRevoke said.
func TestGroupCloseCallsOnRevoke(t *testing.T) {
	t.Parallel()
	srv, c := gmBroker(t, "events", 4)
	var acks []client.Ack
	ckProduce(t, c, client.ProducerOptions{Topic: "events"}, 0, 400, &acks, nil)
	const mark = 7 // what OnRevoke asks to commit: not a position the consumer reached
	var mu sync.Mutex
	var revoked []int32
	revokes := 0
	aOpts := client.ConsumerOptions{Topic: "events", Group: "g",
		OnRevoke: func(ps []int32, lost bool) map[int32]int64 {
			mu.Lock()
			defer mu.Unlock()
			if lost {
				t.Error("OnRevoke at Close says the membership was lost")
			}
			revokes++
			revoked = append(revoked, ps...)
			out := make(map[int32]int64, len(ps))
			for _, p := range ps {
				out[p] = mark
			}
			return out
		}}
	d := newDelivery()
	a := startMember(t, itDial(t, srv.Addr(), itUser, itPass), "a", aOpts, d)
	itEventually(t, "a to deliver everything", func() bool { return d.distinct() == 400 })
	starts := make(chan map[int32]int64, 8)
	bOpts := client.ConsumerOptions{Topic: "events", Group: "g", OnAssign: func(s map[int32]int64) { starts <- s }}
	b := startMember(t, itDial(t, srv.Addr(), itUser, itPass), "b", bOpts, nil)
	waitSplit(t, 4, a, b)
	held := a.k.Partitions()
	mu.Lock()
	revokes, revoked = 0, nil // the rebalance's revocation is TestGroupFencingAndCallbacks'
	mu.Unlock()
	for len(starts) > 0 {
		<-starts
	}
	start := time.Now()
	if err := a.k.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	slices.Sort(revoked)
	if revokes != 1 || !slices.Equal(revoked, held) {
		t.Fatalf("Close made %d OnRevoke calls with %v; a held %v", revokes, revoked, held)
	}
	mu.Unlock()
	for _, p := range held {
		off, err := c.FetchCommitted(itCtx(t), wire.FetchCommitted{Group: "g", Topic: "events", Partition: uint32(p)})
		if err != nil || off != mark {
			t.Fatalf("partition %d committed at %d (%v), want OnRevoke's %d", p, off, err, mark)
		}
	}
	got := map[int32]int64{}
	for len(got) < len(held) {
		select {
		case s := <-starts:
			for p, off := range s {
				got[p] = off
			}
		case <-time.After(time.Second):
			t.Fatalf("b was given %v within a second of a's Close, want %v (LEAVE_GROUP hands over at once)", got, held)
		}
	}
	for _, p := range held {
		if got[p] != mark {
			t.Fatalf("b started partition %d at %d, want %d", p, got[p], mark)
		}
	}
	t.Logf("hand-over %v after Close began", time.Since(start))
}

// Close is bounded by the request timeout when the broker stops answering: the member's
// commit and LEAVE_GROUP are given up after Options.RequestTimeout, not waited for to the
// session's end (10 s here) or for ever. OnRevoke is called all the same, before the
// commit goes out.
func TestGroupCloseBoundedWhenBrokerSilent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := startPipeFake(t)
		fb.AddDurable("events", func(*wire.Fetch) []byte { return (&wire.FetchResponse{HighWatermark: 0}).AppendTo(nil) })
		stop := make(chan struct{})
		t.Cleanup(func() { close(stop) })
		silent := make(chan struct{})
		fb.set(func(fb *fakeBroker) {
			fb.opHook = func(fc *fakeConn, h wire.Header, body []byte) bool {
				switch h.Op {
				case wire.OpJoinGroup:
					r := wire.JoinGroupResponse{Generation: 1, SessionTimeoutMs: 10_000, HeartbeatIntervalMs: 3333, Partitions: []uint32{0}}
					fc.reply(h.Op, h.Corr, r.AppendTo(nil))
				case wire.OpFetchCommitted:
					fc.reply(h.Op, h.Corr, (&wire.OffsetResponse{Offset: 0}).AppendTo(nil))
				case wire.OpHeartbeat:
					// held for ever
				case wire.OpGroupCommit, wire.OpLeaveGroup:
					select {
					case <-silent: // the broker went silent: no answer
					default:
						fc.reply(h.Op, h.Corr, nil)
					}
				case wire.OpFetch:
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
		const reqTimeout = 2 * time.Second
		c, err := client.DialFunc(testCtx(t), fb.DialPipe, client.Options{User: fakeUser, Password: fakePass, ClientName: t.Name(), RequestTimeout: reqTimeout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		revoked := make(chan []int32, 4)
		k, err := c.NewConsumer(testCtx(t), client.ConsumerOptions{Topic: "events", Group: "g", AutoCommit: -1,
			OnRevoke: func(ps []int32, lost bool) map[int32]int64 {
				revoked <- ps
				return map[int32]int64{0: 5}
			}})
		if err != nil {
			t.Fatal(err)
		}
		close(silent)
		start := time.Now()
		err = k.Close()
		took := time.Since(start)
		if err == nil {
			t.Fatal("Close succeeded though the broker answered neither the commit nor the leave")
		}
		if took > reqTimeout {
			t.Fatalf("Close took %v, want at most the request timeout %v", took, reqTimeout)
		}
		select {
		case ps := <-revoked:
			if !slices.Equal(ps, []int32{0}) {
				t.Fatalf("OnRevoke(%v), want [0]", ps)
			}
		default:
			t.Fatal("Close did not call OnRevoke")
		}
		t.Logf("Close returned after %v: %v", took, err)
	})
}
