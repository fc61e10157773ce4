//go:build !cgo

package pjrtprobe

import (
	"fmt"
	"os"
)

// RunChildIfAsked returns at once unless ChildEnv is set. When it is, it exits with status 3
// (the plugin cannot be loaded): this binary was built without cgo, which loading a PJRT plugin
// needs.
func RunChildIfAsked() {
	plugin, ok := os.LookupEnv(ChildEnv)
	if !ok {
		return
	}
	fmt.Fprintf(os.Stderr, "pjrtprobe: loading plugin %q: this binary was built without cgo, which loading a PJRT plugin needs: "+
		"rebuild with CGO_ENABLED=1\n", plugin)
	os.Exit(3)
}
