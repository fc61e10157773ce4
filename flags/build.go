package flags

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Build names one build of XLA whose flags onegpu knows. Different builds accept different
// flags: a flag one build knows kills the process on another.
type Build string

// The builds onegpu has flag tables for.
const (
	// JAX0425 is jax 0.4.25, the build the 2024 tutorial ran on. Only Legacy2024 and `flags
	// check` use it: no plugin of that age works with go-xla.
	JAX0425 Build = "jax-0.4.25"
	// CPU083 is pjrt-cpu v0.83.3, the CPU plugin go-xla v0.1.4 installs (PJRT C API 0.83).
	CPU083 Build = "cpu-0.83"
	// CUDA011 is the CUDA plugin of jax 0.11.0 (jax-cuda13-pjrt). It is the default build.
	CUDA011 Build = "cuda-0.11"
	// CPU0115 is lammps-jax-pjrt-cpu 0.11.2, a CPU plugin built from the XLA of jaxlib 0.11.2
	// (PJRT C API 0.115): the CPU plugin onegpu's CI installs from PyPI. Its flag table was
	// derived from the plugin itself (flags/internal/plugintable), not from XLA's source.
	CPU0115 Build = "cpu-0.115"
	// Head is XLA's source tree on 2026-07-26, for reference: no plugin is built from it.
	Head Build = "head"
)

// Builds returns every build onegpu has a flag table for, oldest first.
func Builds() []Build {
	out := make([]Build, len(builds))
	for i, b := range builds {
		out[i] = b.build
	}
	return out
}

// ParseBuild returns the build called s, one of the names Builds returns.
func ParseBuild(s string) (Build, error) {
	if _, ok := infoOf(Build(s)); ok {
		return Build(s), nil
	}
	return "", fmt.Errorf("unknown XLA build %q: onegpu has flag tables for %s", s, buildList())
}

func buildList() string {
	names := make([]string, len(builds))
	for i, b := range builds {
		names[i] = string(b.build)
	}
	return strings.Join(names, ", ")
}

// String returns the build's name.
func (b Build) String() string { return string(b) }

// Describe says which XLA the build is, e.g. "jax 0.11.0's CUDA plugin (XLA 131bf41a)".
func (b Build) Describe() string {
	if info, ok := infoOf(b); ok {
		return info.description
	}
	return "unknown build " + string(b)
}

// Platform returns the PJRT platform of the build's plugin: "cuda", "cpu", or "source" for
// a build that is XLA's source tree rather than a plugin.
func (b Build) Platform() string {
	if info, ok := infoOf(b); ok {
		return info.platform
	}
	return ""
}

// CPU reports whether the build is a CPU plugin, whose compiler ignores XLA's GPU flags.
func (b Build) CPU() bool { return b.Platform() == "cpu" }

// PJRTVersion returns the PJRT C API version of the build's plugin; ok is false for builds
// whose plugin onegpu does not load.
func (b Build) PJRTVersion() (major, minor int, ok bool) {
	info, found := infoOf(b)
	if !found || info.pjrtMajor < 0 {
		return 0, 0, false
	}
	return info.pjrtMajor, info.pjrtMinor, true
}

// order returns the position of b among the builds, oldest first, or -1.
func (b Build) order() int {
	for i, info := range builds {
		if info.build == b {
			return i
		}
	}
	return -1
}

// BuildForPlugin returns the build of a loaded PJRT plugin from its platform name ("cuda",
// "gpu" or "cpu", as pjrt.Client.Platform or the plugin's name gives it) and its PJRT C API
// version (pjrt.Plugin.Version). Only versions onegpu has a table for are accepted: a plugin
// of another version may define other flags, and one unknown flag kills the process.
func BuildForPlugin(platform string, major, minor int) (Build, error) {
	p := strings.ToLower(platform)
	if p == "gpu" {
		p = "cuda"
	}
	var known []string
	for _, info := range builds {
		if info.pjrtMajor < 0 {
			continue
		}
		if info.platform == p && info.pjrtMajor == major && info.pjrtMinor == minor {
			return info.build, nil
		}
		known = append(known, fmt.Sprintf("%s %d.%d (%s)", info.platform, info.pjrtMajor, info.pjrtMinor, info.build))
	}
	return "", fmt.Errorf("no XLA flag table for a %q plugin with PJRT C API %d.%d: onegpu knows %s; "+
		"pass the closest build explicitly (onegpu flags --build B) if you accept that its flags may differ",
		platform, major, minor, strings.Join(known, ", "))
}

// Environment variables that name the PJRT plugin onegpu will load.
const (
	// PluginEnv names the plugin onegpu loads: a plugin name ("cuda", "cpu") or an absolute
	// path to its .so file.
	PluginEnv = "ONEGPU_PJRT_PLUGIN"
	// GoMLXBackendEnv is GoMLX's backend selection; "xla:<plugin>" names a PJRT plugin.
	GoMLXBackendEnv = "GOMLX_BACKEND"
)

// DefaultBuild returns the build whose flags onegpu checks when none is given, and why. It
// guesses the build from the plugin named by ONEGPU_PJRT_PLUGIN or GOMLX_BACKEND=xla:<plugin>
// without loading it: a plugin inside the lammps_jax_pjrt_cpu Python package is CPU0115;
// go-xla's CPU plugin ("cpu", or any other pjrt_c_api_cpu_plugin.so) is CPU083; a CUDA plugin is
// CUDA011. Anything else, or no plugin at all, gives CUDA011. Once a plugin is loaded,
// BuildForPlugin tells its build for sure.
func DefaultBuild() (Build, string) {
	plugin, from := configuredPlugin()
	if plugin == "" {
		return CUDA011, "no PJRT plugin configured (" + PluginEnv + ", " + GoMLXBackendEnv + "=xla:...): the default build"
	}
	base := strings.ToLower(filepath.Base(plugin))
	switch {
	case slices.Contains(strings.Split(filepath.ToSlash(filepath.Dir(plugin)), "/"), lammpsPackage):
		return CPU0115, fmt.Sprintf("%s names lammps-jax-pjrt-cpu's CPU plugin %q", from, plugin)
	case base == "cpu" || base == "pjrt_c_api_cpu_plugin.so":
		return CPU083, fmt.Sprintf("%s names go-xla's CPU plugin %q", from, plugin)
	case strings.Contains(base, "cuda") || base == "gpu":
		return CUDA011, fmt.Sprintf("%s names the CUDA plugin %q", from, plugin)
	}
	return CUDA011, fmt.Sprintf("%s names plugin %q, whose build onegpu cannot tell without loading it: the default build", from, plugin)
}

// lammpsPackage is the Python package of lammps-jax-pjrt-cpu, whose plugin file has the same
// name as go-xla's CPU plugin.
const lammpsPackage = "lammps_jax_pjrt_cpu"

// configuredPlugin returns the plugin named by the environment and the variable naming it.
func configuredPlugin() (plugin, from string) {
	if p := strings.TrimSpace(os.Getenv(PluginEnv)); p != "" {
		return p, PluginEnv
	}
	backend := strings.TrimSpace(os.Getenv(GoMLXBackendEnv))
	// GoMLX's config is "<backend>:<plugin>[,option...]"; its XLA backend answers to these names.
	for _, name := range []string{"xla:", "stablehlo:", "hlo:", "pjrt:"} {
		if rest, ok := strings.CutPrefix(backend, name); ok {
			plugin, _, _ = strings.Cut(rest, ",")
			return plugin, GoMLXBackendEnv
		}
	}
	return "", ""
}
