package meta

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/lightq/lightq/wire"
)

// Moving partitions between brokers. A move is two commands: SetReplicas (an admin's, or a
// drain's: PlanDrain) gives the partition its new replicas and keeps the old ones in
// Partition.Previous; the partition's Raft group then changes its membership one step at a
// time, which its leader drives (the broker, not this package); FinishMove, proposed by that
// leader once the group's voters are the new replicas, ends it. Until then every broker of
// Previous may still hold a replica: it keeps it open, RemoveBroker refuses it, and Place
// counts it.

// FinishMove ends the move of a partition whose Raft group's voters have become Replicas:
// Previous is cleared, and the brokers no longer among the replicas close theirs. Refused
// with ErrConflict when the partition's replicas (or its group: the topic was created again)
// are not those any more, a no-op when no move is under way.
type FinishMove struct {
	Topic     string
	Partition int
	Group     uint64
	Replicas  []uint64
}

func (c *FinishMove) appendBody(dst []byte) []byte {
	dst = appendStr(dst, c.Topic)
	dst = wire.AppendU32(dst, uint32(c.Partition))
	dst = wire.AppendU64(dst, c.Group)
	return appendIDs(dst, c.Replicas)
}

func (c *FinishMove) decodeBody(r *wire.Reader) {
	c.Topic = r.String(wire.MaxTopicName, "topic name")
	c.Partition = int(r.U32())
	c.Group = r.U64()
	c.Replicas = readIDs(r)
}

func (c *FinishMove) check() error {
	if err := checkTopic(c.Topic); err != nil {
		return err
	}
	if c.Partition < 0 || c.Partition >= wire.MaxPartitions {
		return invalid("topic %q: partition %d", c.Topic, c.Partition)
	}
	if c.Group < FirstPartitionGroup {
		return invalid("topic %q partition %d: group %d is no partition's", c.Topic, c.Partition, c.Group)
	}
	return checkReplicas(fmt.Sprintf("topic %q partition %d", c.Topic, c.Partition), c.Replicas)
}

// partitionOf finds a topic's partition for SetReplicas and FinishMove.
func partitionOf(s *State, topic string, partition int) (*Topic, Partition, error) {
	t, ok := s.topics[topic]
	switch {
	case !ok:
		return nil, Partition{}, fmt.Errorf("%w: %q", ErrUnknownTopic, topic)
	case partition >= len(t.Partitions):
		return nil, Partition{}, invalid("topic %q has %d partitions, no partition %d", topic, len(t.Partitions), partition)
	}
	return t, t.Partitions[partition], nil
}

// setPartition stores a changed copy of topic t with partition i replaced by p.
func (e *editor) setPartition(t *Topic, i int, p Partition) {
	nt := *t
	nt.Partitions = slices.Clone(t.Partitions)
	nt.Partitions[i] = p
	e.topicMap()[t.Name] = &nt
}

func (c *SetReplicas) apply(e *editor) (Result, error) {
	t, cur, err := partitionOf(e.s, c.Topic, c.Partition)
	if err != nil {
		return Result{}, err
	}
	if !slices.Equal(cur.Replicas, c.From) {
		return Result{}, fmt.Errorf("%w: topic %q partition %d: replicas %v, not %v", ErrConflict, c.Topic, c.Partition, cur.Replicas, c.From)
	}
	if slices.Equal(c.To, cur.Replicas) {
		return Result{Groups: []uint64{cur.Group}}, nil // nothing to move
	}
	var added []uint64
	for _, id := range c.To {
		if !slices.Contains(cur.Replicas, id) {
			added = append(added, id)
		}
	}
	what := fmt.Sprintf("topic %q partition %d", c.Topic, c.Partition)
	if err := activeBrokers(e.s, what, added); err != nil {
		return Result{}, err
	}
	// Previous keeps every broker that may still hold a replica: the replicas now, and those
	// of a move this one replaces before it finished.
	prev := slices.Clone(cur.Previous)
	for _, id := range cur.Replicas {
		if !slices.Contains(prev, id) {
			prev = append(prev, id)
		}
	}
	if n := len((Partition{Replicas: c.To, Previous: prev}).Holders()); n > MaxReplicas {
		return Result{}, invalid("%s: the move would involve %d brokers (limit %d): let the move under way finish first", what, n, MaxReplicas)
	}
	if cur.Moves == ^uint32(0) {
		return Result{}, invalid("%s: moved %d times, the limit", what, cur.Moves)
	}
	e.setPartition(t, c.Partition, Partition{Group: cur.Group, Replicas: slices.Clone(c.To), Previous: prev, Moves: cur.Moves + 1})
	return Result{Groups: []uint64{cur.Group}}, nil
}

func (c *FinishMove) apply(e *editor) (Result, error) {
	t, cur, err := partitionOf(e.s, c.Topic, c.Partition)
	if err != nil {
		return Result{}, err
	}
	if cur.Group != c.Group || !slices.Equal(cur.Replicas, c.Replicas) {
		return Result{}, fmt.Errorf("%w: topic %q partition %d: group %d replicas %v, not group %d replicas %v",
			ErrConflict, c.Topic, c.Partition, cur.Group, cur.Replicas, c.Group, c.Replicas)
	}
	if cur.Previous != nil {
		e.setPartition(t, c.Partition, Partition{Group: cur.Group, Replicas: cur.Replicas, Moves: cur.Moves})
	}
	return Result{Groups: []uint64{cur.Group}}, nil
}

// Holding is what a broker holds, by the metadata: how many partitions list it among their
// replicas, how many more only among the replicas of a move not finished, and the first of
// all (topic/partition, by name), for messages.
type Holding struct {
	Replicas, Leaving int
	First             string
}

// HeldBy counts the partitions node holds or may still hold.
func (s *State) HeldBy(node uint64) Holding {
	var h Holding
	for _, t := range s.Topics() {
		for i, p := range t.Partitions {
			in, prev := slices.Contains(p.Replicas, node), slices.Contains(p.Previous, node)
			switch {
			case in:
				h.Replicas++
			case prev:
				h.Leaving++
			default:
				continue
			}
			if h.First == "" {
				h.First = fmt.Sprintf("%s/%d", t.Name, i)
			}
		}
	}
	return h
}

// Moving returns every partition whose move is under way, by topic then partition.
func (s *State) Moving() []Assignment {
	var out []Assignment
	for _, t := range s.Topics() {
		for i, p := range t.Partitions {
			if p.Moving() {
				out = append(out, Assignment{Topic: t.Name, Partition: i, Group: p.Group, Replicas: p.Replicas, Previous: p.Previous})
			}
		}
	}
	return out
}

// PlanDrain returns the moves that take node out of the replicas of every partition of a
// durable topic that lists it (a transient partition is not moved: its data is in its home's
// memory; it keeps the broker in use, HeldBy, until its topic is deleted): each replaces node by the active broker, not a replica of that partition yet,
// that holds the fewest replicas (counting the moves planned before; node ids break ties),
// placed last (the next replica becomes the preferred leader). It is deterministic, like
// Place, and plans from s alone: propose the moves after DrainBroker, each checked again when
// applied (ErrConflict when a partition changed meanwhile: plan again). Errors:
// ErrUnknownBroker; ErrNotEnoughBrokers when some partition has no broker to go to.
func PlanDrain(s *State, node uint64) ([]SetReplicas, error) {
	if _, ok := s.brokers[node]; !ok {
		return nil, fmt.Errorf("%w: %d", ErrUnknownBroker, node)
	}
	load, _ := s.replicaCounts()
	var active []uint64
	for _, b := range s.Brokers() {
		if b.State == BrokerActive && b.ID != node {
			active = append(active, b.ID)
		}
	}
	var plan []SetReplicas
	for _, t := range s.Topics() {
		if t.Kind == wire.KindTransient {
			continue // a transient partition lives in its home's memory: nothing can take it
		}
		for i, p := range t.Partitions {
			at := slices.Index(p.Replicas, node)
			if at < 0 {
				continue
			}
			var best uint64
			for _, id := range active {
				if slices.Contains(p.Replicas, id) {
					continue
				}
				if best == 0 || cmp.Or(cmp.Compare(load[id], load[best]), cmp.Compare(id, best)) < 0 {
					best = id
				}
			}
			if best == 0 {
				return nil, fmt.Errorf("%w: topic %q partition %d has %d replicas and no other active broker can take one of broker %d's: add a broker first",
					ErrNotEnoughBrokers, t.Name, i, len(p.Replicas), node)
			}
			load[best]++
			to := append(slices.Delete(slices.Clone(p.Replicas), at, at+1), best)
			plan = append(plan, SetReplicas{Topic: t.Name, Partition: i, From: p.Replicas, To: to})
		}
	}
	return plan, nil
}
