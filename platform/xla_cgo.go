//go:build cgo && !noxla

package platform

import (
	"fmt"
	"os"

	"github.com/gomlx/go-xla/pkg/pjrt"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/xla"

	"github.com/onegpu/onegpu/flags"
)

// XLABuilt reports whether this binary can run XLA: it was built with cgo (and without the noxla
// tag, GoMLX's way to leave XLA out), which loading a PJRT plugin needs.
const XLABuilt = true

// minPJRTMinor is the oldest PJRT C API minor version known to work with go-xla v0.1.4 (built
// against 0.83): xla-cpu-pjrt 0.0.1 reports 0.81 and runs onegpu's graphs; lammps-jax-pjrt-cpu
// 0.11.2 reports 0.115.
const minPJRTMinor = 81

// newXLA creates an XLA backend from s.Plugin in the only order that cannot kill the process:
// read the user's $XLA_FLAGS, load the plugin (no flag is parsed yet), check its PJRT version,
// validate the merged flags against the plugin's build, set XLA_FLAGS, and only then create the
// client, which is when XLA parses them.
func newXLA(s BackendSpec, o XLAOptions) (backends.Backend, error) {
	xla.EnableAutoInstall(false) // never reach the network from a library call
	user, err := flags.Environment()
	if err != nil {
		return nil, fmt.Errorf("$%s: %w", flags.EnvVar, err)
	}
	if os.Getenv(flags.CUDAChecksEnv) == "" {
		// go-xla v0.1.4 would otherwise append its author's --xla_gpu_cuda_data_dir on load.
		os.Setenv(flags.CUDAChecksEnv, "0")
	}
	plugin, err := pjrt.GetPlugin(s.Plugin)
	if err != nil {
		return nil, fmt.Errorf("PJRT plugin %q cannot be loaded: %w", s.Plugin, err)
	}
	major, minor := plugin.Version()
	if major != 0 || minor < minPJRTMinor {
		return nil, fmt.Errorf("PJRT plugin %q implements PJRT C API %d.%d; onegpu (go-xla v0.1.4, API 0.83) "+
			"needs 0.%d or newer: install a newer plugin (pip install lammps-jax-pjrt-cpu==0.11.2 for CPU)",
			s.Plugin, major, minor, minPJRTMinor)
	}
	build, err := pluginBuild(s.Plugin, major, minor)
	if err != nil {
		if o.Build == "" && (user.Len() > 0 || len(o.Presets) > 0) {
			return nil, fmt.Errorf("%w; its XLA flags cannot be validated: name the closest build explicitly or clear $%s",
				err, flags.EnvVar)
		}
		build = o.Build
	}
	set := user
	if build != "" {
		var warnings []flags.Problem
		set, warnings, err = flags.Resolve(build, user, o.Presets...)
		if err != nil {
			return nil, fmt.Errorf("XLA_FLAGS for plugin %q (build %s): %w", s.Plugin, build, err)
		}
		logProblems(warnings)
	}
	_, warnings, err := flags.Apply(set)
	if err != nil {
		return nil, err
	}
	logProblems(warnings)
	var options map[string]any
	if o.Client != (flags.ClientOptions{}) {
		if options, err = o.Client.NamedValues(build); err != nil {
			return nil, fmt.Errorf("PJRT client options for plugin %q: %w", s.Plugin, err)
		}
	}
	b, err := xla.NewWithOptions(s.Plugin, options)
	if err != nil {
		return nil, fmt.Errorf("XLA backend with plugin %q: %w", s.Plugin, err)
	}
	flags.NotePluginCreated(s.Plugin)
	return b, nil
}
