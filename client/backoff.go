package client

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff is the client's one retry schedule: reconnecting a Conn, retrying an AUTH answered
// RESOURCE_LIMIT, a FETCH that failed for a reason that passes, a PRODUCE refused with a code
// that means "later". Each wait doubles from min to max and is drawn uniformly from its upper
// half (equal jitter), so that clients that lost a broker at the same moment do not all come
// back at the same moment. The zero value of cur starts at min. Not safe for concurrent use:
// each retry loop owns its own.
type backoff struct {
	min, max time.Duration
	cur      time.Duration // the last wait before jitter; 0 before the first
}

// Reconnect and retry schedules. A partition without a known leader (an election, PROTOCOL.md
// section 16, which takes a second or two) is looked up again from lookupMin up to lookupMax.
const (
	reconnectMin = 50 * time.Millisecond
	reconnectMax = 2 * time.Second
	lookupMin    = 50 * time.Millisecond
	lookupMax    = time.Second
)

// next returns the next wait.
func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	half := b.cur / 2
	return half + rand.N(b.cur-half+1)
}

// reset starts the schedule again from min.
func (b *backoff) reset() { b.cur = 0 }

// sleep waits d unless ctx or stop ends first (false). stop may be nil.
func sleep(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	}
}
