package meta

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lightq/lightq/wire"
)

// Result is what applying a command gave: the index of its entry, and for CreateTopic the
// group ids its partitions got (in partition order).
type Result struct {
	Index  uint64
	Groups []uint64
}

// Refusals: a command that apply refuses wraps one of these, and the refusal is the same on
// every member (it depends on the command and the state only). Nothing changed.
var (
	ErrInvalid       = errors.New("meta: invalid command")
	ErrTopicExists   = errors.New("meta: topic exists")
	ErrUnknownTopic  = errors.New("meta: no such topic")
	ErrUserExists    = errors.New("meta: user exists")
	ErrUnknownUser   = errors.New("meta: no such user")
	ErrUnknownBroker = errors.New("meta: no such broker")
	// ErrBrokerInUse: RemoveBroker of a broker that still holds replicas or coordinates a
	// group (move them first); CreateTopic or SetReplicas naming a broker that is not active.
	ErrBrokerInUse = errors.New("meta: broker in use")
	// ErrConflict: SetReplicas whose From is no longer the partition's replica list, or
	// FinishMove of a move that was changed (or a partition that was created again) meanwhile.
	ErrConflict = errors.New("meta: replicas changed meanwhile")
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Checks of commands on their own.

func (c *AddBroker) check() error {
	switch {
	case c.ID == 0:
		return invalid("broker id 0 (raft reserves it)")
	case c.ClientAddr == "" || c.ClusterAddr == "":
		return invalid("broker %d: a client address and a cluster address are required", c.ID)
	case len(c.ClientAddr) > MaxAddr || len(c.TLSAddr) > MaxAddr || len(c.ClusterAddr) > MaxAddr:
		return invalid("broker %d: an address longer than %d bytes", c.ID, MaxAddr)
	}
	return nil
}

func checkID(id uint64) error {
	if id == 0 {
		return invalid("broker id 0 (raft reserves it)")
	}
	return nil
}

func (c *DrainBroker) check() error  { return checkID(c.ID) }
func (c *RemoveBroker) check() error { return checkID(c.ID) }

func checkTopic(name string) error {
	if err := wire.ValidTopicName(name); err != nil {
		return invalid("%v", err)
	}
	return nil
}

func checkUser(name string) error {
	if err := wire.ValidUserName(name); err != nil {
		return invalid("%v", err)
	}
	return nil
}

func checkHash(user string, h []byte) error {
	if len(h) == 0 || len(h) > MaxHash {
		return invalid("user %q: a password hash of 1-%d bytes is required, got %d", user, MaxHash, len(h))
	}
	return nil
}

// checkReplicas checks one replica list: 1-MaxReplicas distinct node ids, none 0.
func checkReplicas(what string, ids []uint64) error {
	if len(ids) == 0 || len(ids) > MaxReplicas {
		return invalid("%s: %d replicas, want 1-%d", what, len(ids), MaxReplicas)
	}
	for i, id := range ids {
		if id == 0 {
			return invalid("%s: node id 0", what)
		}
		if slices.Contains(ids[:i], id) {
			return invalid("%s: node %d listed twice", what, id)
		}
	}
	return nil
}

func (c *CreateTopic) check() error {
	if err := checkTopic(c.Name); err != nil {
		return err
	}
	switch {
	case c.Kind != wire.KindTransient && c.Kind != wire.KindDurable:
		return invalid("topic %q: unknown kind %d", c.Name, c.Kind)
	case len(c.Placement) < 1 || len(c.Placement) > wire.MaxPartitions:
		return invalid("topic %q: %d partitions, want 1-%d", c.Name, len(c.Placement), wire.MaxPartitions)
	case c.User == "" && len(c.UserHash) > 0:
		return invalid("topic %q: a user's password hash without a user", c.Name)
	case len(c.Options) > wire.MaxOptions:
		return invalid("topic %q: %d options, limit %d", c.Name, len(c.Options), wire.MaxOptions)
	}
	if c.User != "" {
		if err := checkUser(c.User); err != nil {
			return err
		}
		if len(c.UserHash) > 0 {
			if err := checkHash(c.User, c.UserHash); err != nil {
				return err
			}
		}
	}
	for i, o := range c.Options {
		switch {
		case len(o.Key) == 0 || len(o.Key) > wire.MaxOptionKey:
			return invalid("topic %q: option key %q must be 1-%d bytes", c.Name, o.Key, wire.MaxOptionKey)
		case len(o.Value) > wire.MaxOptionValue:
			return invalid("topic %q: option %q: value longer than %d bytes", c.Name, o.Key, wire.MaxOptionValue)
		}
		for _, earlier := range c.Options[:i] {
			if earlier.Key == o.Key {
				return invalid("topic %q: option %q given twice", c.Name, o.Key)
			}
		}
	}
	for i, p := range c.Placement {
		if err := checkReplicas(fmt.Sprintf("topic %q partition %d", c.Name, i), p); err != nil {
			return err
		}
	}
	return nil
}

func (c *DeleteTopic) check() error { return checkTopic(c.Name) }

func (c *SetReplicas) check() error {
	if err := checkTopic(c.Topic); err != nil {
		return err
	}
	if c.Partition < 0 || c.Partition >= wire.MaxPartitions {
		return invalid("topic %q: partition %d", c.Topic, c.Partition)
	}
	what := fmt.Sprintf("topic %q partition %d", c.Topic, c.Partition)
	if err := checkReplicas(what+" (from)", c.From); err != nil {
		return err
	}
	return checkReplicas(what, c.To)
}

func (c *CreateUser) check() error {
	if err := checkUser(c.Name); err != nil {
		return err
	}
	return checkHash(c.Name, c.Hash)
}

func (c *DeleteUser) check() error { return checkUser(c.Name) }

func (c *SetPassword) check() error {
	if err := checkUser(c.Name); err != nil {
		return err
	}
	return checkHash(c.Name, c.Hash)
}

// checkRoles is the rule of GRANT and REVOKE: admin on the cluster (empty topic), produce and
// consume on a topic.
func checkRoles(user, topic string, r wire.Roles) error {
	if err := checkUser(user); err != nil {
		return err
	}
	switch {
	case topic == "" && r != wire.RolesAdmin:
		return invalid("roles %v need a topic; on the cluster (empty topic) the role is admin", r)
	case topic != "" && (r == 0 || r&^wire.RolesTopic != 0):
		return invalid("roles %v on topic %q: want produce, consume or both", r, topic)
	case topic != "":
		return checkTopic(topic)
	}
	return nil
}

func (c *Grant) check() error  { return checkRoles(c.User, c.Topic, c.Roles) }
func (c *Revoke) check() error { return checkRoles(c.User, c.Topic, c.Roles) }

func (c *SetCoordinator) check() error {
	if err := wire.ValidGroupName(c.Group); err != nil {
		return invalid("%v", err)
	}
	return nil
}

// Applying commands. Each checks everything first and changes the state only once nothing
// can refuse it.

func (c *AddBroker) apply(e *editor) (Result, error) {
	b := Broker{ID: c.ID, ClientAddr: c.ClientAddr, TLSAddr: c.TLSAddr, ClusterAddr: c.ClusterAddr, State: BrokerActive}
	if old, ok := e.s.brokers[c.ID]; ok {
		if old.ClientAddr == b.ClientAddr && old.TLSAddr == b.TLSAddr && old.ClusterAddr == b.ClusterAddr {
			return Result{}, nil
		}
		b.State = old.State
	}
	e.brokerMap()[c.ID] = &b
	return Result{}, nil
}

func (c *DrainBroker) apply(e *editor) (Result, error) {
	old, ok := e.s.brokers[c.ID]
	if !ok {
		return Result{}, fmt.Errorf("%w: %d", ErrUnknownBroker, c.ID)
	}
	if old.State != BrokerRemoving {
		b := *old
		b.State = BrokerRemoving
		e.brokerMap()[c.ID] = &b
	}
	return Result{}, nil
}

func (c *RemoveBroker) apply(e *editor) (Result, error) {
	if _, ok := e.s.brokers[c.ID]; !ok {
		return Result{}, fmt.Errorf("%w: %d", ErrUnknownBroker, c.ID)
	}
	if n, _ := e.s.replicaCounts(); n[c.ID] > 0 {
		h := e.s.HeldBy(c.ID)
		return Result{}, fmt.Errorf("%w: broker %d is a replica of %d partitions and is leaving %d more whose moves have not finished (the first: %s): drain it first",
			ErrBrokerInUse, c.ID, h.Replicas, h.Leaving, h.First)
	}
	for g, node := range e.s.coordinators {
		if node == c.ID {
			return Result{}, fmt.Errorf("%w: broker %d coordinates consumer group %q (and maybe others)", ErrBrokerInUse, c.ID, minGroup(e.s, c.ID, g))
		}
	}
	delete(e.brokerMap(), c.ID)
	return Result{}, nil
}

// minGroup is the first group (by name) that node coordinates, so that the refusal's text is
// the same on every member whatever the map's order.
func minGroup(s *State, node uint64, any string) string {
	first := any
	for g, n := range s.coordinators {
		if n == node && g < first {
			first = g
		}
	}
	return first
}

// activeBrokers checks that every node listed is an active broker.
func activeBrokers(s *State, what string, ids []uint64) error {
	for _, id := range ids {
		b, ok := s.brokers[id]
		switch {
		case !ok:
			return fmt.Errorf("%w: %s: node %d", ErrUnknownBroker, what, id)
		case b.State != BrokerActive:
			return fmt.Errorf("%w: %s: broker %d is %v", ErrBrokerInUse, what, id, b.State)
		}
	}
	return nil
}

func (c *CreateTopic) apply(e *editor) (Result, error) {
	s := e.s
	if _, ok := s.topics[c.Name]; ok {
		return Result{}, fmt.Errorf("%w: %q", ErrTopicExists, c.Name)
	}
	if c.User != "" {
		_, exists := s.users[c.User]
		switch {
		case len(c.UserHash) > 0 && exists:
			return Result{}, fmt.Errorf("%w: %q (created meanwhile; its password was not checked)", ErrUserExists, c.User)
		case len(c.UserHash) == 0 && !exists:
			return Result{}, fmt.Errorf("%w: %q", ErrUnknownUser, c.User)
		}
	}
	for i, p := range c.Placement {
		if err := activeBrokers(s, fmt.Sprintf("topic %q partition %d", c.Name, i), p); err != nil {
			return Result{}, err
		}
	}
	t := &Topic{Name: c.Name, Kind: c.Kind, User: c.User, Options: slices.Clone(c.Options),
		CreatedAt: time.UnixMilli(c.CreatedAt).UTC(), Partitions: make([]Partition, len(c.Placement))}
	res := Result{Groups: make([]uint64, len(c.Placement))}
	for i, p := range c.Placement {
		t.Partitions[i] = Partition{Group: s.nextGroup, Replicas: slices.Clone(p)}
		res.Groups[i] = s.nextGroup
		s.nextGroup++
	}
	e.topicMap()[c.Name] = t
	if c.User != "" {
		u := User{Name: c.User, Hash: c.UserHash}
		if old, ok := s.users[c.User]; ok {
			u = *old
		}
		u.Grants = withRoles(u.Grants, c.Name, wire.RolesBoth)
		e.setUser(u)
	}
	return res, nil
}

// withRoles returns a copy of grants where topic has r added (r != 0), or removed when
// add is false.
func withRoles(grants map[string]wire.Roles, topic string, r wire.Roles) map[string]wire.Roles {
	g := make(map[string]wire.Roles, len(grants)+1)
	for k, v := range grants {
		g[k] = v
	}
	g[topic] |= r
	return g
}

func withoutRoles(grants map[string]wire.Roles, topic string, r wire.Roles) map[string]wire.Roles {
	if len(grants) == 0 {
		return nil
	}
	g := make(map[string]wire.Roles, len(grants))
	for k, v := range grants {
		g[k] = v
	}
	if left := g[topic] &^ r; left != 0 {
		g[topic] = left
	} else {
		delete(g, topic)
	}
	if len(g) == 0 {
		return nil
	}
	return g
}

func (c *DeleteTopic) apply(e *editor) (Result, error) {
	if _, ok := e.s.topics[c.Name]; !ok {
		return Result{}, fmt.Errorf("%w: %q", ErrUnknownTopic, c.Name)
	}
	delete(e.topicMap(), c.Name)
	for _, u := range e.s.users {
		if _, ok := u.Grants[c.Name]; ok {
			n := *u
			n.Grants = withoutRoles(u.Grants, c.Name, wire.RolesAll)
			e.setUser(n)
		}
	}
	return Result{}, nil
}

func (c *CreateUser) apply(e *editor) (Result, error) {
	if _, ok := e.s.users[c.Name]; ok {
		return Result{}, fmt.Errorf("%w: %q", ErrUserExists, c.Name)
	}
	e.setUser(User{Name: c.Name, Hash: slices.Clone(c.Hash)})
	return Result{}, nil
}

func (c *DeleteUser) apply(e *editor) (Result, error) {
	if _, ok := e.s.users[c.Name]; !ok {
		return Result{}, fmt.Errorf("%w: %q", ErrUnknownUser, c.Name)
	}
	delete(e.userMap(), c.Name)
	for name, t := range e.s.topics {
		if t.User == c.Name {
			nt := *t
			nt.User = ""
			e.topicMap()[name] = &nt
		}
	}
	return Result{}, nil
}

func (c *SetPassword) apply(e *editor) (Result, error) {
	old, ok := e.s.users[c.Name]
	if !ok {
		return Result{}, fmt.Errorf("%w: %q", ErrUnknownUser, c.Name)
	}
	u := *old
	u.Hash = slices.Clone(c.Hash)
	e.setUser(u)
	return Result{}, nil
}

// roleTarget finds the user and topic a Grant or Revoke names.
func roleTarget(s *State, user, topic string) (*User, error) {
	u, ok := s.users[user]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownUser, user)
	}
	if _, ok := s.topics[topic]; topic != "" && !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownTopic, topic)
	}
	return u, nil
}

func (c *Grant) apply(e *editor) (Result, error) {
	old, err := roleTarget(e.s, c.User, c.Topic)
	if err != nil {
		return Result{}, err
	}
	u := *old
	if c.Topic == "" {
		u.Admin = true
	} else {
		u.Grants = withRoles(u.Grants, c.Topic, c.Roles)
	}
	e.setUser(u)
	return Result{}, nil
}

func (c *Revoke) apply(e *editor) (Result, error) {
	old, err := roleTarget(e.s, c.User, c.Topic)
	if err != nil {
		return Result{}, err
	}
	u := *old
	if c.Topic == "" {
		u.Admin = false
	} else {
		u.Grants = withoutRoles(u.Grants, c.Topic, c.Roles)
	}
	e.setUser(u)
	return Result{}, nil
}

func (c *SetCoordinator) apply(e *editor) (Result, error) {
	if c.Node == 0 {
		if _, ok := e.s.coordinators[c.Group]; ok {
			delete(e.coordinatorMap(), c.Group)
		}
		return Result{}, nil
	}
	if err := activeBrokers(e.s, fmt.Sprintf("consumer group %q", c.Group), []uint64{c.Node}); err != nil {
		return Result{}, err
	}
	e.coordinatorMap()[c.Group] = c.Node
	return Result{}, nil
}

// Apply returns the state after applying cmd, carried by the entry at index with request id
// id, to s, and the command's result: a refusal (an error wrapping one of the Err values
// above) leaves the metadata as it was (the index moves on). A request id among the last
// ones applied is a duplicate delivery of a command already applied: nothing changes and the
// result is that of a no-op. s is not modified. Apply is deterministic: every member that
// applies the same commands in the same order holds equal states.
func Apply(s *State, index uint64, id [16]byte, cmd Command) (*State, Result, error) {
	if s.seen(id) {
		n := next(s, index, id)
		n.s.recent = s.recent // the id stays where it was: nothing was applied
		return n.s, Result{Index: index}, nil
	}
	e := next(s, index, id)
	if err := cmd.check(); err != nil {
		return e.s, Result{Index: index}, err
	}
	res, err := cmd.apply(e)
	res.Index = index
	if err != nil {
		// Refused: nothing of the command is kept (apply checks before it changes anything,
		// but start from s again so that a refusal cannot leave half a change).
		e = next(s, index, id)
		return e.s, Result{Index: index}, err
	}
	return e.s, res, nil
}
