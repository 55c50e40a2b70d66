package client_test

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lightq/lightq/client"
)

// TestProducerBatchOpenedWhileFlusherWaitsForSlot: a batch opened on a lower partition
// while the flusher waits for an in-flight slot must still leave after its linger. It runs
// in a synctest bubble: synctest.Wait tells when the flusher is blocked, and the linger is
// on the fake clock.
func TestProducerBatchOpenedWhileFlusherWaitsForSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := startPipeFake(t)
		fb.AddTopic("events", 2)
		c := dialPipe(t, fb)
		const linger = 20 * time.Millisecond
		p := newProducer(t, c, client.ProducerOptions{Topic: "events", Linger: linger, MaxInFlight: 1})
		ctx := testCtx(t)
		fb.set(func(fb *fakeBroker) { fb.holdAcks = true })
		var acked [3]atomic.Bool
		send := func(i int, part int32) {
			if err := p.Send(ctx, &client.Message{Value: value(i), Partition: part, HasPartition: true},
				func(_ client.Ack, err error) { acked[i].Store(err == nil) }); err != nil {
				t.Fatal(err)
			}
		}
		send(0, 0) // sealed after linger, takes the only slot; its ack is held
		fb.waitUntil(func(fb *fakeBroker) bool { return len(fb.heldAcks) == 1 })
		send(1, 1)             // due after linger; the flusher then waits for the slot
		time.Sleep(3 * linger) // the linger of partition 1 is over
		synctest.Wait()        // the flusher is now blocked in sealBatches on partition 1
		send(2, 0)             // opens partition 0: timerDue is stale, no wake
		fb.ReleaseAcks()       // slot frees; flusher seals partition 1 only, timer -> 1h
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if !acked[2].Load() {
			t.Fatalf("message 2 (partition 0) not sent 2s after its %v linger; acked: %v %v", linger, acked[0].Load(), acked[1].Load())
		}
	})
}
