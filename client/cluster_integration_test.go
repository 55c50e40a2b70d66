package client_test

// A real broker without cluster settings is a cluster of one (PROTOCOL.md section 16): it
// leads every partition at the address the client used, so a producer and a consumer of
// its topics keep the Conn's one connection.

import (
	"errors"
	"net"
	"testing"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/internal/proxytest"
	"github.com/lightq/lightq/wire"
)

func TestClusterOfOneBroker(t *testing.T) {
	t.Parallel()
	srv := startBroker(t, func(cfg *broker.Config) { cfg.NodeID = 7 })
	admin := itDial(t, srv.Addr(), itAdminUser, itAdminPass)
	ckDurable(t, admin, "dur", 2, wire.Option{Key: "fsync", Value: "never"})
	proxy := proxytest.Start(t)
	proxy.SetBackend(srv.Addr())

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	c := itDial(t, dead+","+proxy.Addr(), itUser, itPass)
	md, err := c.ClusterMetadata(itCtx(t), "dur")
	if err != nil {
		t.Fatal(err)
	}
	if md.Legacy || md.NodeID != 7 || len(md.Brokers) != 1 || md.Brokers[0].NodeID != 7 || md.Brokers[0].Addr != proxy.Addr() {
		t.Fatalf("cluster metadata %+v, want node 7 alone at %s", md, proxy.Addr())
	}
	for _, p := range md.Topics[0].Partitions {
		if p.Leader != 7 || len(p.Replicas) != 1 || p.Replicas[0] != 7 {
			t.Fatalf("partition %d: leader %d, replicas %v; want 7 and [7]", p.ID, p.Leader, p.Replicas)
		}
	}

	const n = 2000
	var acks []client.Ack
	ckProduce(t, c, client.ProducerOptions{Topic: "dur", BatchBytes: 4 << 10}, 0, n, &acks, nil)
	k := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur", MaxBytes: 8 << 10})
	ckVerify(t, ckCollect(t, k, n), acks, ckRange(0, n))
	if _, err := c.ListOffsets(itCtx(t), wire.ListOffsets{Topic: "dur", Partition: 1, Mode: wire.OffsetLatest}); err != nil {
		t.Fatal(err)
	}
	if got := proxy.Accepted(); got != 1 {
		t.Fatalf("%d connections through the proxy, want 1", got)
	}
	// The thin requests of a partition the broker does not have are refused as before.
	if _, err := c.ListOffsets(itCtx(t), wire.ListOffsets{Topic: "dur", Partition: 9, Mode: wire.OffsetLatest}); !errors.Is(err, &wire.Error{Code: wire.CodeUnknownPartition}) {
		t.Fatalf("ListOffsets of partition 9: %v", err)
	}
}
