// Command lqbench measures LightQ throughput and latency; `lqbench --help` explains. The logic
// is in internal/cli/lqbench.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/lightq/lightq/internal/cli/lqbench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := lqbench.Main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
