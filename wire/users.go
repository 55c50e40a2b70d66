package wire

import (
	"fmt"
	"strings"
)

// Users and their roles: the bodies of CREATE_USER, DELETE_USER, SET_PASSWORD, GRANT, REVOKE
// and LIST_USERS (all admin only; PROTOCOL.md section 5 and the layouts in section 6).

// Roles is a set of rights. On a topic a user may hold RolesProduce, RolesConsume or both; on
// the broker (the empty topic name in GRANT, REVOKE and LIST_USERS) RolesAdmin, which allows
// everything. NEVER renumber: the bits are part of the wire format.
type Roles uint8

const (
	RolesProduce Roles = 1 << 0 // PRODUCE to the topic
	RolesConsume Roles = 1 << 1 // SUBSCRIBE, FETCH, LIST_OFFSETS, COMMIT_OFFSET, FETCH_COMMITTED on the topic
	RolesAdmin   Roles = 1 << 2 // on the broker only: every request on every topic, and the admin requests

	// RolesBoth is produce and consume: what the user CREATE_TOPIC names gets.
	RolesBoth = RolesProduce | RolesConsume
	// RolesTopic are the roles a grant on a topic may carry.
	RolesTopic = RolesBoth
	// RolesAll are the bits this version defines; any other bit makes a body invalid.
	RolesAll = RolesProduce | RolesConsume | RolesAdmin
)

var roleNames = []struct {
	r    Roles
	name string
}{{RolesProduce, "produce"}, {RolesConsume, "consume"}, {RolesAdmin, "admin"}}

// String lists the roles by name, comma-separated ("produce,consume"); no role is "none".
func (r Roles) String() string {
	if r == 0 {
		return "none"
	}
	var parts []string
	for _, rn := range roleNames {
		if r&rn.r != 0 {
			parts = append(parts, rn.name)
		}
	}
	if extra := r &^ RolesAll; extra != 0 {
		parts = append(parts, fmt.Sprintf("0x%02x", uint8(extra)))
	}
	return strings.Join(parts, ",")
}

// ParseRoles reads roles as String writes them, and "both" for produce,consume: a
// comma-separated list of produce, consume, both and admin.
func ParseRoles(s string) (Roles, error) {
	var r Roles
	for _, part := range strings.Split(s, ",") {
		switch strings.TrimSpace(part) {
		case "produce":
			r |= RolesProduce
		case "consume":
			r |= RolesConsume
		case "both":
			r |= RolesBoth
		case "admin":
			r |= RolesAdmin
		default:
			return 0, fmt.Errorf("unknown role %q (want produce, consume, both or admin)", part)
		}
	}
	return r, nil
}

// readRoles reads a roles byte; unknown bits make the body invalid.
func readRoles(r *Reader) Roles {
	v := Roles(r.U8())
	if r.Err() == nil && v&^RolesAll != 0 {
		r.Fail(fmt.Errorf("%w: roles 0x%02x has bits this version does not define", ErrMalformed, uint8(v)))
	}
	return v
}

// UserPassword is the body of CREATE_USER and SET_PASSWORD: a user and its (new) password.
type UserPassword struct {
	User     string
	Password string
}

func (m *UserPassword) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, m.User)
	return AppendString(dst, m.Password)
}

func (m *UserPassword) Decode(b []byte) error {
	r := NewReader(b)
	m.User = r.String(MaxUser, "user")
	m.Password = r.String(MaxPassword, "password")
	return r.Done("user and password body")
}

// UserName is the body of DELETE_USER.
type UserName struct{ User string }

func (m *UserName) AppendTo(dst []byte) []byte { return AppendString(dst, m.User) }

func (m *UserName) Decode(b []byte) error {
	r := NewReader(b)
	m.User = r.String(MaxUser, "user")
	return r.Done("DELETE_USER")
}

// Grant is the body of GRANT and REVOKE: roles of User on Topic, or on the broker when Topic
// is empty (RolesAdmin only).
type Grant struct {
	User  string
	Topic string
	Roles Roles
}

func (m *Grant) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, m.User)
	dst = AppendString(dst, m.Topic)
	return append(dst, byte(m.Roles))
}

func (m *Grant) Decode(b []byte) error {
	r := NewReader(b)
	m.User = r.String(MaxUser, "user")
	m.Topic = r.String(MaxTopicName, "topic name")
	m.Roles = readRoles(&r)
	return r.Done("GRANT/REVOKE")
}

// ListUsers is the body of a LIST_USERS request. User and Topic filter (empty: any); the
// answer holds the entries after (AfterUser, AfterTopic) in (user, topic) order, so a client
// pages through a long list by sending the last entry it got (both empty: from the start).
type ListUsers struct {
	User       string
	Topic      string
	AfterUser  string
	AfterTopic string
}

func (m *ListUsers) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, m.User)
	dst = AppendString(dst, m.Topic)
	dst = AppendString(dst, m.AfterUser)
	return AppendString(dst, m.AfterTopic)
}

func (m *ListUsers) Decode(b []byte) error {
	r := NewReader(b)
	m.User = r.String(MaxUser, "user")
	m.Topic = r.String(MaxTopicName, "topic name")
	m.AfterUser = r.String(MaxUser, "after user")
	m.AfterTopic = r.String(MaxTopicName, "after topic")
	return r.Done("LIST_USERS")
}

// UserRoles is one entry of a LIST_USERS answer: the roles User holds on Topic, or, with
// Topic empty, on the broker (RolesAdmin or none). Every user has a broker entry, first.
type UserRoles struct {
	User  string
	Topic string
	Roles Roles
}

// userRolesMinSize is the smallest encoded UserRoles: two empty strings and the roles byte.
const userRolesMinSize = 2 + 2 + 1

// ListUsersResponse answers LIST_USERS. More says that entries after the last one were left
// out to keep the answer small: ask again from the last entry.
type ListUsersResponse struct {
	More    bool
	Entries []UserRoles
}

func (m *ListUsersResponse) AppendTo(dst []byte) []byte {
	more := byte(0)
	if m.More {
		more = 1
	}
	dst = append(dst, more)
	dst = AppendU32(dst, uint32(len(m.Entries)))
	for _, e := range m.Entries {
		dst = AppendString(dst, e.User)
		dst = AppendString(dst, e.Topic)
		dst = append(dst, byte(e.Roles))
	}
	return dst
}

func (m *ListUsersResponse) Decode(b []byte) error {
	r := NewReader(b)
	switch more := r.U8(); {
	case r.Err() != nil:
	case more > 1:
		r.Fail(fmt.Errorf("%w: more flag %d", ErrMalformed, more))
	default:
		m.More = more == 1
	}
	n := r.U32()
	if r.Err() == nil && uint64(n)*userRolesMinSize > uint64(r.Len()) {
		r.Fail(fmt.Errorf("%w: %d entries in %d bytes", ErrMalformed, n, r.Len()))
	}
	m.Entries = nil
	if r.Err() == nil && n > 0 {
		m.Entries = make([]UserRoles, 0, n)
	}
	for i := uint32(0); i < n && r.Err() == nil; i++ {
		e := UserRoles{User: r.String(MaxUser, "user"), Topic: r.String(MaxTopicName, "topic name")}
		e.Roles = readRoles(&r)
		m.Entries = append(m.Entries, e)
	}
	return r.Done("LIST_USERS response")
}
