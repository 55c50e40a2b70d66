package replica

import (
	"sync"

	"github.com/lightq/lightq/cluster/transport"
)

// Router hands what a broker's transport receives to the replicas of the groups it holds, and
// tells them all when a peer is unreachable. Its Handle and Unreachable are the transport's
// Config.Handler and Config.Unreachable.
//
// Concurrency: every method is safe from any goroutine; Handle takes a read lock per frame.
type Router struct {
	mu     sync.RWMutex
	groups map[uint64]*Replica
}

// NewRouter returns a router with no groups.
func NewRouter() *Router { return &Router{groups: map[uint64]*Replica{}} }

// Add routes group's messages to r.
func (rt *Router) Add(group uint64, r *Replica) {
	rt.mu.Lock()
	rt.groups[group] = r
	rt.mu.Unlock()
}

// Remove stops routing group.
func (rt *Router) Remove(group uint64) {
	rt.mu.Lock()
	delete(rt.groups, group)
	rt.mu.Unlock()
}

// Handle steps each envelope into its group's replica; messages for a group this broker does
// not hold are dropped (it was removed, or is not created yet: raft resends).
func (rt *Router) Handle(_ uint64, envs []transport.Envelope) {
	rt.mu.RLock()
	defer rt.mu.RUnlock()
	for i := range envs {
		if r := rt.groups[envs[i].Group]; r != nil {
			r.Step(envs[i].Msg)
		}
	}
}

// Unreachable reports node unreachable to every replica.
func (rt *Router) Unreachable(node uint64) {
	rt.mu.RLock()
	defer rt.mu.RUnlock()
	for _, r := range rt.groups {
		r.ReportUnreachable(node)
	}
}
