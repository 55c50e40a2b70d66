// Package meta is the cluster's metadata: what every broker of a cluster agrees on, kept in
// one Raft group (Group) that every broker is a member of, and applied in the same order
// everywhere.
//
// # State
//
// State (state.go) holds the brokers (node id, client, TLS and cluster addresses, active or
// removing), the topics (kind, options, creator user, and per partition its Raft group and
// replicas, the preferred leader first), the users (password hash as the broker computed it,
// the admin role, roles on topics), and the coordinators of consumer groups. A State is
// immutable: applying a command makes a new one, sharing what did not change, which
// Store.State hands to any goroutine without a lock.
//
// # Commands
//
// Each change is a Command (command.go: AddBroker, DrainBroker, RemoveBroker, CreateTopic,
// DeleteTopic, SetReplicas, CreateUser, DeleteUser, SetPassword, Grant, Revoke,
// SetCoordinator; moves.go: FinishMove), encoded in a versioned binary layout and stored as one Raft entry (a
// format-2 batch of one record, so that the log is a cluster/raftlog segment log like a
// partition's). Apply (apply.go) checks every command again against the state of the moment
// it applies: a command that was valid when proposed and is not any more (the same topic
// created twice at once) is refused on every member alike and changes nothing. Every choice
// is the proposer's and travels in the command, never made at apply: CreateTopic carries the
// placement (Place, place.go: least-loaded brokers, leaders spread), its creation time, the
// password hash; only the partitions' group ids come from the state (a counter), which is the
// same everywhere. A command carries a random request id: its proposer recognises it when it
// applies it, and a command delivered twice (a duplicated forward) is applied once (the
// state remembers the last 1024 ids).
//
// # Moves
//
// Moving a partition's replicas (moves.go) takes two commands: SetReplicas gives it the new
// replicas and keeps the old ones in Partition.Previous while the partition's own Raft group
// changes its membership (its leader, on a broker, drives that), and FinishMove, proposed by
// that leader once the group's voters are the new replicas, ends it. Until then every broker
// of either list holds (or may hold) a replica: Assignments lists it, RemoveBroker refuses it,
// Place counts it. PlanDrain computes the moves that empty a drained broker. Partition.Moves
// counts moves, so that a broker opening a replica knows whether the replicas are still the
// voters the group was created with (it bootstraps) or not (it joins).
//
// # Proposals
//
// Store.Propose works on any member: the group forwards a follower's proposal to the leader
// (replica.Config.ForwardProposals), and Propose returns when this broker has applied the
// entry with its request id, with its result or its refusal, so the caller's next State has
// it. A proposal that its context ends first has an unknown outcome (ErrOutcomeUnknown): a
// forward lost on the way, or a leader that lost its leadership before the entry committed,
// means it is never applied, and nothing tells the proposer; it reads the state or proposes
// again.
//
// # Snapshots and the log
//
// The log is a raftlog.Storage (SyncEachAppend: a command is durable on a quorum when it is
// committed). Every Config.SnapshotEvery applied commands, and at every membership change,
// the member writes the whole state to its snapshot file and removes the log's whole segments
// behind it. raftlog's own snapshots name a log offset for a partition; this package keeps
// its state beside the log instead (cluster/smlog, shared with cluster/offsets, wraps the
// raftlog.Storage and writes the file: temporary file, fsync, rename, directory fsync):
// Snapshot returns the state snapshot, and a snapshot from the leader is saved, the log
// emptied, the state installed. At Open the member starts from its snapshot
// file and raft replays the committed entries after it; a member too far behind (restarted
// late, or new) receives the leader's snapshot and the entries after it.
//
// # Membership
//
// The group's voters are brokers (members.go). A cluster starts with Config.Peers; a broker
// added later starts its Store with Config.Join (an empty directory, no bootstrap), and a
// member adds it: AddBroker (its addresses, so the others' transports can reach it), then
// AddMember, which proposes raft's membership change until this member has applied it.
// RemoveMember takes a broker out. raft refuses a snapshot whose membership lacks its
// receiver, so each member snapshots as of every membership change it applies: the snapshot
// a new member receives holds it.
//
// A committed entry this broker cannot decode (a command of a newer release, damage) stops
// the applying for good (ErrStalled, Store.Err): skipping it would make this member's state
// differ from the others'. It keeps voting and storing the log. So a release that adds a
// command must not propose it before every member runs that release.
//
// # Concurrency
//
// Store's methods are safe from any goroutine. The replica's goroutine applies commands,
// installs snapshots and takes them; it publishes each State (atomic pointer) before it wakes
// the proposer and the Watch channel. Store.mu guards the waiting proposals, the Watch channel
// and the stalled error; nothing is called while it is held.
//
// # Example
//
//	st, err := meta.Open(meta.Config{Dir: filepath.Join(dataDir, "cluster-meta"), NodeID: id,
//		Peers: []uint64{1, 2, 3}, Sender: tr})
//	if err != nil { ... }
//	router.Add(meta.Group, st.Replica())
//	pl, err := meta.Place(st.State(), 3, 3)
//	res, err := st.Propose(ctx, &meta.CreateTopic{Name: "orders", Kind: wire.KindDurable,
//		CreatedAt: time.Now().UnixMilli(), Placement: pl})
//	// errors.Is(err, meta.ErrTopicExists): another broker created it first.
//	// res.Groups: the partitions' Raft groups; st.State() has the topic.
//	for { ch := st.Watch(); reconcile(st.State().Assignments(id)); <-ch }
package meta
