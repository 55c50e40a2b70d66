package meta

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/lightq/lightq/wire"
)

// ErrNotEnoughBrokers: Place was asked for more replicas per partition than there are active
// brokers.
var ErrNotEnoughBrokers = errors.New("meta: not enough active brokers")

// Place chooses the replicas of a new topic's partitions: partitions lists of rf distinct
// active brokers, the preferred leader first, for a CreateTopic. It is deterministic (the
// same state gives the same placement), so any broker may compute it; apply does not
// recompute it, it only checks it.
//
// Each partition goes to the rf active brokers holding the fewest replicas (counting the
// existing topics and the partitions placed so far); its leader is the one of the least
// loaded that leads the fewest partitions, and among followers of equal load those that lead
// more go first (so those that lead few stay free to lead the next partitions); node ids
// break the remaining ties. So the replicas of any two brokers never differ by more than one
// once they did not, a new broker takes the new replicas until it has caught up with the
// others, and the leaders are spread too (on an empty cluster of up to 7 brokers and rf up to
// 5, within one of each other: TestPlaceEven).
func Place(s *State, partitions, rf int) ([][]uint64, error) {
	switch {
	case partitions < 1 || partitions > wire.MaxPartitions:
		return nil, fmt.Errorf("%w: %d partitions, want 1-%d", ErrInvalid, partitions, wire.MaxPartitions)
	case rf < 1 || rf > MaxReplicas:
		return nil, fmt.Errorf("%w: replication factor %d, want 1-%d", ErrInvalid, rf, MaxReplicas)
	}
	type load struct {
		id                uint64
		replicas, leaders int
	}
	replicas, leaders := s.replicaCounts()
	var brokers []*load
	for _, b := range s.Brokers() {
		if b.State == BrokerActive {
			brokers = append(brokers, &load{id: b.ID, replicas: replicas[b.ID], leaders: leaders[b.ID]})
		}
	}
	if len(brokers) < rf {
		return nil, fmt.Errorf("%w: replication factor %d, %d active brokers", ErrNotEnoughBrokers, rf, len(brokers))
	}
	// The leader is a broker holding the fewest replicas, the one of them that leads the
	// fewest partitions; the followers hold the fewest replicas, and among equals those that
	// lead the most go first, keeping the brokers that lead few free to lead the next ones.
	byLeaders := func(a, b *load) int {
		return cmp.Or(cmp.Compare(a.replicas, b.replicas), cmp.Compare(a.leaders, b.leaders), cmp.Compare(a.id, b.id))
	}
	asFollowers := func(a, b *load) int {
		return cmp.Or(cmp.Compare(a.replicas, b.replicas), cmp.Compare(b.leaders, a.leaders), cmp.Compare(a.id, b.id))
	}
	out := make([][]uint64, partitions)
	for p := range out {
		slices.SortFunc(brokers, byLeaders)
		lead := brokers[0]
		rest := slices.Clone(brokers[1:])
		slices.SortFunc(rest, asFollowers)
		chosen := append([]*load{lead}, rest[:rf-1]...)
		ids := make([]uint64, rf)
		for i, l := range chosen {
			ids[i] = l.id
			l.replicas++
		}
		lead.leaders++
		out[p] = ids
	}
	return out, nil
}
