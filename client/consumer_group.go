package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lightq/lightq/wire"
)

// Group membership (PROTOCOL.md 10.1): a Consumer with a Group joins it at construction and
// then runs two goroutines. The heartbeater keeps a HEARTBEAT held at the broker (long poll),
// sends another at once when the reconciler has released partitions, and hands every answer
// with a newer generation to the reconciler. The reconciler makes the consumer's partitions
// the assignment: for a partition taken away it stops the fetcher, stops Each delivering it
// (applyRevoke, between two records), calls OnRevoke, commits its position with
// GROUP_COMMIT, and only then drops it from the owned set the next heartbeat reports; for a
// partition given it marks it owned first, resolves its start and starts its fetcher. On
// UNKNOWN_MEMBER or FENCED_MEMBER the reconciler drops every partition without committing
// and the heartbeater joins again with the same member id. Close stops both, then revokes
// what the consumer holds as a rebalance would (OnRevoke, commit) and leaves (closeMember).
//
// In a cluster the group's requests go to its coordinator (coordinator.go). When the
// coordinator moves (a heartbeat answered NOT_COORDINATOR, or the coordinator's connection
// lost and FIND_COORDINATOR naming another broker), the new one knows no member: the
// membership is lost as on UNKNOWN_MEMBER, and the member joins the new coordinator.
//
// Lock order: membership.mu is a leaf.

// membership is a consumer's membership of its group.
type membership struct {
	id      wire.MemberID
	session time.Duration // asked for; 0: the broker's

	ctx    context.Context // ends at Close, before the consumer's
	cancel context.CancelFunc
	wg     sync.WaitGroup // heartbeater and reconciler

	changed chan struct{} // cap 1: a new assignment (or a loss) for the reconciler
	kick    chan struct{} // cap 1: the reconciler released partitions: heartbeat now

	mu       sync.Mutex
	epoch    int           // bumped by each JOIN_GROUP: answers to older heartbeats are ignored
	gen      uint32        // the highest generation received
	interval time.Duration // heartbeat interval
	want     []uint32      // the assignment of generation gen
	lost     bool          // the membership ended: drop everything, then join again
	// granted is the session timeout the broker granted (JOIN_GROUP's answer), and expires
	// when the member must consider its session over if no answer came since: the last
	// answer plus nine tenths of granted (the broker's clock starts no earlier than the
	// answer it sent). Past it the member drops its partitions without committing, as on
	// UNKNOWN_MEMBER, even while the Conn is still reconnecting: the broker may already have
	// given them to another member.
	granted time.Duration
	expires time.Time
	owned   []uint32 // ascending: what the consumer processes (HEARTBEAT's owned)
}

func newMembership(session time.Duration) (*membership, error) {
	m := &membership{session: session, changed: make(chan struct{}, 1), kick: make(chan struct{}, 1)}
	if _, err := rand.Read(m.id[:]); err != nil {
		return nil, fmt.Errorf("lightq: member id: %w", err)
	}
	m.id[0] |= 1 // never all zero
	m.ctx, m.cancel = context.WithCancel(context.Background())
	return m, nil
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// generation is the highest generation the member received.
func (m *membership) generation() uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen
}

// apply takes an answer's assignment unless an answer of a newer generation was applied.
func (m *membership) apply(gen uint32, interval time.Duration, parts []uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.answered() // any answer shows the broker still holds the membership
	if gen < m.gen {
		return
	}
	m.gen, m.want, m.lost = gen, parts, false
	if interval > 0 {
		m.interval = interval
	}
	signal(m.changed)
}

// answered pushes the local session deadline out after an answer from the broker. m.mu held.
func (m *membership) answered() {
	if m.granted > 0 {
		m.expires = time.Now().Add(m.granted - m.granted/10)
	}
}

// deadline is when the member must consider its session over (zero: unknown).
func (m *membership) deadline() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.expires
}

// sessionContext is m.ctx bounded by the local session deadline, if one is known.
func (m *membership) sessionContext() (context.Context, context.CancelFunc) {
	if d := m.deadline(); !d.IsZero() {
		return context.WithDeadline(m.ctx, d)
	}
	return context.WithCancel(m.ctx)
}

// answerContext is m.ctx bounded by d and by the local session deadline, if one is known:
// how long a heartbeat's answer is waited for.
func (m *membership) answerContext(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(m.ctx, d)
	if dl := m.deadline(); !dl.IsZero() {
		dctx, dcancel := context.WithDeadline(ctx, dl)
		return dctx, func() { dcancel(); cancel() }
	}
	return ctx, cancel
}

// expired reports whether the local session deadline passed with no answer since.
func (m *membership) expired() bool {
	d := m.deadline()
	return !d.IsZero() && !time.Now().Before(d)
}

// loseSession drops the assignment: the reconciler revokes everything without committing.
func (m *membership) loseSession() {
	m.mu.Lock()
	m.lost, m.want = true, nil
	m.expires = time.Time{}
	m.mu.Unlock()
	signal(m.changed)
}

// join sends JOIN_GROUP and applies its answer.
func (k *Consumer) join(ctx context.Context, c *Conn) error {
	m := k.member
	req := wire.JoinGroup{Group: k.opts.Group, Topic: k.topic, Member: m.id, SessionTimeoutMs: uint32(m.session / time.Millisecond), ClientID: c.opts.ClientName}
	body, err := c.groupRoundTrip(ctx, k.opts.Group, wire.OpJoinGroup, req.AppendTo(nil))
	if err != nil {
		return err
	}
	var resp wire.JoinGroupResponse
	if err := resp.Decode(body); err != nil {
		return fmt.Errorf("%w: JOIN_GROUP response: %w", ErrProtocol, err)
	}
	// A new membership: its generations may be lower than the last one's (after a broker
	// restart), and answers to heartbeats of the old one no longer count.
	m.mu.Lock()
	m.epoch++
	m.gen = 0
	m.granted = time.Duration(resp.SessionTimeoutMs) * time.Millisecond
	m.mu.Unlock()
	m.apply(resp.Generation, time.Duration(resp.HeartbeatIntervalMs)*time.Millisecond, resp.Partitions)
	return nil
}

// startMember starts the heartbeater and the reconciler.
func (k *Consumer) startMember() {
	k.member.wg.Add(2)
	go k.heartbeater()
	go k.reconciler()
}

// stopMember stops the heartbeater and the reconciler and waits for them.
func (k *Consumer) stopMember() {
	k.member.cancel()
	k.member.wg.Wait()
}

// hbResult is the outcome of one HEARTBEAT.
type hbResult struct {
	epoch int
	via   *Conn // the Conn it went on: the consumer's, or its coordinator's
	resp  wire.HeartbeatResponse
	err   error
}

// heartbeater keeps one HEARTBEAT outstanding (two right after a release) and joins again
// when the membership is lost. It ends with the membership's context.
func (k *Consumer) heartbeater() {
	m := k.member
	defer m.wg.Done()
	results := make(chan hbResult, 4)
	outstanding := 0
	backoff := time.Duration(0)
	rejoin, joined, kicked := false, false, false
	send := func(c *Conn) {
		m.mu.Lock()
		req := wire.Heartbeat{Group: k.opts.Group, Topic: k.topic, Member: m.id, Generation: m.gen, MaxWaitMs: uint32(m.interval / time.Millisecond), Owned: slices.Clone(m.owned)}
		wait, epoch := m.interval, m.epoch
		m.mu.Unlock()
		outstanding++
		// Written here, in the order the heartbeats were built: a heartbeat that still owns
		// a partition must not reach the broker after the one that released it (the broker
		// would fence the member for claiming what it no longer holds). A reconnect in
		// progress is waited for up to the local session deadline.
		hc := c.groupConn(k.opts.Group)
		sctx, scancel := m.sessionContext()
		call, err := hc.startCall(sctx, wire.OpHeartbeat, req.AppendTo(nil), wait)
		scancel()
		go func() {
			r := hbResult{epoch: epoch, via: hc}
			var body []byte
			if err == nil {
				// The answer is waited for up to the local session deadline too: a broker that
				// went silent (a machine lost, a network cut: no close comes) must not keep
				// the member processing past it, while others may be given its partitions.
				ctx, cancel := m.answerContext(wait + hc.opts.RequestTimeout)
				defer cancel()
				body, err = call.wait(ctx)
			}
			if r.err = err; err == nil {
				if err := r.resp.Decode(body); err != nil {
					r.err = fmt.Errorf("%w: HEARTBEAT response: %w", ErrProtocol, err)
				}
			}
			results <- r
		}()
	}
	for {
		if m.ctx.Err() != nil {
			return
		}
		c := k.currentConn()
		if rejoin {
			if !k.waitNothingOwned() {
				return
			}
			ctx, cancel := c.withTimeout(m.ctx)
			err := k.join(ctx, c)
			cancel()
			if err != nil {
				if !k.memberRetry(c, fmt.Errorf("lightq: group %s of %s: join again: %w", k.opts.Group, k.topic, err), &backoff) {
					return
				}
				continue
			}
			rejoin, joined, backoff = false, true, 0
		}
		if outstanding == 0 || joined {
			switch moved, unreachable := k.checkCoordinator(c); {
			case moved:
				k.report(fmt.Errorf("lightq: group %s of %s: the coordinator moved, joining the new one", k.opts.Group, k.topic))
				m.loseSession()
				rejoin = true
				continue
			case unreachable && !m.expired():
				if !k.memberRetry(c, fmt.Errorf("lightq: group %s of %s: the coordinator cannot be reached: %w", k.opts.Group, k.topic, ErrConnectionLost), &backoff) {
					return
				}
				continue
			}
		}
		switch {
		case outstanding == 0 || joined:
			send(c)
			joined, kicked = false, false
		case kicked && outstanding < 2:
			send(c) // reports the release; the broker answers the held one at once
			kicked = false
		}
		select {
		case <-m.ctx.Done():
			return
		case <-m.kick:
			kicked = true
		case r := <-results:
			outstanding--
			m.mu.Lock()
			stale := r.epoch != m.epoch
			m.mu.Unlock()
			if stale {
				continue // a heartbeat of a membership that ended
			}
			if r.err == nil {
				backoff = 0
				m.apply(r.resp.Generation, time.Duration(r.resp.HeartbeatIntervalMs)*time.Millisecond, r.resp.Partitions)
				continue
			}
			if m.ctx.Err() != nil {
				return
			}
			if errors.Is(r.err, &wire.Error{Code: wire.CodeUnknownMember}) || errors.Is(r.err, &wire.Error{Code: wire.CodeFencedMember}) || m.expired() ||
				isNotCoordinator(r.err) || k.coordinatorMoved(c, r.via, r.err) {
				k.report(fmt.Errorf("lightq: group %s of %s: membership lost, joining again: %w", k.opts.Group, k.topic, r.err))
				m.loseSession()
				rejoin = true
				continue
			}
			if outstanding == 0 && !k.memberRetry(c, fmt.Errorf("lightq: group %s of %s: HEARTBEAT: %w", k.opts.Group, k.topic, r.err), &backoff) {
				return
			}
		}
	}
}

// memberRetry handles a failed group request on c: it reports err and waits before the
// retry (a request made while the Conn reconnects waits for the new connection), returning
// false when the consumer ends or err is fatal (then the consumer fails with it): a refusal
// that retrying cannot help, or a Conn that gave up (closed, or a reconnect refused).
func (k *Consumer) memberRetry(c *Conn, err error, backoff *time.Duration) bool {
	var we *wire.Error
	retryable := errors.Is(err, ErrConnectionLost) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errNoCoordinator) ||
		errors.As(err, &we) && (we.Code == wire.CodeResourceLimit || we.Code == wire.CodeInternal || we.Code == wire.CodeUnknownMember ||
			we.Code == wire.CodeNotCoordinator || we.Code == wire.CodeReplicationTimeout)
	if !retryable || errors.Is(err, ErrClosed) || c.Err() != nil {
		if k.member.ctx.Err() == nil {
			k.enqueueFatal(nil, err)
		}
		return false
	}
	k.report(err)
	*backoff = min(max(2**backoff, 50*time.Millisecond), 2*time.Second)
	wait := *backoff
	if d := k.member.deadline(); !d.IsZero() {
		// Never past the local session deadline: the loss must be declared there (the
		// caller's next try finds the session expired), not a backoff later.
		wait = max(min(wait, time.Until(d)), 0)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-k.member.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// checkCoordinator looks the group's coordinator up again before a heartbeat goes out on a
// coordinator's Conn that is not connected (its broker may be gone, and the heartbeat would
// wait for it up to the session's end): moved, when FIND_COORDINATOR names another broker
// now; unreachable, when the coordinator stays where it was, or none is known.
func (k *Consumer) checkCoordinator(c *Conn) (moved, unreachable bool) {
	hc := c.groupConn(k.opts.Group)
	if hc == c {
		return false, false
	}
	if ok, _ := hc.Connected(); ok {
		return false, false
	}
	ctx, cancel := k.member.answerContext(c.opts.RequestTimeout) // not past the session deadline
	defer cancel()
	moved, err := c.refreshCoordinator(ctx, k.opts.Group)
	if moved && err == nil {
		return true, false
	}
	ok, _ := c.groupConn(k.opts.Group).Connected()
	return false, !ok
}

// coordinatorMoved reports, for a heartbeat that failed with err on via, that the group's
// coordinator moved: via was a coordinator's Conn, and the group is routed elsewhere now, or
// via's connection was lost and FIND_COORDINATOR names another broker now.
func (k *Consumer) coordinatorMoved(c, via *Conn, err error) bool {
	switch {
	case via == c:
		return false
	case c.groupConn(k.opts.Group) != via:
		return true // routed elsewhere meanwhile (via was closed: ErrClosed)
	case !errors.Is(err, ErrConnectionLost):
		return false
	}
	ctx, cancel := k.member.answerContext(c.opts.RequestTimeout) // not past the session deadline
	defer cancel()
	moved, ferr := c.refreshCoordinator(ctx, k.opts.Group)
	return moved && ferr == nil
}

// waitNothingOwned waits until the reconciler has dropped every partition.
func (k *Consumer) waitNothingOwned() bool {
	m := k.member
	for {
		m.mu.Lock()
		n := len(m.owned)
		m.mu.Unlock()
		if n == 0 {
			return true
		}
		select {
		case <-m.ctx.Done():
			return false
		case <-m.kick: // the reconciler released
		}
	}
}

// reconciler makes the consumed partitions follow the assignment.
func (k *Consumer) reconciler() {
	m := k.member
	defer m.wg.Done()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.changed:
		}
		_ = k.reconcile() // start failures are reported and the partitions let go
	}
}

// reconcile applies the latest assignment once: revocations first (stop, OnRevoke, commit,
// release), then additions. Runs on the reconciler (and once in newConsumer, before it
// starts). It returns the first error of a partition that could not be started (that
// partition is let go, for the broker to give again).
func (k *Consumer) reconcile() error {
	m := k.member
	m.mu.Lock()
	want, lost, owned := slices.Clone(m.want), m.lost, slices.Clone(m.owned)
	m.mu.Unlock()
	var revoke, add []int32
	for _, p := range owned {
		if !contains32(want, p) {
			revoke = append(revoke, int32(p))
		}
	}
	for _, p := range want {
		if !contains32(owned, p) {
			add = append(add, int32(p))
		}
	}
	if len(revoke) > 0 {
		k.revoke(revoke, lost)
		m.mu.Lock()
		m.owned = slices.DeleteFunc(m.owned, func(p uint32) bool { return slices.Contains(revoke, int32(p)) })
		m.mu.Unlock()
		signal(m.kick)
	}
	if len(add) == 0 || lost {
		return nil
	}
	m.mu.Lock()
	for _, p := range add {
		m.owned = append(m.owned, uint32(p))
	}
	slices.Sort(m.owned)
	m.mu.Unlock()
	ready := add[:0:0]
	var first error
	for _, id := range add {
		p := k.byID[id]
		if err := k.startPartition(p); err != nil {
			if first == nil {
				first = err
			}
			if m.ctx.Err() == nil {
				k.report(fmt.Errorf("lightq: group %s: %s partition %d: start: %w", k.opts.Group, k.topic, id, err))
			}
			// Not started: let it go, so that the broker may give it again (or to another).
			m.mu.Lock()
			m.owned = slices.DeleteFunc(m.owned, func(q uint32) bool { return q == uint32(id) })
			m.mu.Unlock()
			signal(m.kick)
			continue
		}
		ready = append(ready, id)
	}
	if len(ready) > 0 && k.opts.OnAssign != nil {
		starts := make(map[int32]int64, len(ready))
		for _, id := range ready {
			starts[id] = k.byID[id].pos.Load()
		}
		k.opts.OnAssign(starts)
	}
	for _, id := range ready {
		k.activate(k.byID[id])
	}
	return first
}

// startPartition resolves where a newly assigned partition starts: its committed offset (or
// Start). A partition lost with the membership (not committed) that comes back resumes at
// its position when nobody committed for it meanwhile: the records before it were
// delivered by this consumer, and those after it nobody committed.
func (k *Consumer) startPartition(p *partState) error {
	c := k.currentConn()
	ctx, cancel := c.withTimeout(k.member.ctx)
	defer cancel()
	if p.resumable.Swap(false) {
		off, err := c.FetchCommitted(ctx, wire.FetchCommitted{Group: k.opts.Group, Topic: k.topic, Partition: uint32(p.id)})
		if err != nil {
			p.resumable.Store(true)
			return err
		}
		if off == p.committed.Load() {
			p.hw.Store(-1)
			return nil
		}
	}
	p.committed.Store(-1)
	p.moved.Store(false)
	p.hw.Store(-1)
	start, err := k.resolveStart(ctx, c, p)
	if err != nil {
		return err
	}
	p.pos.Store(start)
	return nil
}

// revoke stops the partitions and, unless the membership was lost, commits them.
func (k *Consumer) revoke(ids []int32, lost bool) {
	parts := make([]*partState, len(ids))
	for i, id := range ids {
		parts[i] = k.byID[id]
		k.deactivate(parts[i])
	}
	k.stopDelivering(parts)
	for _, p := range parts {
		p.resumable.Store(lost)
	}
	var offsets map[int32]int64
	if k.opts.OnRevoke != nil {
		offsets = k.opts.OnRevoke(ids, lost)
	}
	if lost {
		return
	}
	if offsets == nil {
		offsets = make(map[int32]int64)
		for _, p := range parts {
			if pos := p.pos.Load(); p.moved.Load() && pos != p.committed.Load() {
				offsets[p.id] = pos
			}
		}
	}
	for id := range offsets {
		if !slices.Contains(ids, id) {
			delete(offsets, id)
		}
	}
	ctx, cancel := k.currentConn().withTimeout(k.member.ctx)
	defer cancel()
	if err := k.CommitOffsets(ctx, offsets); err != nil && k.member.ctx.Err() == nil {
		k.report(fmt.Errorf("lightq: group %s: commit of revoked partitions: %w", k.opts.Group, err))
	}
}

// stopDelivering makes Each deliver nothing more of parts: it waits until whoever holds
// consumeMu has applied the revocation between two records (or the consumer closes).
func (k *Consumer) stopDelivering(parts []*partState) {
	k.revokeMu.Lock()
	defer k.revokeMu.Unlock()
	done := make(chan struct{})
	k.revokeDone, k.revoking = done, parts
	k.revokeReq.Store(true)
	signal(k.signal) // a pop waiting for chunks re-checks
	if k.consumeMu.TryLock() {
		k.applyRevoke()
		k.consumeMu.Unlock()
	}
	select {
	case <-done:
	case <-k.closing:
	}
}

// applyRevoke applies a revocation stopDelivering asked for: the revoked partitions' queued
// chunks become stale (pop drops them), and the chunk Each is in is dropped when it is one
// of theirs; it reports whether it dropped it. Caller holds consumeMu.
func (k *Consumer) applyRevoke() bool {
	if !k.revokeReq.Load() {
		return false
	}
	k.mu.Lock()
	for _, p := range k.revoking {
		p.gen++
	}
	k.mu.Unlock()
	dropped := false
	if k.cur != nil && slices.Contains(k.revoking, k.cur.p) {
		ch := k.cur
		k.cur, k.itActive = nil, false
		k.recycle(ch)
		dropped = true
	}
	k.revoking = nil
	k.revokeReq.Store(false)
	close(k.revokeDone)
	return dropped
}

// closeMember ends the membership at Close the way a rebalance that takes every partition
// would: OnRevoke with the partitions the consumer holds (started, OnAssign called), then
// the offsets it returns committed (nil: the positions, unless AutoCommit is disabled, as
// Close always did), then LEAVE_GROUP, so the coordinator hands the partitions over at once
// instead of after the session timeout. When the membership is already lost (declared by
// the heartbeater, or the local session deadline passed, and not yet applied by the
// reconciler) OnRevoke is told so and nothing is committed: another member may hold the
// partitions. Close calls it after stopping the heartbeater, the reconciler and the
// fetchers, so nothing else calls OnRevoke or moves a position meanwhile (a handler
// running during Close may still finish one record). Everything it sends is bounded by one
// RequestTimeout: a broker that is gone costs Close that long, not the session timeout.
func (k *Consumer) closeMember() error {
	m := k.member
	m.mu.Lock()
	owned, lost := slices.Clone(m.owned), m.lost
	m.mu.Unlock()
	lost = lost || m.expired()
	var held []int32
	for _, id := range owned {
		if p := k.byID[int32(id)]; p != nil && p.active.Load() {
			held = append(held, p.id)
		}
	}
	var offsets map[int32]int64
	if len(held) > 0 && k.opts.OnRevoke != nil {
		offsets = k.opts.OnRevoke(held, lost)
	}
	switch {
	case lost:
		offsets = nil
	case offsets == nil && k.opts.AutoCommit > 0:
		offsets = make(map[int32]int64)
		for _, id := range held {
			if p := k.byID[id]; p.moved.Load() && p.pos.Load() != p.committed.Load() {
				offsets[id] = p.pos.Load()
			}
		}
	}
	for id := range offsets {
		if !slices.Contains(held, id) {
			delete(offsets, id) // as on a revocation: only what it holds
		}
	}
	return k.leave(offsets)
}

// leave commits offsets (partitions the consumer holds) and leaves the group, all within
// one RequestTimeout. A commit refused UNKNOWN_MEMBER means the membership ended unnoticed
// (a broker restart, or a session expiry while the connection was down): the consumer joins
// again and commits those of the offsets the join gives back, each only while the group's
// committed offset is still the one this consumer last stored (nobody else committed the
// partition meanwhile, so the records before the position were this consumer's to commit).
func (k *Consumer) leave(offsets map[int32]int64) error {
	c := k.currentConn()
	ctx, cancel := c.withTimeout(context.Background())
	defer cancel()
	err := k.CommitOffsets(ctx, offsets)
	if errors.Is(err, &wire.Error{Code: wire.CodeUnknownMember}) {
		if err = k.join(ctx, c); err == nil {
			k.member.mu.Lock()
			got := slices.Clone(k.member.want)
			k.member.mu.Unlock()
			again := make(map[int32]int64)
			for _, id := range got {
				off, ok := offsets[int32(id)]
				if !ok {
					continue
				}
				cur, ferr := c.FetchCommitted(ctx, wire.FetchCommitted{Group: k.opts.Group, Topic: k.topic, Partition: id})
				if ferr != nil {
					err = errors.Join(err, ferr)
					continue
				}
				if cur == k.byID[int32(id)].committed.Load() {
					again[int32(id)] = off
				}
			}
			err = errors.Join(err, k.CommitOffsets(ctx, again))
		}
	}
	req := wire.LeaveGroup{Group: k.opts.Group, Topic: k.topic, Member: k.member.id}
	if _, lerr := c.groupRoundTrip(ctx, k.opts.Group, wire.OpLeaveGroup, req.AppendTo(nil)); lerr != nil && !errors.Is(lerr, &wire.Error{Code: wire.CodeUnknownMember}) && err == nil {
		err = fmt.Errorf("lightq: leave group %s: %w", k.opts.Group, lerr)
	}
	return err
}

// MemberID is the consumer's member id in its group (zero without one), as DESCRIBE_GROUP
// shows it.
func (k *Consumer) MemberID() wire.MemberID {
	if k.member == nil {
		return wire.MemberID{}
	}
	return k.member.id
}

func contains32(ps []uint32, p uint32) bool {
	_, ok := slices.BinarySearch(ps, p)
	return ok
}

// awaitDropped waits, before fetchers start on a new connection, until a member whose local
// session deadline passed during the outage has dropped every partition (the heartbeater
// declares the loss at the deadline and the reconciler revokes without committing): the
// broker may have given them to another member. It polls (the kick channel is the
// heartbeater's) and reports false when the member stops.
func (k *Consumer) awaitDropped() bool {
	m := k.member
	if m == nil || !m.expired() {
		return true
	}
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		m.mu.Lock()
		n := len(m.owned)
		m.mu.Unlock()
		if n == 0 {
			return true
		}
		select {
		case <-m.ctx.Done():
			return false
		case <-t.C:
		}
	}
}
