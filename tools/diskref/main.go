// Command diskref: see package tools/internal/diskref, which holds all of it.
package main

import (
	"os"

	"github.com/lightq/lightq/tools/internal/diskref"
)

func main() {
	os.Exit(diskref.Main(os.Args[1:], os.Stdout, os.Stderr))
}
