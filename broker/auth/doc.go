// Package auth holds LightQ's credential handling: argon2id password hashes in PHC string
// form, a cache of successful verifications and per-address login throttling. The bounded
// worker pool that runs the checks off the event loops is package workpool.
//
// An argon2id verification with DefaultParams costs about 100 ms of CPU, so it must never run
// on an event loop. The intended AUTH path is:
//
//	if throttle.Blocked(ip, time.Now()) { answer AUTH_FAILED; return }
//	ok := pool.Submit(func() {
//		good := verifier.Check(user, u.Hash, password) // may run argon2
//		if good {
//			throttle.Success(ip)
//		} else {
//			delay := throttle.Failure(ip, time.Now())
//			// answer AUTH_FAILED after delay (a timer, not a sleep on the loop)
//		}
//		// hand the result back to the connection's event loop
//	})
//	if !ok { answer RESOURCE_LIMIT (retry later) }
//
// Concurrency: Hash, Verify and the other functions are pure and safe for concurrent use.
// Verifier and Throttle are safe for concurrent use by any number of goroutines.
// Verifier.Check, Hash and Verify block for the length of an argon2 run (run them on a
// workpool.Pool); all Throttle methods never block on I/O or hashing.
//
// Nothing in this package keeps a plaintext password: the Verifier cache is keyed by an
// HMAC-SHA256 under a random per-process key.
package auth
