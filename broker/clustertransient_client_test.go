package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lightq/lightq/broker/brokertest"
	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// TestClusterTransientTopicClient: a transient topic created on broker 1 of three is the
// cluster's: its user logs in on every broker, METADATA on every broker names the same home
// for each partition, a Go client connected to broker 2 produces to every partition's home,
// and subscribers connected to broker 3 (every partition, merged from the homes) and to a
// broker that is not partition 1's home (that partition, after NOT_LEADER) receive every
// message once, in order per partition, and in the order the acks gave.
func TestClusterTransientTopicClient(t *testing.T) {
	const (
		topic = "ticks"
		parts = 3
		n     = 3000
		user  = "tapp"
		pass  = "tapp-secret"
	)
	cl := brokertest.StartCluster(t, 3, nil)
	admin, err := client.Dial(reqCtx(t), cl.Brokers[0].Addr(), client.Options{User: brokertest.AdminUser, Password: brokertest.AdminPassword})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	eventually(t, "every broker in the metadata", func() bool {
		md, err := admin.ClusterMetadata(reqCtx(t))
		return err == nil && len(md.Brokers) == 3
	})
	eventually(t, "the transient topic created", func() bool {
		err := admin.CreateTopic(reqCtx(t), client.TopicConfig{Name: topic, Kind: wire.KindTransient, Partitions: parts, User: user, Password: pass})
		return err == nil || errors.Is(err, &wire.Error{Code: wire.CodeTopicExists})
	})
	conns := make([]*client.Conn, 3)
	homes := make([]uint32, parts)
	for i, s := range cl.Brokers {
		// Every broker learns the topic and its user when it applies the creation, which
		// the broker that took it may have done first.
		eventually(t, fmt.Sprintf("the topic's user logs in on broker %d", i+1), func() bool {
			c, err := client.Dial(reqCtx(t), s.Addr(), client.Options{User: user, Password: pass})
			if err != nil {
				return false
			}
			conns[i] = c
			return true
		})
		c := conns[i]
		defer c.Close()
		eventually(t, fmt.Sprintf("broker %d describes the topic", i+1), func() bool {
			md, err := c.ClusterMetadata(reqCtx(t), topic)
			if err != nil || len(md.Topics) != 1 || len(md.Topics[0].Partitions) != parts {
				return false
			}
			for _, p := range md.Topics[0].Partitions {
				if p.Leader == 0 || len(p.Replicas) != 1 || p.Replicas[0] != p.Leader {
					t.Fatalf("broker %d: partition %d has leader %d, replicas %v: want its home as both", i+1, p.ID, p.Leader, p.Replicas)
				}
				switch {
				case homes[p.ID] == 0:
					homes[p.ID] = p.Leader
				case homes[p.ID] != p.Leader:
					t.Fatalf("broker %d names node %d the home of partition %d, another broker node %d", i+1, p.Leader, p.ID, homes[p.ID])
				}
			}
			return true
		})
	}
	distinct := map[uint32]bool{}
	for _, h := range homes {
		distinct[h] = true
	}
	if len(distinct) != parts {
		t.Fatalf("homes %v: want the %d partitions on %d brokers (Place spreads them)", homes, parts, parts)
	}

	all, err := conns[2].Subscribe(reqCtx(t), client.SubscribeOptions{Topic: topic, Window: 256 << 10})
	if err != nil {
		t.Fatalf("subscribe to every partition through broker 3: %v", err)
	}
	defer all.Close()
	if all.Partitions() != parts {
		t.Fatalf("subscribed %d partitions, want %d", all.Partitions(), parts)
	}
	// A Conn that has not asked METADATA, to a broker that is not partition 1's home: its
	// SUBSCRIBE is answered NOT_LEADER, and it follows to the home.
	away := int(homes[1]) % 3 // the broker after the home, by index
	fresh, err := client.Dial(reqCtx(t), cl.Brokers[away].Addr(), client.Options{User: user, Password: pass})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	one, err := fresh.Subscribe(reqCtx(t), client.SubscribeOptions{Topic: topic, Partition: 1, HasPartition: true})
	if err != nil {
		t.Fatalf("subscribe to partition 1 through broker %d: %v", away+1, err)
	}
	defer one.Close()
	// Each with InlineHandler on a subscription of several legs: a reader per connection,
	// and only one of them may run the handler at a time (-race checks it).
	inl, err := conns[0].Subscribe(reqCtx(t), client.SubscribeOptions{Topic: topic, Window: 256 << 10, InlineHandler: true})
	if err != nil {
		t.Fatalf("subscribe to every partition through broker 1, inline: %v", err)
	}
	defer inl.Close()
	// Each waits before anything is produced, so the batches find the handler lent.
	type seen struct {
		i         int
		partition int32
		offset    int64
	}
	var inlineGot []seen // the handler's; read after inlineDone
	inlineDone := make(chan error, 1)
	errAll := errors.New("all received")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		inlineDone <- inl.Each(ctx, func(r *client.Received) error {
			i, err := strconv.Atoi(string(r.Value))
			if err != nil || i < 0 || i >= n {
				return fmt.Errorf("message %q", r.Value)
			}
			if inlineGot = append(inlineGot, seen{i, r.Partition, r.Offset}); len(inlineGot) == n {
				return errAll
			}
			return nil
		})
	}()

	p, err := conns[1].NewProducer(client.ProducerOptions{Topic: topic, BatchBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	acks := make([]client.Ack, n)
	var mu sync.Mutex
	var sendErr error
	for i := range n {
		m := client.Message{Key: fmt.Appendf(nil, "k-%d", i), Value: []byte(strconv.Itoa(i))}
		if err := p.Send(reqCtx(t), &m, func(a client.Ack, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil && sendErr == nil {
				sendErr = err
			}
			acks[i] = a
		}); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if sendErr != nil {
		t.Fatalf("produce through broker 2: %v", sendErr)
	}
	perPart := make([]int, parts)
	for _, a := range acks {
		perPart[a.Partition]++
	}
	for i, c := range perPart {
		if c == 0 {
			t.Fatalf("no message went to partition %d (counts %v)", i, perPart)
		}
	}

	check := func(name string, s *client.Subscription, want int) {
		t.Helper()
		last := map[int32]int{}
		got := 0
		timeout := time.NewTimer(30 * time.Second)
		defer timeout.Stop()
		for got < want {
			var r client.Received
			var ok bool
			select {
			case r, ok = <-s.Messages():
			case <-timeout.C:
				t.Fatalf("%s: %d of %d messages after 30 s", name, got, want)
			}
			if !ok {
				t.Fatalf("%s: the subscription ended after %d of %d messages: %v", name, got, want, s.Err())
			}
			i, err := strconv.Atoi(string(r.Value))
			if err != nil || i < 0 || i >= n {
				t.Fatalf("%s: message %q", name, r.Value)
			}
			if a := acks[i]; a.Partition != r.Partition || a.Offset != r.Offset {
				t.Fatalf("%s: message %d at %d/%d, acked at %d/%d", name, i, r.Partition, r.Offset, a.Partition, a.Offset)
			}
			if prev, seen := last[r.Partition]; seen && i <= prev {
				t.Fatalf("%s: partition %d delivered message %d after %d", name, r.Partition, i, prev)
			}
			if r.Dropped != 0 {
				t.Fatalf("%s: %d messages dropped before %d", name, r.Dropped, i)
			}
			last[r.Partition] = i
			got++
		}
	}
	check("every partition at broker 3", all, n)
	check("partition 1 through another broker", one, perPart[1])

	if err := <-inlineDone; !errors.Is(err, errAll) {
		t.Fatalf("inline Each over every partition: %d of %d messages: %v", len(inlineGot), n, err)
	}
	last := map[int32]int{}
	for _, g := range inlineGot {
		if a := acks[g.i]; a.Partition != g.partition || a.Offset != g.offset {
			t.Fatalf("inline: message %d at %d/%d, acked at %d/%d", g.i, g.partition, g.offset, a.Partition, a.Offset)
		}
		if prev, ok := last[g.partition]; ok && g.i <= prev {
			t.Fatalf("inline: partition %d delivered message %d after %d", g.partition, g.i, prev)
		}
		last[g.partition] = g.i
	}
}
