package testkit

import (
	"os"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/backends"

	"github.com/onegpu/onegpu/flags"
	"github.com/onegpu/onegpu/platform"
)

// Embedded returns the embedded backend in onegpu's default (sequential) mode, shared by a test binary.
var Embedded = sync.OnceValue(func() backends.Backend {
	b, err := platform.NewBackend("go")
	if err != nil {
		panic(err)
	}
	return b
})

// XLA returns XLA with the plugin named by $ONEGPU_PJRT_PLUGIN, or nil when none is named or the
// test binary was built without cgo (XLA's plugins load through cgo). XLA is created to dump the
// optimized HLO of the modules named census_* (see CompiledCensus); XLA reads its flags once per
// process, so this is the first XLA backend a test binary creates.
var XLA = sync.OnceValue(func() backends.Backend {
	plugin := os.Getenv(platform.EnvPlugin)
	if plugin == "" || !platform.XLABuilt {
		return nil
	}
	spec, err := platform.ResolveBackend("xla:" + plugin)
	if err != nil {
		panic(err)
	}
	b, err := platform.NewBackendWithOptions(spec, platform.XLAOptions{Presets: []flags.Preset{censusDump()}})
	if err != nil {
		panic(err)
	}
	return b
})

// All returns the embedded backend and, when a PJRT plugin is configured, XLA.
func All() []backends.Backend {
	if b := XLA(); b != nil {
		return []backends.Backend{Embedded(), b}
	}
	return []backends.Backend{Embedded()}
}

// ByName returns the embedded backend as "go" and, when a PJRT plugin is configured, XLA as "xla";
// without a plugin it logs that XLA is not tested.
func ByName(t testing.TB) map[string]backends.Backend {
	bs := map[string]backends.Backend{"go": Embedded()}
	if b := XLA(); b != nil {
		bs["xla"] = b
	} else {
		t.Logf("no PJRT plugin configured ($%s): XLA is not tested", platform.EnvPlugin)
	}
	return bs
}

// RequireXLA returns XLA's backend or skips the test, saying how to get a plugin.
func RequireXLA(t testing.TB) backends.Backend {
	t.Helper()
	b := XLA()
	switch {
	case b != nil:
	case !platform.XLABuilt:
		t.Skipf("needs XLA, which this test binary was built without (no cgo): run the tests with CGO_ENABLED=1")
	default:
		t.Skipf("needs an XLA PJRT plugin: set $%s=/abs/path/pjrt_c_api_cpu_plugin.so (pip install lammps-jax-pjrt-cpu)", platform.EnvPlugin)
	}
	return b
}

// XLAPlugin returns the plugin $ONEGPU_PJRT_PLUGIN names for tests that create their own XLA
// backend (several devices, client options), or skips the test.
func XLAPlugin(t testing.TB) string {
	t.Helper()
	RequireXLA(t)
	return os.Getenv(platform.EnvPlugin)
}
