package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lightq/lightq/wire"
)

// Group commits: Commit and CommitOffsets store positions, pipelined, with GROUP_COMMIT for a
// group member (its member id and generation) and COMMIT_OFFSET in offset-only mode, sent to
// the group's coordinator (coordinator.go); the auto-committer goroutine calls Commit every
// AutoCommit.

// Commit stores, for the consumer's Group, the position of every partition it consumes that
// delivered records since the last commit: the offset of its last delivered record + 1. The
// broker answers once the commit is durable.
func (k *Consumer) Commit(ctx context.Context) error {
	if k.opts.Group == "" {
		return errors.New("lightq: Commit needs ConsumerOptions.Group")
	}
	offsets := make(map[int32]int64)
	for _, p := range k.parts {
		if pos := p.pos.Load(); p.active.Load() && p.moved.Load() && pos != p.committed.Load() {
			offsets[p.id] = pos
		}
	}
	return k.CommitOffsets(ctx, offsets)
}

// CommitOffsets stores, for the consumer's Group, the given next offsets to read, by
// partition. The requests are pipelined; the errors are joined. A group member may commit
// only the partitions it holds (its assignment, and partitions being revoked until they are
// let go): the broker refuses others with FENCED_MEMBER.
func (k *Consumer) CommitOffsets(ctx context.Context, offsets map[int32]int64) error {
	if k.opts.Group == "" {
		return errors.New("lightq: CommitOffsets needs ConsumerOptions.Group")
	}
	if len(offsets) == 0 {
		return nil
	}
	k.commitMu.Lock()
	defer k.commitMu.Unlock()
	c := k.currentConn()
	var wg sync.WaitGroup
	var emu sync.Mutex
	var errs []error
	var gen uint32
	if k.member != nil {
		gen = k.member.generation()
	}
	for part, off := range offsets {
		wg.Go(func() {
			var err error
			if k.member != nil {
				req := wire.GroupCommit{Group: k.opts.Group, Topic: k.topic, Member: k.member.id, Generation: gen, Partition: uint32(part), Offset: off}
				_, err = c.groupRoundTrip(ctx, k.opts.Group, wire.OpGroupCommit, req.AppendTo(nil))
			} else {
				err = c.CommitOffset(ctx, wire.CommitOffset{Group: k.opts.Group, Topic: k.topic, Partition: uint32(part), Offset: off})
			}
			if err != nil {
				emu.Lock()
				errs = append(errs, fmt.Errorf("lightq: commit %s partition %d offset %d: %w", k.topic, part, off, err))
				emu.Unlock()
				return
			}
			if p := k.byID[part]; p != nil {
				p.committed.Store(off)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (k *Consumer) autoCommit() {
	defer k.wg.Done()
	t := time.NewTicker(k.opts.AutoCommit)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-k.ctx.Done():
			return
		}
		ctx, cancel := context.WithTimeout(k.ctx, k.currentConn().opts.RequestTimeout)
		if err := k.Commit(ctx); err != nil && k.ctx.Err() == nil {
			k.report(err)
		}
		cancel()
	}
}
