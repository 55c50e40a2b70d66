package meta

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/lightq/lightq/wire"
)

// FormatVersion is the version of meta.json this package writes. Never change the meaning of
// a version; a new layout gets a new version. Version 1 (one owner user per topic, with every
// right on it) is still read: Open migrates it (see migrateV1).
const FormatVersion = 2

const checksumPrefix = "sha256:"

// ErrCorrupt is wrapped by errors for a meta.json that cannot be decoded: truncated, not
// JSON, an unknown format version or a checksum mismatch.
var ErrCorrupt = errors.New("meta: corrupt metadata file")

type envelope struct {
	FormatVersion int             `json:"format_version"`
	Checksum      string          `json:"checksum"`
	State         json.RawMessage `json:"state"`
}

// diskState is the state of format version 2.
type diskState struct {
	Users  []diskUser  `json:"users"`
	Topics []diskTopic `json:"topics"`
}

type diskUser struct {
	Name   string      `json:"name"`
	Hash   string      `json:"hash"`
	Admin  bool        `json:"admin,omitempty"`
	Grants []diskGrant `json:"grants,omitempty"`
}

// diskGrant is a user's roles on one topic, by name ("produce", "consume").
type diskGrant struct {
	Topic string   `json:"topic"`
	Roles []string `json:"roles"`
}

type diskTopic struct {
	Name       string       `json:"name"`
	Kind       string       `json:"kind"`
	Partitions int          `json:"partitions"`
	User       string       `json:"user,omitempty"`
	Options    []diskOption `json:"options,omitempty"`
	CreatedAt  time.Time    `json:"created_at"`
}

type diskOption struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// diskStateV1 is the state of format version 1: users without grants, and topics whose user
// (required) had every right on them.
type diskStateV1 struct {
	Users  []diskUserV1  `json:"users"`
	Topics []diskTopicV1 `json:"topics"`
}

type diskUserV1 struct {
	Name  string `json:"name"`
	Hash  string `json:"hash"`
	Admin bool   `json:"admin,omitempty"`
}

type diskTopicV1 struct {
	Name       string       `json:"name"`
	Kind       string       `json:"kind"`
	Partitions int          `json:"partitions"`
	User       string       `json:"user"`
	Options    []diskOption `json:"options,omitempty"`
	CreatedAt  time.Time    `json:"created_at"`
}

func checksum(compact []byte) string {
	sum := sha256.Sum256(compact)
	return checksumPrefix + hex.EncodeToString(sum[:])
}

// roleNames are the names of the topic roles in the file. Never rename one.
var roleNames = []struct {
	r    wire.Roles
	name string
}{{wire.RolesProduce, "produce"}, {wire.RolesConsume, "consume"}}

func encodeRoles(r wire.Roles) []string {
	var out []string
	for _, rn := range roleNames {
		if r&rn.r != 0 {
			out = append(out, rn.name)
		}
	}
	return out
}

func decodeRoles(names []string) (wire.Roles, error) {
	var r wire.Roles
	for _, n := range names {
		var bit wire.Roles
		for _, rn := range roleNames {
			if rn.name == n {
				bit = rn.r
			}
		}
		switch {
		case bit == 0:
			return 0, fmt.Errorf("unknown role %q", n)
		case r&bit != 0:
			return 0, fmt.Errorf("role %q listed twice", n)
		}
		r |= bit
	}
	return r, nil
}

// marshal encodes a valid, normalized state as the file's bytes (format version 2).
func marshal(s State) ([]byte, error) {
	var d diskState
	d.Users = make([]diskUser, 0, len(s.Users))
	for _, name := range slices.Sorted(maps.Keys(s.Users)) {
		u := s.Users[name]
		du := diskUser{Name: u.Name, Hash: u.Hash, Admin: u.Admin}
		for _, topic := range slices.Sorted(maps.Keys(u.Grants)) {
			du.Grants = append(du.Grants, diskGrant{Topic: topic, Roles: encodeRoles(u.Grants[topic])})
		}
		d.Users = append(d.Users, du)
	}
	d.Topics = make([]diskTopic, 0, len(s.Topics))
	for _, name := range slices.Sorted(maps.Keys(s.Topics)) {
		t := s.Topics[name]
		dt := diskTopic{Name: t.Name, Kind: t.Kind.String(), Partitions: t.Partitions, User: t.User, CreatedAt: t.CreatedAt}
		for _, o := range t.Options {
			dt.Options = append(dt.Options, diskOption{Key: o.Key, Value: o.Value})
		}
		d.Topics = append(d.Topics, dt)
	}
	body, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("meta: encoding state: %w", err)
	}
	out, err := json.MarshalIndent(envelope{FormatVersion: FormatVersion, Checksum: checksum(body), State: body}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("meta: encoding state: %w", err)
	}
	return append(out, '\n'), nil
}

// unmarshal decodes the file's bytes, of format version 1 or 2, and returns the state and the
// version it was in. Errors wrap ErrCorrupt; the state is not validated.
func unmarshal(data []byte) (State, int, error) {
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return State{}, 0, fmt.Errorf("%w: %v (%d bytes; truncated?)", ErrCorrupt, err, len(data))
	}
	if env.FormatVersion != 1 && env.FormatVersion != FormatVersion {
		return State{}, 0, fmt.Errorf("%w: format_version %d, this broker reads 1 and %d (written by a newer broker?)", ErrCorrupt, env.FormatVersion, FormatVersion)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, env.State); err != nil || compact.Len() == 0 {
		return State{}, 0, fmt.Errorf("%w: missing or malformed state", ErrCorrupt)
	}
	if got := checksum(compact.Bytes()); got != env.Checksum {
		return State{}, 0, fmt.Errorf("%w: checksum mismatch: file says %q, content hashes to %q", ErrCorrupt, env.Checksum, got)
	}
	var (
		s   State
		err error
	)
	if env.FormatVersion == 1 {
		s, err = decodeV1(compact.Bytes())
	} else {
		s, err = decodeV2(compact.Bytes())
	}
	if err != nil {
		return State{}, 0, err
	}
	s.normalize()
	return s, env.FormatVersion, nil
}

// decodeStrict decodes JSON that must hold only the fields of v.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: decoding state: %v", ErrCorrupt, err)
	}
	return nil
}

func decodeV2(data []byte) (State, error) {
	var d diskState
	if err := decodeStrict(data, &d); err != nil {
		return State{}, err
	}
	s := State{Users: make(map[string]User, len(d.Users)), Topics: make(map[string]Topic, len(d.Topics))}
	for _, du := range d.Users {
		if _, dup := s.Users[du.Name]; dup {
			return State{}, fmt.Errorf("%w: user %q listed twice", ErrCorrupt, du.Name)
		}
		u := User{Name: du.Name, Hash: du.Hash, Admin: du.Admin}
		for _, g := range du.Grants {
			if _, dup := u.Grants[g.Topic]; dup {
				return State{}, fmt.Errorf("%w: user %q: grant on topic %q listed twice", ErrCorrupt, du.Name, g.Topic)
			}
			r, err := decodeRoles(g.Roles)
			if err != nil {
				return State{}, fmt.Errorf("%w: user %q: grant on topic %q: %v", ErrCorrupt, du.Name, g.Topic, err)
			}
			if u.Grants == nil {
				u.Grants = map[string]wire.Roles{}
			}
			u.Grants[g.Topic] = r
		}
		s.Users[du.Name] = u
	}
	for _, dt := range d.Topics {
		t, err := decodeTopic(dt.Name, dt.Kind, dt.Partitions, dt.User, dt.Options, dt.CreatedAt)
		if err != nil {
			return State{}, err
		}
		if _, dup := s.Topics[dt.Name]; dup {
			return State{}, fmt.Errorf("%w: topic %q listed twice", ErrCorrupt, dt.Name)
		}
		s.Topics[dt.Name] = t
	}
	return s, nil
}

// decodeV1 reads a format 1 state and migrates it: each topic's user gets both roles on it
// (produce and consume: what owning the topic allowed) and stays the topic's user.
func decodeV1(data []byte) (State, error) {
	var d diskStateV1
	if err := decodeStrict(data, &d); err != nil {
		return State{}, err
	}
	s := State{Users: make(map[string]User, len(d.Users)), Topics: make(map[string]Topic, len(d.Topics))}
	for _, du := range d.Users {
		if _, dup := s.Users[du.Name]; dup {
			return State{}, fmt.Errorf("%w: user %q listed twice", ErrCorrupt, du.Name)
		}
		s.Users[du.Name] = User{Name: du.Name, Hash: du.Hash, Admin: du.Admin}
	}
	for _, dt := range d.Topics {
		t, err := decodeTopic(dt.Name, dt.Kind, dt.Partitions, dt.User, dt.Options, dt.CreatedAt)
		if err != nil {
			return State{}, err
		}
		if _, dup := s.Topics[dt.Name]; dup {
			return State{}, fmt.Errorf("%w: topic %q listed twice", ErrCorrupt, dt.Name)
		}
		s.Topics[dt.Name] = t
		owner, ok := s.Users[dt.User]
		if !ok {
			return State{}, fmt.Errorf("%w: topic %q: its user %q does not exist", ErrInvalid, dt.Name, dt.User)
		}
		if owner.Grants == nil {
			owner.Grants = map[string]wire.Roles{}
		}
		owner.Grants[dt.Name] = wire.RolesBoth
		s.Users[dt.User] = owner
	}
	return s, nil
}

func decodeTopic(name, kind string, partitions int, user string, opts []diskOption, created time.Time) (Topic, error) {
	k, err := wire.ParseKind(kind)
	if err != nil {
		return Topic{}, fmt.Errorf("%w: topic %q: %v", ErrCorrupt, name, err)
	}
	t := Topic{Name: name, Kind: k, Partitions: partitions, User: user, CreatedAt: created}
	for _, o := range opts {
		t.Options = append(t.Options, wire.Option{Key: o.Key, Value: o.Value})
	}
	return t, nil
}
