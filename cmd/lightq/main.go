// Command lightq is the LightQ broker. Run `lightq --help` for its flags; the defaults are
// embedded from default.conf. The logic is in internal/cli/lightq.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/lightq/lightq/internal/cli/lightq"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := lightq.Main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
