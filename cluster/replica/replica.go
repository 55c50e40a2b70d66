package replica

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/cluster/transport"
)

// Storage is the replica's durable state: raft's read side plus the writes a Ready asks for.
// Append and SetHardState must be durable (per the partition's fsync policy) when they return.
type Storage interface {
	raft.Storage
	// Append stores entries, which are consecutive; any stored entries at or after
	// entries[0].Index are replaced (raft only replaces entries that were never committed).
	Append(entries []raftpb.Entry) error
	SetHardState(st raftpb.HardState) error
	ApplySnapshot(snap raftpb.Snapshot) error
}

// ConfStateSaver is a Storage that records the membership raft reports after applying a
// membership change (raftlog.Storage is one): InitialState returns it at the next start, and
// its snapshots carry it. The replica calls it for every membership change it applies.
type ConfStateSaver interface {
	SetConfState(cs raftpb.ConfState, index uint64) error
}

// AppendPreparer is a Storage that can write into a leader's new entries, before Append, the
// fields Append writes into them (raftlog.Storage.PrepareAppend), reporting false when it
// cannot; Append of those entries then only reads their bytes. With it, a leader sends its
// new entries to the followers before it stores them (Replica.sendFirst).
type AppendPreparer interface {
	PrepareAppend(entries []raftpb.Entry) bool
}

// Sender sends messages to peers; *transport.Transport is one. Send must not keep envs (the
// slice) after it returns: the replica reuses it. It may keep the messages.
type Sender interface {
	Send(node uint64, envs ...transport.Envelope) bool
}

// Config configures a Replica. ID, Group, Storage, Sender and Apply are required.
type Config struct {
	ID    uint64 // this broker's node id
	Group uint64 // the Raft group
	// Peers bootstraps a new group with these voters (this broker among them) when Storage
	// is empty; ignored otherwise.
	Peers   []uint64
	Storage Storage
	Sender  Sender
	// Apply receives each committed normal entry that carries data, in index order, on the
	// replica's goroutine. It must not block for long: it holds up the group.
	Apply func(e raftpb.Entry)
	// Applied is the last index Apply saw before a restart (entries up to it are not applied
	// again).
	Applied uint64

	Tick           time.Duration // default 100 ms
	ElectionTicks  int           // default 10: an election starts 1-2 s after the leader went quiet
	HeartbeatTicks int           // default 1
	MaxSizePerMsg  uint64        // bytes of entries per append message; default 1 MiB
	MaxInflight    int           // append messages in flight per follower; default 256
	// MaxUncommittedBytes bounds what a leader accepts beyond its commit index; past it,
	// Propose fails with ErrBusy. Default 64 MiB.
	MaxUncommittedBytes uint64
	Logger              raft.Logger // default: discard
	// ForwardProposals lets a follower take proposals: raft forwards them to the leader (the
	// metadata group, where any broker may propose). Without it (partitions), a follower's
	// Propose fails with *NotLeaderError. With it, no proposal is matched to its index: a
	// Proposal is done as soon as raft took it (appended on the leader, or sent toward it),
	// with Err nil and Index and Term zero, which says nothing about whether it will be
	// stored; the caller recognises its entries when they are applied. It still fails with
	// *NotLeaderError when no leader is known (raft drops the proposal, nothing is sent).
	ForwardProposals bool
	// Advanced, if set, is called on the replica's goroutine after each Ready was handled
	// (persisted, sent, applied), with the status the replica publishes then: the owner
	// follows the applied index (its high watermark) and the leadership there. It must not
	// block for long: it holds up the group.
	Advanced func(Status)
	// LostCommit, when not 0, says that this replica's log lost entries it had
	// acknowledged, up to this index (raftlog.Storage.LostCommit): until its log reaches it
	// again, it grants no votes, since a candidate it helped elect might lack entries a
	// quorum counted on its copy. (Its leader notices the loss and re-adds it: see
	// resetMember.)
	LostCommit uint64
	// Join starts a replica whose Storage is empty without bootstrapping a group (Peers is
	// ignored): a new member that a membership change (ProposeConfChange) adds to a running
	// group, which the leader then sends its log or a snapshot. Ignored when Storage is not
	// empty.
	Join bool
}

var (
	// ErrStopped: the replica stopped; a waiting proposal's outcome is unknown.
	ErrStopped = errors.New("replica stopped")
	// ErrReplaced: a later leader replaced the proposal's entry; it is not stored.
	ErrReplaced = errors.New("proposal replaced by a later leader; not stored")
	// ErrBusy: too many proposals waiting; not stored, retry later.
	ErrBusy = errors.New("replica busy; not stored")
	// ErrSnapshotCovered: a snapshot from the leader replaced this replica's log before the
	// proposal's entry was applied here, so the replica cannot tell whether it is stored.
	ErrSnapshotCovered = errors.New("a snapshot covered the proposal's index; outcome unknown")
	// ErrStaleChange: a membership change that would make a voter a learner, refused.
	// Nothing in LightQ demotes a voter: such a change comes from a view of the group older
	// than the group (a learner added by a mover that had not yet seen the member come back
	// as a voter), and applying it would take a vote from an up-to-date member.
	ErrStaleChange = errors.New("membership change from a stale view: it would make a voter a learner")
	// ErrAbandonSnapshot, from Storage.ApplySnapshot (wrapped), abandons the snapshot of the
	// Ready at hand: nothing of that Ready was persisted or sent, so the replica restarts
	// raft from its storage as after a crash before the Ready (safe in raft: what was never
	// persisted nor sent never happened), with its election timer running again and no
	// leader known. The leader, if alive, finds this follower still behind and sends a
	// snapshot again.
	ErrAbandonSnapshot = errors.New("snapshot abandoned")
)

// NotLeaderError is a proposal to a replica that is not the leader. Leader is the leader it
// knows, 0 when none (an election is under way). Nothing was stored.
type NotLeaderError struct{ Leader uint64 }

func (e *NotLeaderError) Error() string {
	if e.Leader == 0 {
		return "not the leader, and no leader is known (election in progress)"
	}
	return fmt.Sprintf("not the leader; node %d is", e.Leader)
}

// Proposal is one entry proposed to the group. Done is closed when the outcome is known;
// then Index and Term say where it is (Err nil), or Err says why it is not (or may not be)
// stored.
//
// A proposal made with ProposeNotify has no Done channel: its notify function is called
// instead, once, on the replica's goroutine.
type Proposal struct {
	Data  []byte
	Index uint64
	Term  uint64
	Err   error
	done  chan struct{}

	notify   func(*Proposal)
	wantTerm uint64 // ProposeNotify: the leader term the proposal is for; 0 any
}

// Done is closed once the proposal's outcome is known (nil for a ProposeNotify proposal).
func (p *Proposal) Done() <-chan struct{} { return p.done }

func (p *Proposal) finish(err error) {
	p.Err = err
	if p.notify != nil {
		p.notify(p)
		return
	}
	close(p.done)
}

// Status is a snapshot of the replica's view of its group.
type Status struct {
	Leader    uint64
	Term      uint64
	Commit    uint64
	Applied   uint64
	IsLeader  bool
	LastIndex uint64
	// TermStart is, on the leader, the index of the first entry of its term (the empty
	// entry raft appends on election): once Applied reaches it, every entry of earlier
	// terms is applied and every proposal of earlier terms settled. 0 when not leading.
	TermStart uint64
}

// Progress is the leader's view of one member's replication (raft's tracker.Progress).
type Progress struct {
	ID     uint64
	Match  uint64 // highest index known to be stored on the member
	Next   uint64 // next index the leader sends it
	State  string // "StateProbe", "StateReplicate" or "StateSnapshot"
	Active bool   // heard from within the last election timeout
	Voter  bool   // a voter (else a learner)
}

// Replica is one member of one Raft group. See the package doc.
type Replica struct {
	cfg Config
	rn  *raft.RawNode
	// heard is the highest term of the messages Step was handed (any goroutine), for a
	// storage waiting on the replica's goroutine to see a newer term or a campaign (Heard).
	heard atomic.Uint64

	inbox       chan raftpb.Message
	proposals   chan *Proposal
	confChanges chan confChange
	unreachable chan uint64
	progressReq chan chan []Progress
	ctl         chan func(*raft.RawNode)
	restarts    chan restartReq
	stop        chan struct{}
	stopped     chan struct{}
	stopOnce    sync.Once

	statusMu sync.Mutex
	status   Status
	closed   bool // set (under statusMu) before the loop fails what is queued

	// Owned by the loop goroutine.
	term uint64 // the term in which this replica leads, 0 when it does not
	// resets are the members this leader is re-adding because they lost entries they had
	// acknowledged: true once removed, waiting for the add (see resetMember).
	resets     map[uint64]bool
	voters     []uint64 // as of the last membership change applied (addBack)
	ticks      uint64
	termStart  uint64               // index of the first entry of term, once seen
	unassigned []*Proposal          // proposed in this term, index not yet seen in a Ready
	waiting    []*Proposal          // index known, waiting for that index to commit
	snapSent   []snapSent           // snapshots sent in this Ready, reported after Advance
	envs       []transport.Envelope // the one envelope of each Send, reused
}

// Start opens the replica's raft state from cfg.Storage (bootstrapping a new group from
// cfg.Peers when it is empty) and starts its goroutine.
func Start(cfg Config) (*Replica, error) {
	if cfg.ID == 0 || cfg.Storage == nil || cfg.Sender == nil || cfg.Apply == nil {
		return nil, errors.New("replica: ID, Storage, Sender and Apply are required")
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.ElectionTicks <= 0 {
		cfg.ElectionTicks = 10
	}
	if cfg.HeartbeatTicks <= 0 {
		cfg.HeartbeatTicks = 1
	}
	if cfg.MaxSizePerMsg == 0 {
		cfg.MaxSizePerMsg = 1 << 20
	}
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = 256
	}
	if cfg.MaxUncommittedBytes == 0 {
		cfg.MaxUncommittedBytes = 64 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = LogfLogger{}
	}
	rn, err := newRawNode(&cfg, cfg.Applied)
	if err != nil {
		return nil, err
	}
	if last, err := cfg.Storage.LastIndex(); err != nil {
		return nil, err
	} else if hs, _, err := cfg.Storage.InitialState(); err != nil {
		return nil, err
	} else if last == 0 && raft.IsEmptyHardState(hs) && !cfg.Join {
		if len(cfg.Peers) == 0 {
			return nil, fmt.Errorf("replica %d of group %d: empty storage and no peers to bootstrap", cfg.ID, cfg.Group)
		}
		peers := make([]raft.Peer, len(cfg.Peers))
		for i, id := range cfg.Peers {
			peers[i] = raft.Peer{ID: id}
		}
		if err := rn.Bootstrap(peers); err != nil {
			return nil, err
		}
	}
	r := &Replica{
		cfg:         cfg,
		rn:          rn,
		inbox:       make(chan raftpb.Message, 4096),
		proposals:   make(chan *Proposal, 1024),
		confChanges: make(chan confChange, 16),
		unreachable: make(chan uint64, 64),
		progressReq: make(chan chan []Progress),
		ctl:         make(chan func(*raft.RawNode), 16),
		restarts:    make(chan restartReq),
		stop:        make(chan struct{}),
		stopped:     make(chan struct{}),
	}
	go r.run()
	return r, nil
}

// newRawNode makes the replica's raft from cfg.Storage, applied up to applied.
func newRawNode(cfg *Config, applied uint64) (*raft.RawNode, error) {
	rc := &raft.Config{
		ID:                        cfg.ID,
		ElectionTick:              cfg.ElectionTicks,
		HeartbeatTick:             cfg.HeartbeatTicks,
		Storage:                   cfg.Storage,
		Applied:                   applied,
		MaxSizePerMsg:             cfg.MaxSizePerMsg,
		MaxInflightMsgs:           cfg.MaxInflight,
		MaxUncommittedEntriesSize: cfg.MaxUncommittedBytes,
		CheckQuorum:               true,
		PreVote:                   true,
		DisableProposalForwarding: !cfg.ForwardProposals,
		// A leader that applies its own removal steps down, so that the group elects one of
		// its members; otherwise it would go on leading a group it is no member of.
		StepDownOnRemoval: true,
		Logger:            cfg.Logger,
	}
	rn, err := raft.NewRawNode(rc)
	if err != nil {
		return nil, fmt.Errorf("replica %d of group %d: %w", cfg.ID, cfg.Group, err)
	}
	return rn, nil
}

// restartReq asks the loop to restart raft (Restart).
type restartReq struct {
	repair func() (lostCommit uint64, err error)
	done   chan error
}

// ErrRestarted ends the proposals waiting when the replica restarts its raft (Restart):
// their outcome is unknown, as after a leadership change.
var ErrRestarted = errors.New("replica: restarted to repair its log; the outcome is unknown")

// Restart stops this replica's raft between two Readies, runs repair, and starts raft again
// from the Storage, as Start does, applied up to what it had applied (at most the log's end
// after repair). repair may cut the Storage's log (a damaged batch found at run time: raft's
// in-memory log must not outlive it); it returns the commit index the replica had
// acknowledged beyond its log (Config.LostCommit), which makes it abstain from votes and its
// leader re-add it until its log holds those entries again. Proposals waiting end with
// ErrRestarted, and the replica restarts as a follower. A repair error stops the replica (it
// cannot know its log). Safe for concurrent use; it waits for the loop. Call it on a
// follower: a leader hands its leadership over first (TransferLeadership).
func (r *Replica) Restart(repair func() (uint64, error)) error {
	req := restartReq{repair: repair, done: make(chan error, 1)}
	select {
	case r.restarts <- req:
	case <-r.stopped:
		return ErrStopped
	}
	return <-req.done
}

// restart is Restart on the loop's goroutine; an error stops the loop.
func (r *Replica) restart(req restartReq) error {
	applied := r.rn.BasicStatus().Applied
	for _, p := range r.unassigned {
		p.finish(ErrRestarted)
	}
	for _, p := range r.waiting {
		p.finish(ErrRestarted)
	}
	r.unassigned, r.waiting = r.unassigned[:0], r.waiting[:0]
	lost, err := req.repair()
	if err != nil {
		return fmt.Errorf("repair: %w", err)
	}
	last, err := r.cfg.Storage.LastIndex()
	if err != nil {
		return err
	}
	hs, _, err := r.cfg.Storage.InitialState()
	if err != nil {
		return err
	}
	rn, err := newRawNode(&r.cfg, min(applied, last, hs.Commit))
	if err != nil {
		return err
	}
	r.rn = rn
	r.cfg.LostCommit = max(r.cfg.LostCommit, lost)
	r.term, r.termStart = 0, 0
	clear(r.resets)
	st := r.publishStatus()
	if r.cfg.Advanced != nil {
		r.cfg.Advanced(st)
	}
	return nil
}

// Step hands a message from a peer to the replica without blocking; it is dropped when the
// replica's inbox is full (raft resends).
func (r *Replica) Step(m raftpb.Message) {
	for h := r.heard.Load(); m.Term > h && !r.heard.CompareAndSwap(h, m.Term); {
		h = r.heard.Load()
	}
	select {
	case r.inbox <- m:
	default:
	}
}

// Heard reports the highest term of the messages handed to Step so far: above the term of a
// snapshot being installed, a newer leader or a campaign (a pre-vote carries the term it
// would start) is under way. Safe for concurrent use.
func (r *Replica) Heard() uint64 { return r.heard.Load() }

// ReportUnreachable tells raft a message to node was lost, so it probes instead of streaming.
func (r *Replica) ReportUnreachable(node uint64) {
	select {
	case r.unreachable <- node:
	default:
	}
}

// Propose asks the group to store data (which the replica keeps until Done). It fails at once
// with *NotLeaderError when this replica knows it does not lead (with Config.ForwardProposals:
// when it knows no leader), ErrBusy when too much is waiting, ErrStopped after Stop; otherwise
// the outcome comes through the proposal (see Config.ForwardProposals for what it means then).
func (r *Replica) Propose(data []byte) (*Proposal, error) {
	r.statusMu.Lock()
	defer r.statusMu.Unlock() // held over the send, so the loop's exit cannot miss p
	switch {
	case r.closed:
		return nil, ErrStopped
	case !r.status.IsLeader && (!r.cfg.ForwardProposals || r.status.Leader == 0):
		return nil, &NotLeaderError{Leader: r.status.Leader}
	}
	p := &Proposal{Data: data, done: make(chan struct{})}
	select {
	case r.proposals <- p:
		return p, nil
	default:
		return nil, ErrBusy
	}
}

// ProposeNotify proposes p.Data like Propose, for the leadership of term (0: whichever term
// the replica leads in when it takes the proposal): a proposal for a term the replica no
// longer leads in fails with *NotLeaderError, so that an owner that decided to propose from
// what it knew in one term never proposes in the next. The caller owns p (it may reuse it
// once notified); notify is called exactly once with p, on the replica's goroutine, when the
// outcome is known (p.Index, p.Term and p.Err as for Propose), unless ProposeNotify returns an
// error (the same immediate errors as Propose), in which case it is never called.
func (r *Replica) ProposeNotify(p *Proposal, term uint64, notify func(*Proposal)) error {
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	switch {
	case r.closed:
		return ErrStopped
	case !r.status.IsLeader || term != 0 && r.status.Term != term:
		return &NotLeaderError{Leader: r.status.Leader}
	}
	p.Index, p.Term, p.Err, p.done = 0, 0, nil, nil
	p.notify, p.wantTerm = notify, term
	select {
	case r.proposals <- p:
		return nil
	default:
		return ErrBusy
	}
}

// Progress returns the leader's view of every member's replication, nil when this replica
// does not lead or has stopped. It waits for the replica's goroutine (one loop turn): call
// it for status reports, not per request.
func (r *Replica) Progress() []Progress {
	req := make(chan []Progress, 1)
	select {
	case r.progressReq <- req:
	case <-r.stopped:
		return nil
	}
	select {
	case ps := <-req:
		return ps
	case <-r.stopped:
		return nil
	}
}

// confChange is a membership change on its way to the loop, which answers on done.
type confChange struct {
	cc   raftpb.ConfChangeV2
	done chan error
}

// ProposeConfChange asks the group to change its membership (a ConfChangeV2: one change, or
// several through joint consensus). It fails as Propose does (*NotLeaderError, ErrBusy,
// ErrStopped), and with ErrStaleChange for a change that adds as a learner a node that is a
// voter in the membership this replica applied; nil means raft took it (appended on the leader, or forwarded to it), not that
// it will be applied: raft turns a change proposed while another is pending into an empty
// entry, and a forward can be lost. The caller watches the membership the replica saves
// (ConfStateSaver) and proposes again if it does not change. It blocks until the replica's
// goroutine took it.
func (r *Replica) ProposeConfChange(cc raftpb.ConfChangeV2) error {
	req := confChange{cc: cc, done: make(chan error, 1)}
	r.statusMu.Lock()
	switch {
	case r.closed:
		r.statusMu.Unlock()
		return ErrStopped
	case !r.status.IsLeader && (!r.cfg.ForwardProposals || r.status.Leader == 0):
		leader := r.status.Leader // read under statusMu: publishStatus writes it
		r.statusMu.Unlock()
		return &NotLeaderError{Leader: leader}
	}
	select {
	case r.confChanges <- req:
	default:
		r.statusMu.Unlock()
		return ErrBusy
	}
	r.statusMu.Unlock() // after the send, so the loop's exit cannot miss req
	return <-req.done
}

// Campaign starts an election now (pre-vote first: followers that heard from a leader
// within an election timeout refuse it). It does not wait.
func (r *Replica) Campaign() {
	r.control(func(rn *raft.RawNode) { _ = rn.Campaign() }) // an error: no longer a member
}

// TransferLeadership asks this replica, when it leads, to hand the leadership to member to
// (once to's log has caught up, to campaigns at once and wins): a broker that shuts down
// cleanly, or moves leaders, does this first. It does not wait; proposals are refused while
// the transfer is under way (ErrBusy).
func (r *Replica) TransferLeadership(to uint64) {
	r.control(func(rn *raft.RawNode) { rn.TransferLeader(to) })
}

// control runs f on the replica's goroutine; it is dropped when too many are queued.
func (r *Replica) control(f func(*raft.RawNode)) {
	select {
	case r.ctl <- f:
	default:
	}
}

// Status is the replica's latest view, as of its last loop turn.
func (r *Replica) Status() Status {
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	return r.status
}

// Stop ends the replica's goroutine; waiting proposals end with ErrStopped.
func (r *Replica) Stop() {
	r.stopOnce.Do(func() { close(r.stop) })
	<-r.stopped
}

// snapSent is a snapshot message sent to a follower, and whether the transport took it.
type snapSent struct {
	to uint64
	ok bool
}
