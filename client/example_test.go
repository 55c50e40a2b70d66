package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

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
	dir, err := os.MkdirTemp("", "lightq-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
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
	defer srv.Shutdown(context.Background())

	ctx := context.Background()
	admin, err := client.Dial(ctx, srv.Addr(), client.Options{User: "admin", Password: "admin-secret"})
	if err != nil {
		log.Fatal(err)
	}
	err = admin.CreateTopic(ctx, client.TopicConfig{Name: "audit", Kind: wire.KindDurable, User: "app", Password: "app-secret"})
	admin.Close()
	if err != nil {
		log.Fatal(err)
	}

	c, err := client.Dial(ctx, srv.Addr(), client.Options{User: "app", Password: "app-secret"})
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
