package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/onegpu/onegpu/flags"
	"github.com/onegpu/onegpu/platform"
)

func init() {
	register(command{
		name:    "env",
		summary: "show the Go runtime, the backend onegpu would use and why, and the relevant environment",
		run:     func(args []string) error { return runEnv(args, os.Stdout) },
	})
}

// envVars are the environment variables that change what onegpu does.
var envVars = []string{platform.EnvBackend, platform.EnvPlugin, flags.EnvVar, "GOMLX_NO_AUTO_INSTALL",
	"PJRT_PLUGIN_LIBRARY_PATH", flags.CUDAChecksEnv, "TF_CPP_MIN_LOG_LEVEL", "GOGC", "GOMEMLIMIT", "GOMAXPROCS"}

type envReport struct {
	GoVersion   string            `json:"go_version"`
	Platform    string            `json:"platform"`
	CPUs        int               `json:"cpus"`
	Backend     string            `json:"backend"`
	BackendWhy  string            `json:"backend_why"`
	BackendErr  string            `json:"backend_error,omitempty"`
	Plugin      string            `json:"plugin,omitempty"`
	PipPlugin   string            `json:"pip_cpu_plugin,omitempty"`
	XLABuild    string            `json:"xla_build"`
	XLAFlagsErr string            `json:"xla_flags_error,omitempty"`
	Environment map[string]string `json:"environment"`
}

func runEnv(args []string, w io.Writer) error {
	fs := newFlagSet("env", "[--json]")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	r := envReport{GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH,
		CPUs: runtime.NumCPU(), Environment: map[string]string{}}
	for _, name := range envVars {
		if v, ok := os.LookupEnv(name); ok {
			r.Environment[name] = v
		}
	}
	spec, err := platform.ResolveBackend("")
	if err != nil {
		r.BackendErr = err.Error()
	} else {
		r.Backend, r.BackendWhy = spec.String(), describeBackendChoice(spec)
		r.Plugin = spec.Plugin
	}
	r.PipPlugin = findPipCPUPlugin()
	build, why := flags.DefaultBuild()
	r.XLABuild = fmt.Sprintf("%s (%s)", build, why)
	if user, err := flags.Environment(); err != nil {
		r.XLAFlagsErr = err.Error()
	} else if _, err := user.Check(build); err != nil {
		r.XLAFlagsErr = err.Error()
	}
	if *asJSON {
		return writeJSON(w, r)
	}
	fmt.Fprintf(w, "go:        %s %s, %d CPUs\n", r.GoVersion, r.Platform, r.CPUs)
	if r.BackendErr != "" {
		fmt.Fprintf(w, "backend:   error: %s\n", r.BackendErr)
	} else {
		fmt.Fprintf(w, "backend:   %s\n           %s\n", r.Backend, r.BackendWhy)
	}
	switch {
	case r.PipPlugin != "":
		fmt.Fprintf(w, "cpu xla:   pip package lammps-jax-pjrt-cpu installed: %s\n           use it with --backend xla:%s\n", r.PipPlugin, r.PipPlugin)
	default:
		fmt.Fprintf(w, "cpu xla:   no PJRT plugin found for python3 (optional: pip install lammps-jax-pjrt-cpu==%s)\n", cpuPluginVersion)
	}
	fmt.Fprintf(w, "xla flags: checked against %s\n", r.XLABuild)
	if r.XLAFlagsErr != "" {
		fmt.Fprintf(w, "           $XLA_FLAGS would be refused: %s\n", r.XLAFlagsErr)
	}
	fmt.Fprintln(w, "environment:")
	for _, name := range envVars {
		v, ok := r.Environment[name]
		if !ok {
			v = "(unset)"
		}
		fmt.Fprintf(w, "  %-26s %s\n", name, v)
	}
	return nil
}

// cpuPluginVersion is the PyPI version of lammps-jax-pjrt-cpu onegpu is tested with.
const cpuPluginVersion = "0.11.2"

func describeBackendChoice(s platform.BackendSpec) string {
	switch {
	case s.Kind == "xla":
		return fmt.Sprintf("XLA with the PJRT plugin %s (from %s)", s.Plugin, s.Source)
	case s.Parallel():
		return fmt.Sprintf("embedded pure-Go backend, parallel execution (from %s): faster, more memory", s.Source)
	default:
		return fmt.Sprintf("embedded pure-Go backend, one op at a time in creation order (from %s); "+
			"for XLA set %s=/abs/path/plugin.so or pass --backend xla:/abs/path/plugin.so", s.Source, platform.EnvPlugin)
	}
}

// findPipCPUPlugin asks python3 where the lammps-jax-pjrt-cpu wheel put its plugin, if installed.
func findPipCPUPlugin() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "python3", "-c", "import lammps_jax_pjrt_cpu as p; print(p.PLUGIN_PATH)").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
