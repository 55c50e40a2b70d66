// Package lqbench is the lqbench command (cmd/lqbench is a thin main around Main) and its
// engine: it produces and consumes messages through the Go client and reports throughput as
// the original LightQ's lightq-producer and lightq-consumer did, plus end-to-end latency
// percentiles from timestamps carried in every message.
//
// Each message value starts with a 16-byte stamp: the intended send time (unix ns) and the
// message's sequence number. With a rate limit every message is stamped, and the intended
// send time is the slot of the open-loop schedule, not the moment Send ran, so a stall shows
// up as latency instead of hiding it (no coordinated omission). Without one, one message in
// sampleEvery (and each producer's first and last) carries the time it was sent and the
// others a zero time: latency percentiles come from that sample, and neither end reads the
// clock for every message (two clock reads per message were ~4% of the machine's CPU in a
// 1 KiB run).
//
// Concurrency: Run starts its own goroutines and returns when they are done; a Config is
// read-only during Run.
package lqbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// StampSize is the size of the stamp at the start of every benchmark message.
const StampSize = 16

// sampleEvery is how often a message is stamped with its send time in a run without a rate.
const sampleEvery = 16

// Config describes one benchmark run.
type Config struct {
	Mode          string // "produce", "consume" or "e2e"
	Broker        string // an address, or a comma-separated list of a cluster's (client.Dial)
	User          string // the topic's credentials
	Password      string
	AdminUser     string // when set, the topic is created (an existing one is reused)
	AdminPassword string
	// TLS, when not nil, connects to the broker's TLS port (Broker is then its tls-addr).
	TLS *client.TLSOptions

	Topic        string
	Kind         wire.Kind
	Partitions   int
	TopicOptions []wire.Option // for a topic lqbench creates, e.g. fsync=always

	Messages    int // per producer
	Size        int // value bytes, at least StampSize
	Producers   int
	Consumers   int
	Group       string // consumers share a queue group (transient) or consumer group (durable) when set, else each gets everything
	BatchBytes  int
	Linger      time.Duration
	MaxInFlight int
	Acks        client.AckLevel
	// NoIdempotence turns the producers' idempotence off (to measure what it costs).
	NoIdempotence bool
	Compression   wire.Codec
	Rate          int // total messages per second over all producers; 0 = as fast as possible
	Window        int // subscription credit window

	// IdleTimeout ends a consumer that has received nothing for this long.
	IdleTimeout time.Duration
	// Progress, when set, receives a progress bar.
	Progress io.Writer
}

// Defaults fills unset fields.
func (c *Config) Defaults() {
	if c.Mode == "" {
		c.Mode = "e2e"
	}
	if c.Topic == "" {
		c.Topic = "lqbench"
	}
	if c.Kind == 0 {
		c.Kind = wire.KindTransient
	}
	if c.Partitions == 0 {
		c.Partitions = 1
	}
	if c.Messages == 0 {
		c.Messages = 1_000_000
	}
	if c.Size == 0 {
		c.Size = 100
	}
	if c.Producers == 0 {
		c.Producers = 1
	}
	if c.Consumers == 0 {
		c.Consumers = 1
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 5 * time.Second
	}
	if c.Window == 0 {
		c.Window = 16 << 20
	}
	if c.BatchBytes == 0 {
		c.BatchBytes = 512 << 10
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 16
	}
}

func (c *Config) validate() error {
	switch {
	case c.Mode != "produce" && c.Mode != "consume" && c.Mode != "e2e":
		return fmt.Errorf("mode %q: want produce, consume or e2e", c.Mode)
	case c.Size < StampSize:
		return fmt.Errorf("message size %d is below the %d-byte timestamp stamp", c.Size, StampSize)
	case c.Messages < 1 || c.Producers < 1 || c.Consumers < 1 || c.Partitions < 1:
		return errors.New("messages, producers, consumers and partitions must be at least 1")
	case c.Rate < 0:
		return errors.New("rate must not be negative")
	case c.Broker == "":
		return errors.New("no broker address")
	}
	return nil
}

// Run executes the benchmark described by cfg.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.Defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.AdminUser != "" {
		if err := ensureTopic(ctx, &cfg); err != nil {
			return nil, err
		}
	}
	var r *Result
	var err error
	switch cfg.Mode {
	case "produce":
		r, err = runProduce(ctx, &cfg)
	case "consume":
		r, err = runConsume(ctx, &cfg, nil)
	default:
		r, err = runE2E(ctx, &cfg)
	}
	if r != nil {
		r.Kind = cfg.Kind.String()
	}
	return r, err
}

// ensureTopic creates the benchmark topic with the admin credentials; an existing topic is
// fine.
func ensureTopic(ctx context.Context, cfg *Config) error {
	c, err := client.Dial(ctx, cfg.Broker, client.Options{User: cfg.AdminUser, Password: cfg.AdminPassword, ClientName: "lqbench", TLS: cfg.TLS})
	if err != nil {
		return fmt.Errorf("admin connection: %w", err)
	}
	defer c.Close()
	err = c.CreateTopic(ctx, client.TopicConfig{Name: cfg.Topic, Kind: cfg.Kind, Partitions: cfg.Partitions, User: cfg.User, Password: cfg.Password, Options: cfg.TopicOptions})
	if errors.Is(err, &wire.Error{Code: wire.CodeTopicExists}) {
		return nil
	}
	return err
}

func dial(ctx context.Context, cfg *Config, name string) (*client.Conn, error) {
	return client.Dial(ctx, cfg.Broker, client.Options{User: cfg.User, Password: cfg.Password, ClientName: name, TLS: cfg.TLS})
}
