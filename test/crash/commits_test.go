package crash

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// Committed offsets in the history: while producers run, committers commit offsets for
// commitGroups groups on every partition, each pair's offsets strictly increasing (the
// partition's high watermark when it has grown). After a restart every pair must hold at
// least its last acknowledged offset (nothing acknowledged is lost) and at most the last
// one sent (nothing was invented).

const (
	commitGroups     = 8
	commitWorkers    = 4 // connections' goroutines committing concurrently, each its own groups
	commitGroupStyle = "crash-group-%d"
)

type commitKey struct {
	group string
	part  int
}

// commitHist is every pair's commit history over the cycles of one data directory.
type commitHist struct {
	mu    sync.Mutex // guards the maps while committers run
	acked map[commitKey]int64
	sent  map[commitKey]int64

	// Outcomes of this cycle (reset by settle).
	nSent, nAcked, nFailed, nLost int
}

func newCommitHist() *commitHist {
	return &commitHist{acked: map[commitKey]int64{}, sent: map[commitKey]int64{}}
}

// run commits until ctx ends or the connection breaks.
func (h *commitHist) run(ctx context.Context, c *client.Conn) {
	var wg sync.WaitGroup
	for w := range commitWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.commitLoop(ctx, c, w)
		}()
	}
	wg.Wait()
}

func (h *commitHist) commitLoop(ctx context.Context, c *client.Conn, worker int) {
	for ctx.Err() == nil {
		progressed := false
		for part := 0; part < partitions; part++ {
			hw, err := c.ListOffsets(ctx, wire.ListOffsets{Topic: topicName, Partition: uint32(part), Mode: wire.OffsetLatest})
			if err != nil {
				return
			}
			for g := worker; g < commitGroups; g += commitWorkers {
				k := commitKey{fmt.Sprintf(commitGroupStyle, g), part}
				h.mu.Lock()
				prev, had := h.sent[k]
				if had && hw <= prev {
					h.mu.Unlock()
					continue
				}
				h.sent[k] = hw
				h.nSent++
				h.mu.Unlock()
				progressed = true
				err := c.CommitOffset(ctx, wire.CommitOffset{Group: k.group, Topic: topicName, Partition: uint32(part), Offset: hw})
				h.mu.Lock()
				var we *wire.Error
				switch {
				case err == nil:
					h.acked[k] = max(h.acked[k], hw)
					h.nAcked++
				case errors.As(err, &we):
					h.nFailed++ // refused; it may still be stored (sent covers it)
				default:
					h.nLost++ // no answer: stored or not
				}
				h.mu.Unlock()
				if err != nil && !errors.As(err, &we) {
					return
				}
			}
		}
		if !progressed {
			select { // the log has not grown: pace like the producers do
			case <-ctx.Done():
			case <-c.Done():
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}
}

// committedFunc reads a pair's committed offset (-1 for none).
type committedFunc func(ctx context.Context, group string, part int) (int64, error)

func connCommitted(c *client.Conn) committedFunc {
	return func(ctx context.Context, group string, part int) (int64, error) {
		return c.FetchCommitted(ctx, wire.FetchCommitted{Group: group, Topic: topicName, Partition: uint32(part)})
	}
}

// verify reads every pair back and reports lost or invented commits; it also settles this
// cycle's outcome counts into r.
func (h *commitHist) verify(ctx context.Context, read committedFunc, r *report) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	r.commitsSent, r.commitsAcked, r.commitsFailed, r.commitsIndeterminate = h.nSent, h.nAcked, h.nFailed, h.nLost
	h.nSent, h.nAcked, h.nFailed, h.nLost = 0, 0, 0, 0
	for k, sent := range h.sent {
		got, err := read(ctx, k.group, k.part)
		if err != nil {
			return fmt.Errorf("FETCH_COMMITTED %s partition %d: %w", k.group, k.part, err)
		}
		acked, wasAcked := h.acked[k]
		switch {
		case wasAcked && got < acked:
			r.commitLost++
			r.problem("lost-commit", "%s partition %d: committed offset %d after restart, but %d was acknowledged", k.group, k.part, got, acked)
		case got > sent:
			r.commitPhantom++
			r.problem("phantom-commit", "%s partition %d: committed offset %d after restart, but at most %d was sent", k.group, k.part, got, sent)
		}
	}
	return nil
}
