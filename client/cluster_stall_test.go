package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/broker/brokertest"
	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/internal/proxytest"
	"github.com/lightq/lightq/wire"
)

// TestClusterFrozenLeader: three real brokers in this process, each client port behind a
// forwarder that METADATA advertises. An idempotent producer runs while the leader of its
// partition freezes as under SIGSTOP (its client forwarder and the forwarder in front of its
// cluster port stop forwarding: its clients get no answer and it hears no peer, so it steps
// down and the others elect a new leader). The producer's Conn declares the frozen connection
// dead after StallTimeout, asks another broker who leads, and the unacknowledged batches go
// to the new leader: the first message sent after the freeze is acknowledged within a bound,
// and after the old leader is back every message is acknowledged once and stored once.
func TestClusterFrozenLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster of three brokers")
	}
	fronts := make([]*proxytest.Proxy, 3)
	addrs := make([]string, 3)
	for i := range fronts {
		fronts[i] = proxytest.Start(t)
		addrs[i] = fronts[i].Addr()
	}
	cl := brokertest.StartCluster(t, 3, func(cfg *broker.Config) {
		cfg.AdminUser, cfg.AdminPassword = itAdminUser, itAdminPass
		cfg.Cluster.AdvertiseAddr = addrs[cfg.NodeID-1]
	})
	for i, s := range cl.Brokers {
		fronts[i].SetBackend(s.Addr())
	}
	seeds := strings.Join(addrs, ",")
	admin := itDial(t, seeds, itAdminUser, itAdminPass)
	itEventually(t, "the replicated topic created (every broker announced)", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := admin.CreateTopic(ctx, client.TopicConfig{Name: "events", Kind: wire.KindDurable, Partitions: 1, User: itUser, Password: itPass,
			Options: []wire.Option{{Key: wire.OptionReplicationFactor, Value: "3"}}})
		return err == nil || errors.Is(err, &wire.Error{Code: wire.CodeTopicExists})
	})
	for i, a := range addrs { // the topic's user is known everywhere: a refused login ends a Conn
		itEventually(t, fmt.Sprintf("broker %d knows the topic's user", i+1), func() bool {
			c, err := client.Dial(itCtx(t), a, client.Options{User: itUser, Password: itPass})
			if err != nil {
				return false
			}
			defer c.Close()
			_, err = c.Metadata(itCtx(t), "events")
			return err == nil
		})
	}
	const stall = time.Second
	conn, err := client.Dial(itCtx(t), seeds, client.Options{User: itUser, Password: itPass, ClientName: t.Name(), StallTimeout: stall, DialTimeout: stall})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var leader uint32
	itEventually(t, "a leader of events/0", func() bool {
		md, err := conn.ClusterMetadata(itCtx(t), "events")
		if err == nil && len(md.Topics) == 1 && len(md.Topics[0].Partitions) == 1 {
			leader = md.Topics[0].Partitions[0].Leader
		}
		return leader != 0
	})
	p, err := conn.NewProducer(client.ProducerOptions{Topic: "events", Linger: time.Millisecond, DeliveryTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	// The workload: messages sent one after the other (Send blocks while MaxInFlight
	// batches wait), each outcome recorded with its time.
	const limit = 50_000
	log := newAckLog()
	var (
		mu      sync.Mutex
		ackedAt = make([]time.Time, limit)
		acked   atomic.Int64
		sent    atomic.Int64
	)
	stop := make(chan struct{})
	sendDone := make(chan error, 1)
	go func() {
		for i := range limit {
			select {
			case <-stop:
				sendDone <- nil
				return
			default:
			}
			cb := log.cb(i)
			m := client.Message{Value: value(i)}
			if err := p.Send(itCtx(t), &m, func(a client.Ack, err error) {
				cb(a, err)
				if err == nil {
					mu.Lock()
					ackedAt[i] = time.Now()
					mu.Unlock()
					acked.Add(1)
				}
			}); err != nil {
				sendDone <- fmt.Errorf("Send %d: %w", i, err)
				return
			}
			sent.Add(1)
		}
		sendDone <- nil
	}()
	itEventually(t, "200 messages acknowledged before the freeze", func() bool { return acked.Load() >= 200 })

	old := int(leader - 1)
	observer := itDial(t, addrs[(old+1)%3], itAdminUser, itAdminPass) // a broker that stays up
	fronts[old].Freeze()
	cl.PeerProxy(old).Freeze()
	frozen := time.Now()
	// When the others name a new leader: the part of the failover that is the election's.
	elected := make(chan time.Duration, 1)
	go func() {
		for time.Since(frozen) < 20*time.Second {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			md, err := observer.ClusterMetadata(ctx, "events")
			cancel()
			if err == nil && len(md.Topics) == 1 && len(md.Topics[0].Partitions) == 1 {
				if l := md.Topics[0].Partitions[0].Leader; l != 0 && l != leader {
					elected <- time.Since(frozen)
					return
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		elected <- 0
	}()
	firstAfter := int(sent.Load()) // sent after the freeze: only a new leader can acknowledge it
	before := acked.Load()
	var failover time.Duration
	deadline := frozen.Add(20 * time.Second)
	for failover == 0 && time.Now().Before(deadline) {
		mu.Lock()
		for i := firstAfter; i < limit; i++ {
			if !ackedAt[i].IsZero() {
				failover = ackedAt[i].Sub(frozen)
				break
			}
		}
		mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	if failover == 0 {
		t.Fatalf("no message sent after the freeze acknowledged within 20s (%d acknowledged before, %d now)", before, acked.Load())
	}
	itEventually(t, "500 more messages acknowledged by the new leader", func() bool { return acked.Load() >= before+500 })
	fronts[old].Thaw()
	cl.PeerProxy(old).Thaw()
	close(stop)
	if err := <-sendDone; err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	n := int(sent.Load())
	log.exactlyOnce(t, n)
	if got := acked.Load(); got != int64(n) {
		t.Fatalf("%d of %d messages acknowledged", got, n)
	}
	t.Logf("StallTimeout %v: node %d frozen; another named leader after %v; the first message sent after the freeze acknowledged after %v; %d messages",
		stall, leader, (<-elected).Round(time.Millisecond), failover.Round(time.Millisecond), n)
	if failover > 15*time.Second {
		t.Fatalf("failover took %v", failover)
	}

	// Every message is stored once: the first n records hold each once, and nothing but
	// control batches follows them.
	k := ckConsumer(t, conn, client.ConsumerOptions{Topic: "events", Start: client.Earliest()})
	seen := make(map[string]int, n)
	for _, r := range ckCollect(t, k, n) {
		seen[string(r.Value)]++
	}
	for i := range n {
		if c := seen[string(value(i))]; c != 1 {
			t.Fatalf("message %d stored %d times", i, c)
		}
	}
	res, err := conn.Fetch(itCtx(t), wire.Fetch{Topic: "events", Offset: k.Position(0), MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if it := res.Iter(); it.Next() {
		t.Fatalf("records after the %d messages, from offset %d", n, it.Batch().BaseOffset)
	}
}
