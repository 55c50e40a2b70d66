package group

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lightq/lightq/wire"
)

// Config bounds the coordinator. DefaultConfig has the broker's defaults.
type Config struct {
	// SessionTimeout is a member's session timeout when its JOIN_GROUP asks for none;
	// MinSessionTimeout and MaxSessionTimeout bound what it may ask for.
	SessionTimeout, MinSessionTimeout, MaxSessionTimeout time.Duration
	// MaxMembersPerGroup, MaxGroups (groups with live members) and MaxMembers (in all) bound
	// the coordinator's memory: a JOIN_GROUP past one is refused (KindLimit).
	MaxMembersPerGroup, MaxGroups, MaxMembers int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// DefaultConfig is the broker's default: sessions of 10 s within 1 s to 5 min, 1024 members
// a group, 10,000 groups, 100,000 members.
func DefaultConfig() Config {
	return Config{
		SessionTimeout: 10 * time.Second, MinSessionTimeout: time.Second, MaxSessionTimeout: 5 * time.Minute,
		MaxMembersPerGroup: 1024, MaxGroups: 10_000, MaxMembers: 100_000,
	}
}

// Validate reports the first inconsistent setting.
func (c *Config) Validate() error {
	switch {
	case c.MinSessionTimeout < time.Millisecond || c.MaxSessionTimeout < c.MinSessionTimeout:
		return fmt.Errorf("group session timeout bounds [%v, %v]: want 1ms <= min <= max", c.MinSessionTimeout, c.MaxSessionTimeout)
	case c.SessionTimeout < c.MinSessionTimeout || c.SessionTimeout > c.MaxSessionTimeout:
		return fmt.Errorf("group session timeout %v outside its bounds [%v, %v]", c.SessionTimeout, c.MinSessionTimeout, c.MaxSessionTimeout)
	case c.MaxMembersPerGroup < 1 || c.MaxGroups < 1 || c.MaxMembers < 1:
		return fmt.Errorf("group limits (members per group, groups, members) must be at least 1")
	}
	return nil
}

// Kind classifies an Error; the broker maps each to a wire code.
type Kind uint8

const (
	KindUnknownMember    Kind = iota + 1 // UNKNOWN_MEMBER
	KindFenced                           // FENCED_MEMBER
	KindLimit                            // RESOURCE_LIMIT
	KindInvalid                          // INVALID_REQUEST
	KindUnknownPartition                 // UNKNOWN_PARTITION
	KindTopicDeleted                     // UNKNOWN_TOPIC: the topic went while a heartbeat was held
	KindNotCoordinator                   // NOT_COORDINATOR: the broker stopped coordinating the group (DropGroups)
)

// Error is a refused request: its kind and the text for the client.
type Error struct {
	Kind Kind
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Is matches on the kind alone: errors.Is(err, &group.Error{Kind: group.KindFenced}).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Kind == e.Kind
}

func refuse(k Kind, format string, args ...any) *Error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...)}
}

// Answer answers JOIN_GROUP or HEARTBEAT: an error, or the generation, the member's timeouts
// and its whole assignment (ascending).
type Answer struct {
	Err        error
	Generation uint32
	Session    time.Duration
	Interval   time.Duration
	Partitions []uint32
}

// Waiter receives the answer of a held heartbeat. It is called at most once, without the
// coordinator's mutex, and must not block.
type Waiter func(Answer)

// Parked is a held heartbeat, for Unpark.
type Parked struct {
	m        *member
	w        Waiter
	deadline time.Time
}

type key struct{ topic, group string }

// Coordinator holds every group of the broker. See the package doc.
type Coordinator struct {
	cfg Config
	now func() time.Time

	mu       sync.Mutex
	groups   map[key]*group
	withheld map[key]time.Time // groups whose partitions nobody gets before then (Withhold)
	all      time.Time         // every group's partitions, of groups that join later too (WithholdAll); zero when none
	members  int               // in all groups
	lastGen  uint32
	joins    uint64 // join order
	stopping bool
	events   memberHeap // members by their next deadline
	timer    *time.Timer
	timerAt  time.Time // when timer fires; zero when not armed
}

// group is one (topic, name) with live members. Under Coordinator.mu.
type group struct {
	key      key
	gen      uint32
	members  map[wire.MemberID]*member
	order    []*member // join order
	target   []*member // per partition: who should have it
	holder   []*member // per partition: who may process it
	acquired []uint32  // per partition: the generation in which its holder got it
	until    time.Time // while set, no partition gets a holder (Withhold, WithholdAll); cleared by its timer
}

// member is one member of a group. Under Coordinator.mu.
type member struct {
	g        *group
	id       wire.MemberID
	clientID string
	addr     string
	session  time.Duration
	joinSeq  uint64

	lastAnswer  time.Time // the session clock runs from here while no heartbeat is held
	park        *Parked
	told        []uint32 // the assignment of its last answer
	assignedGen uint32   // the generation of the first answer that carried told

	heapIdx int
	eventAt time.Time // park deadline while parked, else session expiry
}

// New returns a coordinator. cfg must be valid (Config.Validate).
func New(cfg Config) *Coordinator {
	c := &Coordinator{cfg: cfg, now: cfg.Now, groups: map[key]*group{}, withheld: map[key]time.Time{}}
	if c.now == nil {
		c.now = time.Now
	}
	return c
}

// interval is the heartbeat interval of a session: a third of it.
func interval(session time.Duration) time.Duration { return session / 3 }

// delivery is a held heartbeat's answer, given to its waiter once the mutex is released.
type delivery struct {
	w Waiter
	a Answer
}

func deliver(ds []delivery) {
	for _, d := range ds {
		d.w(d.a)
	}
}

// JoinRequest is a decoded JOIN_GROUP, with what the broker adds: the topic's partition
// count and the connection's address.
type JoinRequest struct {
	Topic, Group string
	Member       wire.MemberID
	Partitions   int
	Session      time.Duration // 0: Config.SessionTimeout
	ClientID     string
	Addr         string
	// Guard, if set, is called under the coordinator's mutex before anything is done; an
	// error it returns is the answer. A cluster member checks there that it still leads the
	// group's offsets partition in the term it checked before: a broker's leadership is lost
	// before DropGroups (which takes the mutex) runs, so no answer that gives partitions
	// leaves a coordinator after it lost the group.
	Guard func() error
}

// Join makes req.Member a member of the group (again, when it is one: then it releases
// whatever it was revoking, and keeps its assignment) and answers at once.
func (c *Coordinator) Join(req JoinRequest) Answer {
	session := req.Session
	if session == 0 {
		session = c.cfg.SessionTimeout
	}
	if session < c.cfg.MinSessionTimeout || session > c.cfg.MaxSessionTimeout {
		return Answer{Err: refuse(KindInvalid, "session timeout %v outside the broker's bounds [%v, %v]", session, c.cfg.MinSessionTimeout, c.cfg.MaxSessionTimeout)}
	}
	if req.Member.IsZero() || req.Partitions < 1 {
		return Answer{Err: refuse(KindInvalid, "a member id of zeros, or a topic without partitions")}
	}
	c.mu.Lock()
	var ds []delivery
	defer func() {
		c.rearm()
		c.mu.Unlock()
		deliver(ds)
	}()
	if req.Guard != nil {
		if err := req.Guard(); err != nil {
			return Answer{Err: err}
		}
	}
	now := c.now()
	k := key{req.Topic, req.Group}
	g := c.groups[k]
	if g != nil && len(g.target) != req.Partitions {
		// The topic was recreated with another partition count; DropTopic should have
		// removed the group. Start it afresh rather than index out of range.
		ds = append(ds, c.dropGroup(g, refuse(KindTopicDeleted, "topic %q was deleted", req.Topic))...)
		g = nil
	}
	if g == nil {
		if len(c.groups) >= c.cfg.MaxGroups {
			return Answer{Err: refuse(KindLimit, "the broker has %d consumer groups with members, its limit", c.cfg.MaxGroups)}
		}
		g = &group{key: k, members: map[wire.MemberID]*member{}, target: make([]*member, req.Partitions),
			holder: make([]*member, req.Partitions), acquired: make([]uint32, req.Partitions), until: c.holdUntil(k)}
	}
	m := g.members[req.Member]
	changed := false
	if m != nil {
		if m.park != nil {
			ds = append(ds, c.answer(m, now))
		}
		for p, h := range g.holder {
			if h == m && g.target[p] != m {
				g.holder[p] = nil // it holds nothing now: what it was revoking is free
			}
		}
	} else {
		switch {
		case len(g.members) >= c.cfg.MaxMembersPerGroup:
			return Answer{Err: refuse(KindLimit, "group %q of topic %q has %d members, the limit of a group", req.Group, req.Topic, c.cfg.MaxMembersPerGroup)}
		case c.members >= c.cfg.MaxMembers:
			return Answer{Err: refuse(KindLimit, "the broker has %d group members, its limit", c.cfg.MaxMembers)}
		}
		if len(g.members) == 0 {
			c.groups[k] = g
		}
		c.joins++
		m = &member{g: g, id: req.Member, joinSeq: c.joins, heapIdx: -1}
		g.members[req.Member] = m
		g.order = append(g.order, m)
		c.members++
		changed = g.rebalance()
	}
	m.clientID, m.addr, m.session = req.ClientID, req.Addr, session
	ds = append(ds, c.settle(g, changed, now)...)
	a := c.answer(m, now)
	return a.a
}

// HeartbeatRequest is a decoded HEARTBEAT and the connection's address.
type HeartbeatRequest struct {
	Topic, Group string
	Member       wire.MemberID
	Generation   uint32
	MaxWait      time.Duration
	Owned        []uint32 // ascending
	Addr         string
	Guard        func() error // as JoinRequest's
}

// Heartbeat keeps the member alive and takes its releases. It answers at once (park nil),
// or holds the heartbeat (the answer is empty, park is its handle) until the member's
// assignment changes or min(MaxWait, interval) passes; then w gets the answer. A held
// heartbeat of the member is answered first.
func (c *Coordinator) Heartbeat(req HeartbeatRequest, w Waiter) (Answer, *Parked) {
	c.mu.Lock()
	var ds []delivery
	defer func() {
		c.rearm()
		c.mu.Unlock()
		deliver(ds)
	}()
	if req.Guard != nil {
		if err := req.Guard(); err != nil {
			return Answer{Err: err}, nil
		}
	}
	now := c.now()
	g := c.groups[key{req.Topic, req.Group}]
	var m *member
	if g != nil {
		m = g.members[req.Member]
	}
	if m == nil {
		return Answer{Err: refuse(KindUnknownMember, "%s is not a member of group %q of topic %q (it left, its session expired, or the broker restarted): join again", req.Member, req.Group, req.Topic)}, nil
	}
	for _, p := range req.Owned {
		if int(p) >= len(g.target) {
			return Answer{Err: refuse(KindUnknownPartition, "topic %q has partitions 0-%d, not %d", req.Topic, len(g.target)-1, p)}, nil
		}
	}
	if m.park != nil {
		ds = append(ds, c.answer(m, now))
	}
	if req.Generation > g.gen {
		ds = append(ds, c.fence(m, now)...)
		return Answer{Err: refuse(KindFenced, "generation %d is newer than group %q's %d: the member was removed; join again", req.Generation, req.Group, g.gen)}, nil
	}
	for _, p := range req.Owned {
		if g.holder[p] != m {
			ds = append(ds, c.fence(m, now)...)
			return Answer{Err: refuse(KindFenced, "member %s claims partition %d of topic %q, which it does not hold: the member was removed; join again", req.Member, p, req.Topic)}, nil
		}
	}
	m.addr = req.Addr
	if req.Generation >= m.assignedGen {
		// The member has seen the answer that carries its assignment: what it was told is
		// revoked and it no longer owns is released.
		for p, h := range g.holder {
			if h == m && g.target[p] != m && !contains(m.told, uint32(p)) && !contains(req.Owned, uint32(p)) {
				g.holder[p] = nil
			}
		}
	}
	ds = append(ds, c.settle(g, false, now)...)
	if req.MaxWait <= 0 || c.stopping || !slices.Equal(m.given(), m.told) {
		d := c.answer(m, now)
		return d.a, nil
	}
	m.park = &Parked{m: m, w: w, deadline: now.Add(min(req.MaxWait, interval(m.session)))}
	c.schedule(m)
	return Answer{}, m.park
}

// Unpark forgets a held heartbeat that will not be answered (its connection closed): the
// member's session clock starts now. Its waiter is not called.
func (c *Coordinator) Unpark(p *Parked) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.m.park != p {
		return // answered already, or the member is gone
	}
	p.m.park = nil
	p.m.lastAnswer = c.now()
	c.schedule(p.m)
	c.rearm()
}

// Leave removes the member; its partitions go to the others at once.
func (c *Coordinator) Leave(topic, name string, id wire.MemberID) error {
	c.mu.Lock()
	var ds []delivery
	defer func() {
		c.rearm()
		c.mu.Unlock()
		deliver(ds)
	}()
	g := c.groups[key{topic, name}]
	if g == nil || g.members[id] == nil {
		return refuse(KindUnknownMember, "%s is not a member of group %q of topic %q", id, name, topic)
	}
	ds = c.removeAndSettle(g.members[id], refuse(KindUnknownMember, "%s left group %q", id, name), c.now())
	return nil
}

// CheckCommit says whether member id may commit partition p with generation gen: it holds
// p, got it in gen or before, and gen is not beyond the group's.
func (c *Coordinator) CheckCommit(topic, name string, id wire.MemberID, gen, p uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[key{topic, name}]
	if g == nil || g.members[id] == nil {
		return refuse(KindUnknownMember, "%s is not a member of group %q of topic %q: join again", id, name, topic)
	}
	m := g.members[id]
	switch {
	case int(p) >= len(g.holder):
		return refuse(KindUnknownPartition, "topic %q has partitions 0-%d, not %d", topic, len(g.holder)-1, p)
	case g.holder[p] != m:
		return refuse(KindFenced, "member %s does not hold partition %d of topic %q (generation %d)", id, p, topic, g.gen)
	case gen < g.acquired[p]:
		return refuse(KindFenced, "member %s got partition %d of topic %q in generation %d: a commit of generation %d is stale", id, p, topic, g.acquired[p], gen)
	case gen > g.gen:
		return refuse(KindFenced, "generation %d is newer than group %q's %d", gen, name, g.gen)
	}
	return nil
}

// HasMembers reports whether the group has live members (an offset-only commit is refused).
func (c *Coordinator) HasMembers(topic, name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.groups[key{topic, name}] != nil
}

// Withhold gives no partition of group (topic, name) to anyone for d from now, though
// members may join and heartbeat meanwhile; then the partitions go to their targets at once
// (held heartbeats answered). A cluster member calls it for each group it takes over as the
// new coordinator of its offsets partition, for the group's longest session timeout (and a
// margin): members of the previous coordinator that have not heard of the move stop
// processing within their session, and not before the last of them has are the partitions
// given again. A second call extends the wait to the later end; DropGroups and DropTopic end
// it early (the group is no longer coordinated here).
func (c *Coordinator) Withhold(topic, name string, d time.Duration) {
	k := key{topic, name}
	c.mu.Lock()
	until := c.now().Add(d)
	if cur, ok := c.withheld[k]; ok && !cur.Before(until) {
		c.mu.Unlock()
		return
	}
	c.withheld[k] = until
	if g := c.groups[k]; g != nil && g.until.Before(until) {
		g.until = until
	}
	c.mu.Unlock()
	time.AfterFunc(d, func() { c.release(&k, until) })
}

// WithholdAll is Withhold for every group, those that join during the next d included: a
// broker without a cluster calls it at start for the longest session timeout its previous
// run may have granted, since the members of that run, unknown to this one, may still be
// processing their partitions until their local session deadline (PROTOCOL.md 10.1). The
// two withholds are one mechanism: a group's partitions wait for the later of its own
// (Withhold) and this one. A second call extends it to the later end; nothing ends it early.
func (c *Coordinator) WithholdAll(d time.Duration) {
	if d <= 0 {
		return
	}
	c.mu.Lock()
	until := c.now().Add(d)
	if !c.all.Before(until) {
		c.mu.Unlock()
		return
	}
	c.all = until
	for _, g := range c.groups {
		if g.until.Before(until) {
			g.until = until
		}
	}
	c.mu.Unlock()
	time.AfterFunc(d, func() { c.release(nil, until) })
}

// holdUntil is when a group (topic, name) that starts now may give partitions: the later of
// its Withhold and WithholdAll (zero: at once). Caller holds mu.
func (c *Coordinator) holdUntil(k key) time.Time {
	until := c.withheld[k]
	if c.all.After(until) {
		until = c.all
	}
	return until
}

// release ends the withhold that lasts until until, of k (Withhold), or of every group (k
// nil: WithholdAll), unless a later one replaced it or it was dropped: the partitions of the
// groups it held go to their targets. A group held by both waits for the later: its until is
// the later one's, which this release does not match.
func (c *Coordinator) release(k *key, until time.Time) {
	c.mu.Lock()
	var ds []delivery
	if k == nil {
		if c.all.Equal(until) {
			c.all = time.Time{}
		}
	} else if cur, ok := c.withheld[*k]; ok && cur.Equal(until) {
		delete(c.withheld, *k)
	}
	now := c.now()
	lift := func(g *group) {
		if g != nil && g.until.Equal(until) {
			g.until = time.Time{}
			ds = append(ds, c.settle(g, false, now)...)
		}
	}
	if k != nil {
		lift(c.groups[*k])
	} else {
		for _, g := range c.groups {
			lift(g)
		}
	}
	c.rearm()
	c.mu.Unlock()
	deliver(ds)
}

// Withheld reports whether group (topic, name)'s partitions are withheld now (Withhold,
// WithholdAll).
func (c *Coordinator) Withheld(topic, name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.withheld[key{topic, name}]
	return ok || !c.all.IsZero()
}

// DropTopic forgets every group of a deleted topic; held heartbeats are answered
// KindTopicDeleted.
func (c *Coordinator) DropTopic(topic string) {
	c.mu.Lock()
	var ds []delivery
	for k, g := range c.groups {
		if k.topic == topic {
			ds = append(ds, c.dropGroup(g, refuse(KindTopicDeleted, "topic %q was deleted", topic))...)
		}
	}
	for k := range c.withheld {
		if k.topic == topic {
			delete(c.withheld, k)
		}
	}
	c.rearm()
	c.mu.Unlock()
	deliver(ds)
}

// DropGroups forgets every group for which match(topic, group) holds; their held heartbeats
// are answered err. A cluster member calls it when it stops coordinating groups (the
// leadership of their offsets partition moved), and when it starts again (what a
// coordinator of the past left behind is not trusted).
func (c *Coordinator) DropGroups(match func(topic, group string) bool, err error) {
	c.mu.Lock()
	var ds []delivery
	for k, g := range c.groups {
		if match(k.topic, k.group) {
			ds = append(ds, c.dropGroup(g, err)...)
		}
	}
	for k := range c.withheld {
		if match(k.topic, k.group) {
			delete(c.withheld, k)
		}
	}
	c.rearm()
	c.mu.Unlock()
	deliver(ds)
}

// Stop answers every held heartbeat and holds none from now on (the broker is draining).
func (c *Coordinator) Stop() {
	c.mu.Lock()
	c.stopping = true
	now := c.now()
	var ds []delivery
	for _, g := range c.groups {
		for _, m := range g.order {
			if m.park != nil {
				ds = append(ds, c.answer(m, now))
			}
		}
	}
	if c.timer != nil {
		c.timer.Stop()
		c.timerAt = time.Time{}
	}
	c.mu.Unlock()
	deliver(ds)
}

// Tick expires the sessions and ends the held heartbeats due at now. The coordinator's timer
// calls it; tests may too.
func (c *Coordinator) Tick() {
	c.mu.Lock()
	now := c.now()
	var ds []delivery
	for len(c.events) > 0 && !c.events[0].eventAt.After(now) {
		m := c.events[0]
		if m.park != nil {
			ds = append(ds, c.answer(m, now))
			continue
		}
		ds = append(ds, c.removeAndSettle(m, nil, now)...)
	}
	c.timerAt = time.Time{}
	if !c.stopping {
		c.rearm()
	}
	c.mu.Unlock()
	deliver(ds)
}

// rearm points the timer at the earliest deadline, unless it already fires before it.
// Caller holds mu.
func (c *Coordinator) rearm() {
	if len(c.events) == 0 || c.stopping {
		return
	}
	at := c.events[0].eventAt
	if !c.timerAt.IsZero() && !c.timerAt.After(at) {
		return // fires first; Tick re-arms
	}
	d := max(at.Sub(c.now()), 0)
	c.timerAt = at
	if c.timer == nil {
		c.timer = time.AfterFunc(d, c.Tick)
	} else {
		c.timer.Reset(d)
	}
}

// given is what m may process: the partitions it holds whose target it is. Caller holds mu.
func (m *member) given() []uint32 {
	var out []uint32
	for p, h := range m.g.holder {
		if h == m && m.g.target[p] == m {
			out = append(out, uint32(p))
		}
	}
	return out
}

// answer builds m's answer now, records what m was told, and ends its held heartbeat (the
// delivery is for that waiter, nil when none). Caller holds mu.
func (c *Coordinator) answer(m *member, now time.Time) delivery {
	a := m.given()
	if !slices.Equal(a, m.told) || m.assignedGen == 0 {
		m.told, m.assignedGen = a, m.g.gen
	}
	ans := Answer{Generation: m.g.gen, Session: m.session, Interval: interval(m.session), Partitions: slices.Clone(a)}
	var w Waiter
	if m.park != nil {
		w = m.park.w
		m.park = nil
	}
	m.lastAnswer = now
	c.schedule(m)
	return delivery{w: w, a: ans}
}

// settle gives every partition without a holder to its target, in a new generation when
// that or a target change (changed) happened, and answers the held heartbeats of members
// whose assignment changed. Caller holds mu.
func (c *Coordinator) settle(g *group, changed bool, now time.Time) []delivery {
	var gen uint32
	for p, h := range g.holder {
		if h == nil && g.target[p] != nil && g.until.IsZero() {
			if gen == 0 {
				gen = c.nextGen()
			}
			g.holder[p], g.acquired[p] = g.target[p], gen
		}
	}
	if gen == 0 && changed {
		gen = c.nextGen()
	}
	if gen != 0 {
		g.gen = gen
	}
	var ds []delivery
	for _, m := range g.order {
		if m.park != nil && !slices.Equal(m.given(), m.told) {
			ds = append(ds, c.answer(m, now))
		}
	}
	return ds
}

func (c *Coordinator) nextGen() uint32 {
	c.lastGen++
	if c.lastGen == 0 { // after 4 billion generations; 0 means "none"
		c.lastGen = 1
	}
	return c.lastGen
}

// fence removes m for a claim it could not make. Caller holds mu.
func (c *Coordinator) fence(m *member, now time.Time) []delivery {
	return c.removeAndSettle(m, nil, now)
}

// removeAndSettle removes m (its held heartbeat, if any, is answered err), rebalances and
// settles the rest, and forgets a group left empty. Caller holds mu.
func (c *Coordinator) removeAndSettle(m *member, err error, now time.Time) []delivery {
	g := m.g
	ds := c.remove(m, err)
	if len(g.members) == 0 {
		delete(c.groups, g.key)
		return ds
	}
	return append(ds, c.settle(g, g.rebalance(), now)...)
}

// remove takes m out of its group: its partitions lose their holder and target. Caller
// holds mu.
func (c *Coordinator) remove(m *member, err error) []delivery {
	g := m.g
	var ds []delivery
	if m.park != nil {
		ds = append(ds, delivery{w: m.park.w, a: Answer{Err: err}})
		if err == nil {
			ds[0].a.Err = refuse(KindUnknownMember, "%s was removed from group %q", m.id, g.key.group)
		}
		m.park = nil
	}
	for p := range g.target {
		if g.target[p] == m {
			g.target[p] = nil
		}
		if g.holder[p] == m {
			g.holder[p] = nil
		}
	}
	delete(g.members, m.id)
	g.order = slices.DeleteFunc(g.order, func(o *member) bool { return o == m })
	c.members--
	c.events.remove(m)
	return ds
}

// dropGroup removes every member of g, answering held heartbeats err. Caller holds mu.
func (c *Coordinator) dropGroup(g *group, err error) []delivery {
	var ds []delivery
	for _, m := range slices.Clone(g.order) {
		ds = append(ds, c.remove(m, err)...)
	}
	delete(c.groups, g.key)
	return ds
}

// schedule files m under its next deadline. Caller holds mu.
func (c *Coordinator) schedule(m *member) {
	if m.park != nil {
		m.eventAt = m.park.deadline
	} else {
		m.eventAt = m.lastAnswer.Add(m.session)
	}
	c.events.update(m)
}

func contains(ps []uint32, p uint32) bool {
	_, ok := slices.BinarySearch(ps, p)
	return ok
}
