//go:build !cgo || noxla

package platform_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/platform"
)

// TestXLANeedsCgo: a binary built without cgo runs the embedded backend and, asked for XLA, says
// that XLA needs a cgo build and how to get one.
func TestXLANeedsCgo(t *testing.T) {
	if platform.XLABuilt {
		t.Fatal("a build without cgo says it has XLA")
	}
	plugin := filepath.Join(t.TempDir(), "pjrt_c_api_cpu_plugin.so")
	if err := os.WriteFile(plugin, []byte("\x7fELF not really"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := platform.NewBackend("xla:" + plugin)
	if err == nil || !strings.Contains(err.Error(), "built without cgo") || !strings.Contains(err.Error(), "CGO_ENABLED=1") {
		t.Errorf("NewBackend(xla) without cgo: %v, want an error saying XLA needs a cgo build", err)
	}
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	b, err := platform.NewBackend("")
	if err != nil || b.Name() == platform.XLABackendName {
		t.Errorf("the default backend without cgo: %v, %v; want the embedded one", b, err)
	}
}
