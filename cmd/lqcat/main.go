// Command lqcat is netcat for LightQ: produce, consume, list metadata and administer topics
// and consumer groups with kcat's flags. `lqcat --help` explains; the logic is in
// internal/cli/lqcat.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/lightq/lightq/internal/cli/lqcat"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := lqcat.Main(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
