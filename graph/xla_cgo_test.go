//go:build cgo && !noxla

package graph_test

import (
	"testing"

	"github.com/gomlx/gomlx/backends/xla"

	ograph "github.com/onegpu/onegpu/graph"
)

// TestXLABackendName: the name graph/ knows without linking XLA is the one GoMLX's XLA backend reports.
func TestXLABackendName(t *testing.T) {
	if ograph.XLABackendName != xla.BackendName {
		t.Errorf("ograph.XLABackendName = %q, GoMLX's XLA backend is %q", ograph.XLABackendName, xla.BackendName)
	}
	if !ograph.XLABuilt {
		t.Error("a cgo build says it has no XLA")
	}
}
