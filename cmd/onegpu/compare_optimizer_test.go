package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompareRefusesUnmatchedOptimizers: an optimizer the reference has no counterpart for stops
// compare before anything runs, with an error that names both sides, whether --optimizer or a
// --config names it.
func TestCompareRefusesUnmatchedOptimizers(t *testing.T) {
	python, script := fakeReference(t, "{}")
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--optimizer", "adam8bit"}, []string{"--optimizer adam8bit", "onegpu's adam8bit", "optax has no block-wise 8-bit Adam"}},
		{[]string{"--config", "--model mlp --optimizer adam8bit"}, []string{`--config "--model mlp --optimizer adam8bit"`, "onegpu's adam8bit", "optax.adam"}},
		{[]string{"--optimizer", "sgd"}, []string{`onegpu's optimizer "sgd" has no counterpart in the JAX reference`, "adam, adamw or adafactor"}},
	} {
		var out bytes.Buffer
		err := runCompare(append([]string{"--python", python, "--script", script}, tc.args...), &out, &bytes.Buffer{})
		for _, want := range tc.want {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("compare %v = %v, want an error containing %q", tc.args, err, want)
			}
		}
		if out.Len() > 0 {
			t.Errorf("compare %v printed a result before refusing:\n%s", tc.args, out.String())
		}
	}
}

func TestReferenceOptimizerArgs(t *testing.T) {
	for _, tc := range []struct {
		name        string
		weightDecay float64
		want        string
	}{
		{"", 0, "--optimizer adam"}, {"adam", 0, "--optimizer adam"}, {"adafactor", 0, "--optimizer adafactor"},
		{"adamw", 0.01, "--optimizer adamw --weight-decay 0.01"}, {"adafactor", 1e-3, "--optimizer adafactor --weight-decay 0.001"},
	} {
		args, err := referenceOptimizerArgs(tc.name, tc.weightDecay)
		if got := strings.Join(args, " "); err != nil || got != tc.want {
			t.Errorf("referenceOptimizerArgs(%q, %g) = %q, %v; want %q", tc.name, tc.weightDecay, got, err, tc.want)
		}
	}
	if _, err := referenceOptimizerArgs("adam", 0.1); err == nil || !strings.Contains(err.Error(), "use --optimizer adamw") {
		t.Errorf("adam with weight decay: %v, want a pointer to adamw", err)
	}
}

// TestCompareTellsTheReferenceItsOptimizer: the reference is run with the configuration's
// optimizer, and the report names it. The onegpu side runs for real (the MLP on the embedded
// backend); the reference is a stand-in that records its arguments.
func TestCompareTellsTheReferenceItsOptimizer(t *testing.T) {
	dir := t.TempDir()
	argsFile := filepath.Join(dir, "args")
	python := filepath.Join(dir, "python")
	result := `{"framework": "jax", "loss": [1, 1], "accuracy": [0, 0], "step_seconds": [1, 1]}`
	body := "#!/bin/sh\necho \"$@\" > " + argsFile + "\ncat <<'EOF'\n" + result + "\nEOF\n"
	if err := os.WriteFile(python, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "tutorial.py")
	if err := os.WriteFile(script, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_ = runCompare([]string{"--json", "--steps", "2", "--backend", "go", "--python", python, "--script", script,
		"--optimizer", "adam", "--config", "--model mlp --batch 64"}, &out, &bytes.Buffer{})
	var report compareReport
	if err := json.Unmarshal(out.Bytes(), &report); err != nil || len(report.Configs) != 1 {
		t.Fatalf("compare printed no report (%v):\n%s", err, out.String())
	}
	args, err := os.ReadFile(argsFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(args), "--optimizer adam") || report.Configs[0].Optimizer != "adam" {
		t.Errorf("the reference ran with %q; the report names optimizer %q: want adam on both", args, report.Configs[0].Optimizer)
	}
}
