package meta

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/lightq/lightq/wire"
)

// Group is the Raft group of the cluster's metadata. Partition groups are numbered from
// FirstPartitionGroup on (State.NextGroup), so no partition shares the metadata's group on a
// broker's transport.
const (
	Group               uint64 = 1
	FirstPartitionGroup uint64 = 2
)

// BrokerState is a broker's place in the cluster.
type BrokerState uint8

const (
	// BrokerActive: the broker takes new replicas (Place chooses it).
	BrokerActive BrokerState = 1
	// BrokerRemoving: the broker is being drained (DrainBroker): Place does not choose it, and
	// the partitions it holds are to be moved off it (SetReplicas) before RemoveBroker.
	BrokerRemoving BrokerState = 2
)

func (s BrokerState) String() string {
	switch s {
	case BrokerActive:
		return "active"
	case BrokerRemoving:
		return "removing"
	}
	return "unknown"
}

// Broker is one broker of the cluster: its node id (its Raft id in every group) and where
// clients and peers reach it.
type Broker struct {
	ID          uint64
	ClientAddr  string // the plain client listener, host:port
	TLSAddr     string // the TLS client listener; empty when it has none
	ClusterAddr string // the cluster port (cluster/transport)
	State       BrokerState
}

// Partition is where one partition of a topic lives: its Raft group and its replicas, the
// preferred leader first. Replicas and Previous are read-only.
//
// A move (SetReplicas) sets Replicas to the new list at once and keeps in Previous the
// replicas the move started from: the partition's Raft group changes its membership to
// Replicas one step at a time (its leader drives it), and until it has, any broker of Previous
// may still hold a replica and take part in the group. The leader ends the move (FinishMove)
// once the group's voters are Replicas; Previous is then nil. Holders is both lists.
type Partition struct {
	Group    uint64
	Replicas []uint64
	// Previous is nil when no move is under way; else the replicas before it (for a move
	// changed again before it finished, those of every unfinished move), in their order.
	Previous []uint64
	// Moves counts the moves (SetReplicas) the partition has had. While it is 0, Replicas are
	// the voters the group was created with, which a broker opening a new replica of it
	// bootstraps (cluster/replica Config.Peers); a replica of a moved partition always joins
	// (Config.Join): bootstrapping from another list would make its log disagree with the
	// group's at the same indexes.
	Moves uint32
}

// Moving reports whether a move of the partition is under way.
func (p Partition) Moving() bool { return p.Previous != nil }

// Holders is every broker that holds, or may still hold, a replica of the partition:
// Replicas, then the brokers of Previous not among them.
func (p Partition) Holders() []uint64 {
	if p.Previous == nil {
		return p.Replicas
	}
	out := slices.Clone(p.Replicas)
	for _, id := range p.Previous {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// Topic is a topic of the cluster. Options and Partitions are read-only.
type Topic struct {
	Name string
	Kind wire.Kind
	// User is the user CREATE_TOPIC named (reported by METADATA); empty when none was, or once
	// that user was deleted. It gives no rights by itself: User.Grants do.
	User       string
	Options    []wire.Option
	CreatedAt  time.Time // UTC, millisecond precision (the proposer's clock, carried in the command)
	Partitions []Partition
}

// User is a user of the cluster. Hash is the password hash the broker computed (opaque here);
// Admin is the cluster-wide admin role; Grants are roles on topics (wire.RolesProduce,
// wire.RolesConsume or both, never none), by topic. Hash and Grants are read-only.
type User struct {
	Name   string
	Hash   []byte
	Admin  bool
	Grants map[string]wire.Roles
}

// Assignment is one partition as a broker replicating it sees it.
type Assignment struct {
	Topic     string
	Partition int
	Group     uint64
	Replicas  []uint64 // read-only; the preferred leader first
	Previous  []uint64 // read-only; nil unless a move is under way (Partition.Previous)
}

// dedupWindow is how many request ids the state remembers, to apply a command that the
// network delivered twice only once (see State.recent).
const dedupWindow = 1024

// State is the cluster's metadata as of one applied entry. A State is immutable once
// published: Store.State returns it to any goroutine, and nothing in it (slices and maps
// included) may be modified by anyone. Applying a command makes a new State that shares
// whatever did not change (copy-on-write).
type State struct {
	index        uint64 // the last entry applied
	nextGroup    uint64 // the group id the next partition gets
	brokers      map[uint64]*Broker
	topics       map[string]*Topic
	users        map[string]*User
	coordinators map[string]uint64
	// recent holds the request ids of the last dedupWindow commands applied, oldest first: a
	// command whose id is among them was delivered twice (a duplicated forward) and is not
	// applied again. Part of the snapshot, so every replica decides alike.
	recent [][16]byte

	groupsOnce sync.Once
	groups     map[uint64]groupRef // built on first use
}

type groupRef struct {
	topic     *Topic
	partition int
}

// emptyState is the state of a new cluster.
func emptyState() *State {
	return &State{
		nextGroup:    FirstPartitionGroup,
		brokers:      map[uint64]*Broker{},
		topics:       map[string]*Topic{},
		users:        map[string]*User{},
		coordinators: map[string]uint64{},
	}
}

// Index is the Raft index of the last entry applied to this state (0 for the empty state).
func (s *State) Index() uint64 { return s.index }

// NextGroup is the group id the next partition created gets.
func (s *State) NextGroup() uint64 { return s.nextGroup }

// Broker returns the broker with node id id.
func (s *State) Broker(id uint64) (Broker, bool) {
	b, ok := s.brokers[id]
	if !ok {
		return Broker{}, false
	}
	return *b, true
}

// Brokers returns every broker, by node id.
func (s *State) Brokers() []Broker {
	out := make([]Broker, 0, len(s.brokers))
	for _, id := range slices.Sorted(maps.Keys(s.brokers)) {
		out = append(out, *s.brokers[id])
	}
	return out
}

// Topic returns the named topic (read-only).
func (s *State) Topic(name string) (*Topic, bool) {
	t, ok := s.topics[name]
	return t, ok
}

// Topics returns every topic (read-only), by name.
func (s *State) Topics() []*Topic {
	out := make([]*Topic, 0, len(s.topics))
	for _, name := range slices.Sorted(maps.Keys(s.topics)) {
		out = append(out, s.topics[name])
	}
	return out
}

// TopicCount is the number of topics.
func (s *State) TopicCount() int { return len(s.topics) }

// User returns the named user (read-only).
func (s *State) User(name string) (*User, bool) {
	u, ok := s.users[name]
	return u, ok
}

// Users returns every user (read-only), by name.
func (s *State) Users() []*User {
	out := make([]*User, 0, len(s.users))
	for _, name := range slices.Sorted(maps.Keys(s.users)) {
		out = append(out, s.users[name])
	}
	return out
}

// UserCount is the number of users; GrantCount the number of (user, topic) grants.
func (s *State) UserCount() int { return len(s.users) }

// GrantCount is the number of (user, topic) grants.
func (s *State) GrantCount() int {
	n := 0
	for _, u := range s.users {
		n += len(u.Grants)
	}
	return n
}

// Coordinator returns the node that coordinates consumer group group, if one was set.
func (s *State) Coordinator(group string) (uint64, bool) {
	n, ok := s.coordinators[group]
	return n, ok
}

// Partition returns the partition that Raft group group replicates.
func (s *State) Partition(group uint64) (Assignment, bool) {
	s.groupsOnce.Do(s.indexGroups)
	g, ok := s.groups[group]
	if !ok {
		return Assignment{}, false
	}
	p := g.topic.Partitions[g.partition]
	return Assignment{Topic: g.topic.Name, Partition: g.partition, Group: p.Group, Replicas: p.Replicas, Previous: p.Previous}, true
}

// Assignments returns the partitions that node replicates or may still replicate (it is among
// their Holders), by group id: what a broker opens.
func (s *State) Assignments(node uint64) []Assignment {
	var out []Assignment
	for _, t := range s.topics {
		for i, p := range t.Partitions {
			if slices.Contains(p.Replicas, node) || slices.Contains(p.Previous, node) {
				out = append(out, Assignment{Topic: t.Name, Partition: i, Group: p.Group, Replicas: p.Replicas, Previous: p.Previous})
			}
		}
	}
	slices.SortFunc(out, func(a, b Assignment) int { return cmp.Compare(a.Group, b.Group) })
	return out
}

// Equal reports whether s and o hold the same metadata as of the same index (their
// snapshot encodings are equal).
func (s *State) Equal(o *State) bool {
	return string(appendState(nil, s)) == string(appendState(nil, o))
}

func (s *State) indexGroups() {
	s.groups = map[uint64]groupRef{}
	for _, t := range s.topics {
		for i, p := range t.Partitions {
			s.groups[p.Group] = groupRef{topic: t, partition: i}
		}
	}
}

// replicaCounts returns, per broker, how many partition replicas it holds (or may still
// hold: Holders) and how many partitions prefer it as leader.
func (s *State) replicaCounts() (replicas, leaders map[uint64]int) {
	replicas, leaders = map[uint64]int{}, map[uint64]int{}
	for _, t := range s.topics {
		for _, p := range t.Partitions {
			for _, id := range p.Holders() {
				replicas[id]++
			}
			if len(p.Replicas) > 0 {
				leaders[p.Replicas[0]]++
			}
		}
	}
	return replicas, leaders
}

func (s *State) seen(id [16]byte) bool {
	for i := range s.recent {
		if s.recent[i] == id {
			return true
		}
	}
	return false
}

// at is s as of a later entry that changed no metadata (a membership change).
func (s *State) at(index uint64) *State {
	return &State{index: index, nextGroup: s.nextGroup, brokers: s.brokers, topics: s.topics, users: s.users,
		coordinators: s.coordinators, recent: s.recent}
}

// editor makes the next State from s: each map is copied the first time it is changed, so
// the published State is never written.
type editor struct {
	s                                         *State
	brokers, topics, users, coordinatorsMoved bool
}

// next starts the state after s, for the entry at index, which carried request id.
func next(s *State, index uint64, id [16]byte) *editor {
	n := &State{index: index, nextGroup: s.nextGroup, brokers: s.brokers, topics: s.topics, users: s.users, coordinators: s.coordinators}
	recent := s.recent
	if len(recent) >= dedupWindow {
		recent = recent[len(recent)-dedupWindow+1:]
	}
	n.recent = append(slices.Clip(recent), id) // never writes into the backing array s uses
	return &editor{s: n}
}

func (e *editor) brokerMap() map[uint64]*Broker {
	if !e.brokers {
		e.s.brokers, e.brokers = maps.Clone(e.s.brokers), true
	}
	return e.s.brokers
}

func (e *editor) topicMap() map[string]*Topic {
	if !e.topics {
		e.s.topics, e.topics = maps.Clone(e.s.topics), true
	}
	return e.s.topics
}

func (e *editor) userMap() map[string]*User {
	if !e.users {
		e.s.users, e.users = maps.Clone(e.s.users), true
	}
	return e.s.users
}

func (e *editor) coordinatorMap() map[string]uint64 {
	if !e.coordinatorsMoved {
		e.s.coordinators, e.coordinatorsMoved = maps.Clone(e.s.coordinators), true
	}
	return e.s.coordinators
}

// setUser stores a changed copy of user u.
func (e *editor) setUser(u User) { e.userMap()[u.Name] = &u }
