//go:build linux

package bench

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// pacer sleeps short intervals precisely. Go's own timers wake about 1 ms late for short
// sleeps (the netpoller waits in milliseconds), which would be measured as latency (sends are
// stamped with their scheduled time). The pacer pins its goroutine to a thread whose timer
// slack is 1 ns and sleeps with nanosleep(2): wake-ups within tens of µs. One per goroutine.
type pacer struct{}

func newPacer() *pacer {
	runtime.LockOSThread()
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	return &pacer{}
}

func (p *pacer) sleep(d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	_ = unix.Nanosleep(&ts, nil)
}

func (p *pacer) close() { runtime.UnlockOSThread() }
