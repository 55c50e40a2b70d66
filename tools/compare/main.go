// Command compare runs LightQ and NATS side by side (`make compare`; `go run ./tools/compare
// -h` lists the flags); see package tools/internal/compare, which holds all of it.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/lightq/lightq/tools/internal/compare"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := compare.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
