// Command lqbench measures LightQ throughput and latency; `lqbench --help` explains.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/lightq/lightq/tools/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(bench.Main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}
