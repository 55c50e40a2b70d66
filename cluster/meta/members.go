package meta

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/cluster/replica"
)

// The membership of the metadata group itself: which brokers vote in it. A new broker starts
// its Store with Config.Join; a member proposes AddBroker for it, then AddMember.

// Members is the metadata group's membership as this member last applied it.
func (s *Store) Members() raftpb.ConfState { return s.stor.State().ConfState }

// AddMember makes node, a broker of the state (AddBroker first: its address), a voter of the
// metadata group, and waits until this member applied the change. The new broker runs its
// Store with Config.Join; the leader sends it a snapshot and the log. Adding a voter is
// idempotent. Errors: ErrUnknownBroker; ErrOutcomeUnknown when ctx ends first.
func (s *Store) AddMember(ctx context.Context, node uint64) error {
	if _, ok := s.State().Broker(node); !ok {
		return fmt.Errorf("%w: %d (add the broker first)", ErrUnknownBroker, node)
	}
	return s.changeMembers(ctx, raftpb.ConfChangeAddNode, node, func(cs raftpb.ConfState) bool {
		return slices.Contains(cs.Voters, node)
	})
}

// RemoveMember removes node from the metadata group and waits until this member applied the
// change. Removing a node that is no member is idempotent. Errors: ErrOutcomeUnknown when ctx
// ends first.
func (s *Store) RemoveMember(ctx context.Context, node uint64) error {
	return s.changeMembers(ctx, raftpb.ConfChangeRemoveNode, node, func(cs raftpb.ConfState) bool {
		return !slices.Contains(cs.Voters, node) && !slices.Contains(cs.Learners, node) &&
			!slices.Contains(cs.VotersOutgoing, node) && !slices.Contains(cs.LearnersNext, node)
	})
}

// changeMembers proposes one membership change until the membership this member applied
// satisfies done: again every 2 election timeouts, since raft drops a change proposed while
// another is pending (and a forward can be lost); each tick while no leader is known.
func (s *Store) changeMembers(ctx context.Context, typ raftpb.ConfChangeType, node uint64, done func(raftpb.ConfState) bool) error {
	if node == 0 {
		return invalid("node id 0 (raft reserves it)")
	}
	cc := raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{{Type: typ, NodeID: node}}}
	tick := time.NewTicker(s.cfg.Tick)
	defer tick.Stop()
	retryTicks := 2 * s.electionTicks()
	for ticks := retryTicks; ; ticks++ {
		if done(s.Members()) {
			return nil
		}
		if ticks >= retryTicks {
			ticks = 0
			err := s.rep.ProposeConfChange(cc)
			var nl *replica.NotLeaderError
			switch {
			case errors.As(err, &nl), errors.Is(err, replica.ErrBusy):
				ticks = retryTicks - 1 // nothing sent: again at the next tick
			case errors.Is(err, replica.ErrStopped):
				return ErrClosed
			case err != nil:
				return err
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("%w: the membership change of node %d: %w", ErrOutcomeUnknown, node, ctx.Err())
		case <-s.done:
			return fmt.Errorf("%w: the membership change of node %d: %w", ErrOutcomeUnknown, node, ErrClosed)
		}
	}
}
