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

// FormatVersion is the version of meta.json this package writes and reads. Never change the
// meaning of version 1; a new layout gets a new version.
const FormatVersion = 1

const checksumPrefix = "sha256:"

// ErrCorrupt is wrapped by errors for a meta.json that cannot be decoded: truncated, not
// JSON, a wrong format version or a checksum mismatch.
var ErrCorrupt = errors.New("meta: corrupt metadata file")

type envelope struct {
	FormatVersion int             `json:"format_version"`
	Checksum      string          `json:"checksum"`
	State         json.RawMessage `json:"state"`
}

type diskState struct {
	Users  []diskUser  `json:"users"`
	Topics []diskTopic `json:"topics"`
}

type diskUser struct {
	Name  string `json:"name"`
	Hash  string `json:"hash"`
	Admin bool   `json:"admin,omitempty"`
}

type diskTopic struct {
	Name       string       `json:"name"`
	Kind       string       `json:"kind"`
	Partitions int          `json:"partitions"`
	User       string       `json:"user"`
	Options    []diskOption `json:"options,omitempty"`
	CreatedAt  time.Time    `json:"created_at"`
}

type diskOption struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

func checksum(compact []byte) string {
	sum := sha256.Sum256(compact)
	return checksumPrefix + hex.EncodeToString(sum[:])
}

// marshal encodes a valid, normalized state as the file's bytes.
func marshal(s State) ([]byte, error) {
	var d diskState
	d.Users = make([]diskUser, 0, len(s.Users))
	for _, name := range slices.Sorted(maps.Keys(s.Users)) {
		u := s.Users[name]
		d.Users = append(d.Users, diskUser{Name: u.Name, Hash: u.Hash, Admin: u.Admin})
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

// unmarshal decodes the file's bytes. Errors wrap ErrCorrupt; the state is not validated.
func unmarshal(data []byte) (State, error) {
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return State{}, fmt.Errorf("%w: %v (%d bytes; truncated?)", ErrCorrupt, err, len(data))
	}
	if env.FormatVersion != FormatVersion {
		return State{}, fmt.Errorf("%w: format_version %d, this broker reads %d", ErrCorrupt, env.FormatVersion, FormatVersion)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, env.State); err != nil || compact.Len() == 0 {
		return State{}, fmt.Errorf("%w: missing or malformed state", ErrCorrupt)
	}
	if got := checksum(compact.Bytes()); got != env.Checksum {
		return State{}, fmt.Errorf("%w: checksum mismatch: file says %q, content hashes to %q", ErrCorrupt, env.Checksum, got)
	}
	var d diskState
	dec := json.NewDecoder(bytes.NewReader(compact.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return State{}, fmt.Errorf("%w: decoding state: %v", ErrCorrupt, err)
	}
	s := State{Users: make(map[string]User, len(d.Users)), Topics: make(map[string]Topic, len(d.Topics))}
	for _, u := range d.Users {
		if _, dup := s.Users[u.Name]; dup {
			return State{}, fmt.Errorf("%w: user %q listed twice", ErrCorrupt, u.Name)
		}
		s.Users[u.Name] = User{Name: u.Name, Hash: u.Hash, Admin: u.Admin}
	}
	for _, dt := range d.Topics {
		if _, dup := s.Topics[dt.Name]; dup {
			return State{}, fmt.Errorf("%w: topic %q listed twice", ErrCorrupt, dt.Name)
		}
		kind, err := wire.ParseKind(dt.Kind)
		if err != nil {
			return State{}, fmt.Errorf("%w: topic %q: %v", ErrCorrupt, dt.Name, err)
		}
		t := Topic{Name: dt.Name, Kind: kind, Partitions: dt.Partitions, User: dt.User, CreatedAt: dt.CreatedAt}
		for _, o := range dt.Options {
			t.Options = append(t.Options, wire.Option{Key: o.Key, Value: o.Value})
		}
		s.Topics[dt.Name] = t
	}
	s.normalize()
	return s, nil
}
