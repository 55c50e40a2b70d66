package client_test

// Integration tests: the client against the real broker, started in-process on a free
// loopback port with a temporary data directory.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/broker/brokertest"
	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

const (
	itAdminUser = "admin"
	itAdminPass = "integration-admin-pw"
	itUser      = "app"
	itPass      = "app-secret-pw"
)

// errItDone ends an Each loop once a test has what it wants.
var errItDone = errors.New("done")

// startBroker starts a real broker for the test and shuts it down at the end.
func startBroker(t testing.TB, mutate func(*broker.Config)) *broker.Server {
	t.Helper()
	return brokertest.Start(t, func(cfg *broker.Config) {
		cfg.AdminUser, cfg.AdminPassword = itAdminUser, itAdminPass
		if mutate != nil {
			mutate(cfg)
		}
	})
}

func itCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func itDial(t testing.TB, addr, user, pass string) *client.Conn {
	t.Helper()
	c, err := client.Dial(itCtx(t), addr, client.Options{User: user, Password: pass, ClientName: t.Name()})
	if err != nil {
		t.Fatalf("Dial %s as %s: %v", addr, user, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// itTopic creates a topic owned by itUser.
func itTopic(t testing.TB, admin *client.Conn, name string, partitions int, opts ...wire.Option) {
	t.Helper()
	err := admin.CreateTopic(itCtx(t), client.TopicConfig{Name: name, Partitions: partitions, User: itUser, Password: itPass, Options: opts})
	if err != nil {
		t.Fatalf("CreateTopic %s: %v", name, err)
	}
}

// itSetup starts a broker with one topic and returns its address and an admin connection.
func itSetup(t testing.TB, topic string, partitions int, opts ...wire.Option) (string, *client.Conn) {
	t.Helper()
	srv := startBroker(t, nil)
	admin := itDial(t, srv.Addr(), itAdminUser, itAdminPass)
	itTopic(t, admin, topic, partitions, opts...)
	return srv.Addr(), admin
}

func itProducer(t testing.TB, c *client.Conn, opts client.ProducerOptions) *client.Producer {
	t.Helper()
	p, err := c.NewProducer(opts)
	if err != nil {
		t.Fatalf("NewProducer: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func itSubscribe(t testing.TB, c *client.Conn, opts client.SubscribeOptions) *client.Subscription {
	t.Helper()
	s, err := c.Subscribe(itCtx(t), opts)
	if err != nil {
		t.Fatalf("Subscribe %+v: %v", opts, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// itCounters returns a topic's STATS counters by name.
func itCounters(t testing.TB, c *client.Conn, topic string) map[string]uint64 {
	t.Helper()
	st, err := c.Stats(itCtx(t), topic)
	if err != nil {
		t.Fatalf("Stats %s: %v", topic, err)
	}
	if len(st) != 1 || st[0].Name != topic {
		t.Fatalf("Stats %s: got %+v", topic, st)
	}
	out := map[string]uint64{}
	for _, ctr := range st[0].Counters {
		out[ctr.Name] = ctr.Value
	}
	return out
}

// itEventually polls cond for up to 20 s: generous, for a loaded machine.
func itEventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// itRecord is a received message, copied out of the subscription's buffers.
type itRecord struct {
	Partition int32
	Offset    int64
	Timestamp time.Time
	Key       []byte
	Value     []byte
	Headers   []wire.RecordHeader
	Dropped   uint64
}

func copyReceived(m *client.Received) itRecord {
	r := itRecord{
		Partition: m.Partition, Offset: m.Offset, Timestamp: m.Timestamp, Dropped: m.Dropped,
		Key: bytes.Clone(m.Key), Value: bytes.Clone(m.Value),
	}
	for _, h := range m.Headers {
		r.Headers = append(r.Headers, wire.RecordHeader{Name: bytes.Clone(h.Name), Value: bytes.Clone(h.Value)})
	}
	return r
}

// collect consumes s until n messages arrived or ctx ends.
func collect(ctx context.Context, s *client.Subscription, n int) ([]itRecord, error) {
	var out []itRecord
	if n == 0 {
		return out, nil
	}
	err := s.Each(ctx, func(m *client.Received) error {
		out = append(out, copyReceived(m))
		if len(out) >= n {
			return errItDone
		}
		return nil
	})
	if errors.Is(err, errItDone) {
		err = nil
	}
	return out, err
}

func TestIntegrationAdmin(t *testing.T) {
	t.Parallel()
	srv := startBroker(t, nil)
	ctx := itCtx(t)
	admin := itDial(t, srv.Addr(), itAdminUser, itAdminPass)
	if admin.Role() != wire.RoleAdmin {
		t.Errorf("admin role = %v", admin.Role())
	}
	if admin.BrokerVersion() != broker.Version {
		t.Errorf("broker version %q, want %q", admin.BrokerVersion(), broker.Version)
	}
	if admin.Limits() != wire.DefaultLimits() {
		t.Errorf("limits %+v, want the defaults %+v", admin.Limits(), wire.DefaultLimits())
	}
	if _, err := admin.Ping(ctx); err != nil {
		t.Fatal(err)
	}

	if err := admin.CreateTopic(ctx, client.TopicConfig{Name: "orders", Partitions: 3, User: itUser, Password: itPass}); err != nil {
		t.Fatal(err)
	}
	err := admin.CreateTopic(ctx, client.TopicConfig{Name: "orders", Partitions: 1, User: itUser, Password: itPass})
	if !errors.Is(err, &wire.Error{Code: wire.CodeTopicExists}) {
		t.Errorf("second CreateTopic: %v, want TOPIC_EXISTS", err)
	}
	err = admin.CreateTopic(ctx, client.TopicConfig{Name: "other", User: itUser, Password: "not-the-same"})
	if !errors.Is(err, &wire.Error{Code: wire.CodeAuthFailed}) {
		t.Errorf("CreateTopic for an existing user with another password: %v, want AUTH_FAILED", err)
	}

	md, err := admin.Metadata(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if len(md) != 1 || md[0].Name != "orders" || md[0].User != itUser || md[0].Kind != wire.KindTransient || len(md[0].Partitions) != 3 {
		t.Fatalf("Metadata(orders) = %+v", md)
	}
	for i, p := range md[0].Partitions {
		if p.ID != uint32(i) || p.StartOffset != 0 || p.EndOffset != 0 {
			t.Errorf("partition %d metadata %+v", i, p)
		}
	}
	all, err := admin.Metadata(ctx)
	if err != nil || len(all) != 1 || all[0].Name != "orders" {
		t.Errorf("Metadata() = %+v, %v", all, err)
	}

	// The topic's user sees its topic, with a user role.
	user := itDial(t, srv.Addr(), itUser, itPass)
	if user.Role() != wire.RoleUser {
		t.Errorf("user role = %v", user.Role())
	}
	umd, err := user.Metadata(ctx)
	if err != nil || len(umd) != 1 || umd[0].Name != "orders" {
		t.Errorf("user Metadata() = %+v, %v", umd, err)
	}
	if err := user.CreateTopic(ctx, client.TopicConfig{Name: "mine", User: "x", Password: "y"}); !errors.Is(err, &wire.Error{Code: wire.CodeNotAuthorized}) {
		t.Errorf("user CreateTopic: %v, want NOT_AUTHORIZED", err)
	}

	ctr := itCounters(t, admin, "orders")
	for _, name := range []string{"messages_in", "messages_out", "bytes_in", "bytes_out", "batches_in", "publishers", "subscribers", "queue_size", "dropped_messages", "rejected_batches"} {
		v, ok := ctr[name]
		if !ok {
			t.Errorf("STATS lacks counter %q: %v", name, ctr)
		} else if v != 0 {
			t.Errorf("fresh topic: %s = %d", name, v)
		}
	}
	allStats, err := admin.Stats(ctx, "")
	if err != nil || len(allStats) != 1 {
		t.Errorf("Stats(\"\") = %+v, %v", allStats, err)
	}

	if err := admin.DeleteTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Metadata(ctx, "orders"); !errors.Is(err, &wire.Error{Code: wire.CodeUnknownTopic}) {
		t.Errorf("Metadata after delete: %v, want UNKNOWN_TOPIC", err)
	}
	if err := admin.DeleteTopic(ctx, "orders"); !errors.Is(err, &wire.Error{Code: wire.CodeUnknownTopic}) {
		t.Errorf("second DeleteTopic: %v, want UNKNOWN_TOPIC", err)
	}
	if md, err := admin.Metadata(ctx); err != nil || len(md) != 0 {
		t.Errorf("Metadata() after delete = %+v, %v", md, err)
	}
	// The topic's grants went with it; its user stays until DeleteUser.
	if roles, err := admin.ListUsers(ctx, itUser, ""); err != nil || len(roles) != 1 || roles[0] != (wire.UserRoles{User: itUser}) {
		t.Errorf("ListUsers(%q) after the delete = %+v, %v", itUser, roles, err)
	}
	if err := admin.DeleteUser(ctx, itUser); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Dial(ctx, srv.Addr(), client.Options{User: itUser, Password: itPass}); !errors.Is(err, &wire.Error{Code: wire.CodeAuthFailed}) {
		t.Errorf("Dial as the deleted user: %v, want AUTH_FAILED", err)
	}
}

func TestIntegrationBadPassword(t *testing.T) {
	t.Parallel()
	srv := startBroker(t, nil)
	ctx := itCtx(t)
	c, err := client.Dial(ctx, srv.Addr(), client.Options{User: itAdminUser, Password: "wrong"})
	if err == nil {
		c.Close()
		t.Fatal("Dial with a wrong password succeeded")
	}
	if !errors.Is(err, &wire.Error{Code: wire.CodeAuthFailed}) {
		t.Fatalf("wrong password: %v, want AUTH_FAILED", err)
	}
	var we *wire.Error
	if !errors.As(err, &we) || errors.Is(err, client.ErrConnectionLost) {
		t.Errorf("wrong password: want a bare *wire.Error, got %T %v", err, err)
	}
	_, err = client.Dial(ctx, srv.Addr(), client.Options{User: "nobody", Password: "whatever"})
	if !errors.Is(err, &wire.Error{Code: wire.CodeAuthFailed}) {
		t.Errorf("unknown user: %v, want AUTH_FAILED", err)
	}
	// The right password still works after failures.
	itDial(t, srv.Addr(), itAdminUser, itAdminPass)
}

// TestIntegrationColdLoginStorm: a service that opens many connections at once as a user
// nobody has logged in as yet gets all of them: the broker verifies a few logins at a time
// and answers the rest RESOURCE_LIMIT until one has been verified, and Dial retries those.
func TestIntegrationColdLoginStorm(t *testing.T) {
	t.Parallel()
	addr, _ := itSetup(t, "storm", 1)
	const conns = 40
	errs := make(chan error, conns)
	for range conns {
		go func() {
			c, err := client.Dial(itCtx(t), addr, client.Options{User: itUser, Password: itPass})
			if err == nil {
				c.Close()
			}
			errs <- err
		}()
	}
	for range conns {
		if err := <-errs; err != nil {
			t.Errorf("Dial in a cold login storm of %d: %v", conns, err)
		}
	}
}

// TestIntegrationFanOut: two fan-out subscribers each get every message, in order per
// partition, at the offsets the acks gave, with keys, values, headers and timestamps intact.
func TestIntegrationFanOut(t *testing.T) {
	t.Parallel()
	for _, codec := range []wire.Codec{wire.CodecNone, wire.CodecS2, wire.CodecZstd} {
		t.Run(codec.String(), func(t *testing.T) {
			t.Parallel()
			const parts, n = 3, 3000
			addr, _ := itSetup(t, "fan", parts)
			ctx := itCtx(t)
			subs := []*client.Subscription{
				itSubscribe(t, itDial(t, addr, itUser, itPass), client.SubscribeOptions{Topic: "fan"}),
				itSubscribe(t, itDial(t, addr, itUser, itPass), client.SubscribeOptions{Topic: "fan"}),
			}
			for _, s := range subs {
				if s.Partitions() != parts {
					t.Fatalf("subscription covers %d partitions, want %d", s.Partitions(), parts)
				}
			}

			type result struct {
				recs []itRecord
				err  error
			}
			results := make([]chan result, len(subs))
			for i, s := range subs {
				results[i] = make(chan result, 1)
				go func() {
					recs, err := collect(ctx, s, n)
					results[i] <- result{recs, err}
				}()
			}

			pc := itDial(t, addr, itUser, itPass)
			p := itProducer(t, pc, client.ProducerOptions{Topic: "fan", Compression: codec, BatchBytes: 16 << 10})
			sent := make([]client.Message, n)
			acks := make([]client.Ack, n)
			ackErr := make([]error, n)
			var ackCount atomic.Int64
			base := time.Now().Add(-time.Hour).UnixMilli()
			for i := range sent {
				m := client.Message{
					// Compressible values, so that the codecs really compress.
					Value:     fmt.Appendf(nil, "value-%06d-%s", i, bytes.Repeat([]byte("xyz"), 30)),
					Timestamp: time.UnixMilli(base + int64(i)),
				}
				switch i % 3 {
				case 0:
					m.Key = fmt.Appendf(nil, "key-%d", i%17)
				case 1:
					m.Key = fmt.Appendf(nil, "key-%d", i%17)
					m.Headers = []wire.RecordHeader{
						{Name: []byte("trace"), Value: fmt.Appendf(nil, "t-%d", i)},
						{Name: []byte("empty"), Value: nil},
					}
				}
				sent[i] = m
				if err := p.Send(ctx, &m, func(a client.Ack, err error) {
					acks[i], ackErr[i] = a, err
					ackCount.Add(1)
				}); err != nil {
					t.Fatalf("Send %d: %v", i, err)
				}
			}
			if err := p.Flush(ctx); err != nil {
				t.Fatalf("Flush: %v", err)
			}
			if got := ackCount.Load(); got != n {
				t.Fatalf("%d callbacks after Flush, want %d", got, n)
			}

			// Acks: per partition, offsets 0, 1, 2, ... in send order; keyed messages on
			// their key's partition.
			byPos := map[[2]int64]int{} // (partition, offset) -> message index
			next := make([]int64, parts)
			for i, a := range acks {
				if ackErr[i] != nil {
					t.Fatalf("message %d: %v", i, ackErr[i])
				}
				if a.Partition < 0 || int(a.Partition) >= parts {
					t.Fatalf("message %d acked on partition %d", i, a.Partition)
				}
				if a.Offset != next[a.Partition] {
					t.Fatalf("message %d: ack offset %d on partition %d, want %d", i, a.Offset, a.Partition, next[a.Partition])
				}
				next[a.Partition]++
				if k := sent[i].Key; len(k) > 0 {
					if want := wire.PartitionForKey(k, parts); int(a.Partition) != want {
						t.Errorf("message %d key %q acked on partition %d, PartitionForKey says %d", i, k, a.Partition, want)
					}
				}
				byPos[[2]int64{int64(a.Partition), a.Offset}] = i
			}

			for si, ch := range results {
				res := <-ch
				if res.err != nil {
					t.Fatalf("subscriber %d: %v after %d messages", si, res.err, len(res.recs))
				}
				if len(res.recs) != n {
					t.Fatalf("subscriber %d got %d messages, want %d", si, len(res.recs), n)
				}
				expect := make([]int64, parts)
				seen := make([]bool, n)
				for _, r := range res.recs {
					if r.Offset != expect[r.Partition] {
						t.Fatalf("subscriber %d partition %d: offset %d, want %d (out of order or lost)", si, r.Partition, r.Offset, expect[r.Partition])
					}
					expect[r.Partition]++
					if r.Dropped != 0 {
						t.Errorf("subscriber %d: %d dropped before partition %d offset %d", si, r.Dropped, r.Partition, r.Offset)
					}
					i, ok := byPos[[2]int64{int64(r.Partition), r.Offset}]
					if !ok {
						t.Fatalf("subscriber %d: partition %d offset %d was never acked", si, r.Partition, r.Offset)
					}
					if seen[i] {
						t.Fatalf("subscriber %d: message %d twice", si, i)
					}
					seen[i] = true
					m := sent[i]
					if !bytes.Equal(r.Value, m.Value) || !bytes.Equal(r.Key, m.Key) {
						t.Fatalf("subscriber %d message %d: key %q value %q, want %q %q", si, i, r.Key, r.Value, m.Key, m.Value)
					}
					if !r.Timestamp.Equal(m.Timestamp) {
						t.Errorf("subscriber %d message %d: timestamp %v, want %v", si, i, r.Timestamp, m.Timestamp)
					}
					if len(r.Headers) != len(m.Headers) {
						t.Fatalf("subscriber %d message %d: %d headers, want %d", si, i, len(r.Headers), len(m.Headers))
					}
					for h := range m.Headers {
						if !bytes.Equal(r.Headers[h].Name, m.Headers[h].Name) || !bytes.Equal(r.Headers[h].Value, m.Headers[h].Value) {
							t.Errorf("subscriber %d message %d header %d: %q=%q, want %q=%q", si, i, h,
								r.Headers[h].Name, r.Headers[h].Value, m.Headers[h].Name, m.Headers[h].Value)
						}
					}
					if len(r.Key) > 0 {
						if want := wire.PartitionForKey(r.Key, parts); int(r.Partition) != want {
							t.Errorf("subscriber %d: key %q received from partition %d, want %d", si, r.Key, r.Partition, want)
						}
					}
				}
				if subs[si].Dropped() != 0 {
					t.Errorf("subscriber %d: Dropped() = %d", si, subs[si].Dropped())
				}
			}
		})
	}
}

// TestIntegrationKeyPartitioning checks keyed messages against wire.PartitionForKey from
// the receiving side only, with a single key per partition count.
func TestIntegrationKeyPartitioning(t *testing.T) {
	t.Parallel()
	const parts, keys, perKey = 5, 40, 10
	addr, _ := itSetup(t, "keyed", parts)
	ctx := itCtx(t)
	s := itSubscribe(t, itDial(t, addr, itUser, itPass), client.SubscribeOptions{Topic: "keyed"})
	p := itProducer(t, itDial(t, addr, itUser, itPass), client.ProducerOptions{Topic: "keyed"})
	if p.Partitions() != parts {
		t.Fatalf("producer sees %d partitions", p.Partitions())
	}
	used := map[int]bool{}
	for i := 0; i < keys*perKey; i++ {
		k := fmt.Appendf(nil, "customer-%d", i%keys)
		used[wire.PartitionForKey(k, parts)] = true
		if err := p.Send(ctx, &client.Message{Key: k, Value: fmt.Appendf(nil, "%d", i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs, err := collect(ctx, s, keys*perKey)
	if err != nil {
		t.Fatalf("%v after %d messages", err, len(recs))
	}
	perPartKey := map[string]int32{}
	for _, r := range recs {
		if want := wire.PartitionForKey(r.Key, parts); int(r.Partition) != want {
			t.Errorf("key %q on partition %d, want %d", r.Key, r.Partition, want)
		}
		if prev, ok := perPartKey[string(r.Key)]; ok && prev != r.Partition {
			t.Errorf("key %q on partitions %d and %d", r.Key, prev, r.Partition)
		}
		perPartKey[string(r.Key)] = r.Partition
	}
	if len(used) < 2 {
		t.Errorf("40 keys hashed to %d partitions of %d", len(used), parts)
	}
}

// TestIntegrationQueueGroup: three members of a queue group get every message exactly once
// in total.
func TestIntegrationQueueGroup(t *testing.T) {
	t.Parallel()
	const parts, n, members = 2, 4000, 3
	addr, admin := itSetup(t, "work", parts)
	ctx, cancel := context.WithCancel(itCtx(t))
	defer cancel()

	var mu sync.Mutex
	seen := make([]int, n)
	perMember := make([]int, members)
	total := 0
	var wg sync.WaitGroup
	for m := 0; m < members; m++ {
		s := itSubscribe(t, itDial(t, addr, itUser, itPass), client.SubscribeOptions{Topic: "work", QueueGroup: "workers", Window: 32 << 10})
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.Each(ctx, func(r *client.Received) error {
				var i int
				if _, err := fmt.Sscanf(string(r.Value), "job-%d", &i); err != nil || i < 0 || i >= n {
					t.Errorf("member %d: unexpected value %q", m, r.Value)
					return nil
				}
				if r.Dropped != 0 {
					t.Errorf("member %d: %d dropped", m, r.Dropped)
				}
				mu.Lock()
				seen[i]++
				perMember[m]++
				total++
				mu.Unlock()
				return nil
			})
		}()
	}
	if got := itCounters(t, admin, "work")["subscribers"]; got != members {
		t.Errorf("subscribers = %d, want %d", got, members)
	}

	p := itProducer(t, itDial(t, addr, itUser, itPass), client.ProducerOptions{Topic: "work", BatchBytes: 1 << 10, Linger: -1})
	for i := 0; i < n; i++ {
		if err := p.Send(ctx, &client.Message{Value: fmt.Appendf(nil, "job-%06d", i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	itEventually(t, "every job delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return total >= n
	})
	// Give duplicates a chance to show up.
	time.Sleep(100 * time.Millisecond)
	cancel()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if total != n {
		t.Errorf("group received %d messages, want %d", total, n)
	}
	for i, c := range seen {
		if c != 1 {
			t.Fatalf("job %d delivered %d times", i, c)
		}
	}
	t.Logf("per member: %v", perMember)
	itEventually(t, "messages_out", func() bool { return itCounters(t, admin, "work")["messages_out"] >= n })
	ctr := itCounters(t, admin, "work")
	if ctr["messages_out"] != n || ctr["messages_in"] != n || ctr["dropped_messages"] != 0 {
		t.Errorf("counters %v: want messages_in = messages_out = %d, no drops", ctr, n)
	}
}

// TestIntegrationPartitionSubscription: HasPartition subscribes to one partition only.
func TestIntegrationPartitionSubscription(t *testing.T) {
	t.Parallel()
	const parts, per = 3, 50
	addr, _ := itSetup(t, "split", parts)
	ctx := itCtx(t)
	uc := itDial(t, addr, itUser, itPass)
	s := itSubscribe(t, uc, client.SubscribeOptions{Topic: "split", Partition: 1, HasPartition: true})
	if s.Partitions() != 1 {
		t.Errorf("Partitions() = %d, want 1", s.Partitions())
	}
	if _, err := uc.Subscribe(ctx, client.SubscribeOptions{Topic: "split", Partition: parts, HasPartition: true}); !errors.Is(err, &wire.Error{Code: wire.CodeUnknownPartition}) {
		t.Errorf("Subscribe to partition %d: %v, want UNKNOWN_PARTITION", parts, err)
	}
	p := itProducer(t, itDial(t, addr, itUser, itPass), client.ProducerOptions{Topic: "split"})
	for i := 0; i < per; i++ {
		for part := int32(0); part < parts; part++ {
			// Keys that hash elsewhere: HasPartition wins.
			m := client.Message{Key: []byte("k"), Value: fmt.Appendf(nil, "p%d-%d", part, i), Partition: part, HasPartition: true}
			if err := p.Send(ctx, &m, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := p.Send(ctx, &client.Message{Partition: parts, HasPartition: true}, nil); !errors.Is(err, &wire.Error{Code: wire.CodeUnknownPartition}) {
		t.Errorf("Send to partition %d: %v, want UNKNOWN_PARTITION", parts, err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs, err := collect(ctx, s, per)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		if r.Partition != 1 || r.Offset != int64(i) || string(r.Value) != fmt.Sprintf("p1-%d", i) {
			t.Fatalf("message %d: partition %d offset %d value %q", i, r.Partition, r.Offset, r.Value)
		}
	}
	// Nothing from the other partitions follows.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	extra, _ := collect(short, s, 1)
	if len(extra) != 0 {
		t.Errorf("got a message from partition %d", extra[0].Partition)
	}
}

// TestIntegrationAckNone: AckNone callbacks get offset -1 and no error; everything arrives.
func TestIntegrationAckNone(t *testing.T) {
	t.Parallel()
	const n = 2000
	addr, admin := itSetup(t, "fire", 2)
	ctx := itCtx(t)
	s := itSubscribe(t, itDial(t, addr, itUser, itPass), client.SubscribeOptions{Topic: "fire"})
	var asyncErrs atomic.Int64
	p := itProducer(t, itDial(t, addr, itUser, itPass), client.ProducerOptions{
		Topic: "fire", Acks: client.AckNone, BatchBytes: 4 << 10,
		OnError: func(error) { asyncErrs.Add(1) },
	})
	var calls, bad atomic.Int64
	for i := 0; i < n; i++ {
		err := p.Send(ctx, &client.Message{Value: fmt.Appendf(nil, "m-%d", i)}, func(a client.Ack, err error) {
			calls.Add(1)
			if err != nil || a.Offset != -1 {
				bad.Add(1)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != n || bad.Load() != 0 || asyncErrs.Load() != 0 {
		t.Errorf("callbacks %d (want %d), with error or offset != -1: %d, OnError: %d", calls.Load(), n, bad.Load(), asyncErrs.Load())
	}
	recs, err := collect(ctx, s, n)
	if err != nil {
		t.Fatalf("%v after %d", err, len(recs))
	}
	seen := map[string]bool{}
	for _, r := range recs {
		seen[string(r.Value)] = true
	}
	if len(seen) != n {
		t.Errorf("%d distinct messages, want %d", len(seen), n)
	}
	itEventually(t, "messages_in", func() bool { return itCounters(t, admin, "fire")["messages_in"] == n })
}

// TestIntegrationSlowSubscriberPaced: a subscriber with a small window that reads slowly gets
// everything when the producer waits for it.
func TestIntegrationSlowSubscriberPaced(t *testing.T) {
	t.Parallel()
	const n, ahead = 3000, 400
	// A small ring (2 max batches, 64 slots), so that an unpaced producer would overrun it.
	addr, admin := itSetup(t, "paced", 1, wire.Option{Key: "ring.bytes", Value: fmt.Sprint(2 << 20)}, wire.Option{Key: "ring.slots", Value: "64"})
	ctx := itCtx(t)
	s := itSubscribe(t, itDial(t, addr, itUser, itPass), client.SubscribeOptions{Topic: "paced", Window: 16 << 10})
	var received, dropped atomic.Int64
	errc := make(chan error, 1)
	go func() {
		var next int64
		errc <- s.Each(ctx, func(r *client.Received) error {
			if r.Offset != next {
				return fmt.Errorf("offset %d, want %d", r.Offset, next)
			}
			next++
			dropped.Add(int64(r.Dropped))
			if received.Add(1)%20 == 0 {
				time.Sleep(time.Millisecond) // a slow reader
			}
			if received.Load() == n {
				return errItDone
			}
			return nil
		})
	}()
	p := itProducer(t, itDial(t, addr, itUser, itPass), client.ProducerOptions{Topic: "paced", BatchBytes: 4 << 10})
	val := bytes.Repeat([]byte("v"), 200)
	for i := 0; i < n; i++ {
		for deadline := time.Now().Add(10 * time.Second); int64(i)-received.Load() > ahead; {
			if time.Now().After(deadline) {
				t.Fatalf("subscriber stuck at %d of %d sent", received.Load(), i)
			}
			time.Sleep(200 * time.Microsecond)
		}
		if err := p.Send(ctx, &client.Message{Value: val}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, errItDone) {
		t.Fatalf("Each: %v after %d", err, received.Load())
	}
	if received.Load() != n || dropped.Load() != 0 || s.Dropped() != 0 {
		t.Errorf("received %d of %d, dropped %d (Dropped() %d)", received.Load(), n, dropped.Load(), s.Dropped())
	}
	if d := itCounters(t, admin, "paced")["dropped_messages"]; d != 0 {
		t.Errorf("dropped_messages = %d", d)
	}
}

// TestIntegrationSlowSubscriberOverrun: a subscriber that falls behind a small ring loses
// messages, and is told exactly how many: received + dropped == produced.
func TestIntegrationSlowSubscriberOverrun(t *testing.T) {
	t.Parallel()
	const n = 3000
	addr, admin := itSetup(t, "overrun", 1, wire.Option{Key: "ring.bytes", Value: fmt.Sprint(2 << 20)}, wire.Option{Key: "ring.slots", Value: "4"})
	ctx := itCtx(t)
	s := itSubscribe(t, itDial(t, addr, itUser, itPass), client.SubscribeOptions{Topic: "overrun", Window: 4 << 10})

	release := make(chan struct{})
	var received, droppedSum int64
	var orderErr error
	errc := make(chan error, 1)
	go func() {
		next := int64(0)
		errc <- s.Each(ctx, func(r *client.Received) error {
			if received == 0 {
				select { // hold the first message until the producer is done
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			if want := next + int64(r.Dropped); r.Offset != want && orderErr == nil {
				orderErr = fmt.Errorf("offset %d after %d and %d dropped", r.Offset, next-1, r.Dropped)
			}
			next = r.Offset + 1
			received++
			droppedSum += int64(r.Dropped)
			if received+droppedSum >= n {
				return errItDone
			}
			return nil
		})
	}()

	p := itProducer(t, itDial(t, addr, itUser, itPass), client.ProducerOptions{Topic: "overrun", BatchBytes: 1 << 10})
	val := bytes.Repeat([]byte("o"), 100)
	for i := 0; i < n; i++ {
		if err := p.Send(ctx, &client.Message{Value: val}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	close(release)
	select {
	case err := <-errc:
		if !errors.Is(err, errItDone) {
			t.Fatalf("Each: %v after %d received, %d dropped", err, received, droppedSum)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("subscriber never accounted for every message")
	}
	if orderErr != nil {
		t.Error(orderErr)
	}
	t.Logf("received %d, dropped %d of %d", received, droppedSum, n)
	if received+droppedSum != n {
		t.Errorf("received %d + dropped %d != produced %d", received, droppedSum, n)
	}
	if droppedSum == 0 {
		t.Errorf("nothing dropped: the subscriber did not fall behind a 4-slot ring")
	}
	if got := s.Dropped(); got != uint64(droppedSum) {
		t.Errorf("Dropped() = %d, sum of Received.Dropped = %d", got, droppedSum)
	}
	// The broker counts a delivery just after writing it: let the counters catch up.
	var ctr map[string]uint64
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctr = itCounters(t, admin, "overrun")
		if ctr["messages_out"] >= uint64(received) || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if ctr["dropped_messages"] != uint64(droppedSum) || ctr["messages_out"] != uint64(received) || ctr["messages_in"] != n {
		t.Errorf("counters %v: want dropped_messages %d, messages_out %d, messages_in %d", ctr, droppedSum, received, n)
	}
}

// TestIntegrationStats: the STATS counters match what was done.
func TestIntegrationStats(t *testing.T) {
	t.Parallel()
	const n = 500
	addr, admin := itSetup(t, "counted", 2)
	ctx := itCtx(t)
	s1 := itSubscribe(t, itDial(t, addr, itUser, itPass), client.SubscribeOptions{Topic: "counted"})
	s2 := itSubscribe(t, itDial(t, addr, itUser, itPass), client.SubscribeOptions{Topic: "counted"})
	ctr := itCounters(t, admin, "counted")
	if ctr["subscribers"] != 2 || ctr["publishers"] != 0 {
		t.Errorf("after subscribing: %v", ctr)
	}
	pc := itDial(t, addr, itUser, itPass)
	p := itProducer(t, pc, client.ProducerOptions{Topic: "counted"})
	var bytesIn int
	for i := 0; i < n; i++ {
		v := fmt.Appendf(nil, "counted-%d", i)
		bytesIn += len(v)
		if err := p.Send(ctx, &client.Message{Value: v}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*client.Subscription{s1, s2} {
		if recs, err := collect(ctx, s, n); err != nil {
			t.Fatalf("%v after %d", err, len(recs))
		}
	}
	itEventually(t, "messages_out", func() bool { return itCounters(t, admin, "counted")["messages_out"] == 2*n })
	ctr = itCounters(t, admin, "counted")
	if ctr["messages_in"] != n || ctr["subscribers"] != 2 || ctr["publishers"] != 1 ||
		ctr["dropped_messages"] != 0 || ctr["rejected_batches"] != 0 || ctr["batches_in"] == 0 ||
		ctr["bytes_in"] < uint64(bytesIn) || ctr["bytes_out"] != 2*ctr["bytes_in"] || ctr["queue_size"] != n {
		t.Errorf("counters %v: want messages_in %d, messages_out %d, 2 subscribers, 1 publisher, bytes_out = 2*bytes_in, queue_size %d", ctr, n, 2*n, n)
	}
	// The topic's user sees the same counters.
	if uc := itCounters(t, itDial(t, addr, itUser, itPass), "counted"); uc["messages_in"] != n {
		t.Errorf("user STATS %v", uc)
	}

	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if got := itCounters(t, admin, "counted")["subscribers"]; got != 1 {
		t.Errorf("after one Close: subscribers = %d, want 1", got)
	}
	p.Close()
	pc.Close()
	itEventually(t, "publishers back to 0", func() bool { return itCounters(t, admin, "counted")["publishers"] == 0 })
}

// TestIntegrationNotAuthorized: a user cannot produce to or subscribe to a topic it does not
// own.
func TestIntegrationNotAuthorized(t *testing.T) {
	t.Parallel()
	srv := startBroker(t, nil)
	ctx := itCtx(t)
	admin := itDial(t, srv.Addr(), itAdminUser, itAdminPass)
	mk := func(name, user, pass string) {
		t.Helper()
		if err := admin.CreateTopic(ctx, client.TopicConfig{Name: name, User: user, Password: pass}); err != nil {
			t.Fatal(err)
		}
	}
	mk("alice-topic", "alice", "alice-pw")
	mk("bob-topic", "bob", "bob-pw")
	bob := itDial(t, srv.Addr(), "bob", "bob-pw")
	notAuth := &wire.Error{Code: wire.CodeNotAuthorized}

	if _, err := bob.NewProducer(client.ProducerOptions{Topic: "alice-topic"}); !errors.Is(err, notAuth) {
		t.Errorf("NewProducer for another user's topic: %v, want NOT_AUTHORIZED", err)
	}
	if _, err := bob.Subscribe(ctx, client.SubscribeOptions{Topic: "alice-topic"}); !errors.Is(err, notAuth) {
		t.Errorf("Subscribe to another user's topic: %v, want NOT_AUTHORIZED", err)
	}
	if _, err := bob.Stats(ctx, "alice-topic"); !errors.Is(err, notAuth) {
		t.Errorf("Stats of another user's topic: %v, want NOT_AUTHORIZED", err)
	}
	// A missing topic looks the same to a user.
	if _, err := bob.Metadata(ctx, "no-such-topic"); !errors.Is(err, notAuth) {
		t.Errorf("Metadata of a missing topic: %v, want NOT_AUTHORIZED", err)
	}

	// The producer's own topic changes hands under it: its sends are refused through the
	// callback and Flush.
	p := itProducer(t, bob, client.ProducerOptions{Topic: "bob-topic"})
	if err := p.Send(ctx, &client.Message{Value: []byte("ok")}, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("first Flush: %v", err)
	}
	if err := admin.DeleteTopic(ctx, "bob-topic"); err != nil {
		t.Fatal(err)
	}
	mk("bob-topic", "carol", "carol-pw")
	cbErr := make(chan error, 1)
	if err := p.Send(ctx, &client.Message{Value: []byte("refused")}, func(_ client.Ack, err error) { cbErr <- err }); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if err := p.Flush(ctx); !errors.Is(err, notAuth) {
		t.Errorf("Flush: %v, want NOT_AUTHORIZED", err)
	}
	select {
	case err := <-cbErr:
		if !errors.Is(err, notAuth) {
			t.Errorf("callback: %v, want NOT_AUTHORIZED", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no callback")
	}
	if ctr := itCounters(t, admin, "bob-topic"); ctr["messages_in"] != 0 {
		t.Errorf("refused message stored: %v", ctr)
	}
	// The refusal is not fatal: the connection still works.
	if _, err := bob.Ping(ctx); err != nil {
		t.Errorf("Ping after the refusal: %v", err)
	}
}

// TestIntegrationMessageTooLarge: a message over Limits().MaxMessage is refused locally; one
// at the limit goes through.
func TestIntegrationMessageTooLarge(t *testing.T) {
	t.Parallel()
	srv := startBroker(t, func(cfg *broker.Config) {
		cfg.Limits.MaxBatch = 64 << 10
		cfg.Limits.MaxFrame = cfg.Limits.MaxBatch + 1024
		cfg.Limits.MaxMessage = 32 << 10
	})
	ctx := itCtx(t)
	admin := itDial(t, srv.Addr(), itAdminUser, itAdminPass)
	itTopic(t, admin, "big", 1)
	c := itDial(t, srv.Addr(), itUser, itPass)
	lim := c.Limits()
	if lim.MaxMessage != 32<<10 || lim.MaxBatch != 64<<10 {
		t.Fatalf("announced limits %+v", lim)
	}
	s := itSubscribe(t, c, client.SubscribeOptions{Topic: "big"})
	p := itProducer(t, c, client.ProducerOptions{Topic: "big"})
	called := false
	err := p.Send(ctx, &client.Message{Value: make([]byte, lim.MaxMessage+1)}, func(client.Ack, error) { called = true })
	if !errors.Is(err, &wire.Error{Code: wire.CodeMessageTooLarge}) {
		t.Errorf("value of MaxMessage+1: %v, want MESSAGE_TOO_LARGE", err)
	}
	err = p.Send(ctx, &client.Message{Key: []byte("k"), Value: make([]byte, lim.MaxMessage)}, nil)
	if !errors.Is(err, &wire.Error{Code: wire.CodeMessageTooLarge}) {
		t.Errorf("key + value of MaxMessage+1: %v, want MESSAGE_TOO_LARGE", err)
	}
	err = p.Send(ctx, &client.Message{Value: make([]byte, lim.MaxMessage-10), Headers: []wire.RecordHeader{{Name: []byte("h"), Value: make([]byte, 10)}}}, nil)
	if !errors.Is(err, &wire.Error{Code: wire.CodeMessageTooLarge}) {
		t.Errorf("value + header of MaxMessage+1: %v, want MESSAGE_TOO_LARGE", err)
	}
	var ack client.Ack
	var ackErr error
	if err := p.Send(ctx, &client.Message{Value: bytes.Repeat([]byte("m"), lim.MaxMessage)}, func(a client.Ack, err error) { ack, ackErr = a, err }); err != nil {
		t.Fatalf("value of exactly MaxMessage: %v", err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if called {
		t.Error("the refused message's callback ran")
	}
	if ackErr != nil || ack.Offset != 0 {
		t.Errorf("ack %+v, %v", ack, ackErr)
	}
	recs, err := collect(ctx, s, 1)
	if err != nil || len(recs) != 1 || len(recs[0].Value) != lim.MaxMessage {
		t.Fatalf("received %d messages, %v", len(recs), err)
	}
	ctr := itCounters(t, admin, "big")
	if ctr["messages_in"] != 1 || ctr["rejected_batches"] != 0 {
		t.Errorf("counters %v: only the message at the limit should have reached the broker", ctr)
	}
}
