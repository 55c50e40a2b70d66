package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// Consumer groups coordinated by the broker, with the Go consumer against a real broker:
// balance, hand-over on Close and on a dropped connection, late joiners that re-read
// nothing, fencing.

// gmBroker starts a broker whose members may ask for short session timeouts.
func gmBroker(t *testing.T, topic string, partitions int) (*broker.Server, *client.Conn) {
	t.Helper()
	return ckSetup(t, func(c *broker.Config) { c.Groups.MinSessionTimeout = 100 * time.Millisecond }, topic, partitions, wire.Option{Key: "fsync", Value: "never"})
}

// delivery counts the deliveries of every (partition, offset) across a group's members.
type delivery struct {
	mu    sync.Mutex
	count map[[2]int64]int
	by    map[string]int // deliveries per member
}

func newDelivery() *delivery {
	return &delivery{count: map[[2]int64]int{}, by: map[string]int{}}
}

func (d *delivery) add(member string, m *client.Received) {
	d.mu.Lock()
	d.count[[2]int64{int64(m.Partition), m.Offset}]++
	d.by[member]++
	d.mu.Unlock()
}

func (d *delivery) distinct() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.count)
}

// member is one running group member: its consumer and the Each that feeds d.
type member struct {
	name string
	k    *client.Consumer
	done chan error
}

func startMember(t *testing.T, c *client.Conn, name string, opts client.ConsumerOptions, d *delivery) *member {
	t.Helper()
	k, err := c.NewConsumer(itCtx(t), opts)
	if err != nil {
		t.Fatalf("member %s: %v", name, err)
	}
	m := &member{name: name, k: k, done: make(chan error, 1)}
	go func() {
		m.done <- k.Each(context.Background(), func(r *client.Received) error {
			if d != nil {
				d.add(name, r)
			}
			return nil
		})
	}()
	t.Cleanup(func() { k.Close() })
	return m
}

// waitSplit waits until the members' partitions are disjoint, cover n partitions and
// differ in number by at most 1.
func waitSplit(t *testing.T, n int, ms ...*member) {
	t.Helper()
	itEventually(t, fmt.Sprintf("the members to split %d partitions", n), func() bool {
		seen := map[int32]bool{}
		lo, hi := n, 0
		for _, m := range ms {
			ps := m.k.Partitions()
			lo, hi = min(lo, len(ps)), max(hi, len(ps))
			for _, p := range ps {
				if seen[p] {
					return false
				}
				seen[p] = true
			}
		}
		return len(seen) == n && hi-lo <= 1
	})
}

func TestGroupThreeMembersShareEightPartitions(t *testing.T) {
	t.Parallel()
	srv, c := gmBroker(t, "events", 8)
	opts := client.ConsumerOptions{Topic: "events", Group: "g"}
	var ms []*member
	for i := range 3 {
		ms = append(ms, startMember(t, itDial(t, srv.Addr(), itUser, itPass), fmt.Sprint("m", i), opts, nil))
	}
	waitSplit(t, 8, ms...)
	for _, m := range ms {
		if n := len(m.k.Partitions()); n < 2 || n > 3 {
			t.Fatalf("%s has %d partitions: %v", m.name, n, m.k.Partitions())
		}
	}
	d, err := c.DescribeGroup(itCtx(t), "g", "events")
	if err != nil || len(d.Members) != 3 {
		t.Fatalf("describe: %+v %v", d, err)
	}
	l, err := c.ListGroups(itCtx(t), "")
	if err != nil || len(l) != 1 || l[0].Members != 3 {
		t.Fatalf("list: %+v %v", l, err)
	}
}

// A member that closes hands its partitions over within a second, committed: the other
// continues where it stopped.
func TestGroupCloseHandsOverWithinOneSecond(t *testing.T) {
	t.Parallel()
	srv, c := gmBroker(t, "events", 4)
	var acks []client.Ack
	ckProduce(t, c, client.ProducerOptions{Topic: "events"}, 0, 400, &acks, nil)
	d := newDelivery()
	opts := client.ConsumerOptions{Topic: "events", Group: "g"}
	a := startMember(t, itDial(t, srv.Addr(), itUser, itPass), "a", opts, d)
	b := startMember(t, itDial(t, srv.Addr(), itUser, itPass), "b", opts, d)
	waitSplit(t, 4, a, b)
	itEventually(t, "every record delivered", func() bool { return d.distinct() == 400 })
	start := time.Now()
	if err := a.k.Close(); err != nil {
		t.Fatal(err)
	}
	itEventually(t, "b to hold every partition", func() bool { return len(b.k.Partitions()) == 4 })
	if took := time.Since(start); took > time.Second {
		t.Fatalf("hand-over took %v, want at most 1s", took)
	}
	ckProduce(t, c, client.ProducerOptions{Topic: "events"}, 400, 800, &acks, nil)
	itEventually(t, "the new records delivered", func() bool { return d.distinct() == 800 })
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, n := range d.count {
		if n != 1 {
			t.Fatalf("partition %d offset %d delivered %d times", k[0], k[1], n)
		}
	}
}

// A member whose connection drops without LEAVE_GROUP loses its partitions one session
// timeout after, within a second more.
func TestGroupDroppedMemberHandedOverAfterSession(t *testing.T) {
	t.Parallel()
	srv, _ := gmBroker(t, "events", 4)
	const session = time.Second
	opts := client.ConsumerOptions{Topic: "events", Group: "g", SessionTimeout: session, OnError: func(error) {}}
	ca := itDial(t, srv.Addr(), itUser, itPass)
	a := startMember(t, ca, "a", opts, nil)
	b := startMember(t, itDial(t, srv.Addr(), itUser, itPass), "b", opts, nil)
	waitSplit(t, 4, a, b)
	ca.Close() // the connection drops: no LEAVE_GROUP
	dropped := time.Now()
	itEventually(t, "b to hold every partition", func() bool { return len(b.k.Partitions()) == 4 })
	took := time.Since(dropped)
	if took < session*9/10 || took > session+time.Second {
		t.Fatalf("hand-over %v after the drop, want between the session timeout %v and a second more", took, session)
	}
}

// A member that joins later gets its share, and nobody re-reads a record: every record is
// delivered exactly once across the group (revoked partitions are committed before they go).
func TestGroupLateJoinerRereadsNothing(t *testing.T) {
	t.Parallel()
	srv, c := gmBroker(t, "events", 6)
	var acks []client.Ack
	ckProduce(t, c, client.ProducerOptions{Topic: "events"}, 0, 3000, &acks, nil)
	d := newDelivery()
	opts := client.ConsumerOptions{Topic: "events", Group: "g", AutoCommit: time.Hour, MaxBytes: 4 << 10, Prefetch: 16 << 10}
	a := startMember(t, itDial(t, srv.Addr(), itUser, itPass), "a", opts, d)
	itEventually(t, "a to deliver some", func() bool { return d.distinct() >= 1000 })
	b := startMember(t, itDial(t, srv.Addr(), itUser, itPass), "b", opts, d)
	waitSplit(t, 6, a, b)
	if n := len(b.k.Partitions()); n != 3 {
		t.Fatalf("the late member has %d partitions, want 3", n)
	}
	ckProduce(t, c, client.ProducerOptions{Topic: "events"}, 3000, 6000, &acks, nil)
	itEventually(t, "every record delivered", func() bool { return d.distinct() == 6000 })
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, n := range d.count {
		if n != 1 {
			t.Fatalf("partition %d offset %d delivered %d times", k[0], k[1], n)
		}
	}
	if d.by["b"] == 0 {
		t.Fatal("the late member delivered nothing")
	}
}

// A member's commit of a partition it no longer holds is refused, and so is an offset-only
// commit while the group has members; OnRevoke and OnAssign see the hand-over, and the
// revoked partition is committed at the position it reached.
func TestGroupFencingAndCallbacks(t *testing.T) {
	t.Parallel()
	srv, c := gmBroker(t, "events", 2)
	var acks []client.Ack
	ckProduce(t, c, client.ProducerOptions{Topic: "events"}, 0, 200, &acks, nil)
	var mu sync.Mutex
	var revoked, assigned []int32
	aOpts := client.ConsumerOptions{Topic: "events", Group: "g", AutoCommit: -1,
		OnRevoke: func(ps []int32, lost bool) map[int32]int64 {
			mu.Lock()
			defer mu.Unlock()
			if lost {
				t.Error("lost the membership")
			}
			revoked = append(revoked, ps...)
			return nil
		}}
	d := newDelivery()
	a := startMember(t, itDial(t, srv.Addr(), itUser, itPass), "a", aOpts, d)
	itEventually(t, "a to deliver everything", func() bool { return d.distinct() == 200 })
	if err := c.CommitOffset(itCtx(t), wire.CommitOffset{Group: "g", Topic: "events", Partition: 0, Offset: 0}); !errors.Is(err, &wire.Error{Code: wire.CodeGroupNotEmpty}) {
		t.Fatalf("offset-only commit while a is a member: %v", err)
	}
	var assignedAt int64
	bOpts := client.ConsumerOptions{Topic: "events", Group: "g", OnAssign: func(starts map[int32]int64) {
		mu.Lock()
		for p, off := range starts {
			assigned = append(assigned, p)
			assignedAt = off
		}
		mu.Unlock()
	}}
	b := startMember(t, itDial(t, srv.Addr(), itUser, itPass), "b", bOpts, d)
	waitSplit(t, 2, a, b)
	moved := b.k.Partitions()[0]
	mu.Lock()
	if !slices.Equal(revoked, []int32{moved}) || !slices.Equal(assigned, []int32{moved}) {
		t.Fatalf("revoked %v, assigned %v, moved %d", revoked, assigned, moved)
	}
	mu.Unlock()
	committed, err := c.FetchCommitted(itCtx(t), wire.FetchCommitted{Group: "g", Topic: "events", Partition: uint32(moved)})
	mu.Lock()
	at := assignedAt
	mu.Unlock()
	if err != nil || committed != at || committed == 0 {
		t.Fatalf("the revoked partition was committed at %d (%v); b started it at %d", committed, err, at)
	}
	if err := a.k.CommitOffsets(itCtx(t), map[int32]int64{moved: 0}); !errors.Is(err, &wire.Error{Code: wire.CodeFencedMember}) {
		t.Fatalf("a commits the partition it gave away: %v, want FENCED_MEMBER", err)
	}
	if a.k.Position(moved) != -1 {
		t.Fatalf("a still reports a position for partition %d", moved)
	}
}

// Without a group, Starts resumes each partition at its own offset; FromEnd counts back.
func TestConsumerStartsPerPartition(t *testing.T) {
	t.Parallel()
	_, c := gmBroker(t, "events", 3)
	var acks []client.Ack
	ckProduce(t, c, client.ProducerOptions{Topic: "events"}, 0, 300, &acks, nil)
	md, err := c.Metadata(itCtx(t), "events")
	if err != nil {
		t.Fatal(err)
	}
	end := md[0].Partitions[2].EndOffset
	k := ckConsumer(t, c, client.ConsumerOptions{Topic: "events", Start: client.Latest(),
		Starts: map[int32]client.StartPosition{0: client.AtOffset(3), 2: client.FromEnd(5)}})
	if k.Position(0) != 3 || k.Position(1) != md[0].Partitions[1].EndOffset || k.Position(2) != end-5 {
		t.Fatalf("positions %d %d %d, want 3, the end, end-5 (%d)", k.Position(0), k.Position(1), k.Position(2), end-5)
	}
	if _, err := c.NewConsumer(itCtx(t), client.ConsumerOptions{Topic: "events", Starts: map[int32]client.StartPosition{3: client.Earliest()}}); !errors.Is(err, &wire.Error{Code: wire.CodeUnknownPartition}) {
		t.Fatalf("Starts of a partition the topic lacks: %v", err)
	}
	if _, err := c.NewConsumer(itCtx(t), client.ConsumerOptions{Topic: "events", Group: "g", Partitions: []int32{1}}); err == nil {
		t.Fatal("a group member with Partitions was accepted")
	}
}
