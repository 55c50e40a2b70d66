package partition

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lightq/lightq/wire"
)

// BenchmarkReplicatedProduce: three replicas in one process on loopback, four idempotent
// producers with eight batches each in flight, batches of 100 records of 100 B and 1 KiB,
// acked once committed (a quorum wrote them; with fsync=always, fsynced them). One op is one
// batch; allocs/op counts the whole cluster's allocations per batch (leader, two followers,
// transports), not only Produce's.
func BenchmarkReplicatedProduce(b *testing.B) {
	for _, fs := range []Fsync{FsyncNever, FsyncAlways} {
		for _, size := range []int{100, 1024} {
			b.Run(fmt.Sprintf("fsync=%v/record=%dB", fs, size), func(b *testing.B) { benchProduce(b, fs, size) })
		}
	}
}

func benchProduce(b *testing.B, fs Fsync, size int) {
	const (
		producers = 4
		window    = 8
		records   = 100
	)
	c := newCluster(b, 0, 3, func(cfg *Config) {
		cfg.Fsync = fs
		cfg.Log.SegmentBytes = 256 << 20
		cfg.Logf = func(string, ...any) {}
		cfg.Tick = 100 * time.Millisecond // raft's default: a busy machine does not lose its leader
	})
	lead := c.part(c.leader())
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	batchBytes := len(newProducer(0).next(records, size))
	b.SetBytes(int64(batchBytes))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range producers {
		n := b.N / producers
		if i == 0 {
			n += b.N % producers
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pr := newProducer(int64(i + 1))
			batch := pr.next(records, size)
			seq := int32(0)
			sem := make(chan struct{}, window)
			done := func(_ int64, err error) {
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
				<-sem
			}
			for range n {
				if err := wire.SetBatchProducer(batch, pr.id, 0, seq); err != nil {
					panic(err)
				}
				sem <- struct{}{}
				lead.Produce(batch, records, done)
				seq = wire.NextSequence(seq, records)
			}
			for range window {
				sem <- struct{}{}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if first != nil {
		b.Fatalf("%v (leader now %+v)", first, lead.Status())
	}
	b.ReportMetric(float64(b.N*records)/elapsed.Seconds(), "records/s")
}
