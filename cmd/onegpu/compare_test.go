package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/platform"
)

// referencePython is the repository's Python with JAX (.ci/run creates .venv), or "".
func referencePython() string {
	p, err := filepath.Abs(filepath.Join("..", "..", ".venv", "bin", "python"))
	if err != nil {
		return ""
	}
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// TestCompareAgreesWithJAX: on the same XLA (the CPU plugin built from jaxlib's XLA), onegpu and
// the JAX/Flax reference train the tiny GPT to the same losses, in float32 and with the tutorial's
// techniques (bfloat16 compute, remat of MLP and attention, 4 micro-batches).
func TestCompareAgreesWithJAX(t *testing.T) {
	python := referencePython()
	plugin := os.Getenv(platform.EnvPlugin)
	if python == "" || plugin == "" {
		t.Skipf("needs ../../.venv/bin/python with JAX and $%s (both set up by .ci/run): the side-by-side with JAX is not run", platform.EnvPlugin)
	}
	if testing.Short() {
		t.Skip("compiles two train steps on each side (about 40 s)")
	}
	t.Parallel() // a JAX process and an XLA compile: beside the other comparisons
	var out, progress bytes.Buffer
	err := runCompare([]string{"--json", "--steps", "6", "--backend", "xla:" + plugin, "--python", python,
		"--config", "--model gpt --preset tiny --policy float32 --remat none --microbatches 1",
		"--config", "--model gpt --preset tiny --policy params=float32,compute=bfloat16,output=float32 --remat mlp,attn --microbatches 4",
	}, &out, &progress)
	var report compareReport
	if jerr := json.Unmarshal(out.Bytes(), &report); jerr != nil {
		t.Fatalf("compare printed no JSON (%v; err %v):\n%s\n%s", jerr, err, out.String(), progress.String())
	}
	for _, c := range report.Configs {
		t.Logf("%s: largest relative loss difference %.2g (tolerance %.0e), step time ours/JAX %s",
			c.Name, c.MaxRelDiff, c.Tolerance, stepRatio(c))
		if c.Error != "" || !c.Agree {
			t.Errorf("%s does not agree with JAX: error %q, relative differences %v\n%s", c.Name, c.Error, c.LossRelDiff, progress.String())
			continue
		}
		if c.Ours.MemoryKind != "xla_compiled" || c.Ours.Memory.TempBytes <= 0 || c.JAX.Memory == nil || c.JAX.Memory.ArgumentBytes <= 0 {
			t.Errorf("%s: compiled memory missing: ours %+v (%s), JAX %+v", c.Name, c.Ours.Memory, c.Ours.MemoryKind, c.JAX.Memory)
		}
		if float64(c.Ours.Memory.AliasBytes) < 0.99*float64(c.JAX.Memory.AliasBytes) {
			t.Errorf("%s: aliased bytes ours %d, JAX %d: the updated state must be aliased as JAX donates it", c.Name, c.Ours.Memory.AliasBytes, c.JAX.Memory.AliasBytes)
		}
		// The same dots: onegpu unrolls the micro-batches, JAX's scan runs its body 4 times.
		if c.Ours.Census == nil || c.JAX.Census == nil {
			t.Errorf("%s: HLO census missing: ours %v, JAX %v", c.Name, c.Ours.Census, c.JAX.Census)
		} else if ours, theirs := c.Ours.Census.Ops["dot bf16,bf16->bf16"], c.JAX.Census.Ops["dot bf16,bf16->bf16"]; ours != theirs && ours != 4*theirs {
			t.Errorf("%s: %d bf16 dots, JAX %d", c.Name, ours, theirs)
		}
		if c.Ours.Memory.ArgumentBytes != c.JAX.Memory.ArgumentBytes {
			// Same weights, same Adam state: the arguments differ only by scalars (step counters).
			if d := math.Abs(float64(c.Ours.Memory.ArgumentBytes - c.JAX.Memory.ArgumentBytes)); d > 1024 {
				t.Errorf("%s: argument bytes ours %d, JAX %d", c.Name, c.Ours.Memory.ArgumentBytes, c.JAX.Memory.ArgumentBytes)
			}
		}
	}
	if err != nil || !report.Agree || len(report.Configs) != 2 {
		t.Errorf("compare = %v, agree %v, %d configurations", err, report.Agree, len(report.Configs))
	}
}

// TestCompareMemoryOnly compiles the MLP's step on both sides without training: XLA's memory,
// the aliased state and the census come back for both, with build and compile times.
func TestCompareMemoryOnly(t *testing.T) {
	python := referencePython()
	plugin := os.Getenv(platform.EnvPlugin)
	if python == "" || plugin == "" {
		t.Skipf("needs ../../.venv/bin/python with JAX and $%s (both set up by .ci/run)", platform.EnvPlugin)
	}
	var out, progress bytes.Buffer
	err := runCompare([]string{"--json", "--memory-only", "--backend", "xla:" + plugin, "--python", python,
		"--config", "--model mlp --batch 64"}, &out, &progress)
	var report compareReport
	if jerr := json.Unmarshal(out.Bytes(), &report); jerr != nil || err != nil || len(report.Configs) != 1 {
		t.Fatalf("compare --memory-only = %v, JSON %v:\n%s\n%s", err, jerr, out.String(), progress.String())
	}
	c := report.Configs[0]
	if c.Error != "" || c.Ours == nil || c.JAX == nil || c.Ours.Memory == nil || c.JAX.Memory == nil {
		t.Fatalf("%s: %q\n%s", c.Name, c.Error, progress.String())
	}
	if len(c.Ours.Loss) != 0 || len(c.JAX.Loss) != 0 || c.Ours.FirstStepSeconds <= 0 || c.JAX.CompileSeconds <= 0 {
		t.Errorf("compiled only: losses %v / %v, build+compile %.2f s, JAX compile %.2f s", c.Ours.Loss, c.JAX.Loss, c.Ours.FirstStepSeconds, c.JAX.CompileSeconds)
	}
	// The same weights and Adam state; only scalars differ (step counters are int64 vs int32).
	if d := c.Ours.Memory.AliasBytes - c.JAX.Memory.AliasBytes; d < -64 || d > 64 || c.Ours.Memory.AliasBytes < 600<<10 {
		t.Errorf("aliased bytes ours %d, JAX %d: want the same weights and Adam state (~700 KiB)", c.Ours.Memory.AliasBytes, c.JAX.Memory.AliasBytes)
	}
	if c.Ours.Census == nil || c.JAX.Census == nil || c.Ours.Census.Instructions == 0 || c.JAX.Census.Instructions == 0 {
		t.Errorf("census missing: ours %+v, JAX %+v", c.Ours.Census, c.JAX.Census)
	}
	// By default the reference runs on onegpu's plugin: one runtime for both sides.
	if real, _ := filepath.EvalSymlinks(plugin); !strings.Contains(c.JAX.Runtime, "pjrt plugin") || !strings.HasSuffix(c.JAX.Runtime, real) {
		t.Errorf("the reference ran on %q, want onegpu's plugin %s", c.JAX.Runtime, real)
	}
}

func stepRatio(c *compareResult) string {
	if c.Ours == nil || c.JAX == nil || c.Ours.MeanStepSeconds == nil || c.JAX.MeanStepSeconds == nil {
		return "-"
	}
	return compareRatio(*c.Ours.MeanStepSeconds, *c.JAX.MeanStepSeconds)
}

// fakeReference writes a stand-in for the reference: a shell script run as "python" that prints
// the given JSON whatever its arguments.
func fakeReference(t *testing.T, result string) (python, script string) {
	t.Helper()
	body := "cat <<'EOF'\n" + result + "\nEOF\n"
	if result == "" {
		body = "echo 'Traceback: no module named jax' >&2\nexit 3\n"
	}
	return fakeReferenceScript(t, body)
}

// fakeReferenceScript writes a stand-in for the reference that runs the shell commands body.
func fakeReferenceScript(t *testing.T, body string) (python, script string) {
	t.Helper()
	dir := t.TempDir()
	python = filepath.Join(dir, "python")
	if err := os.WriteFile(python, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	script = filepath.Join(dir, "tutorial.py")
	if err := os.WriteFile(script, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return python, script
}

// TestCompareDisagreement: losses that differ make the verdict DISAGREE and the exit status 1,
// after the table is printed; a reference that fails is reported, also with status 1. The onegpu
// side runs for real (the MLP on the embedded backend, fast).
func TestCompareDisagreement(t *testing.T) {
	for _, tc := range []struct {
		name, result, want string
	}{
		{"wrong losses", `{"framework": "jax", "jax": "0.0-fake", "device_kind": "cpu", "loss": [1.0, 1.0], "accuracy": [0, 0],
			"step_seconds": [1, 0.5], "first_step_seconds": 2, "mean_step_seconds": 0.5, "tokens_per_second": 1024,
			"memory": {"argument_bytes": 100, "output_bytes": 10, "alias_bytes": 0, "temp_bytes": 50, "code_bytes": 0, "total_bytes": 160}}`,
			"DISAGREE"},
		{"failing reference", "", "the JAX reference"},
		{"too few steps", `{"loss": [1.0], "accuracy": [0], "step_seconds": [1]}`, "the reference trained 1 steps, onegpu 2"},
		{"short accuracy list", `{"loss": [1.0, 1.0], "accuracy": [0], "step_seconds": [1, 1]}`, "1 accuracies for 2 steps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			python, script := fakeReference(t, tc.result)
			var out, progress bytes.Buffer
			err := runCompare([]string{"--steps", "2", "--backend", "go", "--python", python, "--script", script, "--config", "--model mlp --batch 64"}, &out, &progress)
			var exit *exitError
			if !errors.As(err, &exit) || exit.code != 1 {
				t.Errorf("compare = %v, want exit status 1", err)
			}
			if !strings.Contains(out.String(), tc.want) || !strings.Contains(out.String(), "0 of 1 configurations agree") {
				t.Errorf("output lacks %q:\n%s\n%s", tc.want, out.String(), progress.String())
			}
		})
	}
}

// TestCompareBoundsTheReference: a reference that hangs is stopped after --jax-timeout, and one
// that floods its output is echoed and quoted in bounded pieces, with a note of how much was
// left out; the result on its last line is still read.
func TestCompareBoundsTheReference(t *testing.T) {
	const flood = 20 << 20 // bytes on each stream
	result := `{"framework": "jax", "loss": [1.0, 1.0], "accuracy": [0, 0], "step_seconds": [1, 1]}`
	for _, tc := range []struct {
		name, body string
		args       []string
		want       string // in the configuration's error, or "" for a result that was read
	}{
		{"hangs", "exec sleep 600\n", []string{"--jax-timeout", "1s"}, "ran past --jax-timeout 1s and was stopped"},
		{"floods, then the result", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' e >&2\nhead -c %d /dev/zero | tr '\\0' o\necho\necho '%s'\n", flood, flood, result), nil, ""},
		{"floods, no result", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' o\n", flood), nil, "bytes left out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			python, script := fakeReferenceScript(t, tc.body)
			var out, progress bytes.Buffer
			args := append([]string{"--json", "--steps", "2", "--backend", "go", "--python", python, "--script", script, "--config", "--model mlp --batch 64"}, tc.args...)
			_ = runCompare(args, &out, &progress)
			var report compareReport
			if err := json.Unmarshal(out.Bytes(), &report); err != nil || len(report.Configs) != 1 {
				t.Fatalf("compare printed no report (%v): %.2000s", err, out.String())
			}
			c := report.Configs[0]
			switch {
			case tc.want == "" && (c.Error != "" || c.JAX == nil || len(c.JAX.Loss) != 2):
				t.Errorf("the result was not read: error %q", c.Error)
			case tc.want != "" && !strings.Contains(c.Error, tc.want):
				t.Errorf("error %q, want one containing %q", c.Error, tc.want)
			}
			if len(c.Error) > 4<<10 {
				t.Errorf("an error of %d bytes: %.300s...", len(c.Error), c.Error)
			}
			if progress.Len() > 2*(compareEchoHead+compareEchoTail)+64<<10 {
				t.Errorf("echoed %d bytes of progress for a reference that wrote %d", progress.Len(), flood)
			}
			if strings.Contains(tc.body, ">&2") && !strings.Contains(progress.String(), "bytes of the reference's output left out") {
				t.Errorf("the echo does not say what it left out:\n%.500s", progress.String())
			}
		})
	}
}

func TestCompareConfigErrors(t *testing.T) {
	python, script := fakeReference(t, "{}")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--configs", "tpu"}, `unknown --configs "tpu"`},
		{[]string{"--steps", "0"}, "--steps 0"},
		{[]string{"--jax-runtime", "cuda"}, `unknown --jax-runtime "cuda": use plugin, own`},
		{[]string{"--script", "/nonexistent/tutorial.py"}, "--script"},
		{[]string{"--jax-timeout", "0s"}, "--jax-timeout 0s: give the reference a positive time"},
		// Outputs are checked before anything runs (progress stays empty, below).
		{[]string{"--config", "--model mlp --batch 64", "--steps", "1", "--json-file", "/nonexistent/x.json"}, "--json-file /nonexistent/x.json: the folder /nonexistent does not exist"},
		{[]string{"--config", "--model mlp --batch 64", "--steps", "1", "--json-file", os.TempDir()}, "--json-file " + os.TempDir() + ": is a folder"},
		{[]string{"--config", "--model mlp --batch 64", "--steps", "1", "--keep", "/etc/passwd/kept"}, "--keep /etc/passwd/kept: the folder /etc/passwd/kept goes through a file"},
	} {
		args := append([]string{"--python", python, "--script", script}, tc.args...) // a later --script wins
		var progress bytes.Buffer
		err := runCompare(args, &bytes.Buffer{}, &progress)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("compare %v = %v, want an error containing %q", tc.args, err, tc.want)
		}
		if progress.Len() > 0 {
			t.Errorf("compare %v ran before refusing:\n%s", tc.args, progress.String())
		}
	}
	// A bad --config stops compare before any configuration runs, even one given before it.
	var out bytes.Buffer
	err := runCompare([]string{"--python", python, "--script", script, "--config", "--model mlp", "--config", "--model gpt --preset huge"}, &out, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), `unknown GPT preset "huge"`) || out.Len() > 0 {
		t.Errorf("a bad --config: %v\n%s", err, out.String())
	}
}

func TestCompareRelDiff(t *testing.T) {
	for _, tc := range []struct{ a, b, want float64 }{
		{1, 1, 0}, {1.1, 1, 0.1}, {0.9, 1, 0.1}, {1, 0, 1}, {math.NaN(), 1, math.MaxFloat64}, {1, math.Inf(1), math.MaxFloat64},
	} {
		if got := compareRelDiff(tc.a, tc.b); math.Abs(got-tc.want) > 1e-12 && got != tc.want {
			t.Errorf("compareRelDiff(%g, %g) = %g, want %g", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestCompareFloatsJSON: a diverged (NaN) loss travels as null, both ways.
func TestCompareFloatsJSON(t *testing.T) {
	b, err := json.Marshal(floats{1.5, math.NaN(), math.Inf(1)})
	if err != nil || string(b) != "[1.5,null,null]" {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	var back floats
	if err := json.Unmarshal(b, &back); err != nil || len(back) != 3 || back[0] != 1.5 || !math.IsNaN(back[1]) {
		t.Errorf("Unmarshal = %v, %v", back, err)
	}
}
