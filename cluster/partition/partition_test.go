package partition

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/lightq/lightq/cluster/replica"
	"github.com/lightq/lightq/log"
	"github.com/lightq/lightq/wire"
)

// workload is the batches of n idempotent producers (ids from firstID), each of batches
// batches of 1-5 records of 20-220 bytes, from seed.
type workload struct {
	keys    [][]batchKey
	batches [][][]byte
}

func newWorkload(seed uint64, firstID int64, n, batches int) *workload {
	w := &workload{}
	for i := range n {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		pr := newProducer(firstID + int64(i))
		var keys []batchKey
		var bs [][]byte
		for range batches {
			keys = append(keys, batchKey{pr.id, pr.epoch, pr.seq})
			bs = append(bs, pr.next(1+rng.IntN(5), 20+rng.IntN(200)))
		}
		w.keys, w.batches = append(w.keys, keys), append(w.batches, bs)
	}
	return w
}

// run sends every producer's batches through the cluster's leader, window in flight each,
// all producers at once, retrying as producers do, and returns what each batch was acked
// with and the first error (errAborted when the cluster's abort said so).
func (w *workload) run(c *cluster, window int) (map[batchKey]int64, error) {
	var (
		mu    sync.Mutex
		acked = map[batchKey]int64{}
		first error
		wg    sync.WaitGroup
	)
	for i := range w.batches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base, err := c.pipeline(w.batches[i], window)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = fmt.Errorf("producer %d: %w", w.keys[i][0].pid, err)
			}
			for j, k := range w.keys[i] {
				if base[j] >= 0 {
					acked[k] = base[j]
				}
			}
		}()
	}
	wg.Wait()
	return acked, first
}

// runProducers runs a new workload (see newWorkload) and fails the test unless every batch
// is acked.
func runProducers(c *cluster, seed uint64, firstID int64, n, batches, window int) map[batchKey]int64 {
	c.t.Helper()
	acked, err := newWorkload(seed, firstID, n, batches).run(c, window)
	if err != nil {
		c.t.Fatal(err)
	}
	return acked
}

// TestReplicatedProduce: batches produced through the leader (idempotent ones, in flight
// eight at a time per producer, and plain ones in both formats) are acked with the offsets
// every replica gives them; the high watermark ends equal everywhere, and the replicas'
// segment files are byte-identical.
func TestReplicatedProduce(t *testing.T) {
	c := newCluster(t, 1, 3, nil)
	c.leader()
	acked := runProducers(c, 1, 100, 4, 60, 8)
	lead := c.part(c.leader())
	plain := map[int64]string{}
	for i := range 20 {
		v := fmt.Sprintf("plain-%d", i)
		magic := uint8(wire.BatchMagic)
		if i%2 == 1 {
			magic = wire.BatchMagic2
		}
		o := produceWait(lead, plainBatch(magic, v))
		if o.err != nil {
			t.Fatalf("plain batch %d: %v", i, o.err)
		}
		plain[o.base] = v
	}
	hw := c.quiet()
	t.Logf("%d idempotent and %d plain batches acked; high watermark %d", len(acked), len(plain), hw)
	c.sameLogs(c.ids...)
	for _, id := range c.ids {
		p := c.part(id)
		exactlyOnce(t, p, acked)
		// Plain batches are stored once each, in format 2 with their records unchanged.
		got := map[int64]string{}
		for _, s := range committed(t, p) {
			if s.pid != wire.NoProducer {
				continue
			}
			bt, _ := wire.ParseBatch(s.raw, 1<<20)
			it := wire.NewRecordIter(bt.Records, bt.RecordCount, bt.BaseOffset, bt.FirstTimestamp)
			var rec wire.Record
			if !it.Next(&rec) {
				t.Fatalf("node %d: plain batch at %d: %v", id, s.base, it.Err())
			}
			got[s.base] = string(rec.Value)
		}
		if fmt.Sprint(got) != fmt.Sprint(plain) {
			t.Fatalf("node %d: plain batches %v, want %v", id, got, plain)
		}
		if st := p.Status(); st.HighWatermark != hw || st.Pending != 0 {
			t.Fatalf("node %d: status %+v", id, st)
		}
	}
	if a, b, c3 := tables(c.part(1)), tables(c.part(2)), tables(c.part(3)); a != b || a != c3 {
		t.Fatalf("producer states differ:\n%s\n%s\n%s", a, b, c3)
	}
	// The followers applied everything (quiet); the leader learns it from their answers,
	// which may still be on the way.
	waitFor(t, "the leader to see every replica caught up", func() bool {
		st := lead.Status()
		if len(st.Replicas) != 3 || len(st.Voters) != 3 {
			t.Fatalf("leader status: %+v", st)
		}
		for _, r := range st.Replicas {
			if r.Lag != 0 || r.Match != st.LastIndex {
				return false
			}
		}
		return true
	})
}

// TestFollowerRefuses: a follower stores nothing and names the leader.
func TestFollowerRefuses(t *testing.T) {
	c := newCluster(t, 2, 3, nil)
	l := c.leader()
	c.produceAcked(plainBatch(wire.BatchMagic2, "x"))
	c.quiet()
	for _, id := range c.ids {
		if id == l {
			continue
		}
		o := produceWait(c.part(id), newProducer(7).next(1, 10))
		var nl *replica.NotLeaderError
		if !errors.As(o.err, &nl) || nl.Leader != l {
			t.Fatalf("follower %d answered %v, want NotLeader naming %d", id, o.err, l)
		}
	}
	// Invalid batches are refused before anything else.
	p := c.part(l)
	b := plainBatch(wire.BatchMagic2, "y")
	if o := produceWait(p, b[:len(b)-1]); !errors.Is(o.err, ErrInvalidBatch) {
		t.Fatalf("a cut batch: %v", o.err)
	}
	if o := produceWait(p, wire.AppendControlBatch(nil, wire.ControlEmptyEntry, nil)); !errors.Is(o.err, ErrInvalidBatch) {
		t.Fatalf("a control batch: %v", o.err)
	}
	ch := make(chan error, 1)
	p.Produce(b, 2, func(_ int64, err error) { ch <- err })
	if err := <-ch; !errors.Is(err, wire.ErrCorruptBatch) {
		t.Fatalf("a wrong record count: %v", err)
	}
	if o := produceWait(p, b); o.err != nil && !errors.Is(o.err, log.ErrDuplicate) {
		t.Fatalf("the valid batch: %v", o.err)
	}
}
