package broker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/broker/brokertest"
	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// Two members of one group consume a replicated topic of a 3-broker cluster while the
// group's coordinator moves: its broker stops, or it hands the leadership of the group's
// offsets partition to another broker. The holding of each partition is recorded from the
// members' OnAssign and OnRevoke callbacks, and no two members may hold a partition at
// once: the new coordinator withholds the group's partitions for the group's session
// timeout and two election timeouts, which outlasts the old members' hold (they stop within
// nine tenths of their session after the old coordinator's last answer). One member takes
// its time to let go (OnRevoke returns after 800 ms, an application finishing what it holds
// of the partitions): without the withhold, the other, quicker to join the new coordinator,
// is given its partitions meanwhile.

const (
	cmTopic      = "events"
	cmPartitions = 4
	cmUser       = "app"
	cmPass       = "app-secret"
	cmSession    = 2 * time.Second
	cmSlowRevoke = 800 * time.Millisecond
)

// eventually polls cond (bounded: 30 s) until it holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after 30 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func reqCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// hold is one member's holding of one partition, from OnAssign to the return of OnRevoke
// (open: end zero).
type hold struct {
	member     int
	start, end time.Time
	from       int64 // the offset it started at
}

// holdings records who holds which partition, and when.
type holdings struct {
	mu    sync.Mutex
	parts map[int32][]hold
}

func (h *holdings) assign(member int, starts map[int32]int64) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for p, off := range starts {
		h.parts[p] = append(h.parts[p], hold{member: member, start: now, from: off})
	}
}

func (h *holdings) revoke(member int, parts []int32) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range parts {
		hs := h.parts[p]
		for i := len(hs) - 1; i >= 0; i-- {
			if hs[i].member == member && hs[i].end.IsZero() {
				hs[i].end = now
				break
			}
		}
	}
}

// closeAll ends every open holding of member.
func (h *holdings) closeAll(member int) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for p, hs := range h.parts {
		for i := range hs {
			if hs[i].member == member && hs[i].end.IsZero() {
				h.parts[p][i].end = now
			}
		}
	}
}

// holders is who holds each partition now (-1: nobody).
func (h *holdings) holders() map[int32]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[int32]int{}
	for p := range int32(cmPartitions) {
		out[p] = -1
		for _, x := range h.parts[p] {
			if x.end.IsZero() {
				out[p] = x.member
			}
		}
	}
	return out
}

// givenSince is how many partitions were given to a member after t.
func (h *holdings) givenSince(t time.Time) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, hs := range h.parts {
		if len(hs) > 0 && hs[len(hs)-1].start.After(t) {
			n++
		}
	}
	return n
}

// check fails the test if two members held a partition at once, closing open holdings at
// end, and returns the holdings of each partition started after from.
func (h *holdings) check(t *testing.T, end, from time.Time) map[int32][]hold {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	after := map[int32][]hold{}
	for p, hs := range h.parts {
		hs = slices.Clone(hs)
		for i := range hs {
			if hs[i].end.IsZero() {
				hs[i].end = end
			}
			if hs[i].start.After(from) {
				after[p] = append(after[p], hs[i])
			}
		}
		sort.Slice(hs, func(i, j int) bool { return hs[i].start.Before(hs[j].start) })
		for i := 1; i < len(hs); i++ {
			if prev := hs[i-1]; hs[i].start.Before(prev.end) {
				t.Errorf("partition %d: member %d held it from %s while member %d held it until %s (%v overlap)", p,
					hs[i].member, hs[i].start.Format("15:04:05.000"), prev.member, prev.end.Format("15:04:05.000"), prev.end.Sub(hs[i].start))
			}
		}
	}
	return after
}

func TestClusterGroupNoTwoHolders(t *testing.T) {
	for _, tc := range []struct {
		name string
		move func(t *testing.T, cl *brokertest.Cluster, group string, coord, to int)
	}{
		{"coordinator stopped", func(t *testing.T, cl *brokertest.Cluster, _ string, coord, _ int) { cl.Stop(coord) }},
		{"leadership transferred", func(t *testing.T, cl *brokertest.Cluster, group string, coord, to int) {
			eventually(t, "the offsets partition's leadership to move", func() bool {
				return cl.Brokers[coord].TransferCoordinator(group, uint64(to+1))
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { testNoTwoHolders(t, tc.move) })
	}
}

func testNoTwoHolders(t *testing.T, move func(t *testing.T, cl *brokertest.Cluster, group string, coord, to int)) {
	cl := brokertest.StartCluster(t, 3, func(cfg *broker.Config) { cfg.Groups.SessionTimeout = cmSession })
	admin, err := client.Dial(reqCtx(t), cl.Brokers[0].Addr(), client.Options{User: brokertest.AdminUser, Password: brokertest.AdminPassword})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	eventually(t, "the replicated topic created", func() bool {
		err := admin.CreateTopic(reqCtx(t), client.TopicConfig{Name: cmTopic, Kind: wire.KindDurable, Partitions: cmPartitions, User: cmUser, Password: cmPass,
			Options: []wire.Option{{Key: wire.OptionReplicationFactor, Value: "3"}}})
		return err == nil || errors.Is(err, &wire.Error{Code: wire.CodeTopicExists})
	})
	conns := make([]*client.Conn, 3)
	for i, s := range cl.Brokers {
		eventually(t, fmt.Sprintf("broker %d serves the topic", i+1), func() bool {
			c, err := client.Dial(reqCtx(t), s.Addr(), client.Options{User: cmUser, Password: cmPass})
			if err != nil {
				return false
			}
			if _, err := c.Metadata(reqCtx(t), cmTopic); err != nil {
				c.Close()
				return false
			}
			conns[i] = c
			t.Cleanup(func() { c.Close() })
			return true
		})
	}
	group := "billing"
	coord := -1
	eventually(t, "a coordinator every broker names", func() bool {
		coord = -1
		for _, c := range conns {
			fc, err := c.FindCoordinator(reqCtx(t), group)
			if err != nil || fc.Coordinator == 0 || coord >= 0 && coord != int(fc.Coordinator-1) {
				return false
			}
			coord = int(fc.Coordinator - 1)
		}
		return true
	})
	var others []int
	for i := range conns {
		if i != coord {
			others = append(others, i)
		}
	}

	// Produce through a broker that stays, two halves: before and after the move.
	var acksMu sync.Mutex
	ends := map[int32]int64{}    // partition: the offset after its last record
	acked := map[int32][]int64{} // partition: the offsets of its records
	produce := func(from, to int) {
		p, err := conns[others[0]].NewProducer(client.ProducerOptions{Topic: cmTopic})
		if err != nil {
			t.Fatal(err)
		}
		for i := from; i < to; i++ {
			err := p.Send(reqCtx(t), &client.Message{Key: fmt.Appendf(nil, "k-%d", i), Value: fmt.Appendf(nil, "v-%d", i)}, func(a client.Ack, err error) {
				if err != nil {
					t.Errorf("record %d: %v", i, err)
					return
				}
				acksMu.Lock()
				ends[a.Partition] = max(ends[a.Partition], a.Offset+1)
				acked[a.Partition] = append(acked[a.Partition], a.Offset)
				acksMu.Unlock()
			})
			if err != nil {
				t.Fatalf("Send %d: %v", i, err)
			}
		}
		if err := p.Close(); err != nil {
			t.Fatalf("producer Close: %v", err)
		}
	}
	const half = 200
	produce(0, half)

	h := &holdings{parts: map[int32][]hold{}}
	var delMu sync.Mutex
	delivered := map[int32]map[int64]int{}
	count := func() int {
		delMu.Lock()
		defer delMu.Unlock()
		n := 0
		for _, offs := range delivered {
			n += len(offs)
		}
		return n
	}
	ctx, stopConsuming := context.WithCancel(context.Background())
	defer stopConsuming()
	var wg sync.WaitGroup
	consumers := make([]*client.Consumer, 2)
	for i := range consumers {
		slow := i == 0
		k, err := conns[others[i]].NewConsumer(reqCtx(t), client.ConsumerOptions{Topic: cmTopic, Group: group, SessionTimeout: cmSession,
			AutoCommit: 100 * time.Millisecond,
			OnAssign:   func(starts map[int32]int64) { h.assign(i, starts) },
			OnRevoke: func(parts []int32, lost bool) map[int32]int64 {
				if slow && lost {
					time.Sleep(cmSlowRevoke) // finishing what it holds of them
				}
				h.revoke(i, parts)
				return nil
			}})
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
		consumers[i] = k
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = k.Each(ctx, func(m *client.Received) error {
				delMu.Lock()
				if delivered[m.Partition] == nil {
					delivered[m.Partition] = map[int64]int{}
				}
				delivered[m.Partition][m.Offset]++
				delMu.Unlock()
				return nil
			})
		}()
	}
	split := func() bool {
		n := [2]int{}
		for _, m := range h.holders() {
			if m < 0 {
				return false
			}
			n[m]++
		}
		return n[0] == cmPartitions/2 && n[1] == cmPartitions/2
	}
	eventually(t, "the members to split the partitions and consume the first half", func() bool { return split() && count() == half })
	// Committed before the move: what the new coordinator must start the partitions at.
	allCommitted := func() bool {
		for p := range int32(cmPartitions) {
			off, err := conns[others[0]].FetchCommitted(reqCtx(t), wire.FetchCommitted{Group: group, Topic: cmTopic, Partition: uint32(p)})
			acksMu.Lock()
			end := ends[p]
			acksMu.Unlock()
			if err != nil || off != end {
				return false
			}
		}
		return true
	}
	eventually(t, "every position committed", allCommitted)
	acksMu.Lock()
	committed := maps(ends)
	acksMu.Unlock()

	moved := time.Now()
	move(t, cl, group, coord, others[0])
	produce(half, 2*half)
	eventually(t, "the members to split the partitions again, given by the new coordinator, and consume everything", func() bool {
		return count() == 2*half && split() && h.givenSince(moved) == cmPartitions
	})
	// The old holders may have delivered records after the move, uncommitted: the new ones
	// read them again from the committed offsets, and commit everything.
	eventually(t, "every position committed at the new coordinator", allCommitted)
	stopConsuming()
	wg.Wait()
	for i, k := range consumers {
		// The member's holdings end as Close starts (it delivers nothing more; Close's
		// OnRevoke ends them again, and its LEAVE_GROUP hands them to the other at once).
		h.closeAll(i)
		if err := k.Close(); err != nil {
			t.Errorf("member %d: Close: %v", i, err)
		}
	}

	after := h.check(t, time.Now(), moved)
	if t.Failed() {
		t.Logf("moved at %s; holdings:", moved.Format("15:04:05.000"))
		for p, hs := range h.parts {
			for _, x := range hs {
				t.Logf("  partition %d: member %d from %s (offset %d) until %s", p, x.member, x.start.Format("15:04:05.000"), x.from, x.end.Format("15:04:05.000"))
			}
		}
	}
	var gap time.Duration
	for p := range int32(cmPartitions) {
		hs := after[p]
		if len(hs) == 0 {
			t.Errorf("partition %d was not given again after the move", p)
			continue
		}
		if hs[0].from < committed[p] {
			t.Errorf("partition %d started at %d after the move, below its commit %d", p, hs[0].from, committed[p])
		}
		gap = max(gap, hs[0].start.Sub(moved))
	}
	dups := 0
	for p := range int32(cmPartitions) {
		for _, off := range acked[p] {
			switch n := delivered[p][off]; {
			case n == 0:
				t.Errorf("partition %d offset %d never delivered", p, off)
			case n > 1 && off < committed[p]:
				t.Errorf("partition %d offset %d, committed before the move, delivered %d times", p, off, n)
			default:
				dups += n - 1
			}
		}
		off, err := conns[others[0]].FetchCommitted(reqCtx(t), wire.FetchCommitted{Group: group, Topic: cmTopic, Partition: uint32(p)})
		if err != nil || off != ends[p] {
			t.Errorf("partition %d: committed %d, %v at the end; want %d", p, off, err, ends[p])
		}
	}
	t.Logf("coordinator node %d moved; partitions given again %v later (withheld for the %v session and two election timeouts); %d records delivered twice (by the old holder before it heard of the move, and the new; none committed)",
		coord+1, gap.Round(time.Millisecond), cmSession, dups)
}

func maps(m map[int32]int64) map[int32]int64 {
	out := make(map[int32]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
