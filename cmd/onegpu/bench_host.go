package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/optim/hostengine"
)

// hostBenchFlags are the flags `bench --grid host` reads; the others describe a model it does not
// build.
var hostBenchFlags = map[string]bool{"grid": true, "steps": true, "json": true, "host-params": true, "host-backend": true, "jax": true, "python": true}

// hostBenchOptimizers are the optimizers `bench --grid host` times.
var hostBenchOptimizers = []string{"adam", "adamw", "adam8bit", "adafactor"}

// hostBench is `bench --grid host`'s result.
type hostBench struct {
	// CopyGBs and TriadGBs are the host's STREAM bandwidths (the best of a measure before the
	// updates and one after); BoundGBs the larger, the bound's.
	CopyGBs  float64 `json:"copy_gb_per_s"`
	TriadGBs float64 `json:"triad_gb_per_s"`
	BoundGBs float64 `json:"bound_gb_per_s"`
	Threads  int     `json:"threads"`
	// Load is the system's load average over the last minute when the run ended (0 where unknown).
	Load float64   `json:"load_average,omitempty"`
	Rows []hostRow `json:"rows"`
	// JAX is jitted optax Adam's update of the same matrix in the same run (--jax).
	JAX *jaxHostAdam `json:"jax,omitempty"`
}

// hostRow is one optimizer's update rate on one host backend and path.
type hostRow struct {
	Backend string `json:"backend"`
	hostengine.UpdateRate
	Error string `json:"error,omitempty"`
}

// jaxHostAdam is reference/jax/host_adam.py's result.
type jaxHostAdam struct {
	Optimizer       string    `json:"optimizer"`
	Params          int64     `json:"params"`
	Seconds         []float64 `json:"seconds"`
	BestSeconds     float64   `json:"best_seconds"`
	MedianSeconds   float64   `json:"median_seconds"`
	ParamsPerSecond float64   `json:"params_per_second"`
	Runtime         string    `json:"runtime"`
	JAX             string    `json:"jax"`
	// Fraction is ParamsPerSecond over the bound (Adam's 30 bytes per parameter at the run's
	// bandwidth).
	Fraction float64 `json:"fraction"`
}

// runHostBench measures the host's memory bandwidth and the host engine's update rate of each
// optimizer (bfloat16 parameters out): the flat loop where the optimizer has one (what training
// runs), and the graph update on the embedded backend and, with a CPU plugin, XLA's CPU client;
// with --jax, jitted optax Adam on the same matrix beside them.
func runHostBench(fs *flag.FlagSet, steps int, params int64, spec string, withJAX bool, python string, asJSON bool, w io.Writer) error {
	for name := range given(fs) {
		if !hostBenchFlags[name] {
			return fmt.Errorf("--%s does not apply: --grid host measures the host's bandwidth and optimizer updates, it builds no model", name)
		}
	}
	if steps < 1 {
		return fmt.Errorf("--steps %d: time at least one update", steps)
	}
	if params < 4096 {
		return fmt.Errorf("--host-params %d: update at least 4096 parameters (a matrix much larger than the caches: 16Mi is the default)", params)
	}
	specs := []string{hostengine.Embedded}
	if spec != "" {
		specs = []string{spec}
	} else if b, s, err := hostengine.NewBackend(); err == nil {
		if s != hostengine.Embedded {
			specs = append(specs, s)
		}
		b.Finalize()
	}
	var progress io.Writer = w
	if asJSON {
		progress = io.Discard
	}
	// Arrays as large as the benchmark's matrix, and at least 128 MiB (4x the 32 MiB L3 of CI's EPYC);
	// measured again after the updates (below): on a shared machine the best of both is the bound.
	arrays := max(128<<20, 4*params)
	bw := hostengine.MeasureBandwidth(arrays, 10)
	r := hostBench{CopyGBs: bw.Copy / 1e9, TriadGBs: bw.Triad / 1e9, BoundGBs: max(bw.Copy, bw.Triad) / 1e9, Threads: bw.Threads}
	fmt.Fprintf(progress, "host memory bandwidth (%d threads, 3 arrays of %d MiB): copy %.1f GB/s, triad %.1f GB/s\n", bw.Threads, bw.ArrayBytes>>20, r.CopyGBs, r.TriadGBs)
	for i, s := range specs {
		backend, s, err := hostengine.NewBackendFrom(s)
		if err != nil {
			return err
		}
		for _, name := range hostBenchOptimizers {
			opt, err := optim.ByName(name, optim.Settings{})
			if err != nil {
				return err
			}
			_, flat := opt.(optim.FlatOptimizer)
			for _, graphUpdate := range []bool{false, true} {
				if !graphUpdate && (!flat || i > 0) {
					continue // the flat loop runs in Go: one row per optimizer
				}
				rate, err := hostengine.MeasureUpdate(hostengine.Config{Backend: backend, Optimizer: opt, Compute: dtypes.BFloat16, GraphUpdate: graphUpdate},
					params, steps, max(bw.Copy, bw.Triad))
				row := hostRow{Backend: s, UpdateRate: rate}
				if err != nil {
					row.Error = err.Error()
				}
				fmt.Fprintf(progress, "  %s %s (%s): %s\n", s, name, rate.Path, describeRate(row.UpdateRate, row.Error))
				r.Rows = append(r.Rows, row)
			}
		}
		backend.Finalize()
	}
	if again := hostengine.MeasureBandwidth(arrays, 10); max(again.Copy, again.Triad) > max(bw.Copy, bw.Triad) {
		r.CopyGBs, r.TriadGBs, r.BoundGBs = max(bw.Copy, again.Copy)/1e9, max(bw.Triad, again.Triad)/1e9, max(again.Copy, again.Triad)/1e9
		fmt.Fprintf(progress, "host memory bandwidth again: copy %.1f GB/s, triad %.1f GB/s: the bound from here (the rows above at %.1f GB/s)\n",
			again.Copy/1e9, again.Triad/1e9, max(bw.Copy, bw.Triad)/1e9)
		for i := range r.Rows {
			r.Rows[i].UpdateRate = r.Rows[i].UpdateRate.WithBandwidth(r.BoundGBs * 1e9)
		}
	}
	if withJAX {
		j, err := runJAXHostAdam(python, params, steps)
		if err != nil {
			return fmt.Errorf("--jax: %w (--jax=false leaves JAX out)", err)
		}
		j.Fraction = j.ParamsPerSecond / (r.BoundGBs * 1e9 / 30)
		r.JAX = j
		fmt.Fprintf(progress, "  JAX %s jitted optax %s (%s runtime): %.0fM params/s (%.3f s for %d; median %.3f s): %.0f%% of the bound\n",
			j.JAX, j.Optimizer, j.Runtime, j.ParamsPerSecond/1e6, j.BestSeconds, j.Params, j.MedianSeconds, 100*j.Fraction)
	}
	r.Load = loadAverage()
	if r.Load > 0 {
		fmt.Fprintf(progress, "load average %.2f on %d cores\n", r.Load, runtime.NumCPU())
	}
	if asJSON {
		return writeJSON(w, r)
	}
	return nil
}

// runJAXHostAdam runs reference/jax/host_adam.py with python (or the one compare finds) on a
// matrix of params parameters, steps timed updates.
func runJAXHostAdam(python string, params int64, steps int) (*jaxHostAdam, error) {
	python, err := comparePython(python)
	if err != nil {
		return nil, err
	}
	script, ok := compareFindUp(filepath.Join("reference", "jax", "host_adam.py"))
	if !ok {
		return nil, fmt.Errorf("reference/jax/host_adam.py not found in this folder or a parent: run from the repository")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, python, script, "--params", fmt.Sprint(params), "--steps", fmt.Sprint(steps))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", python, script, err, strings.TrimSpace(lastLines(stderr.String(), 5)))
	}
	out := strings.TrimSpace(stdout.String())
	var j jaxHostAdam
	if err := json.Unmarshal([]byte(out[strings.LastIndex(out, "\n")+1:]), &j); err != nil {
		return nil, fmt.Errorf("%s printed no JSON result (%v): %q", script, err, out)
	}
	return &j, nil
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func describeRate(r hostengine.UpdateRate, err string) string {
	if err != "" {
		return "error: " + err
	}
	return fmt.Sprintf("%.0fM params/s (%.3f s for %d), %.1f B/param moved -> bound %.0fM params/s: %.0f%% of the bound",
		r.ParamsPerSecond/1e6, r.Seconds, r.Params, r.BytesPerParam, r.BoundParamsPerSecond/1e6, 100*r.Fraction)
}

// loadAverage is the system's load average over the last minute (Linux's /proc/loadavg), 0 where
// the system does not say.
func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var load float64
	if _, err := fmt.Sscan(string(data), &load); err != nil {
		return 0
	}
	return load
}
