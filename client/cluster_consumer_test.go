package client_test

// The consumer in a cluster (fakecluster_test.go): each partition is fetched from its
// leader; when the leader moves (the old one answers NOT_LEADER, or its connection closes)
// the partition's fetching moves to the new leader at its position, without skipping or
// repeating an offset. A group member's group requests stay with the broker it dialled.

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// fillPartitions stores n messages in each of the topic's partitions through a producer on
// c: partition p gets messages p*n to p*n+n-1, at offsets 0 to n-1.
func fillPartitions(t *testing.T, c *client.Conn, topic string, parts, n int) {
	t.Helper()
	p := newProducer(t, c, client.ProducerOptions{Topic: topic, BatchBytes: 256})
	log := newAckLog()
	for part := range parts {
		sendRange(t, p, log, int32(part), part*n, part*n+n)
	}
	if err := p.Flush(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	log.exactlyOnce(t, parts*n)
}

// movingLeader names how a partition's leader moves in a test.
type movingLeader struct {
	name string
	move func(fb *fakeBroker) // node 2 stops leading partition 0 of "dur"; node 3 takes it
}

var leaderMoves = []movingLeader{
	{"not leader", func(fb *fakeBroker) { fb.SetLeader("dur", 0, 3) }},
	{"connection lost", func(fb *fakeBroker) {
		fb.SetLeader("dur", 0, 3)
		fb.SetDown(2, true)
		fb.DropNode(2)
	}},
}

// consumeAcrossMove consumes the n records of each of two partitions of "dur" with k,
// moving partition 0's leader (mv) while Each is at its offset 100, and checks that every
// offset of each partition was delivered once, in order, with the value stored there.
func consumeAcrossMove(t *testing.T, fb *fakeBroker, k *client.Consumer, n int, mv movingLeader) {
	t.Helper()
	errDone := errors.New("every record consumed")
	paused, resume := make(chan struct{}), make(chan struct{})
	got := map[int32][]client.Received{}
	total := 0
	done := make(chan error, 1)
	go func() {
		done <- k.Each(testCtx(t), func(m *client.Received) error {
			got[m.Partition] = append(got[m.Partition], client.Received{Partition: m.Partition, Offset: m.Offset, Value: append([]byte(nil), m.Value...)})
			total++
			if m.Partition == 0 && m.Offset == 100 {
				close(paused)
				<-resume
			}
			if total == 2*n {
				return errDone
			}
			return nil
		})
	}()
	select {
	case <-paused:
	case err := <-done:
		t.Fatalf("Each: %v before partition 0 reached offset 100", err)
	}
	mv.move(fb)
	close(resume)
	if err := <-done; !errors.Is(err, errDone) {
		t.Fatalf("Each: %v after %d records", err, total)
	}
	for part := range int32(2) {
		recs := got[part]
		if len(recs) != n {
			t.Errorf("partition %d: %d records delivered, want %d", part, len(recs), n)
		}
		for i, r := range recs {
			if r.Offset != int64(i) || string(r.Value) != string(value(int(part)*n+i)) {
				t.Fatalf("partition %d: record %d is offset %d value %q, want offset %d value %q (skipped or repeated)",
					part, i, r.Offset, r.Value, i, value(int(part)*n+i))
			}
		}
	}
	if mv.name == "not leader" && fb.NotLeaders(wire.OpFetch) == 0 {
		t.Error("no FETCH met NOT_LEADER: the leader moved after everything was fetched")
	}
}

func TestClusterConsumerFollowsLeader(t *testing.T) {
	for _, mv := range leaderMoves {
		t.Run(mv.name, func(t *testing.T) {
			fb := startFakeCluster(t, 3)
			fb.AddDurableTopic("dur", 2)
			fb.SetLeader("dur", 0, 2)
			fb.SetLeader("dur", 1, 3)
			c := dialSeeds(t, fb.Seeds(1))
			const n = 300
			fillPartitions(t, c, "dur", 2, n)
			var mu sync.Mutex
			var reported []error
			k, err := c.NewConsumer(testCtx(t), client.ConsumerOptions{Topic: "dur", MaxBytes: 512, Prefetch: 2048, MaxWait: 50 * time.Millisecond,
				OnError: func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }})
			if err != nil {
				t.Fatal(err)
			}
			defer k.Close()
			fetched1 := fb.Served(wire.OpFetch, 1)
			consumeAcrossMove(t, fb, k, n, mv)
			if fb.Served(wire.OpFetch, 1) != fetched1 || fetched1 != 0 {
				t.Errorf("node 1, which leads nothing, served %d FETCHes", fb.Served(wire.OpFetch, 1))
			}
			mu.Lock()
			for _, err := range reported {
				t.Logf("OnError: %v", err)
			}
			mu.Unlock()
		})
	}
}

// A group member fetches from the leaders and follows a move, while its JOIN_GROUP,
// HEARTBEAT, GROUP_COMMIT and LEAVE_GROUP all go to the broker it dialled.
func TestClusterGroupMemberFollowsLeader(t *testing.T) {
	for _, mv := range leaderMoves {
		t.Run(mv.name, func(t *testing.T) {
			fb := startFakeCluster(t, 3)
			fb.AddDurableTopic("dur", 2)
			fb.SetLeader("dur", 0, 2)
			fb.SetLeader("dur", 1, 3)
			c := dialSeeds(t, fb.Seeds(1))
			const n = 300
			fillPartitions(t, c, "dur", 2, n)
			k, err := c.NewConsumer(testCtx(t), client.ConsumerOptions{Topic: "dur", Group: "g", MaxBytes: 512, Prefetch: 2048,
				MaxWait: 50 * time.Millisecond, OnError: func(err error) { t.Logf("OnError: %v", err) }})
			if err != nil {
				t.Fatal(err)
			}
			consumeAcrossMove(t, fb, k, n, mv)
			if err := k.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			for _, op := range []wire.Op{wire.OpJoinGroup, wire.OpHeartbeat, wire.OpGroupCommit, wire.OpLeaveGroup} {
				if fb.Served(op, 1) == 0 || fb.Served(op, 2)+fb.Served(op, 3) != 0 {
					t.Errorf("%v served by nodes 1, 2, 3: %d, %d, %d; want node 1 only", op, fb.Served(op, 1), fb.Served(op, 2), fb.Served(op, 3))
				}
			}
			var committed []int64
			fb.get(func(fb *fakeBroker) {
				for part := range 2 {
					committed = append(committed, fb.cluster.committed[fmt.Sprintf("g/dur/%d", part)])
				}
			})
			if committed[0] != n || committed[1] != n {
				t.Errorf("committed %v, want %d for both partitions", committed, n)
			}
		})
	}
}
