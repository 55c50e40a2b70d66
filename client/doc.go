// Package client is the Go client of the LightQ broker: a connection that pipelines requests,
// a batching producer with per-message acknowledgements, and credit-based push subscriptions.
//
// # Usage
//
//	c, err := client.Dial(ctx, "127.0.0.1:7400", client.Options{User: "app", Password: "secret"})
//	if err != nil { ... } // a refusal is a *wire.Error: errors.Is(err, &wire.Error{Code: wire.CodeAuthFailed})
//	defer c.Close()
//
//	p, err := c.NewProducer(client.ProducerOptions{Topic: "events"})
//	err = p.Send(ctx, &client.Message{Key: k, Value: v}, func(a client.Ack, err error) { ... })
//	err = p.Close() // flushes
//
//	s, err := c.Subscribe(ctx, client.SubscribeOptions{Topic: "events"})
//	err = s.Each(ctx, func(m *client.Received) error { ...; return nil })
//
// # Concurrency
//
// Conn, Producer and the Close/accessor methods of Subscription are safe for concurrent use.
// A Subscription is consumed by one goroutine at a time (Each or Messages). Producer
// callbacks run one at a time on a producer goroutine, in send order. Nothing the client
// calls back runs on the connection's reader goroutine, so callbacks and handlers may issue
// requests on the same Conn.
//
// # Errors
//
// Broker refusals are *wire.Error values, returned as they are. Client-side errors wrap
// ErrClosed (closed by its owner), ErrConnectionLost (I/O error or fatal broker error, which
// is wrapped too) or ErrProtocol (an answer that breaks the protocol; the connection closes).
//
// # Internals
//
// Files: conn.go (Dial, handshake, the reader goroutine, frame dispatch, failure fan-out),
// request.go (request/response slots), admin.go (topic administration and the thin durable
// requests), producer.go (options, Send, Flush, Close), producer_batch.go (sealing and
// writing batches, the linger flusher, the acknowledgement queue),
// subscription.go (DELIVER queue, decoding, credit), consumer.go (durable topics: per-partition
// fetchers with bounded prefetch, start positions, group commits, reconnect).
//
// One reader goroutine per Conn reads frames into a reused buffer and dispatches them by op and
// correlation id: DELIVER frames to the subscription named by their correlation id, ERROR and
// responses to the pending slot of that id, ERRORs for frames that expect no answer (CREDIT,
// PRODUCE with AckNone) to the owner remembered for the last 1024 such frames. Dispatch never
// blocks: response slots copy what they need, subscriptions queue a copy of the batch (bounded
// by the credit window). Writers take Conn.wmu and write whole frames to one bufio.Writer; a
// produce frame larger than the buffer goes out in one writev instead (see writeVectored).
//
// Lock order: Producer.mu, Conn.wmu, Conn.mu, then Producer.ackMu or Subscription.mu.
// Subscription.consumeMu is held by the consumer only and taken before Subscription.mu.
package client
