package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	ograph "github.com/onegpu/onegpu/graph"
)

// TestMemoryLlamaPresetsExact: `memory --model llama --preset P --json` reports the published
// parameter counts, building the step without allocating its weights (one sequence, one
// micro-batch: the count does not depend on them; an 8B model's float32 weights alone would not
// fit this machine).
func TestMemoryLlamaPresetsExact(t *testing.T) {
	t.Setenv(ograph.EnvBackend, "")
	t.Setenv(ograph.EnvPlugin, "")
	for preset, want := range map[string]float64{"tinyllama-1.1b": 1100048384, "llama-3.2-1b": 1235814400, "llama-3.1-8b": 8030261248} {
		var out bytes.Buffer
		if err := runMemory([]string{"--model", "llama", "--preset", preset, "--batch", "1", "--microbatches", "1", "--json"}, &out); err != nil {
			t.Fatal(err)
		}
		var r map[string]any
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("not JSON: %v", err)
		}
		if got := r["params"].(float64); got != want {
			t.Errorf("%s: params %.0f, want %.0f", preset, got, want)
		}
	}
}

// TestTrainLlamaTiny: `train --model llama --preset tiny` learns: the loss falls over 6 steps, and
// the progress names the model.
func TestTrainLlamaTiny(t *testing.T) {
	t.Setenv(ograph.EnvBackend, "")
	t.Setenv(ograph.EnvPlugin, "")
	var out bytes.Buffer
	if err := runTrain([]string{"--model", "llama", "--preset", "tiny", "--steps", "6", "--batch", "8", "--microbatches", "2", "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	var r struct {
		Steps []struct{ Loss float64 }
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.String())
	}
	if first, last := r.Steps[0].Loss, r.Steps[len(r.Steps)-1].Loss; !(last < first-0.1) {
		t.Errorf("loss %v -> %v: want a fall", first, last)
	}
	err := runPlan([]string{"--model", "llama", "--preset", "tiny", "--largest"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "plan --largest") {
		t.Errorf("plan --largest --model llama: %v", err)
	}
}
