package broker

import (
	"fmt"
	"testing"

	"github.com/lightq/lightq/wire"
)

func TestHandshakeAndPing(t *testing.T) {
	srv := startBroker(t, nil)
	c := dialRaw(t, srv.Addr())
	hr := c.hello()
	if hr.ProtocolVersion != wire.Version || hr.Limits != srv.cfg.Limits {
		t.Fatalf("hello response %+v, want limits %+v", hr, srv.cfg.Limits)
	}
	c.ping() // allowed before AUTH
	c.auth(testAdminUser, testAdminPass)
	c.ping()
}

func TestProduceFanOutInOrder(t *testing.T) {
	srv := startBroker(t, nil)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createTopic("orders", 2, "orders-user", "orders-pw")

	subs := []*rawClient{login(t, srv.Addr(), "orders-user", "orders-pw"), login(t, srv.Addr(), "orders-user", "orders-pw")}
	for _, s := range subs {
		s.subscribe("orders", wire.PartitionAny, "", 1<<20)
	}
	prod := login(t, srv.Addr(), "orders-user", "orders-pw")
	const batches = 50
	for i := 0; i < batches; i++ {
		resp := prod.produce("orders", int32(i%2), testBatch(t, fmt.Sprintf("m%d-a", i), fmt.Sprintf("m%d-b", i)))
		if want := int64(i / 2 * 2); resp.BaseOffset != want || resp.Partition != uint32(i%2) {
			t.Fatalf("batch %d acked at partition %d offset %d, want %d/%d", i, resp.Partition, resp.BaseOffset, i%2, want)
		}
	}
	for si, s := range subs {
		next := map[uint32]int64{}
		got := 0
		for got < batches {
			d := s.readDeliver()
			if d.dropped != 0 {
				t.Fatalf("subscriber %d: %d dropped", si, d.dropped)
			}
			if d.batch.BaseOffset != next[d.partition] {
				t.Fatalf("subscriber %d partition %d: offset %d, want %d", si, d.partition, d.batch.BaseOffset, next[d.partition])
			}
			next[d.partition] += int64(len(d.values))
			got++
		}
	}
}
