//go:build linux

package broker

import (
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lightq/lightq/wire"
)

// coldStallBound is a stall, not a performance target: a ping's p99 is a few milliseconds on
// an idle machine and can reach tens of them on a loaded 2-core one, so a tight bound fails
// for the load, not the loop. This one catches a loop held for a second or more (by the disk
// or by a worker hand-off that never completes); the figures logged for both modes are the
// finer comparison.
const coldStallBound = time.Second

// TestColdCatchUpDoesNotStallTheLoop measures what a consumer reading data that is not in the
// page cache does to another connection on the same event loop: a pinger's round trips while
// the consumer catches up on 32 MiB evicted from the cache, with cold chunks read in by a
// worker first (the broker's design) and, for comparison, with sendfile reading them on the
// loop. The design must keep the pinger's p99 under coldStallBound; the figures of both are
// logged.
func TestColdCatchUpDoesNotStallTheLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	for _, noPrefetch := range []bool{false, true} {
		name := map[bool]string{false: "prefetch", true: "sendfile-on-loop"}[noPrefetch]
		t.Run(name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.EventLoops = 1 // everyone on one loop
			cfg.NoColdPrefetch = noPrefetch
			srv := startWith(t, cfg)
			admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
			admin.createDurable("cold", 1, wire.Option{Key: "segment.bytes", Value: "8388608"})
			p := login(t, srv.Addr(), "d-user", "d-pw")
			var next int64
			for next < 32<<20/1000 {
				p.produceAcks("cold", 0, wire.AcksDurable, offsetBatch(t, next, 60, 1000))
				next += 60
			}
			if !evict(t, filepath.Join(cfg.DataDir, "topics", "cold", "0")) {
				t.Skip("cannot evict segment files from the page cache here")
			}
			pinger := login(t, srv.Addr(), "d-user", "d-pw")
			stop := make(chan struct{})
			rtts := make(chan []time.Duration, 1)
			go func() {
				var out []time.Duration
				for {
					select {
					case <-stop:
						rtts <- out
						return
					default:
					}
					start := time.Now()
					pinger.ping()
					out = append(out, time.Since(start))
					time.Sleep(500 * time.Microsecond)
				}
			}()
			c := login(t, srv.Addr(), "d-user", "d-pw")
			start := time.Now()
			for off := int64(0); off < next; {
				m := wire.Fetch{Topic: "cold", Partition: 0, Offset: off, MaxBytes: 1 << 20}
				var resp wire.FetchResponse
				if err := resp.Decode(c.expectResponse(wire.OpFetch, c.send(wire.OpFetch, m.AppendTo(nil)))); err != nil {
					t.Fatal(err)
				}
				off = checkBatches(t, resp.Batches, off)
			}
			took := time.Since(start)
			close(stop)
			r := <-rtts
			sort.Slice(r, func(i, j int) bool { return r[i] < r[j] })
			if len(r) == 0 {
				t.Fatal("no pings")
			}
			p99, worst := r[len(r)*99/100], r[len(r)-1]
			t.Logf("%s: cold catch-up of 32 MiB in %v; pinger on the same loop: %d pings, p50 %v, p99 %v, max %v",
				name, took.Round(time.Millisecond), len(r), r[len(r)/2], p99, worst)
			if !noPrefetch && p99 > coldStallBound {
				t.Errorf("pinger p99 %v (over %v) while a cold consumer caught up: the loop stalled", p99, coldStallBound)
			}
		})
	}
}

// evict drops a directory's files from the page cache (they are clean: fsynced).
func evict(t *testing.T, dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	ok := false
	for _, e := range entries {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		_ = f.Sync()
		if unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED) == nil {
			ok = true
		}
		f.Close()
	}
	return ok
}
