package client_test

// Stall detection (stall.go) against the fake broker frozen as SIGSTOP freezes a real one
// (fakefreeze_test.go): a connection whose requests get no answer, and that receives
// nothing, for StallTimeout is declared dead, its requests fail with ErrStalled, and the
// Conn reconnects; producers and consumers move to the partition's new leader. A request the
// broker holds on purpose (a long poll) and a slow answer from a broker that still answers
// PINGs keep their connection. A broker whose METADATA names no leader is not asked again
// while another can be.

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// dialStall connects to seeds with the given StallTimeout (and as DialTimeout, so that a
// reconnect to a frozen broker gives up as fast).
func dialStall(t testing.TB, seeds string, stall time.Duration) *client.Conn {
	t.Helper()
	c, err := client.Dial(testCtx(t), seeds, client.Options{User: fakeUser, Password: fakePass, ClientName: t.Name(),
		StallTimeout: stall, DialTimeout: stall})
	if err != nil {
		t.Fatalf("Dial %s: %v", seeds, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The broker freezes: a PING fails with ErrStalled (and ErrConnectionLost) between one
// StallTimeout and one and an eighth (the watchdog's tick) after it was sent; once the
// broker is back, the Conn has reconnected and answers.
func TestStallFailsRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := startPipeFake(t)
		const stall = time.Second
		c, err := client.DialFunc(testCtx(t), fb.DialPipe, client.Options{User: fakeUser, Password: fakePass,
			StallTimeout: stall, DialTimeout: stall, KeepAlive: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fb.Freeze(1)
		start := time.Now()
		_, err = c.Ping(testCtx(t))
		took := time.Since(start)
		if !errors.Is(err, client.ErrStalled) || !errors.Is(err, client.ErrConnectionLost) {
			t.Fatalf("Ping to a frozen broker: %v; want ErrStalled wrapped in ErrConnectionLost", err)
		}
		if took < stall || took > stall+stall/8 {
			t.Fatalf("the stall was declared after %v; want %v to %v", took, stall, stall+stall/8)
		}
		if ok, _ := c.Connected(); ok {
			t.Fatal("still connected to the frozen broker")
		}
		fb.Thaw(1)
		if _, err := c.Ping(testCtx(t)); err != nil {
			t.Fatalf("Ping after the broker came back: %v", err)
		}
	})
}

// Answers the broker gives late on purpose keep the connection: PRODUCE answers held for
// four StallTimeouts while the broker answers PINGs at once (the watchdog's probe), and a
// FETCH long poll of three StallTimeouts on a broker that answers no PING at all (its own
// MaxWait extends its allowance). One connection throughout.
func TestStallSparesSlowAnswers(t *testing.T) {
	const stall = time.Second
	t.Run("slow produce, pings answered", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fb := startPipeFake(t)
			fb.AddTopic("events", 1)
			c, err := client.DialFunc(testCtx(t), fb.DialPipe, client.Options{User: fakeUser, Password: fakePass, StallTimeout: stall, KeepAlive: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			p := newProducer(t, c, client.ProducerOptions{Topic: "events", Linger: -1})
			fb.set(func(fb *fakeBroker) { fb.holdAcks = true })
			log := newAckLog()
			sendRange(t, p, log, 0, 0, 1)
			fb.waitUntil(func(fb *fakeBroker) bool { return len(fb.heldAcks) == 1 })
			time.Sleep(4 * stall)
			fb.ReleaseAcks()
			if err := p.Flush(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			log.exactlyOnce(t, 1)
			var accepted, pings int
			fb.get(func(fb *fakeBroker) { accepted, pings = fb.accepted, fb.pings })
			if accepted != 1 || pings == 0 {
				t.Fatalf("%d connections, %d PINGs; want one connection kept alive by PINGs", accepted, pings)
			}
		})
	})
	t.Run("long poll, no pings answered", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fb := startPipeFake(t)
			fb.AddDurableTopic("dur", 1)
			fb.set(func(fb *fakeBroker) {
				fb.opHook = func(_ *fakeConn, h wire.Header, _ []byte) bool { return h.Op == wire.OpPing }
			})
			c, err := client.DialFunc(testCtx(t), fb.DialPipe, client.Options{User: fakeUser, Password: fakePass, StallTimeout: stall, KeepAlive: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			if _, err := c.Fetch(testCtx(t), wire.Fetch{Topic: "dur", Offset: 0, MaxBytes: 1 << 10, MaxWaitMs: uint32(3 * stall / time.Millisecond)}); err != nil {
				t.Fatalf("long poll: %v", err)
			}
			if took := time.Since(start); took < 3*stall {
				t.Fatalf("the long poll was answered after %v, before its MaxWait", took)
			}
			var accepted int
			fb.get(func(fb *fakeBroker) { accepted = fb.accepted })
			if accepted != 1 {
				t.Fatalf("%d connections; want the one", accepted)
			}
		})
	})
}

// A topic change the broker works on for three StallTimeouts, reading nothing from the
// connection meanwhile (as a broker's background job holds it: the PING probe goes
// unanswered), keeps its connection: the watchdog allows such a request its RequestTimeout.
func TestStallSparesHeldAdminRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const stall = time.Second
		fb := startPipeFake(t)
		fb.set(func(fb *fakeBroker) {
			fb.opHook = func(_ *fakeConn, h wire.Header, _ []byte) bool {
				switch h.Op {
				case wire.OpPing:
					return true // never answered
				case wire.OpCreateTopic:
					time.Sleep(3 * stall) // the job, with the connection held
				}
				return false
			}
		})
		c, err := client.DialFunc(testCtx(t), fb.DialPipe, client.Options{User: fakeUser, Password: fakePass, StallTimeout: stall, KeepAlive: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		if err := c.CreateTopic(testCtx(t), client.TopicConfig{Name: "slow"}); err != nil {
			t.Fatalf("CreateTopic held for %v: %v", time.Since(start), err)
		}
		var accepted int
		fb.get(func(fb *fakeBroker) { accepted = fb.accepted })
		if accepted != 1 {
			t.Fatalf("%d connections; want the one", accepted)
		}
	})
}

// Node 2 leads partition 0 and freezes while batches wait for its answers (some stored and
// unanswered: the replicas have them); node 3 takes over. Within about one StallTimeout the
// producer gives the frozen connection up, asks node 1 who leads, and re-sends every
// unanswered batch to node 3 in seal order; the re-sends node 2 had stored are answered
// with their offsets: each message is stored and acknowledged once.
func TestStallProducerMovesToNewLeader(t *testing.T) {
	fb := startFakeCluster(t, 3)
	fb.AddTopic("events", 1)
	fb.SetLeader("events", 0, 2)
	const stall = 300 * time.Millisecond
	c := dialStall(t, fb.Seeds(1), stall)
	p := newProducer(t, c, client.ProducerOptions{Topic: "events", BatchBytes: 64, Linger: -1})
	log := newAckLog()
	sendRange(t, p, log, 0, 0, 10)
	if err := p.Flush(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	fb.set(func(fb *fakeBroker) { fb.holdAcks = true })
	sent := sendAsync(t, p, log, 0, 10, 40)
	fb.waitUntil(func(fb *fakeBroker) bool { return len(fb.heldAcks) >= 4 })
	fb.Freeze(2)
	frozen := time.Now()
	fb.set(func(fb *fakeBroker) { fb.holdAcks, fb.heldAcks = false, nil })
	fb.SetLeader("events", 0, 3)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	took := time.Since(frozen)
	log.exactlyOnce(t, 40)
	acksInOrder(t, log, 0, 0, 40, 0)
	storedOnce(t, fb, "events", 0, 0, 40)
	if fb.Served(wire.OpProduce, 3) == 0 {
		t.Fatal("node 3 served no PRODUCE")
	}
	t.Logf("from the freeze to every message acknowledged by the new leader: %v (StallTimeout %v)", took.Round(time.Millisecond), stall)
	if took > 10*stall {
		t.Fatalf("%v from the freeze to the acknowledgements; want about one StallTimeout (%v)", took, stall)
	}
}

// A consumer's fetcher on a frozen leader moves to the new one at its position: every
// offset is delivered once, in order.
func TestStallConsumerMovesToNewLeader(t *testing.T) {
	fb := startFakeCluster(t, 3)
	fb.AddDurableTopic("dur", 2)
	fb.SetLeader("dur", 0, 2)
	fb.SetLeader("dur", 1, 3)
	c := dialStall(t, fb.Seeds(1), 300*time.Millisecond)
	const n = 300
	fillPartitions(t, c, "dur", 2, n)
	var mu sync.Mutex
	var reported []error
	k, err := c.NewConsumer(testCtx(t), client.ConsumerOptions{Topic: "dur", MaxBytes: 512, Prefetch: 2048, MaxWait: 50 * time.Millisecond,
		OnError: func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	consumeAcrossMove(t, fb, k, n, movingLeader{"frozen", func(fb *fakeBroker) {
		fb.SetLeader("dur", 0, 3)
		fb.Freeze(2)
	}})
	mu.Lock()
	defer mu.Unlock()
	for _, err := range reported {
		t.Logf("OnError: %v", err)
	}
}

// The broker the Conn dialled leads partition 0 and is cut off from the others, who elect
// node 2: it answers NOT_LEADER and its METADATA names no leader. The Conn asks another
// broker instead of that one again, and the producer moves to node 2.
func TestClusterMetadataAsksAnotherBroker(t *testing.T) {
	fb := startFakeCluster(t, 3)
	fb.AddTopic("events", 1)
	c := dialSeeds(t, fb.Seeds(1))
	p := newProducer(t, c, client.ProducerOptions{Topic: "events", BatchBytes: 64, Linger: -1, DeliveryTimeout: 10 * time.Second})
	log := newAckLog()
	sendRange(t, p, log, 0, 0, 10)
	if err := p.Flush(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	fb.SetCutOff(1, true)
	fb.SetLeader("events", 0, 2)
	sendRange(t, p, log, 0, 10, 20)
	if err := p.Flush(testCtx(t)); err != nil {
		t.Fatalf("after node 1 was cut off: %v", err)
	}
	log.exactlyOnce(t, 20)
	storedOnce(t, fb, "events", 0, 0, 20)
	if fb.Served(wire.OpProduce, 2) == 0 {
		t.Fatal("node 2 served no PRODUCE")
	}
}

// Node 2 leads partition 0 and freezes; the Conn's view learns that node 3 leads before the
// watchdog gives node 2's connection up (a METADATA refresh for another reason), so node 2
// is no longer wanted and its reconnector stops at once. The producer moves to node 3. Node
// 2 thaws and is elected again (the chaos run's pause-leader cycles): node 3 answers
// NOT_LEADER, the view names node 2, and the producer's old route to node 2, without a
// connection, must be dialled again: nothing else would, and the partition would wait for
// the delivery timeout.
func TestStallProducerFollowsLeaderBackToThawedBroker(t *testing.T) {
	fb := startFakeCluster(t, 3)
	fb.AddTopic("events", 1)
	fb.SetLeader("events", 0, 2)
	const stall = 300 * time.Millisecond
	c := dialStall(t, fb.Seeds(1), stall)
	p := newProducer(t, c, client.ProducerOptions{Topic: "events", BatchBytes: 64, Linger: -1, DeliveryTimeout: 5 * time.Second})
	log := newAckLog()
	sendRange(t, p, log, 0, 0, 10)
	if err := p.Flush(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	fb.Freeze(2)
	fb.SetLeader("events", 0, 3)
	if _, err := c.ClusterMetadata(testCtx(t), "events"); err != nil { // node 1 answers
		t.Fatal(err)
	}
	sendRange(t, p, log, 0, 10, 20) // written to node 2, frozen: its link stalls
	if err := p.Flush(testCtx(t)); err != nil {
		t.Fatalf("moving to node 3: %v", err)
	}
	before := fb.Served(wire.OpProduce, 2)
	fb.Thaw(2)
	fb.SetLeader("events", 0, 2)
	start := time.Now()
	sendRange(t, p, log, 0, 20, 30)
	if err := p.Flush(testCtx(t)); err != nil {
		t.Fatalf("back to node 2: %v", err)
	}
	t.Logf("back on node 2 after %v", time.Since(start).Round(time.Millisecond))
	log.exactlyOnce(t, 30)
	acksInOrder(t, log, 0, 0, 30, 0)
	storedOnce(t, fb, "events", 0, 0, 30)
	if fb.Served(wire.OpProduce, 2) == before {
		t.Fatal("node 2 served no PRODUCE after it was elected again")
	}
}
