package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lightq/lightq/wire"
)

// Consumer-group requests to the group's coordinator (PROTOCOL.md sections 10.1 and 16). In
// a cluster each group has one coordinator, and another broker answers its requests
// NOT_COORDINATOR; a broker without cluster settings never does. So a Conn sends a group's
// requests to its own broker until one is answered NOT_COORDINATOR, then asks its broker
// FIND_COORDINATOR and sends them to the broker named, over a Conn of its own to that broker
// (dialled with the same Options, shared by the groups it coordinates, closed with the Conn),
// and asks again whenever that broker answers NOT_COORDINATOR or cannot be reached. With one
// broker nothing changes: no route is ever made and no Conn dialled.
//
// Concurrency: coordinators.mu is a leaf; nothing is called while it is held.

// coordinators is a Conn's routing of group requests.
type coordinators struct {
	mu     sync.Mutex
	routes map[string]uint32 // group -> node id of its coordinator, when not the Conn's broker
	conns  map[uint32]*coordConn
	closed bool
}

// coordConn is a Conn to a coordinator and the address it was dialled at.
type coordConn struct {
	c    *Conn
	addr string
}

// maxRoutes bounds the groups a Conn remembers a coordinator for: past it the routes are
// forgotten and learnt again from the next NOT_COORDINATOR.
const maxRoutes = 4096

// errNoCoordinator: FIND_COORDINATOR named none (an election, or the cluster's start).
var errNoCoordinator = errors.New("lightq: no coordinator known for the group (an election is under way): retry")

// FindCoordinator asks the Conn's broker which broker coordinates group (FIND_COORDINATOR).
// A broker without cluster settings names itself.
func (c *Conn) FindCoordinator(ctx context.Context, group string) (wire.FindCoordinatorResponse, error) {
	var resp wire.FindCoordinatorResponse
	if err := wire.ValidGroupName(group); err != nil {
		return resp, fmt.Errorf("lightq: %w", err)
	}
	req := wire.FindCoordinator{Group: group}
	body, err := c.roundTrip(ctx, wire.OpFindCoordinator, req.AppendTo(nil))
	if err != nil {
		return resp, err
	}
	if err := resp.Decode(body); err != nil {
		return resp, fmt.Errorf("%w: FIND_COORDINATOR response: %w", ErrProtocol, err)
	}
	return resp, nil
}

// groupConn is the Conn that group's requests go to now: c, or the coordinator's.
func (c *Conn) groupConn(group string) *Conn {
	cs := &c.coord
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if node, ok := cs.routes[group]; ok {
		if cc := cs.conns[node]; cc != nil {
			return cc.c
		}
	}
	return c
}

// refreshCoordinator asks c's broker where group's coordinator is and routes the group
// there, dialling it if no Conn to it is open. moved reports that the route changed (to
// another broker: the old coordinator's memberships are gone). It fails with errNoCoordinator
// when none is known, or when the coordinator cannot be dialled.
func (c *Conn) refreshCoordinator(ctx context.Context, group string) (moved bool, err error) {
	fc, err := c.FindCoordinator(ctx, group)
	if err != nil {
		return false, err
	}
	if fc.Coordinator == 0 {
		return false, errNoCoordinator
	}
	cs := &c.coord
	node := fc.Coordinator
	if node == fc.Node {
		node = 0 // the Conn's own broker
	}
	addr := fc.Addr
	if c.opts.TLS != nil {
		addr = fc.TLSAddr
	}
	cs.mu.Lock()
	prev := cs.routes[group]
	cc := cs.conns[node]
	closed := cs.closed
	cs.mu.Unlock()
	if closed {
		return false, ErrClosed
	}
	if node != 0 && (cc == nil || cc.addr != addr) {
		if addr == "" {
			return false, fmt.Errorf("lightq: group %s: its coordinator, node %d, has no address for this client (TLS: %v)", group, node, c.opts.TLS != nil)
		}
		nc, err := Dial(ctx, addr, c.opts)
		if err != nil {
			return false, fmt.Errorf("lightq: group %s: dial its coordinator, node %d at %s: %w", group, node, addr, err)
		}
		cc = &coordConn{c: nc, addr: addr}
		var old *Conn
		cs.mu.Lock()
		if cs.closed {
			cs.mu.Unlock()
			nc.Close()
			return false, ErrClosed
		}
		if cur := cs.conns[node]; cur != nil {
			old = cur.c // a broker that moved, or dialled twice at once: the newest stays
		}
		if cs.conns == nil {
			cs.conns = map[uint32]*coordConn{}
		}
		cs.conns[node] = cc
		cs.mu.Unlock()
		if old != nil {
			old.Close()
		}
	}
	cs.mu.Lock()
	if node == 0 {
		delete(cs.routes, group)
	} else {
		if cs.routes == nil || len(cs.routes) >= maxRoutes {
			cs.routes = map[string]uint32{}
		}
		cs.routes[group] = node
	}
	var unused *Conn // the old coordinator's Conn, when no group goes there any more
	if prev != 0 && prev != node && cs.conns[prev] != nil && !cs.routesTo(prev) {
		unused = cs.conns[prev].c
		delete(cs.conns, prev)
	}
	cs.mu.Unlock()
	if unused != nil {
		unused.Close() // its requests in flight end with ErrClosed: groupRoundTrip sends them again
	}
	return prev != node, nil
}

// routesTo reports whether a group's route goes to node. cs.mu held.
func (cs *coordinators) routesTo(node uint32) bool {
	for _, n := range cs.routes {
		if n == node {
			return true
		}
	}
	return false
}

// close closes the coordinators' Conns (Conn.Close).
func (cs *coordinators) close() {
	cs.mu.Lock()
	cs.closed = true
	conns := cs.conns
	cs.conns, cs.routes = nil, nil
	cs.mu.Unlock()
	for _, cc := range conns {
		cc.c.Close()
	}
}

// isNotCoordinator reports an answer NOT_COORDINATOR.
func isNotCoordinator(err error) bool {
	return errors.Is(err, &wire.Error{Code: wire.CodeNotCoordinator})
}

// groupRoundTrip is roundTrip for a request of group, sent to its coordinator: on
// NOT_COORDINATOR (nothing was done) it finds the coordinator and sends the request again
// there, until ctx ends (with backoff while the same broker or none is named: an election).
// A coordinator's Conn that is not connected is not waited for: the coordinator is looked up
// again (its broker may be gone) until it is reachable or another is named. A request in
// flight on a coordinator's Conn that a new route closed is sent again.
func (c *Conn) groupRoundTrip(ctx context.Context, group string, op wire.Op, body []byte) ([]byte, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	bo := backoff{min: coordLookupMin, max: coordLookupMax}
	var last error
	for {
		gc := c.groupConn(group)
		if ok, _ := gc.Connected(); gc != c && !ok {
			moved, err := c.refreshCoordinator(ctx, group)
			if err != nil || !moved {
				if last = err; last == nil {
					last = fmt.Errorf("lightq: group %s: its coordinator cannot be reached: %w", group, ErrConnectionLost)
				}
				if !sleep(ctx, nil, bo.next()) {
					return nil, fmt.Errorf("%w (%w)", last, ctx.Err())
				}
				continue
			}
			gc = c.groupConn(group)
		}
		resp, err := gc.roundTrip(ctx, op, body)
		switch {
		case gc != c && errors.Is(err, ErrClosed) && c.Err() == nil && ctx.Err() == nil:
			continue // a new route closed that Conn
		case !isNotCoordinator(err):
			return resp, err
		}
		moved, ferr := c.refreshCoordinator(ctx, group)
		if moved && ferr == nil {
			continue
		}
		if !sleep(ctx, nil, bo.next()) {
			return nil, err
		}
	}
}

// The schedule of looking a coordinator up again while none is known: an election takes a
// second or two.
const (
	coordLookupMin = 50 * time.Millisecond
	coordLookupMax = time.Second
)
