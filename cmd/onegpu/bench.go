package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/plan"
	"github.com/onegpu/onegpu/recipes"
)

func init() {
	register(command{
		name:    "bench",
		summary: "run the tutorial's experiment grid (f32/bf16 × remat × micro-batches), or plain vs chunked attention and loss: memory, FLOPs, step time, ratios; or the host's bandwidth and optimizer update rate (--grid host)",
		run:     func(args []string) error { return runBench(args, os.Stdout) },
	})
}

// benchRow is one configuration's results.
type benchRow = plan.Measured

func runBench(args []string, w io.Writer) (err error) {
	defer inFlags(&err)
	fs := newFlagSet("bench", "[--preset P] [--grid tutorial|chunking|host] [--steps N] [--plot FILE.png] [--estimate-only] [--json]")
	var s setup
	s.register(fs, "gpt", "tiny")
	steps := fs.Int("steps", 3, "timed steps per configuration (after one that compiles), at least 1")
	estimateOnly := fs.Bool("estimate-only", false, "only build and analyze each step; run nothing")
	plotFile := fs.String("plot", "", "write memory and time per configuration to this PNG file (default: no plot)")
	asJSON := fs.Bool("json", false, "print the grid as one JSON object")
	grid := fs.String("grid", "tutorial", "the configurations: tutorial (f32/bf16 × remat none, mlp,attn, block × 1 and 4 micro-batches) or chunking "+
		"(plain and chunked attention × plain and chunked cross-entropy, at the run's policy, remat and micro-batches, with XLA's compile time) "+
		"or host (the host's memory bandwidth and the offloaded runs' host update rate of Adam, AdamW, 8-bit Adam and Adafactor against it, jitted optax Adam beside)")
	hostParams := fs.Int64("host-params", 16<<20, "--grid host: the parameters of the benchmark's matrix (at least 4096; far larger than the caches)")
	hostBackend := fs.String("host-backend", "", `--grid host: one host backend to measure ("go" or "xla:/abs/path/cpu_plugin.so"; default: the embedded backend and the XLA CPU client of $ONEGPU_HOST_PJRT_PLUGIN or a CPU $ONEGPU_PJRT_PLUGIN)`)
	withJAX := fs.Bool("jax", true, "--grid host: time jitted optax Adam on the same matrix beside (reference/jax/host_adam.py, with the Python of --python)")
	python := fs.String("python", "", "--grid host --jax: the Python with jax and optax (default: $ONEGPU_PYTHON, then .venv/bin/python in this folder or a parent, then python3)")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if *grid == "host" {
		return runHostBench(fs, *steps, *hostParams, *hostBackend, *withJAX, *python, *asJSON, w)
	}
	if err := notApplicable(given(fs), "it sizes --grid host's measurement", "host-params", "host-backend", "jax", "python"); err != nil {
		return err
	}
	if family, err := recipes.Lookup(s.model); err != nil || family.WithSeq == nil {
		return fmt.Errorf("--model %s: the grids vary a transformer's remat and attention; bench a language model (%s)", s.model, languageModels())
	}
	set := given(fs)
	switch *grid {
	case "tutorial":
		if err := notApplicable(set, "the grid sets compute precision, remat and micro-batches itself", "policy", "remat", "microbatches"); err != nil {
			return err
		}
	case "chunking":
		if err := notApplicable(set, "the grid tries plain and chunked attention and loss itself", "attention", "cross-entropy"); err != nil {
			return err
		}
		if *plotFile != "" {
			return fmt.Errorf("--plot draws the tutorial's grid; use --grid tutorial, or --json for the chunking grid's figures")
		}
	default:
		return fmt.Errorf("unknown --grid %q: use tutorial, chunking or host", *grid)
	}
	if *steps < 1 {
		return fmt.Errorf("--steps %d: time at least one step", *steps)
	}
	if *grid == "tutorial" {
		_ = fs.Set("microbatches", "1") // the grid chooses them; 1 lets the base config take any --batch
	}
	if *estimateOnly {
		if err := notApplicable(set, "--estimate-only runs no steps", "steps"); err != nil {
			return err
		}
	}
	base, err := s.config()
	if err != nil {
		return err
	}
	if *plotFile != "" {
		if err := checkOutputFile("plot", *plotFile); err != nil {
			return err
		}
	}
	backend, spec, err := s.newBackend()
	if err != nil {
		return err
	}
	defer backend.Finalize()
	var progress io.Writer = w
	if *asJSON {
		progress = io.Discard
	}
	fmt.Fprintf(progress, "benchmarking %s\non %s\n", describe(base), spec)
	opts := plan.BenchOptions{Steps: *steps, Compile: spec.Kind == "xla", MeasureHeap: spec.Kind == "go", Progress: progress}
	if *estimateOnly {
		opts.Steps = 0
	}
	var rows []benchRow
	if *grid == "chunking" {
		rows = plan.BenchChunkings(backend, base, plan.AllChunkings, opts)
	} else {
		rows = plan.Bench(backend, base, opts)
	}
	failed := benchFailed(rows)
	if *plotFile != "" && failed == nil {
		if err := plotBench(*plotFile, modelTitle(base), rows); err != nil {
			return err
		}
	}
	if *asJSON {
		if err := writeJSON(w, struct {
			Config  string     `json:"config"`
			Backend string     `json:"backend"`
			Rows    []benchRow `json:"rows"`
		}{describe(base), spec.String(), rows}); err != nil {
			return err
		}
		return failed
	}
	if *grid == "chunking" {
		writeChunkingTable(w, rows, spec.Kind == "xla")
	} else {
		writeBenchTable(w, rows, spec.Kind == "xla")
	}
	if *plotFile != "" && failed == nil {
		fmt.Fprintf(w, "plot: %s\n", *plotFile)
	}
	return failed
}

// benchFailed returns an error when every configuration of the grid failed (the table of errors
// is printed all the same), naming the first error; nil when one at least was measured.
func benchFailed(rows []benchRow) error {
	for _, r := range rows {
		if r.Error == "" {
			return nil
		}
	}
	if len(rows) == 0 {
		return fmt.Errorf("the grid has no configuration")
	}
	return fmt.Errorf("all %d configurations failed; the first: %s", len(rows), rows[0].Error)
}

func writeBenchTable(w io.Writer, rows []benchRow, xla bool) {
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-8s %-8s %2s | %10s %6s %10s %6s | %10s | %9s %6s %11s\n", "compute", "remat", "k",
		"est. peak", "ratio", "est. act.", "ratio", measuredHeader(xla), "step", "ratio", "tokens/s")
	for _, r := range rows {
		if r.Error != "" {
			fmt.Fprintf(w, "%-8s %-8s %2d | error: %s\n", r.Compute, r.Remat, r.MicroBatches, r.Error)
			continue
		}
		measured := "-"
		switch {
		case r.XLA != nil:
			measured = analysis.FormatBytes(r.XLA.TotalBytes())
		case r.MeasuredPeakBytes > 0:
			measured = analysis.FormatBytes(r.MeasuredPeakBytes + r.ArgumentBytes)
		}
		step, timeRatio, tokens := "-", "-", "-"
		if r.StepSeconds > 0 {
			step, timeRatio, tokens = fmt.Sprintf("%.3fs", r.StepSeconds), fmt.Sprintf("%.2fx", r.TimeRatio), fmt.Sprintf("%.0f", r.TokensPerSecond)
		}
		fmt.Fprintf(w, "%-8s %-8s %2d | %10s %5.2fx %10s %5.2fx | %10s | %9s %6s %11s\n", r.Compute, r.Remat, r.MicroBatches,
			analysis.FormatBytes(r.PeakBytes), r.PeakRatio, analysis.FormatBytes(r.ActivationBytes), r.ActivationRatio, measured, step, timeRatio, tokens)
	}
	fmt.Fprintf(w, "\nest. peak: sequential-execution estimate incl. weights and optimizer state; est. act.: its activations;\n")
	if xla {
		fmt.Fprintf(w, "XLA total: XLA's compiled memory (arguments + outputs - aliases + temporaries).\n")
	} else {
		fmt.Fprintf(w, "measured: the step's inputs (exact) plus the Go heap's peak above them (GOGC=10, continuous collection,\n")
		fmt.Fprintf(w, "least of two steps); steps of a few MiB read a little high.\n")
	}
	fmt.Fprintf(w, "ratios are to the first row (float32, no remat, 1 micro-batch), measured in this run.\n")
}

func measuredHeader(xla bool) string {
	if xla {
		return "XLA total"
	}
	return "measured"
}

// writeChunkingTable prints a grid of chunkings: memory, compile time and step time per row.
func writeChunkingTable(w io.Writer, rows []benchRow, xla bool) {
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-10s %-14s | %10s %6s | %10s | %8s | %9s %6s %11s\n", "attention", "cross-entropy",
		"est. peak", "ratio", measuredHeader(xla), "compile", "step", "ratio", "tokens/s")
	for _, r := range rows {
		if r.Error != "" {
			fmt.Fprintf(w, "%-10s %-14s | error: %s\n", r.Attention, r.CrossEntropy, r.Error)
			continue
		}
		measured, compile := "-", "-"
		switch {
		case r.XLA != nil:
			measured = analysis.FormatBytes(r.XLA.TotalBytes())
		case r.MeasuredPeakBytes > 0:
			measured = analysis.FormatBytes(r.MeasuredPeakBytes + r.ArgumentBytes)
		}
		if r.CompileSeconds > 0 {
			compile = fmt.Sprintf("%.1fs", r.CompileSeconds)
		}
		step, timeRatio, tokens := "-", "-", "-"
		if r.StepSeconds > 0 {
			step, timeRatio, tokens = fmt.Sprintf("%.3fs", r.StepSeconds), fmt.Sprintf("%.2fx", r.TimeRatio), fmt.Sprintf("%.0f", r.TokensPerSecond)
		}
		fmt.Fprintf(w, "%-10s %-14s | %10s %5.2fx | %10s | %8s | %9s %6s %11s\n", r.Attention, r.CrossEntropy,
			analysis.FormatBytes(r.PeakBytes), r.PeakRatio, measured, compile, step, timeRatio, tokens)
	}
	fmt.Fprintf(w, "\nat %s compute, remat %s, %s; est. peak: the sequential-execution estimate incl. weights and optimizer state;\n",
		rows[0].Compute, rows[0].Remat, plural(rows[0].MicroBatches, "micro-batch"))
	if xla {
		fmt.Fprintf(w, "XLA total: XLA's compiled memory; compile: XLA's compile time of the step (wall clock).\n")
	} else {
		fmt.Fprintf(w, "measured: the step's inputs plus the Go heap's peak above them (GOGC=10).\n")
	}
	fmt.Fprintf(w, "ratios are to the first row (plain attention and loss), measured in this run.\n")
}

// languageModels lists the registered models that are language models.
func languageModels() string {
	var names []string
	for _, name := range recipes.Names() {
		if f, _ := recipes.Lookup(name); f.WithSeq != nil {
			names = append(names, name)
		}
	}
	return strings.Join(names, ", ")
}
