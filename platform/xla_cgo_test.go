//go:build cgo && !noxla

package platform_test

import (
	"testing"

	"github.com/gomlx/gomlx/backends/xla"

	"github.com/onegpu/onegpu/platform"
)

// TestXLABackendName: the name platform knows without linking XLA is the one GoMLX's XLA backend reports.
func TestXLABackendName(t *testing.T) {
	if platform.XLABackendName != xla.BackendName {
		t.Errorf("platform.XLABackendName = %q, GoMLX's XLA backend is %q", platform.XLABackendName, xla.BackendName)
	}
	if !platform.XLABuilt {
		t.Error("a cgo build says it has no XLA")
	}
}
