package lqcat

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// The balanced consumer, kcat's -G: "lqcat -C -G GROUP -t TOPIC" is a member of GROUP, and
// the broker shares the topic's partitions among the members (PROTOCOL.md 10.1). lqcat
// commits, for each partition it holds, the offset after the last message printed: every
// second, when the broker takes the partition away (after flushing what it printed), and at
// exit (SIGINT included), before it leaves the group.

// heldPart is one partition the member holds; guarded by output.mu.
type heldPart struct {
	end       int64 // the end of the log when the partition was assigned (for -e)
	next      int64 // offset after the last message printed, -1 before one
	committed int64 // what the group has committed (or where lqcat started)
	done      bool
}

// balancedStart is the client start position for -o, used where the group has committed
// nothing.
func balancedStart(o offsetSpec) client.StartPosition {
	switch o.kind {
	case startEnd:
		return client.Latest()
	case startAbsolute:
		return client.AtOffset(o.n)
	case startRelative:
		return client.FromEnd(o.n)
	case startTime:
		return client.AtTime(time.UnixMilli(o.n))
	}
	return client.Earliest()
}

// consumeBalanced reads a durable topic as a member of cc.group.
func (r *runner) consumeBalanced(ctx context.Context, conn *client.Conn, cc *consumeConfig, out *output) error {
	eof := cc.exitEOF || cc.start.hasStop && cc.start.stopAt <= time.Now().UnixMilli()
	bounded := eof || cc.start.hasStop
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()

	// All guarded by out.mu.
	held := map[int32]*heldPart{}
	finished := false
	var assignErr error
	// finishIfDone ends the run when every partition held is done (-e, e@): the others'
	// partitions are theirs to finish. A member holding nothing waits. out.mu held.
	finishIfDone := func() {
		if !bounded || finished || len(held) == 0 {
			return
		}
		for _, p := range held {
			if !p.done {
				return
			}
		}
		finished = true
		stopRun()
	}
	// commitMu makes a revocation wait for a commit in progress, so that lqcat never
	// commits a partition it gave away.
	var commitMu sync.Mutex

	onAssign := func(starts map[int32]int64) {
		ends := map[int32]int64{}
		if eof {
			for p := range starts {
				lctx, cancel := r.reqCtx(ctx)
				end, err := conn.ListOffsets(lctx, wire.ListOffsets{Topic: cc.topic, Partition: uint32(p), Mode: wire.OffsetLatest})
				cancel()
				if err != nil {
					out.mu.Lock()
					if assignErr == nil {
						assignErr = fmt.Errorf("partition %d: end of the log: %w", p, err)
					}
					out.mu.Unlock()
					stopRun()
					return
				}
				ends[p] = end
			}
		}
		out.mu.Lock()
		defer out.mu.Unlock()
		for p, pos := range starts {
			hp := &heldPart{end: ends[p], next: -1, committed: pos}
			if eof && pos > hp.end && assignErr == nil {
				assignErr = withCode(ExitOutOfRange, fmt.Errorf("partition %d: offset %d is beyond the end of the log (%d)", p, pos, hp.end))
				stopRun()
			}
			hp.done = eof && pos >= hp.end
			held[p] = hp
		}
		r.info("group %q: assigned partitions %v of topic %q", cc.group, sortedKeys(starts), cc.topic)
		finishIfDone()
	}
	onRevoke := func(ps []int32, lost bool) map[int32]int64 {
		commitMu.Lock()
		defer commitMu.Unlock()
		_ = out.flush() // what was printed is out before its offsets are committed
		out.mu.Lock()
		defer out.mu.Unlock()
		offs := map[int32]int64{}
		for _, id := range ps {
			if p := held[id]; p != nil {
				if p.next > p.committed {
					offs[id] = p.next
				}
				delete(held, id)
			}
		}
		if lost {
			r.warn("group %q: membership lost; partitions %v go back uncommitted", cc.group, ps)
		} else {
			r.info("group %q: partitions %v of topic %q revoked", cc.group, ps, cc.topic)
		}
		finishIfDone()
		return offs
	}

	prefetch := 4 << 20
	k, err := conn.NewConsumer(ctx, client.ConsumerOptions{
		Topic: cc.topic, Group: cc.group, Start: balancedStart(cc.start), AutoCommit: -1, SessionTimeout: r.c.sessionTimeout,
		Prefetch: prefetch, MaxBytes: 1 << 20, OnAssign: onAssign, OnRevoke: onRevoke,
		OnError: func(err error) { r.warn("%v", err) },
		// A skipped batch counts as read, for -e and commits; out.mu held.
		OnCorruptBatch: r.onCorrupt(cc, out, func(e *client.CorruptBatchError) bool {
			p := held[e.Partition]
			if finished || p == nil || p.done {
				return false
			}
			p.next = max(p.next, e.LastOffset+1)
			p.done = eof && p.next >= p.end
			finishIfDone()
			return true
		}),
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("topic %q: group %q: %w", cc.topic, cc.group, err)
	}
	defer k.Close()
	r.info("group %q: member %s of topic %q", cc.group, k.MemberID(), cc.topic)

	handler := func(m *client.Received) error {
		out.mu.Lock()
		defer out.mu.Unlock()
		if finished {
			return errStop
		}
		p := held[m.Partition]
		if p == nil || p.done {
			return nil // finished partition: the rest is not ours to print
		}
		if cc.start.hasStop && m.Timestamp.UnixMilli() >= cc.start.stopAt {
			p.done = true
		} else {
			if err := out.write(m); err != nil {
				return err
			}
			p.next = m.Offset + 1
			p.done = eof && p.next >= p.end
		}
		if cc.count > 0 && out.printed >= cc.count {
			finished = true
			stopRun()
			return errStop
		}
		finishIfDone()
		if finished {
			return errStop
		}
		return nil
	}
	commit := func(ctx context.Context) error {
		commitMu.Lock()
		defer commitMu.Unlock()
		out.mu.Lock()
		offs := map[int32]int64{}
		for id, p := range held {
			if p.next > p.committed {
				offs[id] = p.next
			}
		}
		out.mu.Unlock()
		if len(offs) == 0 {
			return nil
		}
		if err := k.CommitOffsets(ctx, offs); err != nil {
			return err
		}
		out.mu.Lock()
		for id, off := range offs {
			if p := held[id]; p != nil {
				p.committed = max(p.committed, off)
			}
		}
		out.mu.Unlock()
		return nil
	}

	stop := make(chan struct{})
	ticks := 0
	wg := ticker(out.flushEvery, stop, func() {
		_ = out.flush()
		// A position can reach the end without a message to print there: a control batch
		// (PROTOCOL.md section 7) at the end of the log takes an offset and carries none.
		out.mu.Lock()
		for id, p := range held {
			if pos := k.Position(id); eof && !p.done && pos >= p.end {
				p.next, p.done = max(p.next, pos), true
			}
		}
		finishIfDone()
		out.mu.Unlock()
		if ticks++; ticks%10 == 0 {
			cctx, cancel := context.WithTimeout(runCtx, 10*time.Second)
			if err := commit(cctx); err != nil && runCtx.Err() == nil {
				r.warn("commit: %v", err)
			}
			cancel()
		}
	})
	err = k.Each(runCtx, handler)
	close(stop)
	wg.Wait()
	var first error
	if !(err == nil || errors.Is(err, errStop) || errors.Is(err, context.Canceled) || errors.Is(err, client.ErrClosed)) {
		first = err
	}
	out.mu.Lock()
	if first == nil {
		first = assignErr
	}
	out.mu.Unlock()
	if out.err != nil && first == nil {
		first = fmt.Errorf("stdout: %w", out.err)
	}
	// Flush, commit, leave: in this order, so that the next member starts after what was
	// printed, and at once.
	if ferr := out.flush(); ferr != nil && first == nil {
		first = fmt.Errorf("stdout: %w", ferr)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := commit(cctx); err != nil && first == nil {
		first = fmt.Errorf("group %q: %w", cc.group, err)
	}
	if err := k.Close(); err != nil && first == nil {
		first = fmt.Errorf("group %q: %w", cc.group, err)
	}
	if first != nil && !strings.Contains(first.Error(), cc.topic) {
		first = fmt.Errorf("topic %q: %w", cc.topic, first)
	}
	return first
}

// sortedKeys lists the partitions of m in order.
func sortedKeys(m map[int32]int64) []int32 {
	out := make([]int32, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}
