package group

import (
	"time"

	"github.com/lightq/lightq/wire"
)

// Summary is one group with live members, for LIST_GROUPS.
type Summary struct {
	Topic, Group string
	Members      int
	Generation   uint32
}

// List returns every group with live members, in no particular order.
func (c *Coordinator) List() []Summary {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Summary, 0, len(c.groups))
	for k, g := range c.groups {
		out = append(out, Summary{Topic: k.topic, Group: k.group, Members: len(g.members), Generation: g.gen})
	}
	return out
}

// MemberInfo is one member, for DESCRIBE_GROUP.
type MemberInfo struct {
	ID       wire.MemberID
	ClientID string
	Addr     string
	Session  time.Duration
	Assigned []uint32 // what it may process
	Revoking []uint32 // what it holds but was revoked
}

// Description is a group's state, for DESCRIBE_GROUP.
type Description struct {
	Generation uint32
	Members    []MemberInfo // in join order
}

// Describe returns the group's members and their partitions; a group without members has
// generation 0 and none.
func (c *Coordinator) Describe(topic, name string) Description {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[key{topic, name}]
	if g == nil {
		return Description{}
	}
	d := Description{Generation: g.gen}
	for _, m := range g.order {
		mi := MemberInfo{ID: m.id, ClientID: m.clientID, Addr: m.addr, Session: m.session, Assigned: m.given()}
		for p, h := range g.holder {
			if h == m && g.target[p] != m {
				mi.Revoking = append(mi.Revoking, uint32(p))
			}
		}
		d.Members = append(d.Members, mi)
	}
	return d
}
