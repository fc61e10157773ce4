package flags

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
)

// CUDAChecksEnv is the variable go-xla v0.1.4 reads when it loads a CUDA plugin: unless it is
// set to something other than "", "1", "true" or "yes", go-xla appends
// --xla_gpu_cuda_data_dir=<a folder on its author's machine> to XLA_FLAGS when that flag is
// not already there.
const CUDAChecksEnv = "GOPJRT_CUDA_CHECKS"

// applyState serializes Apply and records the plugins created, for the whole process.
var applyState struct {
	sync.Mutex
	plugins []string // plugins that created a client, in order, as NotePluginCreated reported them
}

// Applied is what Apply changed in the process environment.
type Applied struct {
	// XLAFlags is the value XLA_FLAGS now holds.
	XLAFlags string
	// CUDAChecksOff is set when Apply set GOPJRT_CUDA_CHECKS=0, so that go-xla does not add
	// its own --xla_gpu_cuda_data_dir.
	CUDAChecksOff bool
}

// Apply sets this process's XLA_FLAGS to s (as Set.String renders it), for the plugins created
// after it. Call it once, after Resolve and before the first XLA backend is created: XLA reads
// XLA_FLAGS once per plugin, when the plugin's first client is created, and ignores later
// changes. A warning says so when NotePluginCreated reported a plugin already.
//
// Apply refuses a Set with tokenizing problems (Parse's error); it does not check flags against
// a build, which is Resolve's job. Unless s sets xla_gpu_cuda_data_dir, Apply also sets
// GOPJRT_CUDA_CHECKS=0 (when it is unset or empty): otherwise go-xla v0.1.4, loading a CUDA
// plugin, appends --xla_gpu_cuda_data_dir pointing at a folder of its author's machine. It
// warns instead when the variable explicitly enables those checks. Apply is safe to call from
// several goroutines; the last call wins.
func Apply(s Set) (Applied, []Problem, error) {
	if len(s.syntax) > 0 {
		return Applied{}, nil, Problems(s.syntax)
	}
	value := s.String()
	applyState.Lock()
	defer applyState.Unlock()
	var warnings []Problem
	if len(applyState.plugins) > 0 && value != os.Getenv(EnvVar) {
		warnings = append(warnings, Problem{Flag: EnvVar,
			Message: fmt.Sprintf("plugin %s was created before, and XLA read XLA_FLAGS then: the new flags reach only plugins created from now on",
				strings.Join(applyState.plugins, ", ")),
			Fix: "apply the flags before creating the first XLA backend"})
	}
	if err := os.Setenv(EnvVar, value); err != nil {
		return Applied{}, warnings, fmt.Errorf("setting %s: %w", EnvVar, err)
	}
	applied := Applied{XLAFlags: value}
	if _, ok := s.Lookup("xla_gpu_cuda_data_dir"); !ok {
		switch checks := os.Getenv(CUDAChecksEnv); {
		case checks == "":
			if err := os.Setenv(CUDAChecksEnv, "0"); err != nil {
				return applied, warnings, fmt.Errorf("setting %s: %w", CUDAChecksEnv, err)
			}
			applied.CUDAChecksOff = true
		case checks == "1" || strings.EqualFold(checks, "true") || strings.EqualFold(checks, "yes"):
			warnings = append(warnings, Problem{Flag: CUDAChecksEnv,
				Message: fmt.Sprintf("%s=%s lets go-xla append --xla_gpu_cuda_data_dir=<its author's folder> to XLA_FLAGS when it loads a CUDA plugin",
					CUDAChecksEnv, checks),
				Fix: "set --xla_gpu_cuda_data_dir=<your CUDA folder> yourself, or unset " + CUDAChecksEnv})
		}
	}
	return applied, warnings, nil
}

// NotePluginCreated records that a PJRT plugin (its name or path) created a client, and with
// it read XLA_FLAGS. platform calls it right after creating an XLA backend, so that a later Apply
// can warn that its flags come too late for that plugin.
func NotePluginCreated(plugin string) {
	applyState.Lock()
	defer applyState.Unlock()
	if !slices.Contains(applyState.plugins, plugin) {
		applyState.plugins = append(applyState.plugins, plugin)
	}
}

// PluginsCreated returns the plugins NotePluginCreated reported, in order.
func PluginsCreated() []string {
	applyState.Lock()
	defer applyState.Unlock()
	return slices.Clone(applyState.plugins)
}
