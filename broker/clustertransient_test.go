package broker

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/lightq/lightq/wire"
)

// mustRead2 reads the answer to corr (the first frame: nothing else is in flight).
func (c *rawClient) mustRead2(corr uint32) frame {
	c.t.Helper()
	f := c.mustRead()
	if f.h.Corr != corr {
		c.t.Fatalf("answer to corr %d, want %d", f.h.Corr, corr)
	}
	return f
}

// ringMemoryOf reads s.ringMemory (adminMu's).
func ringMemoryOf(s *Server) int64 {
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	return s.ringMemory
}

// TestClusterTransientHome: a transient topic of a 3-broker cluster has each partition on
// one broker, its home, which alone holds its ring. Another broker answers PRODUCE and
// SUBSCRIBE of it NOT_LEADER naming the home's address, and a SUBSCRIBE of every partition
// NOT_LEADER listing the homes; a move of it, and the removal of its home, are refused. The home restarted builds the ring
// again (empty) from its metadata before it serves clients. DELETE_TOPIC on any broker
// removes it everywhere and gives its ring memory back.
func TestClusterTransientHome(t *testing.T) {
	tc := startCluster(t, 3)
	admin := login(t, tc.brokers[0].Addr(), testAdminUser, testAdminPass)
	// The metadata group may still be settling (the offsets topic is created meanwhile): a
	// creation not applied in time is tried again.
	ct := wire.CreateTopic{Name: "tt", Kind: wire.KindTransient, Partitions: 3, User: "app", Password: "app-secret"}
	waitUntil(t, "the topic created", func() bool {
		f := admin.mustRead2(admin.send(wire.OpCreateTopic, ct.AppendTo(nil)))
		if f.h.Op != wire.OpError {
			return true
		}
		var eb wire.ErrorBody
		_ = eb.Decode(f.body)
		switch eb.Code {
		case wire.CodeTopicExists:
			return true
		case wire.CodeReplicationTimeout:
			return false
		}
		t.Fatalf("CREATE_TOPIC: %s %s", eb.Code, eb.Message)
		return false
	})
	for i := range tc.brokers {
		waitUntil(t, fmt.Sprintf("broker %d has the topic and its user", i+1), func() bool {
			return (*tc.brokers[i].topics.Load())["tt"] != nil && tc.brokers[i].lookupUser("app") != nil
		})
	}
	md := tc.metadata(1, "tt")
	if len(md.Topics) != 1 || len(md.Topics[0].Partitions) != 3 {
		t.Fatalf("metadata: %+v", md)
	}
	pm := md.Topics[0].Partitions[0]
	if pm.Leader == 0 || len(pm.Replicas) != 1 || pm.Replicas[0] != pm.Leader {
		t.Fatalf("partition 0: leader %d, replicas %v: want its home as both", pm.Leader, pm.Replicas)
	}
	h := int(pm.Leader - 1)
	o := (h + 1) % 3
	for i, s := range tc.brokers {
		tp := (*s.topics.Load())["tt"]
		if hasRing := tp.parts[0].ring != nil; hasRing != (i == h) || tp.kind != wire.KindTransient || tp.cluster == nil {
			t.Fatalf("broker %d: ring for partition 0 %v, kind %s, cluster %v; the home is broker %d", i+1, hasRing, tp.kind, tp.cluster != nil, h+1)
		}
	}
	memBefore := ringMemoryOf(tc.brokers[h])
	if memBefore == 0 {
		t.Fatal("the home counts no ring memory")
	}

	// Another broker sends clients to the home; the topic's user exists there too.
	other := login(t, tc.brokers[o].Addr(), "app", "app-secret")
	e := other.expectError(other.send(wire.OpProduce, produceBody("tt", 0, wire.AcksWritten, testBatch(t, "x"))), wire.CodeNotLeader)
	if !strings.Contains(e.Message, tc.brokers[h].Addr()) {
		t.Errorf("PRODUCE NOT_LEADER %q does not name the home's address %s", e.Message, tc.brokers[h].Addr())
	}
	sub := wire.Subscribe{Topic: "tt", Partition: 0, Credit: 1 << 20}
	e = other.expectError(other.send(wire.OpSubscribe, sub.AppendTo(nil)), wire.CodeNotLeader)
	if !strings.Contains(e.Message, tc.brokers[h].Addr()) {
		t.Errorf("SUBSCRIBE NOT_LEADER %q does not name the home's address %s", e.Message, tc.brokers[h].Addr())
	}
	sub.Partition = wire.PartitionAny
	if e := other.expectError(other.send(wire.OpSubscribe, sub.AppendTo(nil)), wire.CodeNotLeader); !strings.Contains(e.Message, "subscribe to each partition at its home") {
		t.Errorf("SUBSCRIBE of every partition: %q", e.Message)
	}
	var ea *errAnswer
	if err := tc.brokers[o].moveReplicas(&wire.MoveReplicas{Topic: "tt", Partition: 0, Replicas: []uint32{uint32(o + 1)}}); !errors.As(err, &ea) || ea.code != wire.CodeInvalidRequest {
		t.Errorf("moving a transient partition: %v, want INVALID_REQUEST", err)
	}
	if err := tc.brokers[o].removeBroker(uint32(h + 1)); !errors.As(err, &ea) || ea.code != wire.CodeBrokerInUse || !strings.Contains(ea.msg, "home of transient partitions") {
		t.Errorf("removing the home: %v, want BROKER_IN_USE naming its transient partitions", err)
	}
	other.conn.Close()

	// At the home: produce and receive.
	home := login(t, tc.brokers[h].Addr(), "app", "app-secret")
	id := home.subscribe("tt", 0, "", 1<<20)
	home.produce("tt", 0, testBatch(t, "a", "b"))
	if d := home.readDeliver(); d.sub != id || d.partition != 0 || strings.Join(d.values, ",") != "a,b" {
		t.Fatalf("delivered %+v", d)
	}
	home.conn.Close()

	// The home restarts: its ring is built again, empty, before it takes clients.
	stopped := tc.brokers[h]
	tc.brokers[h] = nil
	if err := stopped.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	tc.brokers[h] = startWith(t, tc.cfgs[h])
	tc.wire()
	tp := (*tc.brokers[h].topics.Load())["tt"]
	if tp == nil || tp.parts[0].ring == nil {
		t.Fatal("the restarted home serves clients without the partition's ring")
	}
	if oldest, next := tp.parts[0].ring.Messages(); oldest != 0 || next != 0 {
		t.Fatalf("the restarted home's ring holds messages %d-%d: a ring is not kept across a restart", oldest, next)
	}
	if got := ringMemoryOf(tc.brokers[h]); got != memBefore {
		t.Fatalf("the restarted home counts %d bytes of ring memory, before %d", got, memBefore)
	}
	home = login(t, tc.brokers[h].Addr(), "app", "app-secret")
	id = home.subscribe("tt", 0, "", 1<<20)
	home.produce("tt", 0, testBatch(t, "c"))
	if d := home.readDeliver(); d.sub != id || strings.Join(d.values, ",") != "c" {
		t.Fatalf("delivered after the restart %+v", d)
	}

	// Deleted through another broker: gone everywhere, the subscription ended, the memory back.
	admin2 := login(t, tc.brokers[o].Addr(), testAdminUser, testAdminPass)
	admin2.expectResponse(wire.OpDeleteTopic, admin2.send(wire.OpDeleteTopic, (&wire.TopicName{Name: "tt"}).AppendTo(nil)))
	for i := range tc.brokers {
		waitUntil(t, fmt.Sprintf("broker %d dropped the topic", i+1), func() bool { return (*tc.brokers[i].topics.Load())["tt"] == nil })
	}
	home.expectError(id, wire.CodeUnknownTopic)
	if got := ringMemoryOf(tc.brokers[h]); got != 0 {
		t.Fatalf("the home counts %d bytes of ring memory after the deletion", got)
	}
	// Its grant went with it: the topic's user may not name it any more.
	home.expectError(home.send(wire.OpProduce, produceBody("tt", 0, wire.AcksWritten, testBatch(t, "x"))), wire.CodeNotAuthorized)
}
