package partition

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/cluster/raftlog"
	"github.com/lightq/lightq/cluster/transport"
)

// SegmentFetcher streams a peer's segment bytes (*transport.Transport is one: see its
// FetchSegments).
type SegmentFetcher interface {
	FetchSegments(ctx context.Context, node, group uint64, from, to int64, roundDown bool, sink transport.SegmentSink) (int64, error)
}

// CatchUpStats are the figures of the catch-ups from whole segments this replica made.
type CatchUpStats struct {
	Done     int   // catch-ups installed
	Bytes    int64 // bytes of batches received and installed, over all of them
	Attempts int   // streams opened (more than Done when some were cut or refused)
	Failed   int   // catch-ups given up (the snapshot then installed without the segments)
	Last     time.Duration
}

const (
	defaultCatchUpTimeout = 2 * time.Minute
	catchUpRetryMin       = 20 * time.Millisecond
	catchUpRetryMax       = time.Second
)

// catchUp fetches the segments below the offset of snap (raftlog data, version 2) from the
// node it names, from the later of that node's log start and this replica's committed end,
// verified and written to temporary files (raftlog.CatchUp), and returns them ready to
// install; nil when there is nothing to fetch (no source, or nothing below the offset that
// this replica lacks), or when it gave up (Config.CatchUpTimeout, logged: the snapshot is then
// installed as before, the log starting at its offset). A stream cut short goes on from the
// last whole batch; a refusal because the source's retention moved past what was asked, or
// bytes that fail verification, start it again.
//
// It runs on the replica's goroutine, which waits (raft's snapshot flow: the leader probes
// this follower from the snapshot on once it is installed); Close cancels it.
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-p.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	began := time.Now()
	deadline := began.Add(p.cfg.CatchUpTimeout)
	wait := catchUpRetryMin
	for {
		p.mu.Lock()
		p.cu.Attempts++
		p.mu.Unlock()
		if c.Started() {
			c.Resume()
			_, err = p.cfg.Segments.FetchSegments(ctx, d.Source, p.cfg.Group, c.Next(), d.FirstOffset, false, c.Write)
		} else {
			_, err = p.cfg.Segments.FetchSegments(ctx, d.Source, p.cfg.Group, start, d.FirstOffset, true, c.Write)
		}
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
		switch {
		case errors.As(err, &se) && se.Code == transport.SegGone:
			start = max(start, se.Start) // the source's retention moved on: from its start again
			err = c.Restart()
		case errors.Is(err, raftlog.ErrCorrupt):
			err = c.Restart()
		}
		if err != nil && time.Now().After(deadline) {
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
	took := time.Since(began)
	p.mu.Lock()
	p.cu.Done++
	p.cu.Bytes += c.Received()
	p.cu.Last = took
	p.mu.Unlock()
	p.logf("catch-up: %d bytes of segments [%d, %d) from node %d in %v", c.Received(), c.From(), d.FirstOffset, d.Source, took.Round(time.Millisecond))
	return c, nil
}

// CatchUps reports the catch-ups from whole segments this replica made since Open. Safe for
// concurrent use.
func (p *Partition) CatchUps() CatchUpStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cu
}
