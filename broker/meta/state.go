package meta

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/lightq/lightq/broker/auth"
	"github.com/lightq/lightq/wire"
)

// ErrInvalid is wrapped by errors for a State that breaks a rule of Validate.
var ErrInvalid = errors.New("meta: invalid state")

// User is a broker user. Hash is an auth PHC string (see auth.Hash); the plaintext password
// is never stored. Admin is the broker-wide admin role; Grants are the user's roles on
// topics, by topic name (wire.RolesProduce, wire.RolesConsume or both; never none).
type User struct {
	Name   string
	Hash   string
	Admin  bool
	Grants map[string]wire.Roles
}

// Topic is a topic's metadata.
type Topic struct {
	Name       string
	Kind       wire.Kind
	Partitions int
	// User is the user CREATE_TOPIC named, reported by METADATA; empty when none was or once
	// that user is deleted. Who may use the topic is in the users' Grants, not here.
	User      string
	Options   []wire.Option
	CreatedAt time.Time
}

// State is the whole metadata: users and topics, each keyed by name.
type State struct {
	Users  map[string]User
	Topics map[string]Topic
}

// Clone returns a deep copy of s (with non-nil maps).
func (s State) Clone() State {
	c := State{Users: make(map[string]User, len(s.Users)), Topics: make(map[string]Topic, len(s.Topics))}
	for name, u := range s.Users {
		u.Grants = maps.Clone(u.Grants)
		c.Users[name] = u
	}
	for name, t := range s.Topics {
		t.Options = slices.Clone(t.Options)
		c.Topics[name] = t
	}
	return c
}

// normalize makes nil maps empty, stores times in UTC without a monotonic reading and empty
// option lists and grant maps as nil, so that a state equals itself after a round trip
// through the file.
func (s *State) normalize() {
	if s.Users == nil {
		s.Users = map[string]User{}
	}
	if s.Topics == nil {
		s.Topics = map[string]Topic{}
	}
	for name, u := range s.Users {
		if len(u.Grants) == 0 && u.Grants != nil {
			u.Grants = nil
			s.Users[name] = u
		}
	}
	for name, t := range s.Topics {
		t.CreatedAt = t.CreatedAt.UTC()
		if len(t.Options) == 0 {
			t.Options = nil
		}
		s.Topics[name] = t
	}
}

// Validate reports the first broken rule (in name order), wrapping ErrInvalid: user names pass
// wire.ValidUserName; hashes are well-formed auth PHC strings; grants name existing topics and
// carry produce, consume or both; topic names pass wire.ValidTopicName; kinds are transient or
// durable; partitions are 1..wire.MaxPartitions; a topic's user is empty or exists; options
// respect the wire limits and have unique keys; map keys equal the names.
func (s State) Validate() error {
	for _, name := range slices.Sorted(maps.Keys(s.Users)) {
		u := s.Users[name]
		if err := s.validateUser(name, u); err != nil {
			return fmt.Errorf("%w: user %q: %v", ErrInvalid, name, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.Topics)) {
		t := s.Topics[name]
		if err := s.validateTopic(name, t); err != nil {
			return fmt.Errorf("%w: topic %q: %v", ErrInvalid, name, err)
		}
	}
	return nil
}

func (s State) validateUser(key string, u User) error {
	if u.Name != key {
		return fmt.Errorf("stored under key %q but named %q", key, u.Name)
	}
	if err := wire.ValidUserName(u.Name); err != nil {
		return err
	}
	if err := auth.CheckEncoding(u.Hash); err != nil {
		return fmt.Errorf("password hash: %v", err) // the hash is not quoted: it might be a plaintext password
	}
	for _, topic := range slices.Sorted(maps.Keys(u.Grants)) {
		r := u.Grants[topic]
		if _, ok := s.Topics[topic]; !ok {
			return fmt.Errorf("grant on topic %q, which does not exist", topic)
		}
		if r == 0 || r&^wire.RolesTopic != 0 {
			return fmt.Errorf("grant on topic %q: roles %v (want produce, consume or both)", topic, r)
		}
	}
	return nil
}

func (s State) validateTopic(key string, t Topic) error {
	if t.Name != key {
		return fmt.Errorf("stored under key %q but named %q", key, t.Name)
	}
	if err := wire.ValidTopicName(t.Name); err != nil {
		return err
	}
	if t.Kind != wire.KindTransient && t.Kind != wire.KindDurable {
		return fmt.Errorf("unknown kind %v", t.Kind)
	}
	if t.Partitions < 1 || t.Partitions > wire.MaxPartitions {
		return fmt.Errorf("partitions %d outside [1, %d]", t.Partitions, wire.MaxPartitions)
	}
	if _, ok := s.Users[t.User]; t.User != "" && !ok {
		return fmt.Errorf("user %q does not exist", t.User)
	}
	if len(t.Options) > wire.MaxOptions {
		return fmt.Errorf("%d options, limit %d", len(t.Options), wire.MaxOptions)
	}
	seen := make(map[string]bool, len(t.Options))
	for _, o := range t.Options {
		switch {
		case len(o.Key) == 0 || len(o.Key) > wire.MaxOptionKey:
			return fmt.Errorf("option key %q must be 1-%d bytes", o.Key, wire.MaxOptionKey)
		case len(o.Value) > wire.MaxOptionValue:
			return fmt.Errorf("option %q: value longer than %d bytes", o.Key, wire.MaxOptionValue)
		case seen[o.Key]:
			return fmt.Errorf("option %q given twice", o.Key)
		}
		seen[o.Key] = true
	}
	return nil
}
