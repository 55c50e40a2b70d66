// Package client is the Go client of the LightQ broker: a connection that pipelines requests,
// a batching producer with per-message acknowledgements, credit-based push subscriptions to
// transient topics, and consumers that read durable topics by offset.
//
// # Usage
//
//	c, err := client.Dial(ctx, "127.0.0.1:7450", client.Options{User: "app", Password: "secret"})
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
//	k, err := c.NewConsumer(ctx, client.ConsumerOptions{Topic: "audit", Group: "auditor"})
//	err = k.Each(ctx, func(m *client.Received) error { ...; return nil })
//	err = k.Close() // commits the group's positions and leaves the group
//
// A Consumer with a Group is a member of it: the broker gives it a share of the topic's
// partitions and moves them between members as they come and go (ConsumerOptions.Group,
// OnAssign, OnRevoke); OffsetsOnly keeps the consumer's own partitions and only stores
// their positions for the group.
//
// In a cluster each group has one coordinator (PROTOCOL.md section 16): a Conn sends the
// group's requests (a consumer's membership and commits, CommitOffset, FetchCommitted,
// DescribeGroup) to its own broker until that answers NOT_COORDINATOR, then to the broker
// FIND_COORDINATOR names, on a Conn of its own to it (the same Options, closed with the Conn;
// coordinator.go). A member whose coordinator moves (NOT_COORDINATOR, or the coordinator's
// broker gone and another named) loses its membership, as after an expired session: it stops
// its partitions without committing and joins the new coordinator, and the partitions start
// again at the committed offsets (or, when the member gets a partition back that nobody
// committed meanwhile, at its position). A Conn reaches the coordinator only through its own
// broker: while that broker is down, the group waits for it. ListGroups lists what the
// Conn's broker coordinates.
//
// # TLS
//
// Options.TLS connects to the broker's TLS port (its tls-addr) instead of the plaintext one,
// which is meant for loopback: anywhere else it carries passwords and messages in clear.
//
//	c, err := client.Dial(ctx, "broker.example.com:7451", client.Options{User: "app", Password: "secret",
//		TLS: &client.TLSOptions{CAFile: "ca.crt"}})
//
// With a client certificate the broker verifies (its tls-client-ca), leave User and Password
// empty: the certificate names the user (PROTOCOL.md 4.7).
//
//	c, err := client.Dial(ctx, addr, client.Options{TLS: &client.TLSOptions{CAFile: "ca.crt",
//		CertFile: "app.crt", KeyFile: "app.key"}})
//
// A failed handshake's error says what usually causes it (an untrusted CA, a name the
// certificate lacks, the plaintext port).
//
// # Clusters
//
// Brokers with cluster settings replicate each partition of a topic created with
// replication.factor > 1, and one of them leads it (PROTOCOL.md section 16); each partition
// of a transient topic lives on one broker, its home, which METADATA names as its leader
// (section 16.3). Give Dial the
// addresses of some of them, separated by commas:
//
//	c, err := client.Dial(ctx, "b1:7450,b2:7450,b3:7450", opts)
//
// Dial tries them in order and keeps the first that answers (the boot broker); reconnects go
// through the list again, from the one that worked last. The Conn asks METADATA with the
// cluster flag when a Producer or Consumer starts, and keeps a view of which broker leads
// each partition of those topics and where each broker is (its address, or with
// Options.TLS its TLS address). PRODUCE, FETCH and LIST_OFFSETS of a partition go to its
// leader, over one connection per broker, made the first time a broker leads a partition
// the Conn uses, with the same handshake, login, TLS, keep-alive and reconnects as the boot
// connection. Administration (topics, users, roles), METADATA, STATS and INIT_PRODUCER go
// to the first broker connected, the boot broker first, skipping a suspect one while
// another can be reached (one whose connection stalled, or whose METADATA named no leader
// for a partition in the last 5 seconds: cut off from its peers, it cannot know the new
// one). Group requests (JOIN_GROUP,
// HEARTBEAT, GROUP_COMMIT, LEAVE_GROUP, FETCH_COMMITTED, COMMIT_OFFSET, LIST_GROUPS,
// DESCRIBE_GROUP) and Ping stay on the boot broker. A subscription goes to its partition's
// home: sent to the boot broker while the view does not know the topic, and to the home
// after a NOT_LEADER; a subscription to every partition of a topic whose partitions live on
// several brokers is one SUBSCRIBE per partition at its home, merged into one Subscription
// (which ends when any of their connections does).
//
// When a partition's leader changes, its broker answers NOT_LEADER (nothing done) or its
// connection closes, or stalls (Reconnects): the Conn asks METADATA again (of any connected broker; while no leader
// is known, an election, again with backoff from 50 ms to 1 s) and the partition moves. A
// broker that leads no partition in the view is not reconnected; when it leads again (a
// paused leader back and re-elected), its connection is dialled again then. A
// Producer sends the partition's unacknowledged batches to the new leader, byte for byte,
// in seal order, once none of them awaits an answer from the old one; an idempotent
// producer's batches that the old leader had stored are answered with their offsets, not
// stored again. REPLICATION_TIMEOUT (the leader did not hear a quorum in time) is re-sent
// the same way by an idempotent producer; without idempotence the batch fails as
// may-be-stored. DeliveryTimeout bounds it all: a partition without a leader for longer
// fails its messages with ErrDeliveryTimeout, as not stored when every attempt was refused
// NOT_LEADER. A Consumer stops the partition's fetcher, drops what it had fetched and not
// delivered, and fetches again from the position at the new leader: no offset is skipped
// or delivered twice. Keyed messages go to wire.PartitionForKey(key, partitions) with the
// partition count from METADATA; unkeyed ones to the partitions in turn (each batch names
// its partition: the broker's own round robin, partition -1, cannot follow leaders).
//
// With one broker (no cluster settings) the broker answers as a cluster of one that leads
// everything at the address the client used: one connection, as before clusters, and no
// request more (NewProducer's and NewConsumer's METADATA carries the flag). A broker from
// before replication refuses the flag; the Conn then asks without it and sends everything
// to that broker. ClusterMetadata shows the layout (lqcat -L prints it). The connections to
// other brokers stay open until Close; a broker that leads none of the Conn's partitions
// any more is not dialled again once its connection is lost.
//
// # Concurrency
//
// Conn, Producer and the Close/accessor methods of Subscription are safe for concurrent use.
// A Conn runs a reader goroutine per connection, a keep-alive, a stall watchdog (and,
// while it probes a quiet connection, a goroutine for that PING), and per broker, while it
// reconnects, a reconnector; a Producer runs its flusher and its acker (callbacks) until
// Close, and a goroutine while it looks a moving partition's leader up.
// A Subscription is consumed by one goroutine at a time (Each or Messages). Producer
// callbacks run one at a time on a producer goroutine, in send order. Nothing the client
// calls back runs on the connection's reader goroutine, so callbacks and handlers may issue
// requests on the same Conn; the one exception is a Subscription's handler with
// SubscribeOptions.InlineHandler, which the reader runs while Each waits, and which must
// therefore neither block nor wait for an answer on its connection.
//
// A Consumer is consumed by one goroutine at a time too, with Each or Messages, not both;
// its handler runs on the goroutine that called Each. Commit, CommitOffsets, Position,
// HighWatermark, Buffered, Err, Topic, Partitions and Close are safe for concurrent use,
// including from a handler and from OnError. A Consumer runs, until Close or a fatal error:
// one fetcher goroutine per partition (per connection of its Conn), the goroutine that
// calls OnError (one call at a time), an auto-committer when it has a Group and AutoCommit is
// not disabled, per broker it fetches from the supervisor that restarts the fetchers on each
// new connection, the mover (a partition's fetcher to its new leader), the goroutine
// behind Messages once that is called, and for a group member the heartbeater and the
// reconciler, which calls OnAssign and OnRevoke (Close calls OnRevoke a last time, once the
// reconciler has stopped). Close waits for the fetchers, the
// supervisors, the mover, the auto-committer and a member's two; the OnError goroutine ends after its
// current call, and the Messages one by closing the channel. A revocation waits until no
// handler of Each runs (it is applied between two records), so a handler that never returns
// holds its partition.
//
// # Reconnects
//
// A Conn reconnects by itself when its socket breaks: the requests waiting for an answer fail
// with an error wrapping ErrConnectionLost (retry them: the Conn is already dialling),
// subscriptions end with it (subscribe again: the broker forgets a subscription with its
// connection), and requests made meanwhile wait for the new connection. Dials back off from
// 50 ms to 2 s with jitter; a refused login (AUTH_FAILED) ends the Conn (Done, Err). A
// Producer re-sends, in order per partition and byte for byte, every batch not acknowledged,
// and keeps taking messages up to its MaxInFlight bound meanwhile; a Consumer resumes at its
// positions. Connected reports the state.
//
// A broker can also stop answering without closing anything (SIGSTOP, a hung machine, a
// network that drops every packet): a connection on which requests wait and nothing at all
// arrives for Options.StallTimeout (default 5s, plus each request's own server-side wait, a
// FETCH's or a held HEARTBEAT's MaxWait) is declared dead and handled as a lost one, its
// requests failing with an error wrapping ErrStalled and ErrConnectionLost. After half of
// it in silence the Conn sends a PING, which a live broker answers at once, so a request
// that is only slow keeps its connection; an idle connection is checked by its keep-alive
// PING. In a cluster the producers and consumers then look the partitions' leaders up on
// another broker and move there (see Clusters); the stalled broker's node reconnects from
// its next seed address, and nothing is asked of it until a handshake with it succeeds.
//
// # Errors
//
// Broker refusals are *wire.Error values, returned as they are. Client-side errors wrap
// ErrClosed (closed by its owner), ErrConnectionLost (I/O error or fatal broker error, which
// is wrapped too) or ErrProtocol (an answer that breaks the protocol; the connection closes).
// A record batch the client cannot decode is a *CorruptBatchError (wrapping
// wire.ErrCorruptBatch) naming its topic, partition and offsets: it stops a Consumer unless
// ConsumerOptions.OnCorruptBatch skips it, a Subscription skips it (SubscribeOptions has the
// same hook), and BatchIter.SkipCorrupt goes past one. The broker sends stored batches as
// they are, so fetching one again never helps.
//
// A message that Producer.Send took and that then fails gets a *ProduceError, in its callback
// and from Flush. Its MaybeStored method, or errors.Is with ErrNotStored and ErrMaybeStored,
// says whether the message may be in the log anyway:
//
//	what happened to the batch                          retried   may be stored
//	never sent (DeliveryTimeout while reconnecting,     -         no
//	  waiting for a slot, or Close)
//	sent, then the connection broke before the answer   yes       yes, unless the broker
//	  (I/O error, kill -9, TIMEOUT, ...)                          said SHUTTING_DOWN
//	SHUTTING_DOWN (the broker stops: it answers what    yes       no
//	  it stored first, PROTOCOL.md 4.4)
//	STORAGE_FULL, RESOURCE_LIMIT                        yes       no
//	STORAGE_ERROR (an I/O error or a failed fsync)      yes       yes
//	NOT_LEADER (sent again to the partition's new       yes       no
//	  leader: see Clusters)
//	REPLICATION_TIMEOUT, idempotent (sent again to      yes       stored once
//	  the leader, which answers a stored batch)
//	REPLICATION_TIMEOUT without idempotence             no        yes
//	INTERNAL, a code this client does not know          no        yes
//	UNKNOWN_PRODUCER (renumbered under a new epoch)     yes       no
//	OUT_OF_ORDER_SEQUENCE (nothing earlier refused),    no        no
//	  PRODUCER_FENCED (the producer stops)
//	AUTH_FAILED, NOT_AUTHORIZED, UNKNOWN_TOPIC,         no        no
//	  UNKNOWN_PARTITION, MESSAGE_TOO_LARGE,
//	  CORRUPT_BATCH, INVALID_REQUEST, NOT_SUPPORTED,
//	  and the other codes that refuse the request
//	AUTH_FAILED on a reconnect (the Conn ends)          no        as for a broken connection
//	DeliveryTimeout passed (ErrDeliveryTimeout)         no        yes if any attempt was sent
//	                                                              and not answered
//
// "Retried" batches go again until they are acknowledged or DeliveryTimeout (default 2
// minutes, from the Send of the batch's first message) passes; then the batch and the later
// batches of its partition fail with ErrDeliveryTimeout. A retried refusal waits for the
// answers of the partition's later batches: if one of them was stored, the refused batch
// fails instead (a retry would store it out of order). The codes that close the connection
// (SHUTTING_DOWN, TIMEOUT, TOO_MANY_CONNECTIONS, MALFORMED_FRAME, ...) are connection
// losses: the batches are re-sent after the reconnect. An idempotent producer (the default
// with AckWritten and AckDurable) stores each message once: the broker answers a re-sent
// batch it already stored with the original offsets. Its answers of PROTOCOL.md section 15:
// UNKNOWN_PRODUCER (the broker lost the producer's state) is retried under a new epoch, the
// batch renumbered; OUT_OF_ORDER_SEQUENCE behind an earlier refused batch waits for it;
// alone, it fails the batch as not stored (the broker lost acknowledged batches) and the
// partition's later batches start a new epoch, as after any failed batch; PRODUCER_FENCED
// fails the batch as not stored and stops the producer (a newer incarnation writes). With
// DisableIdempotence or AckNone, a message retried after a lost answer may be stored twice
// (at least once).
//
// Control batches (PROTOCOL.md section 7: the entries of a replicated partition that carry no
// message) are checked like any batch and then skipped wherever FETCH answers are read:
// BatchIter.Next passes over them, and a Consumer moves the partition's position past their
// offset without calling the handler.
//
// # Internals
//
// Files: conn.go (Options, the Conn, Dial, Close, the keep-alive), stall.go (the stall
// watchdog and its PING probe),
// node.go (one broker: its addresses, its writer, its connection and reconnector),
// link.go (one socket: its pending requests, subscriptions and reader), reconnect.go (the
// handshake), cluster.go (the cluster view: METADATA with the cluster flag, leaders, the
// node of a broker, requests of one partition sent to its leader), backoff.go (the one
// retry schedule), request.go (request/response slots; the boot broker's, any broker's),
// admin.go (topic administration and the thin durable requests),
// errors.go (ProduceError and what each broker code does to a batch), users.go (users and
// their roles), producer.go (options,
// Send, Flush, Close), producer_batch.go (sealing a batch, writing it in partition order, its
// answer, the acknowledgement queue), producer_flusher.go (linger, re-sends after a
// reconnect, retries, the delivery timeout), producer_route.go (each partition's leader, and
// moving a partition to a new one), producer_idem.go (the idempotent producer's numbering),
// subscription.go (DELIVER queue, decoding, credit), corrupt.go (CorruptBatchError and the
// offset range of a batch that does not decode). The durable consumer: consumer.go
// (options, the Consumer type, construction, accessors, error reporting, Close),
// consumer_start.go (start positions), consumer_session.go (one connection's fetchers;
// the supervisor per broker that restarts them on each new connection, the mover that moves
// a partition to its new leader), consumer_fetch.go (the per-partition fetcher:
// pipelined FETCHes, verification, decompression, retries), consumer_queue.go (the queue
// between fetchers and Each, bounded by Prefetch, with chunk reuse), consumer_each.go (Each
// and Messages), consumer_commit.go (group commits, the auto-committer), consumer_group.go
// (group membership: join, held heartbeats, the reconciler that starts and revokes
// partitions, leave, following a coordinator that moves), group_admin.go (ListGroups,
// DescribeGroup), coordinator.go (group requests routed to the group's coordinator:
// FindCoordinator, the Conns to coordinators).
//
// One reader goroutine per link reads frames into a reused buffer and dispatches them by op and
// correlation id: DELIVER frames to the subscription named by their correlation id, ERROR and
// responses to the pending slot of that id, ERRORs for frames that expect no answer (CREDIT,
// PRODUCE with AckNone) to the owner remembered for the last 1024 such frames. Dispatch never
// blocks: response slots copy what they need, subscriptions queue a copy of the batch (bounded
// by the credit window). Writers take their node's wmu and write whole frames to its
// bufio.Writer; a produce frame larger than the buffer goes out in one writev instead (see
// writeVectored).
// Frame and batch byte positions are wire's: the client reads headers with wire.PeekHeader
// and wire.PeekBatchHeader.
//
// A node has one current link (socket) at a time. Requests, subscriptions, fetcher
// sessions and the producer's routes remember the link they used: an answer, a CREDIT or an
// UNSUBSCRIBE only makes sense on the connection the broker knows it from.
//
// Lock order: Producer.mu, node.wmu, Conn.mu, then Producer.ackMu or Subscription.mu.
// Conn.mu guards every node's connection state and the cluster view.
// Subscription.consumeMu is held by the consumer only and taken before Subscription.mu.
// Consumer.commitMu, then Consumer.mu, then Conn's locks; Consumer.consumeMu is held by Each
// (or, with TryLock, by a revocation when no Each runs) and taken before Consumer.mu;
// Consumer.revokeMu before consumeMu; Consumer.activeMu, membership.mu and coordinators.mu
// are leaves.
package client
