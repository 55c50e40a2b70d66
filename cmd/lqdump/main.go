// Command lqdump prints or verifies the segment files of one durable partition:
//
//	lqdump DIR            list segments and batches (offset, records, size, CRC, timestamps)
//	lqdump -verify DIR    check every batch of every segment; exit 1 if any is corrupt
//
// DIR is <data dir>/topics/<topic>/<partition>. It reads the files only; run it on a stopped
// broker's data, or on a copy.
package main

import (
	"os"

	"github.com/lightq/lightq/log"
)

func main() {
	os.Exit(log.DumpMain(os.Args[1:], os.Stdout, os.Stderr))
}
