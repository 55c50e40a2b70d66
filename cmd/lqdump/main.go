// Command lqdump prints or verifies the segment files of one durable partition:
//
//	lqdump DIR            list segments and batches (offset, records, size, CRC, timestamps)
//	lqdump -verify DIR    check every batch of every segment; exit 1 if any is corrupt
//
// DIR is <data dir>/topics/<topic>/<partition>. It reads the files only; run it on a stopped
// broker's data, or on a copy. The logic is in internal/cli/lqdump.
package main

import (
	"os"

	"github.com/lightq/lightq/internal/cli/lqdump"
)

func main() {
	os.Exit(lqdump.Main(os.Args[1:], os.Stdout, os.Stderr))
}
