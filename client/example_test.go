package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
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
