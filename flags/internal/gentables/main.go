// Command gentables regenerates flags/tables_gen.go from the flag tables in flags/tables.
// It runs through `go generate ./flags/`.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/onegpu/onegpu/flags/internal/tablegen"
)

func main() {
	in := flag.String("in", "tables", "folder holding builds.tsv, custom.tsv and the per-build tables")
	out := flag.String("out", "tables_gen.go", "Go file to write")
	flag.Parse()
	src, err := tablegen.Generate(os.DirFS(*in))
	if err != nil {
		fmt.Fprintln(os.Stderr, "gentables:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, src, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gentables:", err)
		os.Exit(1)
	}
}
