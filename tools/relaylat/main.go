// Command relaylat: see package tools/internal/relaylat, which holds all of it.
package main

import (
	"os"

	"github.com/lightq/lightq/tools/internal/relaylat"
)

func main() {
	os.Exit(relaylat.Main(os.Args[1:], os.Stdout, os.Stderr))
}
