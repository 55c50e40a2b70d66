// Package lqdump is the lqdump command: cmd/lqdump is a thin main around Main, which lists
// or verifies the segment files of one durable partition with the log package's Dump and
// Verify. It only reads the files; run it on a stopped broker's data, or on a copy.
//
// Main may run concurrently with itself; runs share nothing.
package lqdump

import (
	"flag"
	"fmt"
	"io"

	"github.com/lightq/lightq/internal/size"
	"github.com/lightq/lightq/internal/version"
	"github.com/lightq/lightq/log"
)

// Main is the whole of the lqdump command, so that it can be tested: it parses args,
// dumps or verifies one partition directory, and returns the exit code (0 fine, 1 corruption
// or an error reading, 2 bad usage).
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lqdump", flag.ContinueOnError)
	fs.SetOutput(stderr)
	verify := fs.Bool("verify", false, "check every batch's header and CRC instead of listing them")
	var maxBatch size.IntValue
	fs.Var(&maxBatch, "max-batch", "largest batch the broker accepts, bytes or with a unit: 4MiB (0: the default)")
	printVersion := fs.Bool("version", false, "print the version (module, VCS revision and time, Go) and exit")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: lqdump [-verify] [-max-batch N] <data dir>/topics/<topic>/<partition>\n       lqdump -version")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if *printVersion {
		fmt.Fprintln(stdout, version.String("lqdump"))
		return 0
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	dir := fs.Arg(0)
	if !*verify {
		if err := log.Dump(stdout, dir, nil, int(maxBatch)); err != nil {
			fmt.Fprintln(stderr, "lqdump:", err)
			return 1
		}
		return 0
	}
	problems, err := log.Verify(dir, nil, int(maxBatch))
	if err != nil {
		fmt.Fprintln(stderr, "lqdump:", err)
		return 1
	}
	for _, p := range problems {
		fmt.Fprintln(stdout, p.String())
	}
	if len(problems) > 0 {
		fmt.Fprintf(stderr, "lqdump: %d corrupt batches in %s\n", len(problems), dir)
		return 1
	}
	fmt.Fprintf(stdout, "%s: every batch verified\n", dir)
	return 0
}
