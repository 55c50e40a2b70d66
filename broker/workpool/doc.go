// Package workpool runs blocking jobs (argon2 checks, fsyncs, cold disk reads) on a fixed
// number of worker goroutines behind a bounded queue, so that event loops never block and a
// burst cannot pile up unbounded work.
//
// Concurrency rules:
//   - Submit never blocks: it queues the job or reports false (queue full, or pool closed).
//     That makes it safe to call from an event loop; the caller answers a refusal (the broker
//     answers RESOURCE_LIMIT) instead of waiting.
//   - Jobs run in no particular order relative to each other once more than one worker runs
//     them; a caller that needs order serialises its own jobs (the broker holds a connection
//     while its job runs).
//   - A job must not block on an event loop or call Close (Close waits for every job,
//     itself included). A job that panics crashes the process.
//   - Close stops accepting jobs, runs the queued ones and waits for all of them. It is
//     idempotent. Submit after Close returns false.
//
// Example:
//
//	pool := workpool.New(2, 256)
//	defer pool.Close()
//	if !pool.Submit(func() { result <- expensiveCheck() }) {
//		// answer "busy, retry"
//	}
package workpool
