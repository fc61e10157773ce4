package hostengine

import (
	"fmt"
	"os"
	"strings"

	"github.com/gomlx/gomlx/backends"

	"github.com/onegpu/onegpu/platform"
)

// EnvPlugin names the XLA CPU PJRT plugin the host engine runs on when $ONEGPU_PJRT_PLUGIN is the
// device's (a CUDA plugin on a GPU machine); unset, $ONEGPU_PJRT_PLUGIN is used when it is a CPU
// plugin.
const EnvPlugin = "ONEGPU_HOST_PJRT_PLUGIN"

// Embedded is the embedded backend's spec the engine falls back to: sequential, as every onegpu
// program on the embedded backend (platform.DefaultEmbedded: GoMLX v0.26.0's parallel executor can
// deadlock).
const Embedded = "go"

// NewBackend returns the fastest host backend there is: an XLA CPU client of the plugin named by
// $ONEGPU_HOST_PJRT_PLUGIN, else by $ONEGPU_PJRT_PLUGIN when that plugin's devices are CPUs
// (multithreaded, vectorized updates), else the embedded backend. It returns the backend and its
// spec ("xla:/path" or "go"). A plugin named by $ONEGPU_HOST_PJRT_PLUGIN that cannot be loaded or
// is not a CPU plugin is an error; one of $ONEGPU_PJRT_PLUGIN that is not a CPU plugin falls back.
func NewBackend() (backends.Backend, string, error) {
	if path := os.Getenv(EnvPlugin); path != "" {
		b, err := cpuBackend(path)
		if err != nil {
			return nil, "", fmt.Errorf("$%s: %w", EnvPlugin, err)
		}
		return b, "xla:" + path, nil
	}
	if path := os.Getenv(platform.EnvPlugin); path != "" {
		if b, err := cpuBackend(path); err == nil {
			return b, "xla:" + path, nil
		}
	}
	b, err := platform.NewBackend(Embedded)
	return b, Embedded, err
}

// NewBackendFrom returns the backend of spec ("go", "go:OPTIONS" or "xla:/abs/path.so", which must
// be a CPU plugin), or NewBackend's for an empty spec.
func NewBackendFrom(spec string) (backends.Backend, string, error) {
	if spec == "" {
		return NewBackend()
	}
	if path, ok := strings.CutPrefix(spec, "xla:"); ok {
		b, err := cpuBackend(path)
		return b, spec, err
	}
	b, err := platform.NewBackend(spec)
	return b, spec, err
}

// cpuBackend loads the XLA plugin at path and checks that its devices are CPUs.
func cpuBackend(path string) (backends.Backend, error) {
	b, err := platform.NewBackend("xla:" + path)
	if err != nil {
		return nil, err
	}
	if d := b.DeviceDescription(0); !strings.HasPrefix(strings.ToLower(d), "cpu") {
		b.Finalize()
		return nil, fmt.Errorf("PJRT plugin %s runs on %q, not the CPU: name the XLA CPU plugin for the host update", path, d)
	}
	return b, nil
}
