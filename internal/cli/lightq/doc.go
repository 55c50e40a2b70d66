// Package lightq is the lightq broker command: cmd/lightq is a thin main around Main, which
// takes its arguments, environment, stdout and stderr as parameters so that tests run the
// command in-process against a real broker (run_test.go) as well as the built binary
// (binary_test.go).
//
// Files: run.go (Main: flags, serve, shutdown), config.go (the embedded default.conf, the
// layering of --config file, $LIGHTQ_* and flags, and the broker.Config built from it),
// procs.go (GOMAXPROCS: one P per event loop on top of one per CPU, and why).
package lightq
