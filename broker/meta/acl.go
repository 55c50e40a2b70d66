package meta

import "github.com/lightq/lightq/wire"

// Changes to users' roles, for the broker's Update functions. They change the State only; the
// caller checks that the user and the topic exist (Validate refuses a grant on a topic that
// does not) and turns what it finds into the client's answer.

// Grant adds roles (wire.RolesTopic bits) to user's grant on topic.
func (s *State) Grant(user, topic string, r wire.Roles) {
	u := s.Users[user]
	if u.Grants == nil {
		u.Grants = map[string]wire.Roles{}
	}
	u.Grants[topic] |= r
	s.Users[user] = u
}

// Revoke removes roles from user's grant on topic; a grant left with none goes.
func (s *State) Revoke(user, topic string, r wire.Roles) {
	u, ok := s.Users[user]
	if !ok {
		return
	}
	if left := u.Grants[topic] &^ r; left != 0 {
		u.Grants[topic] = left
	} else {
		delete(u.Grants, topic)
	}
	s.Users[user] = u
}

// RemoveTopic deletes a topic and every grant on it.
func (s *State) RemoveTopic(name string) {
	delete(s.Topics, name)
	for uname, u := range s.Users {
		if _, ok := u.Grants[name]; ok {
			delete(u.Grants, name)
			s.Users[uname] = u
		}
	}
}

// RemoveUser deletes a user with its grants, and clears it as the user of the topics that
// CREATE_TOPIC named it for.
func (s *State) RemoveUser(name string) {
	delete(s.Users, name)
	for tname, t := range s.Topics {
		if t.User == name {
			t.User = ""
			s.Topics[tname] = t
		}
	}
}

// GrantCount is the number of (user, topic) grants.
func (s State) GrantCount() int {
	n := 0
	for _, u := range s.Users {
		n += len(u.Grants)
	}
	return n
}
