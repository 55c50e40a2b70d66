// Command blast: see package tools/internal/blast, which holds all of it.
package main

import (
	"os"

	"github.com/lightq/lightq/tools/internal/blast"
)

func main() {
	os.Exit(blast.Main(os.Args[1:], os.Stdout, os.Stderr))
}
