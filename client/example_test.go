package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"maps"
	"os"
	"slices"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/broker/auth"
	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
	"github.com/rs/zerolog"
)

// exampleBroker starts the test fake so that the examples run; a real program dials its
// broker's address.
func exampleBroker() (addr string, stop func()) {
	fb, err := newFake()
	if err != nil {
		log.Fatal(err)
	}
	fb.AddTopic("events", 1)
	return fb.Addr(), fb.Close
}

// exampleServer starts a real broker on a free loopback port, with the admin password
// admin-secret, for the examples that need more than the fake; a real program dials its
// broker's address.
func exampleServer() (addr string, stop func()) {
	dir, err := os.MkdirTemp("", "lightq-example-")
	if err != nil {
		log.Fatal(err)
	}
	cfg := broker.DefaultConfig()
	cfg.Addr, cfg.DataDir = "127.0.0.1:0", dir
	cfg.AdminUser, cfg.AdminPassword, cfg.HashParams = "admin", "admin-secret", auth.TestParams()
	cfg.Logger = zerolog.Nop()
	srv, err := broker.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		log.Fatal(err)
	}
	return srv.Addr(), func() {
		if err := srv.Shutdown(context.Background()); err != nil {
			log.Print(err)
		}
		os.RemoveAll(dir)
	}
}

// exampleTopic creates a topic whose user is app (password app-secret), and produces
// values to its partitions: values[i] to partition i.
func exampleTopic(addr string, cfg client.TopicConfig, values ...[]string) {
	ctx := context.Background()
	admin, err := client.Dial(ctx, addr, client.Options{User: "admin", Password: "admin-secret"})
	if err != nil {
		log.Fatal(err)
	}
	defer admin.Close()
	cfg.User, cfg.Password = "app", "app-secret"
	if err := admin.CreateTopic(ctx, cfg); err != nil {
		log.Fatal(err)
	}
	if len(values) == 0 {
		return
	}
	p, err := admin.NewProducer(client.ProducerOptions{Topic: cfg.Name})
	if err != nil {
		log.Fatal(err)
	}
	for i, vs := range values {
		for _, v := range vs {
			m := client.Message{Value: []byte(v), Partition: int32(i), HasPartition: true}
			if err := p.Send(ctx, &m, nil); err != nil {
				log.Fatal(err)
			}
		}
	}
	if err := p.Close(); err != nil {
		log.Fatal(err)
	}
}

func ExampleDial() {
	addr, stop := exampleBroker()
	defer stop()

	ctx := context.Background()
	c, err := client.Dial(ctx, addr, client.Options{User: "admin", Password: "secret", ClientName: "example"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	fmt.Println("max batch:", c.Limits().MaxBatch)

	_, err = client.Dial(ctx, addr, client.Options{User: "admin", Password: "wrong"})
	fmt.Println("auth failed:", errors.Is(err, &wire.Error{Code: wire.CodeAuthFailed}))
	// Output:
	// max batch: 1048576
	// auth failed: true
}

func ExampleProducer() {
	addr, stop := exampleBroker()
	defer stop()

	ctx := context.Background()
	c, err := client.Dial(ctx, addr, client.Options{User: "admin", Password: "secret"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	p, err := c.NewProducer(client.ProducerOptions{Topic: "events", Compression: wire.CodecS2})
	if err != nil {
		log.Fatal(err)
	}
	m := client.Message{Key: []byte("user-42")}
	for i := range 3 {
		m.Value = fmt.Appendf(m.Value[:0], "event %d", i) // reusable once Send returns
		err := p.Send(ctx, &m, func(a client.Ack, err error) {
			if err != nil {
				log.Print(err)
				return
			}
			fmt.Printf("stored at partition %d offset %d\n", a.Partition, a.Offset)
		})
		if err != nil {
			log.Fatal(err)
		}
	}
	if err := p.Close(); err != nil { // flushes
		log.Fatal(err)
	}
	// Output:
	// stored at partition 0 offset 0
	// stored at partition 0 offset 1
	// stored at partition 0 offset 2
}

func ExampleConn_Subscribe() {
	addr, stop := exampleBroker()
	defer stop()

	ctx := context.Background()
	c, err := client.Dial(ctx, addr, client.Options{User: "admin", Password: "secret"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	p, err := c.NewProducer(client.ProducerOptions{Topic: "events"})
	if err != nil {
		log.Fatal(err)
	}
	for _, v := range []string{"a", "b", "c"} {
		if err := p.Send(ctx, &client.Message{Value: []byte(v)}, nil); err != nil {
			log.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		log.Fatal(err)
	}

	s, err := c.Subscribe(ctx, client.SubscribeOptions{Topic: "events"})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	n := 0
	errEnough := errors.New("enough")
	err = s.Each(ctx, func(m *client.Received) error {
		fmt.Printf("%d: %s\n", m.Offset, m.Value) // m is valid only during the call
		if n++; n == 3 {
			return errEnough
		}
		return nil
	})
	fmt.Println(err)
	// Output:
	// 0: a
	// 1: b
	// 2: c
	// enough
}

func ExampleConn_NewConsumer() {
	addr, stop := exampleServer()
	defer stop()

	ctx := context.Background()
	admin, err := client.Dial(ctx, addr, client.Options{User: "admin", Password: "admin-secret"})
	if err != nil {
		log.Fatal(err)
	}
	err = admin.CreateTopic(ctx, client.TopicConfig{Name: "audit", Kind: wire.KindDurable, User: "app", Password: "app-secret"})
	admin.Close()
	if err != nil {
		log.Fatal(err)
	}

	c, err := client.Dial(ctx, addr, client.Options{User: "app", Password: "app-secret"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	p, err := c.NewProducer(client.ProducerOptions{Topic: "audit"})
	if err != nil {
		log.Fatal(err)
	}
	for _, v := range []string{"login", "view", "logout"} {
		if err := p.Send(ctx, &client.Message{Key: []byte("user-7"), Value: []byte(v)}, nil); err != nil {
			log.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		log.Fatal(err)
	}

	k, err := c.NewConsumer(ctx, client.ConsumerOptions{Topic: "audit", Group: "auditor", Start: client.Earliest()})
	if err != nil {
		log.Fatal(err)
	}
	defer k.Close() // commits the group's position and leaves the group
	errDone := errors.New("done")
	err = k.Each(ctx, func(m *client.Received) error {
		fmt.Printf("offset %d: %s %s\n", m.Offset, m.Key, m.Value)
		if m.Offset == 2 {
			return errDone
		}
		return nil
	})
	fmt.Println(err == errDone, "position", k.Position(0))
	// Output:
	// offset 0: user-7 login
	// offset 1: user-7 view
	// offset 2: user-7 logout
	// true position 3
}

func ExampleConn_Subscribe_queueGroup() {
	addr, stop := exampleServer()
	defer stop()
	exampleTopic(addr, client.TopicConfig{Name: "jobs", Kind: wire.KindTransient, Partitions: 2})

	// Two workers, each on a connection of its own, in the queue group "workers": each
	// message goes to one of them.
	ctx := context.Background()
	received := make(chan string, 16)
	for _, name := range []string{"worker-1", "worker-2"} {
		c, err := client.Dial(ctx, addr, client.Options{User: "app", Password: "app-secret", ClientName: name})
		if err != nil {
			log.Fatal(err)
		}
		defer c.Close()
		s, err := c.Subscribe(ctx, client.SubscribeOptions{Topic: "jobs", QueueGroup: "workers"})
		if err != nil {
			log.Fatal(err)
		}
		go func() {
			for m := range s.Messages() { // ends when the connection closes
				received <- string(m.Value)
			}
		}()
	}

	c, err := client.Dial(ctx, addr, client.Options{User: "app", Password: "app-secret"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	p, err := c.NewProducer(client.ProducerOptions{Topic: "jobs"})
	if err != nil {
		log.Fatal(err)
	}
	for i := range 6 {
		if err := p.Send(ctx, &client.Message{Value: fmt.Appendf(nil, "job-%d", i)}, nil); err != nil {
			log.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		log.Fatal(err)
	}

	deliveries := map[string]int{}
	for range 6 {
		deliveries[<-received]++
	}
	once := 0
	for _, n := range deliveries {
		if n == 1 {
			once++
		}
	}
	fmt.Printf("%d jobs received, %d of them once\n", len(deliveries), once)
	// Output:
	// 6 jobs received, 6 of them once
}

func ExampleConsumerOptions_group() {
	addr, stop := exampleServer()
	defer stop()
	exampleTopic(addr, client.TopicConfig{Name: "orders", Kind: wire.KindDurable, Partitions: 2},
		[]string{"a", "b", "c"}, []string{"x", "y", "z"})

	// Members of the group "billing" share the topic's partitions: the broker assigns them
	// and calls OnAssign when a member gets some.
	ctx := context.Background()
	type assignment struct {
		member string
		starts map[int32]int64
	}
	assigned := make(chan assignment, 8)
	member := func(name string) *client.Consumer {
		k, err := client.DialConsumer(ctx, addr, client.Options{User: "app", Password: "app-secret"}, client.ConsumerOptions{
			Topic: "orders",
			Group: "billing",
			OnAssign: func(starts map[int32]int64) {
				assigned <- assignment{name, starts}
			},
		})
		if err != nil {
			log.Fatal(err)
		}
		return k
	}
	first := member("first")
	defer first.Close()
	fmt.Println("first gets", len((<-assigned).starts), "partitions")
	second := member("second") // the first lets one partition go, then the second gets it
	fmt.Println("second gets", len((<-assigned).starts), "partition; the first keeps", len(first.Partitions()))

	// Each member reads only its own partition.
	type record struct {
		member    string
		partition int32
		value     string
	}
	records := make(chan record, 8)
	for name, k := range map[string]*client.Consumer{"first": first, "second": second} {
		go func() {
			err := k.Each(ctx, func(m *client.Received) error {
				records <- record{name, m.Partition, string(m.Value)}
				return nil
			})
			if !errors.Is(err, client.ErrClosed) {
				log.Fatal(err)
			}
		}()
	}
	readers := map[int32]map[string]bool{} // partition: its readers
	var values []string
	for range 6 {
		r := <-records
		if readers[r.partition] == nil {
			readers[r.partition] = map[string]bool{}
		}
		readers[r.partition][r.member] = true
		values = append(values, r.value)
	}
	slices.Sort(values)
	fmt.Println(values, "with one reader per partition:", len(readers[0]) == 1 && len(readers[1]) == 1 && !maps.Equal(readers[0], readers[1]))

	// A member that closes commits its positions and leaves the group; the other one takes
	// its partition over at once, where it stopped.
	if err := second.Close(); err != nil {
		log.Fatal(err)
	}
	a := <-assigned
	for _, offset := range a.starts {
		fmt.Println(a.member, "takes over the other partition at offset", offset)
	}
	// Output:
	// first gets 2 partitions
	// second gets 1 partition; the first keeps 1
	// [a b c x y z] with one reader per partition: true
	// first takes over the other partition at offset 3
}

func ExampleDialConsumer() {
	addr, stop := exampleServer()
	defer stop()
	exampleTopic(addr, client.TopicConfig{Name: "audit", Kind: wire.KindDurable, Partitions: 2},
		[]string{"login", "view", "logout"}, []string{"start", "stop"})

	// A consumer without a group reads the partitions it names (default: all), each from
	// its own start, and redials when its connection drops, resuming at its positions.
	// Here the application had stored that it read partition 0 up to offset 1.
	ctx := context.Background()
	k, err := client.DialConsumer(ctx, addr, client.Options{User: "app", Password: "app-secret"}, client.ConsumerOptions{
		Topic:  "audit",
		Start:  client.Earliest(),
		Starts: map[int32]client.StartPosition{0: client.AtOffset(2)},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer k.Close()
	var got []string
	errDone := errors.New("done")
	err = k.Each(ctx, func(m *client.Received) error {
		got = append(got, fmt.Sprintf("partition %d offset %d: %s", m.Partition, m.Offset, m.Value))
		if len(got) == 3 {
			return errDone
		}
		return nil
	})
	if err != errDone {
		log.Fatal(err)
	}
	slices.Sort(got) // partitions are interleaved
	for _, g := range got {
		fmt.Println(g)
	}
	// Output:
	// partition 0 offset 2: logout
	// partition 1 offset 0: start
	// partition 1 offset 1: stop
}
