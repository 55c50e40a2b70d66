//go:build linux

package pace

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// Pacer sleeps short intervals precisely. Go's own timers wake about 1 ms late for short
// sleeps (the netpoller waits in milliseconds). The Pacer pins its goroutine to a thread whose
// timer slack is 1 ns and sleeps with nanosleep(2): wake-ups within tens of µs. One per
// goroutine; not safe for concurrent use.
type Pacer struct{}

// New pins the calling goroutine to its thread and sets the thread's timer slack to 1 ns.
func New() *Pacer {
	runtime.LockOSThread()
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	return &Pacer{}
}

// Sleep blocks the thread for d with nanosleep(2); it may return early on a signal (Until
// loops until its target).
func (p *Pacer) Sleep(d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	_ = unix.Nanosleep(&ts, nil)
}

// Close unpins the goroutine; call it on the goroutine that called New.
func (p *Pacer) Close() { runtime.UnlockOSThread() }
