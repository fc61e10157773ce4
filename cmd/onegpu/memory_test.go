package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/platform"
)

func TestMemoryJSON(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	var ours, stock map[string]any
	for _, c := range []struct {
		args []string
		into *map[string]any
	}{{[]string{"--json"}, &ours}, {[]string{"--json", "--stock-gradients"}, &stock}} {
		var out bytes.Buffer
		if err := runMemory(c.args, &out); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(out.Bytes(), c.into); err != nil {
			t.Fatalf("%v: not JSON: %v\n%s", c.args, err, out.String())
		}
	}
	for _, key := range []string{"backend", "params", "peak_bytes", "flops", "breakdown_at_peak"} {
		if _, ok := ours[key]; !ok {
			t.Errorf("JSON has no %q", key)
		}
	}
	if got := ours["params"].(float64); got != 59236 { // 128*256+256 + 2*256 + 256*100+100
		t.Errorf("params %v, want 59236", got)
	}
	breakdown := ours["breakdown_at_peak"].(map[string]any)
	var sum float64
	for _, kind := range []string{"parameters", "optimizer_state", "gradients", "activations", "other"} {
		sum += breakdown[kind].(float64)
	}
	if sum != ours["peak_bytes"].(float64) {
		t.Errorf("breakdown sums to %v, peak_bytes is %v", sum, ours["peak_bytes"])
	}
	if ours["backend"] != "go:ops_sequential" {
		t.Errorf("backend %v, want the embedded default go:ops_sequential", ours["backend"])
	}
	if ratio := stock["peak_bytes"].(float64) / ours["peak_bytes"].(float64); ratio < 5 {
		t.Errorf("GoMLX's gradient rules need %.1fx the peak memory of onegpu's; expected far more (> 5x)", ratio)
	}
}

func TestMemoryText(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	var out bytes.Buffer
	if err := runMemory([]string{"--batch", "64"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"batch 64", "parameters      59,236", "peak memory", "at the peak, by kind:", "activations", "largest buffers alive"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestMemoryBadInput(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", "resnet"}, `unknown --model "resnet"`},
		{[]string{"--batch", "-1"}, "must be at least 1"},
		{[]string{"--backend", "xla:/missing/plugin.so"}, "not found"},
		{[]string{"--backend", "tpu"}, `unknown backend "tpu"`},
	} {
		err := runMemory(c.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one containing %q", c.args, err, c.want)
		}
	}
}

func TestEnv(t *testing.T) {
	t.Setenv(platform.EnvBackend, "go:parallelism=8")
	var out bytes.Buffer
	if err := runEnv([]string{"--json"}, &out); err != nil {
		t.Fatal(err)
	}
	var r envReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if r.Backend != "go:parallelism=8" || !strings.Contains(r.BackendWhy, "$GOMLX_BACKEND") || r.Environment[platform.EnvBackend] != "go:parallelism=8" {
		t.Errorf("env does not explain the backend chosen from $GOMLX_BACKEND: %+v", r)
	}
}

func TestTrainJSON(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	var out bytes.Buffer
	if err := runTrain([]string{"--steps", "3", "--json", "--remat", "block", "--microbatches", "2"}, &out); err != nil {
		t.Fatal(err)
	}
	var r struct {
		Config string
		Steps  []struct {
			Step int
			Loss float64
		}
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.String())
	}
	if len(r.Steps) != 3 || r.Steps[2].Step != 3 || r.Steps[0].Loss <= 0 || !strings.Contains(r.Config, "remat block") {
		t.Errorf("unexpected history: %+v", r)
	}
}

func TestTrainBadInput(t *testing.T) {
	t.Setenv(platform.EnvBackend, "") // the embedded backend: it refuses float16
	t.Setenv(platform.EnvPlugin, "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--microbatches", "3"}, "a batch of 16 does not split into 3 equal micro-batches"},
		{[]string{"--policy", "compute=int8"}, "int8"},
		{[]string{"--preset", "huge"}, `unknown GPT preset "huge"`},
		{[]string{"--remat", "mlp", "--model", "mlp"}, "no blocks to rematerialize"},
		{[]string{"--data", "wiki"}, `unknown --data "wiki"`},
		{[]string{"--policy", "f16"}, "bfloat16"},
	} {
		err := runTrain(c.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one containing %q", c.args, err, c.want)
		}
	}
}

// TestMemoryAuditGrouped: the tutorial GPT's dtype audit is clean with onegpu's gradient rules
// (the scalar ties of remat, 96 of them, were once reported as float32 detours), and with GoMLX's
// own rules (--stock-gradients) it is a summary: the identical 16-bit reductions of every block,
// micro-batch and recomputation are one line each that counts them and says where, and the whole
// audit takes at most 15 lines.
func TestMemoryAuditGrouped(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	var out bytes.Buffer
	if err := runMemory([]string{"--model", "gpt", "--preset", "tutorial"}, &out); err != nil {
		t.Fatal(err)
	}
	if _, audit, found := strings.Cut(out.String(), "\ndtype audit: "); found {
		t.Errorf("onegpu's rules: the audit found\n%s", audit)
	}
	out.Reset()
	if err := runMemory([]string{"--model", "gpt", "--preset", "tutorial", "--stock-gradients"}, &out); err != nil {
		t.Fatal(err)
	}
	_, audit, found := strings.Cut(out.String(), "\ndtype audit: ")
	if !found {
		t.Fatalf("GoMLX's rules: no dtype audit:\n%s", out.String())
	}
	t.Logf("dtype audit: %s", audit)
	lines := strings.Split(strings.TrimRight(audit, "\n"), "\n")
	if len(lines) > 15 {
		t.Errorf("the audit takes %d lines, want at most 15:\n%s", len(lines), audit)
	}
	if !strings.Contains(audit, "16-bit reduction ×") || !strings.Contains(audit, "/block_*/") {
		t.Errorf("want the 16-bit reductions grouped, with the blocks they are in:\n%s", audit)
	}
}

// TestMemoryLayers: memory --layers N builds the preset at another depth, the rest the same: the
// estimate is affine in the layers (the tiny Llama at 3 layers is 1 layer plus twice the second's
// bytes, to the byte), --layers 2 of the tiny Llama is its preset; a LoRA run of an untied Llama
// says its input embedding stays in host memory; --layers below 1, and of the MLP, are refused.
func TestMemoryLayers(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	peak := func(args ...string) (int64, memoryReport) {
		t.Helper()
		var out bytes.Buffer
		if err := runMemory(append([]string{"--model", "llama", "--preset", "tiny", "--json"}, args...), &out); err != nil {
			t.Fatalf("memory %v: %v", args, err)
		}
		var r memoryReport
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		return r.PeakBytes, r
	}
	one, _ := peak("--layers", "1")
	two, _ := peak("--layers", "2")
	three, _ := peak("--layers", "3")
	preset, _ := peak()
	if three != one+2*(two-one) || two != preset {
		t.Errorf("peaks at 1, 2, 3 layers %d, %d, %d (the preset %d): want affine in the layers, 2 the preset's", one, two, three, preset)
	}
	if _, r := peak("--lora", "rank=2"); r.EmbeddingOnHost {
		t.Errorf("the tiny Llama ties its embeddings: its table cannot stay on the host")
	}
	if _, r := peak("--preset", "llama-3.1-8b", "--layers", "1", "--seq", "128", "--batch", "1", "--microbatches", "1", "--lora", "rank=2"); !r.EmbeddingOnHost {
		t.Errorf("Llama-3.1-8B's untied table under LoRA: want it in host memory")
	}
	for want, args := range map[string][]string{
		"--layers -1: build at least 1 layer":        {"--model", "llama", "--preset", "tiny", "--layers", "-1"},
		"--layers 2: the mlp has no layers to count": {"--model", "mlp", "--layers", "2"},
	} {
		err := runMemory(args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: %v, want an error saying %q", args, err, want)
		}
	}
}
