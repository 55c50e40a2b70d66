// Package crash holds black-box crash tests of the lightq binary (reliability plan D1): the
// real broker on a real disk is killed with SIGKILL while producers and a consumer run, then
// restarted, and a history verifier checks that nothing acknowledged was lost, corrupted,
// reordered or rewritten (verifier_test.go; selftest_test.go plants each violation in a fake
// log to prove the verifier catches it). The crash tests in crash_test.go build
// the binary themselves and are skipped with -short.
//
// The producers never dial again by hand: each lives through all the cycles of its data
// directory on one reconnecting client.Conn, through a proxy (internal/proxytest) that
// forwards to whichever broker runs now, and the client re-sends what the kill left
// unacknowledged. After each restart the producers are flushed, so that every message has
// its outcome, and the whole topic is read back. Each mode, and the test, ends with
//
//	crash: cycles=N acked=N lost=N duplicated=N unknown=N
//
// lost: acknowledged messages not found at the offset their acknowledgement names (must be
// 0); duplicated: messages stored more than once (must be 0: the client's producer is
// idempotent, and requireNoDuplicates, in verifier_test.go, makes them a violation);
// unknown: messages the client failed as "may have been stored". lqcat_test.go runs lqcat -P
// from a pipe through a kill -9 and a SIGTERM of the real binary.
//
// Knobs (environment):
//
//	LIGHTQ_CRASH_CYCLES  kill -9 cycles over the three fsync modes together (default 24)
//	LIGHTQ_CRASH_SEED    seed of the test's random choices (default: the clock; always printed)
//	LIGHTQ_CRASH_RATE    messages a second per producer (default 1000)
//	LIGHTQ_CRASH_GEN     cycles sharing one data directory before a fresh one (default 10)
package crash
