package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/plan"
	"github.com/onegpu/onegpu/platform"
)

// TestBenchOrdering: the grid's estimates order as the tutorial found: float32 needs more memory
// than bfloat16, which needs more than bfloat16 with remat; and 4 micro-batches keep fewer
// activations than 1, for every precision and remat choice.
func TestBenchOrdering(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	var out bytes.Buffer
	if err := runBench([]string{"--preset", "small", "--estimate-only", "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	var r struct{ Rows []benchRow }
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	peak := map[plan.Variant]int64{}
	act := map[plan.Variant]int64{}
	for _, row := range r.Rows {
		if row.Error != "" {
			t.Fatalf("%s: %s", row.Variant, row.Error)
		}
		peak[row.Variant], act[row.Variant] = row.PeakBytes, row.ActivationBytes
	}
	f32, bf16, bf16Remat := plan.Variant{Compute: "float32", Remat: "none", MicroBatches: 1}, plan.Variant{Compute: "bfloat16", Remat: "none", MicroBatches: 1}, plan.Variant{Compute: "bfloat16", Remat: "mlp,attn", MicroBatches: 1}
	if !(peak[f32] > peak[bf16] && peak[bf16] > peak[bf16Remat]) {
		t.Errorf("peak memory f32 %d, bf16 %d, bf16+remat %d: want strictly decreasing", peak[f32], peak[bf16], peak[bf16Remat])
	}
	for v := range peak {
		if v.MicroBatches != 4 {
			continue
		}
		one := v
		one.MicroBatches = 1
		if act[v] >= act[one] {
			t.Errorf("%s: activations %d with 4 micro-batches, %d with 1; want fewer with 4", v, act[v], act[one])
		}
	}
}

// TestBenchAllFailed: a grid whose every configuration fails (16 devices on the embedded
// backend) still prints its rows, and exits with an error naming the first failure.
func TestBenchAllFailed(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	var out bytes.Buffer
	err := runBench([]string{"--devices", "16", "--estimate-only", "--json"}, &out)
	if err == nil || !strings.Contains(err.Error(), "all 12 configurations failed") || !strings.Contains(err.Error(), "--devices 16") {
		t.Errorf("bench on 16 devices of the embedded backend = %v, want an error: every configuration failed", err)
	}
	var r struct{ Rows []benchRow }
	if jerr := json.Unmarshal(out.Bytes(), &r); jerr != nil || len(r.Rows) != 12 {
		t.Errorf("the failed rows are not printed (%v): %s", jerr, out.String())
	}
	// As a user runs it: exit status 1.
	if code, stderr := runCLI(t, "bench", "--devices", "16", "--estimate-only"); code != 1 || !strings.Contains(stderr, "all 12 configurations failed") {
		t.Errorf("exit status %d, stderr %q; want 1 and the failure", code, stderr)
	}
}

// TestBenchChecksThePlotFirst: a plot that cannot be written is refused before the grid runs.
func TestBenchChecksThePlotFirst(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	var out bytes.Buffer
	err := runBench([]string{"--plot", "/nonexistent/g.png", "--json"}, &out)
	if err == nil || !strings.Contains(err.Error(), "--plot /nonexistent/g.png: the folder /nonexistent does not exist") || out.Len() > 0 {
		t.Errorf("bench --plot /nonexistent/g.png = %v, printed %q: want a refusal before any work", err, out.String())
	}
}
