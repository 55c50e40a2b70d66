// Package auth holds LightQ's credential handling: argon2id password hashes in PHC string
// form, a cache of successful verifications and login throttling. The bounded worker pool
// that runs the checks off the event loops is package workpool.
//
// An argon2id verification with DefaultParams costs about 100 ms of CPU, so it must never run
// on an event loop. The intended AUTH path (broker/login.go) is:
//
//	attempt, refusal := throttle.Admit(ip, user, time.Now()) // on the loop
//	if refusal != auth.Admitted { answer RESOURCE_LIMIT if refusal.Busy(), else TOO_MANY_ATTEMPTS }
//	ok := pool.Submit(func() {
//		if r := throttle.Evaluate(attempt, time.Now()); r != auth.Admitted {
//			throttle.Finish(attempt, auth.Unverified, time.Now()) // refused unhashed
//			...
//		}
//		if verifier.Check(user, u.Hash, password) { // may run argon2
//			throttle.Finish(attempt, auth.Succeeded, time.Now())
//		} else {
//			delay, blocked := throttle.Finish(attempt, auth.Failed, time.Now())
//			// answer AUTH_FAILED (TOO_MANY_ATTEMPTS if blocked) after delay: a timer, not a sleep
//		}
//	})
//	if !ok { throttle.Finish(attempt, auth.Unverified, time.Now()); answer RESOURCE_LIMIT }
//
// # Throttling policy
//
// Three things are throttled, each keyed so that one party's failures cost others as little
// as possible:
//
//   - An (address, user) pair is blocked after MaxFailures within Window, and its failures
//     are answered after a growing delay. This is the lockout, and it is per pair: one
//     service's typo behind a NAT blocks that service's user from that address, not the
//     admin or the other services there.
//   - An address is blocked after MaxAddrFailures (ten times the pair's) failures of any users:
//     a ceiling against spraying many users from one place, high enough that hammering one
//     user never reaches it.
//   - A user has a budget of UserBurst failures, refilled at one per UserRefill, counted
//     over all addresses: guesses against one account are limited however many connections
//     and addresses send them. Pairs that logged in within TrustFor are exempt from it.
//
// Why no hard per-user lockout: it would let anyone lock out a real user by guessing wrong on
// purpose, the classic denial of service of account lockouts (Active Directory's lockout
// threshold; OWASP's authentication cheat sheet recommends delays and source-aware limits
// instead). Kafka delays failed SASL answers (connection.failed.authentication.delay.ms) and
// caps connections per IP; Postgres has auth_delay; OpenSSH limits unauthenticated
// connections (MaxStartups) and penalises sources (PerSourcePenalties). None locks an
// account. Here the per-user limit is a rate, not a lock: it refills continuously, and the
// places a user is known to log in from (the pairs that succeeded recently, OWASP's "device
// cookie" idea keyed by address) keep working while strangers spend the budget. A new
// address of a user under attack does have to wait for the budget: that is the price of
// bounding distributed guessing, and the refusal says so.
//
// The decision is taken when an attempt is evaluated, on the worker, immediately before
// hashing, not only when it is queued: attempts queued behind the failures that block them
// are refused without being hashed. Attempts being verified count against every budget as
// if they will fail (Evaluate reserves, Finish settles), so parallel attempts cannot all pass
// a check none of them has failed yet, and a right password placed last in a burst of wrong
// ones is refused once the budget is used, whether or not it would match. A success of the
// Verifier's cache goes through the same Evaluate, so a cached password gives no way around
// a block. Attempts in flight are bounded in total, per address and per pair, and refused at
// once beyond (RESOURCE_LIMIT): an attacker hammering one user holds at most
// MaxPendingPerPair of its address's MaxPendingPerAddr, so another user there is admitted at
// once and verified behind at most a few attempts.
//
// Concurrency: Hash, Verify and the other functions are pure and safe for concurrent use.
// Verifier and Throttle are safe for concurrent use by any number of goroutines.
// Verifier.Check, Hash and Verify block for the length of an argon2 run (run them on a
// workpool.Pool); Verifier.CheckCached and all Throttle methods never block on I/O or
// hashing. Time is passed to Throttle by the caller, so tests run it under testing/synctest.
//
// Nothing in this package keeps a plaintext password: the Verifier cache is keyed by an
// HMAC-SHA256 under a random per-process key.
package auth
