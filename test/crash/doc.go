// Package crash holds black-box crash tests of the lightq binary (reliability plan D1): the
// real broker on a real disk is killed with SIGKILL while producers and a consumer run, then
// restarted, and a history verifier checks that nothing acknowledged was lost, corrupted,
// reordered or rewritten (verifier_test.go; selftest_test.go plants each violation in a fake
// log to prove the verifier catches it). The crash tests in crash_test.go build
// the binary themselves and are skipped with -short.
//
// Knobs (environment):
//
//	LIGHTQ_CRASH_CYCLES  kill -9 cycles over the three fsync modes together (default 24)
//	LIGHTQ_CRASH_SEED    seed of the test's random choices (default: the clock; always printed)
//	LIGHTQ_CRASH_RATE    messages a second per producer (default 1000)
//	LIGHTQ_CRASH_GEN     cycles sharing one data directory before a fresh one (default 10)
package crash
