package partition

import (
	"errors"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/cluster/raftlog"
)

// The scrub and the repair of damage found at run time.
//
// A replica's log is checked at Open (the active segment, and the committed entries from the
// producer checkpoint on); the rest is read only when asked for. The scrub goroutine reads
// the sealed segments again at a bounded rate (Config.Scrub, shared by the partitions of a
// broker) and verifies every batch (raftlog.Storage.Scrub: CRC, raft index, term). Damage,
// found by the scrub or by a read raft makes (storage.Entries), is repaired from the other
// replicas: a leader first hands its leadership to the most advanced active follower; a
// follower restarts its raft with its log cut at the damaged entry
// (replica.Replica.Restart, raftlog.Storage.CutDamaged), so it lost entries it had
// acknowledged, and its leader removes it and adds it back (the lost-entries path of
// cluster/replica), which fills its log again from the leader's. A replica alone in its
// group cannot be repaired: the damage is logged and counted, and reads of it fail.

// ScrubRate is the bytes per second the scrubs of the partitions sharing it read together
// (a token bucket holding at most one second of reading). Safe for concurrent use.
type ScrubRate struct {
	mu    sync.Mutex
	rate  float64
	avail float64
	last  time.Time
}

// DefaultScrubBytesPerSecond is the broker's default scrub rate, for all its replicas
// together: a pass over 100 GiB of sealed segments takes about 3.5 hours.
const DefaultScrubBytesPerSecond = 8 << 20

// NewScrubRate returns a rate of bytesPerSecond (> 0) to share between partitions.
func NewScrubRate(bytesPerSecond int64) *ScrubRate {
	return &ScrubRate{rate: float64(max(bytesPerSecond, 1)), last: time.Now()}
}

// take grants up to n bytes of reading now; 0 when the bucket is empty.
func (r *ScrubRate) take(n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.avail = min(r.avail+now.Sub(r.last).Seconds()*r.rate, r.rate)
	r.last = now
	got := min(float64(n), r.avail)
	if got < 1 {
		return 0
	}
	r.avail -= got
	return int(got)
}

// debit takes back what a step read beyond what it was granted (a step reads at least one
// batch).
func (r *ScrubRate) debit(n int) {
	r.mu.Lock()
	r.avail -= float64(n)
	r.mu.Unlock()
}

const (
	scrubTick = 100 * time.Millisecond
	scrubStep = 256 << 10 // bytes per Scrub call (the Storage's mutex is held for one)
)

// scrub is the partition's scrub goroutine (Config.Scrub set), and the repairer of damage
// raft's reads meet (reported on p.damage), with or without the scrub.
func (p *Partition) scrub() {
	defer close(p.scrubDone)
	var tickC <-chan time.Time
	if p.cfg.Scrub != nil {
		t := time.NewTicker(scrubTick)
		defer t.Stop()
		tickC = t.C
	}
	for {
		select {
		case <-p.stop:
			return
		case ce := <-p.damage:
			p.repair(ce, FoundByRead)
		case <-tickC:
			p.scrubSome()
		}
	}
}

// scrubSome verifies what the rate grants now, and repairs what it finds.
func (p *Partition) scrubSome() {
	for range 64 {
		n := p.cfg.Scrub.take(scrubStep)
		if n == 0 {
			return
		}
		res, err := p.st.Scrub(n)
		p.scrubbed.Add(res.Bytes)
		if over := int(res.Bytes) - n; over > 0 {
			p.cfg.Scrub.debit(over)
		}
		var ce *raftlog.CorruptEntryError
		switch {
		case errors.As(err, &ce):
			p.logf("scrub: %v", ce)
			p.repair(ce, FoundByScrub)
			return
		case err != nil:
			p.logf("scrub: %v", err)
			return
		case res.Passed:
			p.scrubPasses.Add(1)
			return
		}
	}
}

// repair cuts this replica's log at the damaged entry ce, found by where (FoundByScrub,
// FoundByRead), and lets its peers fill it again (see the top of the file). It runs on the
// scrub goroutine; a repair that cannot be done now (no follower to hand the leadership to)
// is left to the next time the damage is met.
//
// A report can be stale: raft reads a damaged entry again while its repair runs (the leader
// waiting for its successor), and that second report reaches the scrub goroutine after the
// cut. The entry is then no longer in the log, and cutting there again would fail and stop
// the replica: such a report is dropped (here, and in the cut, where raft is stopped and the
// log cannot change), and what was queued during a repair is dropped after it.
func (p *Partition) repair(ce *raftlog.CorruptEntryError, where int) {
	if !p.holds(ce) {
		p.logf("entry %d (offset %d): damage reported again after its repair; the log now ends before it", ce.Index, ce.Offset)
		return
	}
	p.ct.found(where, ce)
	p.markDamage(nil)
	if st := p.rep.Status(); st.IsLeader {
		to := p.successor()
		if to == 0 {
			p.logf("entry %d is damaged (%v), and no active follower can take the leadership: not repaired", ce.Index, ce)
			return
		}
		p.logf("entry %d is damaged: handing the leadership to node %d before the log is cut", ce.Index, to)
		p.rep.TransferLeadership(to)
		wait := time.NewTimer(4 * time.Duration(p.electionTicks()) * p.tick())
		defer wait.Stop()
		tick := time.NewTicker(p.tick())
		defer tick.Stop()
		for p.rep.Status().IsLeader {
			select {
			case <-p.stop:
				return
			case <-wait.C:
				p.logf("entry %d is damaged, and node %d did not take the leadership: not repaired yet", ce.Index, to)
				return
			case <-tick.C:
			}
		}
	}
	p.logf("entry %d is damaged (%v): cutting the log there; the other replicas bring it back", ce.Index, ce)
	cut := false
	err := p.rep.Restart(func() (uint64, error) {
		if !p.holds(ce) {
			return p.st.LostCommit(), nil // cut since (raft truncated its tail): nothing to do
		}
		if err := p.st.CutDamaged(ce); err != nil {
			return 0, err
		}
		cut = true
		return p.st.LostCommit(), nil
	})
	if err != nil {
		p.logf("repairing entry %d: %v", ce.Index, err)
		return
	}
	select {
	case <-p.damage: // reported while it was repaired: the log it names is gone
	default:
	}
	if cut {
		p.ct.damageRepaired[where].Add(1)
	}
}

// holds reports whether the log still holds the entry and batch ce names.
func (p *Partition) holds(ce *raftlog.CorruptEntryError) bool {
	last, err := p.st.LastIndex()
	return err == nil && ce.Index <= last && ce.Offset < p.st.Log().NextOffset()
}

// successor is the active voter, other than this replica, with the highest match index; 0
// when none.
func (p *Partition) successor() uint64 {
	var best, match uint64
	for _, pr := range p.rep.Progress() {
		if pr.ID != p.cfg.NodeID && pr.Voter && pr.Active && (best == 0 || pr.Match > match) {
			best, match = pr.ID, pr.Match
		}
	}
	return best
}

func (p *Partition) tick() time.Duration {
	if p.cfg.Tick > 0 {
		return p.cfg.Tick
	}
	return 100 * time.Millisecond
}

func (p *Partition) electionTicks() int {
	if p.cfg.ElectionTicks > 0 {
		return p.cfg.ElectionTicks
	}
	return 10
}

// markDamage records ce as damage raft met (nil: the repair of what was recorded began),
// which the snapshots wait on. Any goroutine.
func (p *Partition) markDamage(ce *raftlog.CorruptEntryError) {
	p.damageMu.Lock()
	p.damageSeen = ce != nil
	p.damageMu.Unlock()
	if ce != nil {
		select {
		case p.damage <- ce:
		default: // one is queued: the repair goes back to it when it is met again
		}
	}
}

func (p *Partition) damagePending() bool {
	p.damageMu.Lock()
	defer p.damageMu.Unlock()
	return p.damageSeen
}

// Entries is raftlog's, but a damaged batch is reported for repair and answered
// raft.ErrCompacted: raft panics on any other error from its Storage, and for
// ErrCompacted a leader sends a snapshot instead (held back while the damage is repaired:
// see Snapshot), so the replica goes on until the repair. Runs on the replica's goroutine.
func (s *storage) Entries(lo, hi, maxSize uint64) ([]raftpb.Entry, error) {
	ents, err := s.Storage.Entries(lo, hi, maxSize)
	return ents, s.p.readError(err)
}

// Term is raftlog's (which answers from its leader epochs file where it can), with damage
// answered as Entries does.
func (s *storage) Term(i uint64) (uint64, error) {
	t, err := s.Storage.Term(i)
	return t, s.p.readError(err)
}

// readError reports damage among the errors of a raft read, and answers it ErrCompacted.
func (p *Partition) readError(err error) error {
	var ce *raftlog.CorruptEntryError
	if err == nil || !errors.As(err, &ce) {
		return err
	}
	p.logf("raft read a damaged entry: %v", ce)
	p.markDamage(ce)
	return raft.ErrCompacted
}
