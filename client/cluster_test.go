package client_test

// The client in a cluster (PROTOCOL.md section 16), against a fake of three brokers
// (fakecluster_test.go): each partition's batches go to its leader; when the leader moves
// (the old one answers NOT_LEADER, or its connection closes), the producer re-sends every
// unacknowledged batch to the new leader in seal order, each message acknowledged once; no
// leader for longer than DeliveryTimeout fails the messages, saying whether they may be
// stored; seed lists.

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// dialSeeds connects to the fake's brokers at seeds (comma-separated).
func dialSeeds(t testing.TB, seeds string) *client.Conn {
	t.Helper()
	c, err := client.Dial(testCtx(t), seeds, client.Options{User: fakeUser, Password: fakePass, ClientName: t.Name()})
	if err != nil {
		t.Fatalf("Dial %s: %v", seeds, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// sendRange sends messages from..to-1 to partition part.
func sendRange(t *testing.T, p *client.Producer, log *ackLog, part int32, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		m := client.Message{Value: value(i), Partition: part, HasPartition: true}
		if err := p.Send(testCtx(t), &m, log.cb(i)); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
	}
}

// sendAsync is sendRange on a goroutine of its own (Send blocks while every in-flight slot
// waits for an answer the fake holds); the channel gets its outcome.
func sendAsync(t *testing.T, p *client.Producer, log *ackLog, part int32, from, to int) <-chan error {
	done := make(chan error, 1)
	go func() {
		for i := from; i < to; i++ {
			m := client.Message{Value: value(i), Partition: part, HasPartition: true}
			if err := p.Send(testCtx(t), &m, log.cb(i)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	return done
}

// waitNodeConns waits until node id has n open connections.
func waitNodeConns(fb *fakeBroker, id uint32, n int) {
	fb.waitUntil(func(fb *fakeBroker) bool {
		got := 0
		for fc := range fb.conns {
			if fc.node == id && !fc.dead {
				got++
			}
		}
		return got == n
	})
}

// storedOnce checks that partition part holds messages from..to-1 once each, in order.
func storedOnce(t *testing.T, fb *fakeBroker, topic string, part, from, to int) {
	t.Helper()
	order, copies := firstOccurrences(t, fb, topic, part)
	if copies != to-from || len(order) != to-from {
		t.Fatalf("partition %d: %d records stored, %d distinct, want %d once each", part, copies, len(order), to-from)
	}
	for i, m := range order {
		if m != from+i {
			t.Fatalf("partition %d: record %d is message %d, want %d (out of order)", part, i, m, from+i)
		}
	}
}

// acksInOrder checks that messages from..to-1 were acknowledged in partition part at
// consecutive offsets from base.
func acksInOrder(t *testing.T, log *ackLog, part int32, from, to int, base int64) {
	t.Helper()
	log.mu.Lock()
	defer log.mu.Unlock()
	for i := from; i < to; i++ {
		a := log.acks[i]
		if len(a) != 1 || len(log.errs[i]) != 0 || a[0].Partition != part || a[0].Offset != base+int64(i-from) {
			t.Fatalf("message %d: acks %v, errs %v; want one ack at partition %d offset %d", i, a, log.errs[i], part, base+int64(i-from))
		}
	}
}

// Each partition's batches go to its leader, over one connection per broker: the boot
// broker (a seed that leads nothing) and the two leaders; nothing meets NOT_LEADER.
// Unkeyed messages are spread over the partitions, keyed ones by the partition count.
func TestClusterProducerRoutesToLeaders(t *testing.T) {
	fb := startFakeCluster(t, 3)
	fb.AddTopic("events", 2)
	fb.SetLeader("events", 0, 2)
	fb.SetLeader("events", 1, 3)
	c := dialSeeds(t, fb.Seeds(1))
	p := newProducer(t, c, client.ProducerOptions{Topic: "events", BatchBytes: 256})
	log := newAckLog()
	const n = 400
	for i := range n {
		m := client.Message{Value: value(i)}
		if i%2 == 1 {
			m.Key = value(i)
		}
		if err := p.Send(testCtx(t), &m, log.cb(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	log.exactlyOnce(t, n)
	if got := fb.NotLeaders(wire.OpProduce); got != 0 {
		t.Errorf("%d PRODUCEs met NOT_LEADER", got)
	}
	unkeyed := map[int32]int{}
	log.mu.Lock()
	for i := range n {
		a := log.acks[i][0]
		if i%2 == 1 {
			if want := int32(wire.PartitionForKey(value(i), 2)); a.Partition != want {
				t.Errorf("keyed message %d in partition %d, want %d", i, a.Partition, want)
			}
		} else {
			unkeyed[a.Partition]++
		}
	}
	log.mu.Unlock()
	if unkeyed[0] == 0 || unkeyed[1] == 0 {
		t.Errorf("unkeyed messages by partition: %v, want both partitions used", unkeyed)
	}
	if fb.Served(wire.OpProduce, 2) == 0 || fb.Served(wire.OpProduce, 3) == 0 || fb.Served(wire.OpProduce, 1) != 0 {
		t.Errorf("PRODUCEs served by node 1, 2, 3: %d, %d, %d; want 0 and both leaders",
			fb.Served(wire.OpProduce, 1), fb.Served(wire.OpProduce, 2), fb.Served(wire.OpProduce, 3))
	}
	for id := uint32(1); id <= 3; id++ {
		if got := fb.NodeConns(id); got != 1 {
			t.Errorf("node %d: %d connections, want 1", id, got)
		}
	}
}

// The leader of partition 0 moves from node 2 to node 3 while batches of it wait for their
// answers at node 2, which answers them NOT_LEADER (nothing stored): the producer looks the
// leader up and re-sends them all to node 3, in seal order. Partition 1 is not disturbed.
func TestClusterProducerNotLeaderMoves(t *testing.T) {
	for _, idem := range []bool{true, false} {
		t.Run(map[bool]string{true: "idempotent", false: "not idempotent"}[idem], func(t *testing.T) {
			fb := startFakeCluster(t, 3)
			fb.AddTopic("events", 2)
			fb.SetLeader("events", 0, 2)
			fb.SetLeader("events", 1, 3)
			c := dialSeeds(t, fb.Seeds(1))
			p := newProducer(t, c, client.ProducerOptions{Topic: "events", BatchBytes: 64, Linger: -1, MaxInFlight: 32, DisableIdempotence: !idem})
			log := newAckLog()
			sendRange(t, p, log, 0, 0, 20)
			sendRange(t, p, log, 1, 60, 70)
			if err := p.Flush(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			// Node 2 stops leading partition 0; its answers are held, so several batches
			// are unanswered when it refuses them.
			fb.set(func(fb *fakeBroker) { fb.holdAcks = true })
			fb.SetLeader("events", 0, 3)
			sent0 := sendAsync(t, p, log, 0, 20, 60)
			sent1 := sendAsync(t, p, log, 1, 70, 80)
			fb.waitUntil(func(fb *fakeBroker) bool { return fb.cluster.notLeaders[wire.OpProduce] >= 4 })
			fb.ReleaseAcks()
			if err := errors.Join(<-sent0, <-sent1); err != nil {
				t.Fatal(err)
			}
			if err := p.Flush(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			log.exactlyOnce(t, 80)
			acksInOrder(t, log, 0, 0, 60, 0)
			acksInOrder(t, log, 1, 60, 80, 0)
			storedOnce(t, fb, "events", 0, 0, 60)
			if fb.Served(wire.OpProduce, 3) == 0 {
				t.Fatal("node 3 served no PRODUCE")
			}
		})
	}
}

// Node 2, leading partition 0, goes away while batches wait for its answers (they were
// stored: the replicas have them); node 3 takes over. The producer re-sends every
// unanswered batch to node 3 in seal order, and the idempotent producer's re-sends are
// answered with the offsets they got: each message is stored and acknowledged once.
func TestClusterProducerLeaderConnectionLost(t *testing.T) {
	fb := startFakeCluster(t, 3)
	fb.AddTopic("events", 1)
	fb.SetLeader("events", 0, 2)
	c := dialSeeds(t, fb.Seeds(1))
	p := newProducer(t, c, client.ProducerOptions{Topic: "events", BatchBytes: 64, Linger: -1})
	log := newAckLog()
	sendRange(t, p, log, 0, 0, 10)
	if err := p.Flush(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	fb.set(func(fb *fakeBroker) { fb.holdAcks = true })
	sent := sendAsync(t, p, log, 0, 10, 40)
	fb.waitUntil(func(fb *fakeBroker) bool { return len(fb.heldAcks) >= 4 })
	fb.set(func(fb *fakeBroker) { fb.holdAcks, fb.heldAcks = false, nil })
	fb.SetDown(2, true)
	fb.SetLeader("events", 0, 3)
	fb.DropNode(2)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	log.exactlyOnce(t, 40)
	acksInOrder(t, log, 0, 0, 40, 0)
	storedOnce(t, fb, "events", 0, 0, 40)
}

// REPLICATION_TIMEOUT: an idempotent batch, which may be stored, goes again like a batch
// whose connection broke and is answered as stored once; a batch without a producer id
// fails as may-be-stored, and is not sent again.
func TestClusterProducerReplicationTimeout(t *testing.T) {
	t.Run("idempotent", func(t *testing.T) {
		fb := startFakeCluster(t, 3)
		fb.AddTopic("events", 1)
		fb.SetLeader("events", 0, 2)
		c := dialSeeds(t, fb.Seeds(1))
		p := newProducer(t, c, client.ProducerOptions{Topic: "events", BatchBytes: 64, Linger: -1})
		log := newAckLog()
		fb.set(func(fb *fakeBroker) { fb.cluster.replTimeouts = 3 })
		sendRange(t, p, log, 0, 0, 30)
		if err := p.Flush(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		log.exactlyOnce(t, 30)
		acksInOrder(t, log, 0, 0, 30, 0)
		storedOnce(t, fb, "events", 0, 0, 30)
	})
	t.Run("not idempotent", func(t *testing.T) {
		fb := startFakeCluster(t, 3)
		fb.AddTopic("events", 1)
		fb.SetLeader("events", 0, 2)
		c := dialSeeds(t, fb.Seeds(1))
		p := newProducer(t, c, client.ProducerOptions{Topic: "events", DisableIdempotence: true})
		log := newAckLog()
		fb.set(func(fb *fakeBroker) { fb.cluster.replTimeouts = 1 })
		sendRange(t, p, log, 0, 0, 1)
		err := p.Flush(testCtx(t))
		var pe *client.ProduceError
		if !errors.As(err, &pe) || !pe.MaybeStored() || !errors.Is(err, &wire.Error{Code: wire.CodeReplicationTimeout}) {
			t.Fatalf("Flush = %v, want a may-be-stored ProduceError with REPLICATION_TIMEOUT", err)
		}
		if got := fb.Served(wire.OpProduce, 2); got != 1 {
			t.Fatalf("%d PRODUCEs, want 1 (no re-send)", got)
		}
	})
}

// No leader for longer than DeliveryTimeout (an election that does not end): the messages
// fail with ErrDeliveryTimeout once it passes, as not stored when every attempt was refused
// NOT_LEADER, as may-be-stored when one was answered REPLICATION_TIMEOUT.
func TestClusterProducerNoLeaderTimesOut(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(fb *fakeBroker)
		maybe bool
	}{
		{"not leader", func(fb *fakeBroker) { fb.SetLeader("events", 0, 0) }, false},
		{"replication timeout", func(fb *fakeBroker) {
			// Stored, answered REPLICATION_TIMEOUT, and the leader is lost with it.
			fb.set(func(fb *fakeBroker) { fb.cluster.replTimeouts, fb.holdAcks = 1, true })
			go func() {
				fb.waitUntil(func(fb *fakeBroker) bool { return len(fb.heldAcks) == 1 })
				fb.SetLeader("events", 0, 0)
				fb.ReleaseAcks()
			}()
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fb := startFakeCluster(t, 3)
			fb.AddTopic("events", 1)
			fb.SetLeader("events", 0, 2)
			c := dialSeeds(t, fb.Seeds(1))
			const timeout = 3 * time.Second // the second phase needs a lookup (at most lookupMax, 1 s, apart) within it
			p := newProducer(t, c, client.ProducerOptions{Topic: "events", DeliveryTimeout: timeout})
			tc.setup(fb)
			errc := make(chan error, 1)
			start := time.Now()
			if err := p.Send(testCtx(t), &client.Message{Value: []byte("v"), HasPartition: true}, func(_ client.Ack, err error) { errc <- err }); err != nil {
				t.Fatal(err)
			}
			err := <-errc
			took := time.Since(start)
			var pe *client.ProduceError
			if !errors.As(err, &pe) || !errors.Is(err, client.ErrDeliveryTimeout) || pe.MaybeStored() != tc.maybe {
				t.Fatalf("callback: %v, want a delivery timeout with MaybeStored %v", err, tc.maybe)
			}
			t.Logf("%v after %v", err, took)
			if took < timeout || took > timeout+5*time.Second {
				t.Errorf("failed after %v, DeliveryTimeout %v", took, timeout)
			}
			if fb.NotLeaders(wire.OpProduce)+fb.Served(wire.OpProduce, 2) == 0 {
				t.Error("the batch was never sent")
			}
			if err := p.Flush(testCtx(t)); !errors.Is(err, client.ErrDeliveryTimeout) {
				t.Fatalf("Flush = %v, want the delivery timeout", err)
			}
			// The leader comes back: the producer goes on.
			fb.SetLeader("events", 0, 3)
			log := newAckLog()
			sendRange(t, p, log, 0, 0, 5)
			if err := p.Flush(testCtx(t)); err != nil {
				t.Fatalf("after the election: %v", err)
			}
			log.exactlyOnce(t, 5)
		})
	}
}

// Dial with a seed list: the first seed refuses, the second answers; when the broker the
// Conn uses goes away, it reconnects through the list.
func TestDialSeedList(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	fb := startFakeCluster(t, 2)
	fb.AddTopic("events", 1)
	c := dialSeeds(t, dead+", "+fb.Seeds(1, 2))
	if _, err := c.Ping(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if fb.NodeConns(1) != 1 || fb.NodeConns(2) != 0 {
		t.Fatalf("connections to nodes 1 and 2: %d, %d; want the first live seed", fb.NodeConns(1), fb.NodeConns(2))
	}
	fb.SetDown(1, true)
	fb.DropNode(1)
	waitNodeConns(fb, 2, 1)
	md, err := c.Metadata(testCtx(t), "events")
	if err != nil || len(md) != 1 {
		t.Fatalf("Metadata after node 1 went away: %v, %v", md, err)
	}
	if fb.NodeConns(2) != 1 {
		t.Fatalf("%d connections to node 2 after node 1 went away", fb.NodeConns(2))
	}
	if _, err := client.Dial(testCtx(t), dead+","+dead, client.Options{}); err == nil {
		t.Fatal("Dial to two dead seeds succeeded")
	}
	if _, err := client.Dial(testCtx(t), " , ", client.Options{}); err == nil {
		t.Fatal("Dial with no address succeeded")
	}
}

// A broker from before replication refuses METADATA's cluster flag: the Conn asks once more
// without it, routes everything to that broker, and asks without the flag from then on.
func TestLegacyBrokerWithoutClusterFlag(t *testing.T) {
	fb := startFake(t)
	fb.set(func(fb *fakeBroker) { fb.legacy = true })
	fb.AddTopic("events", 2)
	c := dial(t, fb)
	p := newProducer(t, c, client.ProducerOptions{Topic: "events"})
	log := newAckLog()
	sendRange(t, p, log, 1, 0, 10)
	if err := p.Flush(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	log.exactlyOnce(t, 10)
	md, err := c.ClusterMetadata(testCtx(t), "events")
	if err != nil || !md.Legacy || len(md.Topics) != 1 || len(md.Topics[0].Partitions) != 2 {
		t.Fatalf("ClusterMetadata = %+v, %v; want the legacy answer", md, err)
	}
	var reqs int
	fb.get(func(fb *fakeBroker) { reqs = fb.metadataReqs })
	if reqs != 3 {
		t.Fatalf("%d METADATA requests, want 3 (refused, asked again, then without the flag)", reqs)
	}
	if fb.Conns() != 1 {
		t.Fatalf("%d connections", fb.Conns())
	}
}

// The only seed and the partition's leader both go away: the Conn asks the other brokers it
// learned of for the partition's new leader, and the producer goes on there.
func TestClusterProducerSeedAndLeaderGone(t *testing.T) {
	fb := startFakeCluster(t, 3)
	fb.AddTopic("events", 1)
	fb.SetLeader("events", 0, 2)
	c := dialSeeds(t, fb.Seeds(1))
	p := newProducer(t, c, client.ProducerOptions{Topic: "events", BatchBytes: 64, Linger: -1})
	log := newAckLog()
	sendRange(t, p, log, 0, 0, 10)
	if err := p.Flush(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	fb.SetDown(1, true)
	fb.SetDown(2, true)
	fb.SetLeader("events", 0, 3)
	fb.DropNode(1)
	fb.DropNode(2)
	sendRange(t, p, log, 0, 10, 20)
	if err := p.Flush(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	log.exactlyOnce(t, 20)
	acksInOrder(t, log, 0, 0, 20, 0)
	storedOnce(t, fb, "events", 0, 0, 20)
	if md, err := c.Metadata(testCtx(t), "events"); err != nil || len(md) != 1 {
		t.Fatalf("Metadata with the seed gone: %v, %v", md, err)
	}
}
