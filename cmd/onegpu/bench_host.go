package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/optim/hostengine"
)

// hostBenchFlags are the flags `bench --grid host` reads; the others describe a model it does not
// build.
var hostBenchFlags = map[string]bool{"grid": true, "steps": true, "json": true, "host-params": true, "host-backend": true}

// hostBench is `bench --grid host`'s result.
type hostBench struct {
	// CopyGBs and TriadGBs are the host's STREAM bandwidths; BoundGBs the larger, the bound's.
	CopyGBs  float64 `json:"copy_gb_per_s"`
	TriadGBs float64 `json:"triad_gb_per_s"`
	BoundGBs float64 `json:"bound_gb_per_s"`
	Threads  int     `json:"threads"`
	Rows     []struct {
		Backend string `json:"backend"`
		hostengine.UpdateRate
		Error string `json:"error,omitempty"`
	} `json:"rows"`
}

// runHostBench measures the host's memory bandwidth and the host engine's update rate of each
// optimizer (bfloat16 parameters out) on the embedded backend and, with a CPU plugin, XLA's CPU
// client: the figures the streamed executor's host update runs at, next to the bound.
func runHostBench(fs *flag.FlagSet, steps int, params int64, spec string, asJSON bool, w io.Writer) error {
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
	// Arrays as large as the benchmark's matrix, and at least 128 MiB (4x the 32 MiB L3 of CI's EPYC).
	bw := hostengine.MeasureBandwidth(max(128<<20, 4*params), 5)
	r := hostBench{CopyGBs: bw.Copy / 1e9, TriadGBs: bw.Triad / 1e9, BoundGBs: max(bw.Copy, bw.Triad) / 1e9, Threads: bw.Threads}
	fmt.Fprintf(progress, "host memory bandwidth (%d threads, 3 arrays of %d MiB): copy %.1f GB/s, triad %.1f GB/s\n", bw.Threads, bw.ArrayBytes>>20, r.CopyGBs, r.TriadGBs)
	for _, s := range specs {
		backend, s, err := hostengine.NewBackendFrom(s)
		if err != nil {
			return err
		}
		for _, name := range []string{"adam", "adam8bit", "adafactor"} {
			opt, err := optim.ByName(name, optim.Settings{})
			if err != nil {
				return err
			}
			rate, err := hostengine.MeasureUpdate(backend, opt, dtypes.BFloat16, params, steps, max(bw.Copy, bw.Triad))
			row := struct {
				Backend string `json:"backend"`
				hostengine.UpdateRate
				Error string `json:"error,omitempty"`
			}{Backend: s, UpdateRate: rate}
			if err != nil {
				row.Error = err.Error()
			}
			fmt.Fprintf(progress, "  %s %s: %s\n", s, name, describeRate(row.UpdateRate, row.Error))
			r.Rows = append(r.Rows, row)
		}
		backend.Finalize()
	}
	if asJSON {
		return writeJSON(w, r)
	}
	return nil
}

func describeRate(r hostengine.UpdateRate, err string) string {
	if err != "" {
		return "error: " + err
	}
	return fmt.Sprintf("%.0fM params/s (%.3f s for %d), %.1f B/param moved -> bound %.0fM params/s: %.0f%% of the bound",
		r.ParamsPerSecond/1e6, r.Seconds, r.Params, r.BytesPerParam, r.BoundParamsPerSecond/1e6, 100*r.Fraction)
}
