// Package group is the broker's consumer group coordinator: the state machine behind
// JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, GROUP_COMMIT's fencing check, LIST_GROUPS and
// DESCRIBE_GROUP (PROTOCOL.md section 10.1). It knows no network and no storage: the broker
// hands it decoded requests and gets answers back, immediately or, for a heartbeat the
// coordinator holds (long poll), later through a Waiter. Committed offsets are not here; they
// stay in the topic's offset log.
//
// # Model
//
// A group is (topic, name). For each partition it keeps a target (the member that should
// have it, from the sticky balanced assignment of assign.go) and a holder (the member the
// broker let process it). A partition whose target moves away from its holder is revoking:
// the holder no longer gets it in its answers, but still holds it, and may commit it, until
// it releases it (a heartbeat, trusted only when it reports a generation at least the one of
// the answer that revoked it, no longer owns it) or is removed (leave, session expiry,
// fencing). Only then does the partition go to its target, in a new generation. So:
//
//   - a partition has at most one holder, and a member is told a partition only while it
//     holds it: no two members are ever told the same partition at once;
//   - GROUP_COMMIT is accepted from the holder only, with a generation at least the one in
//     which it got the partition; every hand-over draws a new generation, so each
//     (partition, generation) has at most one member whose commits are accepted.
//
// A group may be withheld (Withhold): for a while no partition gets a holder, though members
// join and heartbeat. A cluster member withholds the groups it takes over as a new
// coordinator, for as long as the previous coordinator's members may still process their
// partitions (their session timeout), since it does not know who they are; a broker without
// a cluster withholds every group at start (WithholdAll), for the same reason, for the
// longest session its previous run may have granted. A request may
// carry a Guard, checked under the mutex, that refuses it when the broker no longer
// coordinates the group.
//
// Generations come from one counter for the whole coordinator, so they never repeat while
// the broker runs, even for a group that lost its last member and was forgotten.
//
// # Time
//
// Session expiry and the end of held heartbeats are driven by one timer (time.AfterFunc on
// the earliest deadline of a heap of members), so an idle coordinator costs nothing. The
// current time comes from Config.Now (time.Now by default); the tests drive the timer inside
// testing/synctest bubbles, and table tests call Tick with their own clock.
//
// # Concurrency
//
// Every method is safe for concurrent use. One mutex guards all groups; requests are O(the
// topic's partitions + the group's members) under it. Waiters are called after the mutex
// is released, from the goroutine of whichever request or timer answered the heartbeat,
// at most once each; they must not block (the broker's queues the answer on the
// connection's loop). The coordinator calls nothing else outside the package.
//
// Example (the broker's use, simplified):
//
//	co := group.New(group.DefaultConfig())
//	ans := co.Join(group.JoinRequest{Topic: "audit", Group: "billing", Member: id, Partitions: 8})
//	ans, park := co.Heartbeat(group.HeartbeatRequest{...}, func(a group.Answer) { /* answer later */ })
//	if park != nil { /* held: at close, co.Unpark(park) */ }
//	err := co.CheckCommit("audit", "billing", id, ans.Generation, 3)
package group
