package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	ograph "github.com/onegpu/onegpu/graph"
)

func init() {
	register(command{
		name:    "plan",
		summary: "without running anything, find the fastest configuration whose memory fits a budget",
		run:     func(args []string) error { return runPlan(args, os.Stdout) },
	})
}

// planRow is one candidate configuration.
type planRow struct {
	variant
	estimate
	// Seconds is the step time estimated from FLOPs (recomputation included) at the assumed
	// throughput of the compute dtype.
	Seconds float64 `json:"estimated_step_seconds"`
	Fits    bool    `json:"fits"`
	Pareto  bool    `json:"pareto"`
}

func runPlan(args []string, w io.Writer) error {
	fs := newFlagSet("plan", "--budget 24GiB [--preset P] [--tflops-f32 T] [--tflops-bf16 T] [--json]")
	var s setup
	s.register(fs, "gpt", "tutorial")
	budgetText := fs.String("budget", "24GiB", "device memory available for the train step, e.g. 24GiB, 80GB, 16000MiB; above 8 EiB reads as 8 EiB, where everything fits")
	tflopsF32 := fs.Float64("tflops-f32", 27.8, "assumed float32 throughput in TFLOP/s (default: an RTX A5000, the tutorial's 24 GB GPU)")
	tflopsBF16 := fs.Float64("tflops-bf16", 111, "assumed bfloat16 tensor-core throughput in TFLOP/s")
	asJSON := fs.Bool("json", false, "print the plan as one JSON object")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	set := given(fs)
	if err := notApplicable(set, "the plan tries every compute precision, remat choice and micro-batch count itself", "policy", "remat", "microbatches"); err != nil {
		return err
	}
	if err := notApplicable(set, "the plan estimates memory and time; it trains nothing", "lr", "seed"); err != nil {
		return err
	}
	_ = fs.Set("microbatches", "1") // the grid chooses them; 1 lets the base config take any --batch
	budget, err := parseBytes(*budgetText)
	if err != nil {
		return fmt.Errorf("--budget: %w", err)
	}
	if *tflopsF32 <= 0 || *tflopsBF16 <= 0 {
		return fmt.Errorf("--tflops-f32 %g and --tflops-bf16 %g must be positive", *tflopsF32, *tflopsBF16)
	}
	if s.model != "gpt" {
		return fmt.Errorf("--model %s: plan chooses remat over transformer blocks; plan the gpt", s.model)
	}
	base, err := s.config()
	if err != nil {
		return err
	}
	backend, spec, err := s.newBackend()
	if err != nil {
		return err
	}
	defer backend.Finalize()
	var rows []planRow
	for _, v := range planGrid(base.Batch) {
		config, err := v.apply(base)
		if err != nil {
			continue // a micro-batch count that does not divide the batch
		}
		e, err := estimateStep(backend, config, spec.Kind == "xla")
		if err != nil {
			return fmt.Errorf("%s: %w", v, err)
		}
		row := planRow{variant: v, estimate: e}
		rate := *tflopsF32
		if v.Compute == "bfloat16" {
			rate = *tflopsBF16
		}
		row.Seconds = float64(e.FLOPs) / (rate * 1e12)
		row.Fits = row.memory() <= budget
		rows = append(rows, row)
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].Seconds != rows[j].Seconds {
			return rows[i].Seconds < rows[j].Seconds
		}
		return rows[i].memory() < rows[j].memory()
	})
	markPareto(rows)
	best := -1
	for i, r := range rows {
		if r.Fits {
			best = i
			break
		}
	}
	if *asJSON {
		out := struct {
			Config      string    `json:"config"`
			Backend     string    `json:"backend"`
			BudgetBytes int64     `json:"budget_bytes"`
			Best        *planRow  `json:"best"`
			Rows        []planRow `json:"rows"`
		}{Config: describe(base), Backend: spec.String(), BudgetBytes: budget, Rows: rows}
		if best >= 0 {
			out.Best = &rows[best]
		}
		return writeJSON(w, out)
	}
	fmt.Fprintf(w, "plan for %s\nbudget %s; memory from %s; time from FLOPs at %g (f32) / %g (bf16) TFLOP/s\n\n",
		describe(base), ograph.FormatBytes(budget), memorySource(spec.Kind == "xla"), *tflopsF32, *tflopsBF16)
	if best >= 0 {
		b := rows[best]
		fmt.Fprintf(w, "fastest that fits: %s compute, remat %s, %d micro-batches: %s, about %.3f s per step\n\n",
			b.Compute, b.Remat, b.MicroBatches, ograph.FormatBytes(b.memory()), b.Seconds)
	} else {
		smallest := rows[0]
		for _, r := range rows {
			if r.memory() < smallest.memory() {
				smallest = r
			}
		}
		fmt.Fprintf(w, "nothing fits: the smallest configuration (%s) needs %s, %s more than the budget;\n"+
			"use more micro-batches (--batch must stay divisible), a smaller --preset, or a larger device\n\n",
			smallest.variant, ograph.FormatBytes(smallest.memory()), ograph.FormatBytes(smallest.memory()-budget))
	}
	fmt.Fprintln(w, "Pareto front (no other configuration is both faster and smaller):")
	fmt.Fprintf(w, "  %-8s %-9s %3s %12s %10s %s\n", "compute", "remat", "k", "memory", "step", "fits")
	for _, r := range rows {
		if r.Pareto {
			fits := "no"
			if r.Fits {
				fits = "yes"
			}
			fmt.Fprintf(w, "  %-8s %-9s %3d %12s %9.3fs %s\n", r.Compute, r.Remat, r.MicroBatches, ograph.FormatBytes(r.memory()), r.Seconds, fits)
		}
	}
	return nil
}

// memory is the row's memory figure: XLA's compiled total when available, else the estimate.
func (r planRow) memory() int64 {
	if r.XLA != nil {
		return r.XLA.TotalBytes()
	}
	return r.PeakBytes
}

func memorySource(xla bool) string {
	if xla {
		return "XLA's compiled statistics"
	}
	return "the sequential-execution estimate"
}

// planGrid is every precision, remat choice and micro-batch count (powers of two up to 16 that
// divide the batch).
func planGrid(batch int) []variant {
	var grid []variant
	for _, compute := range []string{"float32", "bfloat16"} {
		for _, r := range []string{"none", "mlp", "attn", "mlp,attn", "block"} {
			for k := 1; k <= 16 && k <= batch; k *= 2 {
				if batch%k == 0 {
					grid = append(grid, variant{compute, r, k})
				}
			}
		}
	}
	return grid
}

// markPareto marks the rows (sorted by time) that no faster row beats in memory.
func markPareto(rows []planRow) {
	smallest := int64(-1)
	for i := range rows {
		if m := rows[i].memory(); smallest < 0 || m < smallest {
			rows[i].Pareto, smallest = true, m
		}
	}
}

// parseBytes reads sizes like "24GiB", "80GB", "512MiB", "1.5TiB" or a plain number of bytes.
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		factor float64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
		{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}}
	text := strings.TrimSpace(s)
	factor := 1.0
	for _, u := range units {
		if strings.HasSuffix(strings.ToUpper(text), strings.ToUpper(u.suffix)) {
			text, factor = strings.TrimSpace(text[:len(text)-len(u.suffix)]), u.factor
			break
		}
	}
	v, err := strconv.ParseFloat(text, 64)
	if errors.Is(err, strconv.ErrRange) && v > 0 { // past float64: still a size, and larger than any
		return math.MaxInt64, nil
	}
	if err != nil || !(v > 0) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a size: write a positive finite number and a unit, e.g. 24GiB, 80GB or 512MiB", s)
	}
	if bytes := v * factor; bytes < math.MaxInt64 { // float64(MaxInt64) rounds up to 2^63
		return max(int64(bytes), 1), nil
	}
	return math.MaxInt64, nil
}
