//go:build !cgo || noxla

package platform

import (
	"errors"
	"fmt"

	"github.com/gomlx/gomlx/backends"
)

// XLABuilt reports whether this binary can run XLA: it was built with cgo (and without the noxla
// tag, GoMLX's way to leave XLA out), which loading a PJRT plugin needs. Not this one: it runs
// on the embedded backend only.
const XLABuilt = false

// newXLA refuses: XLA is not in this binary.
func newXLA(s BackendSpec, _ XLAOptions) (backends.Backend, error) {
	return nil, fmt.Errorf("backend %q (from %s): %w", s, s.Source, errors.New(errNoXLA))
}
