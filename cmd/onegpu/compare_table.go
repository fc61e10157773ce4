package main

import (
	"fmt"
	"io"

	"github.com/onegpu/onegpu/analysis"
)

// writeTable prints one configuration's side-by-side table.
func (r *compareResult) writeTable(w io.Writer) {
	fmt.Fprintf(w, "\n== %s\n", r.Name)
	if r.Config != "" {
		fmt.Fprintf(w, "%s; %s; dropout 0\n", r.Config, r.Data)
	}
	if r.Error != "" {
		fmt.Fprintf(w, "FAILED: %s\n", r.Error)
		return
	}
	o, j := r.Ours, r.JAX
	n := len(o.Loss)
	jaxName := fmt.Sprintf("JAX %s (%s)", j.Version, j.DeviceKind)
	fmt.Fprintf(w, "onegpu: %s\n", r.Backend)
	if j.Runtime != "" {
		fmt.Fprintf(w, "JAX: %s\n", j.Runtime)
	}
	fmt.Fprintf(w, "%-32s %16s %16s %12s\n", "", "onegpu", "JAX", "onegpu/JAX")
	row := func(name, ours, theirs, ratio string) {
		fmt.Fprintf(w, "%-32s %16s %16s %12s\n", name, ours, theirs, ratio)
	}
	if n > 0 && len(j.Loss) >= n {
		row("loss at step 1 (same weights)", fmt.Sprintf("%.6f", o.Loss[0]), fmt.Sprintf("%.6f", j.Loss[0]),
			fmt.Sprintf("Δ %.1e", r.LossRelDiff[0]))
		row(fmt.Sprintf("loss at step %d", n), fmt.Sprintf("%.6f", o.Loss[n-1]), fmt.Sprintf("%.6f", j.Loss[n-1]),
			fmt.Sprintf("Δ %.1e", r.LossRelDiff[n-1]))
		row(fmt.Sprintf("largest Δ over %d steps", n), "", "", fmt.Sprintf("%.1e", r.MaxRelDiff))
		if len(o.Accuracy) >= n && len(j.Accuracy) >= n { // runJAXSide checks the lists' lengths
			row(fmt.Sprintf("accuracy at step %d", n), fmt.Sprintf("%.4f", o.Accuracy[n-1]), fmt.Sprintf("%.4f", j.Accuracy[n-1]), "")
		}
		row("first step (compiles)", fmt.Sprintf("%.2f s", o.FirstStepSeconds), fmt.Sprintf("%.2f s", j.FirstStepSeconds),
			compareRatio(o.FirstStepSeconds, j.FirstStepSeconds))
	} else {
		row("build + compile", fmt.Sprintf("%.2f s", o.FirstStepSeconds), fmt.Sprintf("%.2f s", j.CompileSeconds),
			compareRatio(o.FirstStepSeconds, j.CompileSeconds))
		row("  of which building", fmt.Sprintf("%.2f s", o.BuildSeconds), "", "")
	}
	if o.MeanStepSeconds != nil && j.MeanStepSeconds != nil {
		row(fmt.Sprintf("step time (mean, 2..%d)", n), compareSeconds(*o.MeanStepSeconds), compareSeconds(*j.MeanStepSeconds),
			compareRatio(*o.MeanStepSeconds, *j.MeanStepSeconds))
	}
	if o.TokensPerSecond != nil && j.TokensPerSecond != nil {
		row(r.unit+"/s", compareRate(*o.TokensPerSecond), compareRate(*j.TokensPerSecond), compareRatio(*o.TokensPerSecond, *j.TokensPerSecond))
	}
	if o.Memory != nil && j.Memory != nil {
		kind := "XLA compiled"
		if o.MemoryKind == "estimate" {
			kind = "onegpu estimate"
		}
		row("memory ("+kind+")", "", "", "")
		row("  arguments", analysis.FormatBytes(o.Memory.ArgumentBytes), analysis.FormatBytes(j.Memory.ArgumentBytes), compareRatio(float64(o.Memory.ArgumentBytes), float64(j.Memory.ArgumentBytes)))
		if o.MemoryKind != "estimate" {
			row("  outputs", analysis.FormatBytes(o.Memory.OutputBytes), analysis.FormatBytes(j.Memory.OutputBytes), compareRatio(float64(o.Memory.OutputBytes), float64(j.Memory.OutputBytes)))
			row("  aliased", analysis.FormatBytes(o.Memory.AliasBytes), analysis.FormatBytes(j.Memory.AliasBytes), compareRatio(float64(o.Memory.AliasBytes), float64(j.Memory.AliasBytes)))
		}
		row("  temporary", analysis.FormatBytes(o.Memory.TempBytes), analysis.FormatBytes(j.Memory.TempBytes), compareRatio(float64(o.Memory.TempBytes), float64(j.Memory.TempBytes)))
		row("  total", analysis.FormatBytes(o.Memory.TotalBytes), analysis.FormatBytes(j.Memory.TotalBytes), compareRatio(float64(o.Memory.TotalBytes), float64(j.Memory.TotalBytes)))
		if j.Memory.PeakMemoryBytes != nil {
			row("  JAX peak_memory_in_bytes", "", analysis.FormatBytes(*j.Memory.PeakMemoryBytes), "")
		}
	}
	if o.Census != nil && j.Census != nil {
		row("optimized HLO (census)", "", "", "")
		row("  instructions", fmt.Sprint(o.Census.Instructions), fmt.Sprint(j.Census.Instructions),
			compareRatio(float64(o.Census.Instructions), float64(j.Census.Instructions)))
		for _, k := range analysis.CensusRows(*o.Census, *j.Census) {
			ours, theirs := o.Census.Ops[k], j.Census.Ops[k]
			row("  "+k, fmt.Sprint(ours), fmt.Sprint(theirs), compareRatio(float64(ours), float64(theirs)))
		}
	}
	if n == 0 {
		fmt.Fprintf(w, "compiled, not trained [%s]\n", jaxName)
		return
	}
	verdict := fmt.Sprintf("agree: largest relative loss difference %.1e <= %.0e (%s compute)", r.MaxRelDiff, r.Tolerance, r.Compute)
	if !r.Agree {
		verdict = fmt.Sprintf("DISAGREE: largest relative loss difference %.1e > %.0e (%s compute)", r.MaxRelDiff, r.Tolerance, r.Compute)
	}
	fmt.Fprintf(w, "%s [%s]\n", verdict, jaxName)
}

func compareRatio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func compareSeconds(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.1f ms", s*1000)
	}
	return fmt.Sprintf("%.2f s", s)
}

func compareRate(r float64) string {
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.2fM", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.1fk", r/1e3)
	}
	return fmt.Sprintf("%.0f", r)
}
