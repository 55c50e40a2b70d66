package partition

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/cluster/raftlog"
	"github.com/lightq/lightq/cluster/replica"
	"github.com/lightq/lightq/cluster/transport"
)

// SegmentFetcher streams a peer's segment bytes (*transport.Transport is one: see its
// FetchSegments).
type SegmentFetcher interface {
	FetchSegments(ctx context.Context, node, group uint64, from, to int64, roundDown bool, sink transport.SegmentSink, progress func(n int)) (int64, error)
	// PeerFeatures (FeatureSource): a snapshot naming segments goes only to a peer that
	// announced transport.FeatureSegmentCatchUp (snapGate).
	FeatureSource
}

// CatchUpStats are the figures of the catch-ups from whole segments this replica made.
type CatchUpStats struct {
	Done     int   // catch-ups installed
	Bytes    int64 // bytes of batches received and installed, over all of them
	Attempts int   // streams opened (more than Done when some were cut or refused)
	Failed   int   // catch-ups given up (the snapshot then installed without the segments)
	// Abandoned counts snapshots abandoned because their source stopped answering (refused
	// or failed dial, no bytes for CatchUpStall, a newer term heard): not installed, raft
	// restarted (replica.ErrAbandonSnapshot).
	Abandoned int
	// AbandonedBy splits Abandoned by reason (AbandonStall, AbandonTerm, AbandonNoAnswer).
	AbandonedBy [AbandonReasons]int
	Last        time.Duration
}

const (
	defaultCatchUpTimeout = 2 * time.Minute
	catchUpRetryMin       = 20 * time.Millisecond
	catchUpRetryMax       = time.Second
	minCatchUpStall       = 250 * time.Millisecond
)

// catchUp fetches the segments below the offset of snap (raftlog data, version 2) from the
// node it names, from the later of that node's log start and this replica's committed end,
// verified and written to temporary files (raftlog.CatchUp), and returns them ready to
// install; nil when there is nothing to fetch (no source, or nothing below the offset that
// this replica lacks), or when it gave up (Config.CatchUpTimeout, logged: the snapshot is then
// installed as before, the log starting at its offset). A stream cut short after it made
// progress goes on from the last whole batch; a refusal because the source's retention moved
// past what was asked, or bytes that fail verification, start it again.
//
// It runs on the replica's goroutine, which waits (raft's snapshot flow: the leader probes
// this follower from the snapshot on once it is installed); Close cancels it. Meanwhile this
// replica's election timer is stopped and its inbox unread, so it holds its vote from the
// group: when the source stops answering (an attempt that fails before any chunk, such as
// a refused dial; no bytes for Config.CatchUpStall, a stopped or cut-off source whose
// connection stays open; a message of a newer term, or a pre-vote, reaching the replica)
// the snapshot is abandoned, wrapped in replica.ErrAbandonSnapshot: the replica restarts
// raft from its storage, unchanged, and votes again within an election timeout. Snapshots
// abandoned for longer than CatchUpTimeout with none installed (a live leader whose segments
// cannot be had) end as a fetch that gives up does: the next is installed the old way.
func (p *Partition) catchUp(snap raftpb.Snapshot) (*raftlog.CatchUp, error) {
	d, err := raftlog.DecodeSnapshotData(snap.Data)
	if err != nil || d.Source == 0 || d.Source == p.cfg.NodeID || p.cfg.Segments == nil {
		return nil, nil // ApplySnapshot reports bad data
	}
	start := max(p.st.CommittedEnd(), d.Start)
	if start >= d.FirstOffset {
		return nil, nil
	}
	c, err := p.st.NewCatchUp(snap)
	if err != nil {
		return nil, err
	}
	p.ct.catchUpStarted.Add(1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-p.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	term := p.heard() // the snapshot's message is in it
	began := time.Now()
	deadline := began.Add(p.cfg.CatchUpTimeout)
	moved := began // the end of the last attempt that brought a chunk
	if began.Sub(p.lastAbandon) > 4*p.cfg.CatchUpStall {
		// Not the leader's next snapshot after a rejection (a round trip away): a new streak.
		p.abandonedSince = time.Time{}
	}
	wait := catchUpRetryMin
	for {
		p.mu.Lock()
		p.cu.Attempts++
		p.mu.Unlock()
		w := p.watch(ctx, term)
		w.ct = &p.ct
		if c.Started() {
			c.Resume()
			_, err = p.cfg.Segments.FetchSegments(w.ctx, d.Source, p.cfg.Group, c.Next(), d.FirstOffset, false, w.sink(c.Write), w.progress)
		} else {
			_, err = p.cfg.Segments.FetchSegments(w.ctx, d.Source, p.cfg.Group, start, d.FirstOffset, true, w.sink(c.Write), w.progress)
		}
		why, reason := w.stop()
		if err == nil {
			if err = c.Finish(p.st.CanKeepBelow(c.From())); err == nil {
				break
			}
		}
		if ctx.Err() != nil {
			_ = c.Abandon()
			return nil, ErrClosed
		}
		var se *transport.SegmentError
		gone := errors.As(err, &se) && se.Code == transport.SegGone
		if w.progressed() {
			moved = time.Now()
		}
		if why == "" && !w.progressed() && !gone && !errors.Is(err, raftlog.ErrCorrupt) &&
			(p.abandonedSince.IsZero() || time.Since(moved) > p.cfg.CatchUpStall) {
			// A refused or failed dial, a failed handshake, a refusal: at once the first
			// time; after an abandoned snapshot, once CatchUpStall passed with no chunk, so
			// that a live leader whose segments cannot be had is not sent a rejection (and
			// makes a new snapshot) every round trip.
			why, reason = "no answer", AbandonNoAnswer
		}
		if why != "" && p.abandonedSince.IsZero() {
			p.abandonedSince = began
		}
		if why != "" && time.Since(p.abandonedSince) > p.cfg.CatchUpTimeout {
			// Snapshots abandoned for longer than CatchUpTimeout: a leader that keeps
			// sending them while its segments cannot be had. Install this one the old way
			// rather than never.
			err = fmt.Errorf("%s: %w", why, err)
			why = ""
			began = p.abandonedSince
			deadline = began
		}
		if why != "" {
			_ = c.Abandon()
			p.lastAbandon = time.Now()
			p.mu.Lock()
			p.cu.Abandoned++
			p.cu.AbandonedBy[reason]++
			p.mu.Unlock()
			return nil, fmt.Errorf("%w: catch-up of the snapshot at entry %d from node %d (%s after %v, offset %d reached): %v",
				replica.ErrAbandonSnapshot, snap.Metadata.Index, d.Source, why, time.Since(began).Round(time.Millisecond), c.Next(), err)
		}
		switch {
		case gone:
			start = max(start, se.Start) // the source's retention moved on: from its start again
			err = c.Restart()
		case errors.Is(err, raftlog.ErrCorrupt):
			err = c.Restart()
		}
		if err != nil && time.Now().After(deadline) {
			p.abandonedSince = time.Time{}
			p.logf("catch-up of the snapshot at entry %d from node %d given up after %v: %v; the log starts at offset %d without the segments below",
				snap.Metadata.Index, d.Source, time.Since(began).Round(time.Millisecond), err, d.FirstOffset)
			_ = c.Abandon()
			p.mu.Lock()
			p.cu.Failed++
			p.mu.Unlock()
			return nil, nil
		}
		if err != nil {
			p.logf("catch-up from node %d: %v; retrying (offset %d reached)", d.Source, err, c.Next())
		}
		select {
		case <-ctx.Done():
			_ = c.Abandon()
			return nil, ErrClosed
		case <-time.After(wait):
		}
		wait = min(2*wait, catchUpRetryMax)
	}
	p.abandonedSince = time.Time{}
	took := time.Since(began)
	p.mu.Lock()
	p.cu.Done++
	p.cu.Bytes += c.Received()
	p.cu.Last = took
	p.mu.Unlock()
	p.logf("catch-up: %d bytes of segments [%d, %d) from node %d in %v", c.Received(), c.From(), d.FirstOffset, d.Source, took.Round(time.Millisecond))
	return c, nil
}

// heard is the replica's Heard, 0 before the replica exists.
func (p *Partition) heard() uint64 {
	if p.rep == nil {
		return 0
	}
	return p.rep.Heard()
}

// fetchWatch cancels one fetch attempt whose stream brings no bytes for CatchUpStall, or
// once the replica hears a term above term. The fetch's goroutine calls sink and stop; the
// watcher's goroutine only reads last and sets why (and reason) before it cancels.
type fetchWatch struct {
	ctx    context.Context
	cancel context.CancelFunc
	last   atomic.Int64 // UnixNano of the last bytes read, or of the start
	chunks atomic.Int64
	why    atomic.Pointer[string]
	reason int // AbandonStall or AbandonTerm, set before why
	done   chan struct{}
	exited chan struct{}
	// ct counts the stream's chunks (Counts.SegmentBytesReceived, SegmentsReceived); base
	// is the segment of the last chunk (-1 before the first). The fetch's goroutine only.
	ct   *counters
	base int64
}

func (p *Partition) watch(parent context.Context, term uint64) *fetchWatch {
	w := &fetchWatch{done: make(chan struct{}), exited: make(chan struct{}), base: -1}
	w.ctx, w.cancel = context.WithCancel(parent)
	w.last.Store(time.Now().UnixNano())
	stall := p.cfg.CatchUpStall
	go func() {
		defer close(w.exited)
		t := time.NewTicker(max(stall/8, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-w.ctx.Done():
				return
			case now := <-t.C:
				var why string
				switch {
				case now.Sub(time.Unix(0, w.last.Load())) > stall:
					why, w.reason = fmt.Sprintf("no bytes for %v", stall), AbandonStall
				case p.heard() > term:
					why, w.reason = fmt.Sprintf("term %d heard (the snapshot came in term %d or before)", p.heard(), term), AbandonTerm
				default:
					continue
				}
				w.why.Store(&why)
				w.cancel()
				return
			}
		}
	}()
	return w
}

// sink wraps next, counting the chunks.
func (w *fetchWatch) sink(next transport.SegmentSink) transport.SegmentSink {
	return func(base, pos int64, data []byte) error {
		w.chunks.Add(1)
		if w.ct != nil {
			w.ct.segBytesIn.Add(int64(len(data)))
			if base != w.base {
				w.ct.segsIn.Add(1)
				w.base = base
			}
		}
		return next(base, pos, data)
	}
}

// progress notes that bytes arrived (once per read of up to 64 KiB: a slow stream is not a
// stalled one, however large its chunks).
func (w *fetchWatch) progress(int) { w.last.Store(time.Now().UnixNano()) }

func (w *fetchWatch) progressed() bool { return w.chunks.Load() > 0 }

// stop ends the watcher and reports why it cancelled the attempt ("" if it did not), and
// the reason's code.
func (w *fetchWatch) stop() (string, int) {
	close(w.done)
	<-w.exited
	w.cancel()
	if s := w.why.Load(); s != nil {
		return *s, w.reason
	}
	return "", 0
}

// CatchUps reports the catch-ups from whole segments this replica made since Open. Safe for
// concurrent use.
func (p *Partition) CatchUps() CatchUpStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cu
}
