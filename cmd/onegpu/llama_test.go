package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/platform"
)

// TestMemoryLlamaPresetsExact: `memory --model F --preset P --json` reports the published
// parameter counts of every Llama family's presets (the Llama's listed here, and each preset's as
// its description states it, "(N parameters)"), building the step without allocating its weights
// (one sequence, one micro-batch: the count does not depend on them; an 8B model's float32
// weights alone would not fit this machine).
func TestMemoryLlamaPresetsExact(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	published := map[string]float64{"tinyllama-1.1b": 1100048384, "llama-3.2-1b": 1235814400, "llama-3.1-8b": 8030261248,
		"llama-3.1-70b": 70553706496, "llama-3.3-70b": 70553706496}
	described := regexp.MustCompile(`\(([0-9,]+) parameters\)`)
	n := 0
	for _, key := range models.LlamaFamilyNames() {
		f, _ := models.LlamaFamilyOf(key)
		for _, preset := range f.PresetNames() {
			want, ok := published[preset]
			if m := described.FindStringSubmatch(f.Presets[preset].Description); m != nil {
				count, _ := strconv.ParseFloat(strings.ReplaceAll(m[1], ",", ""), 64)
				if ok && count != want {
					t.Errorf("%s: the description says %.0f parameters, the published count is %.0f", preset, count, want)
				}
				want, ok = count, true
			}
			if !ok {
				continue
			}
			n++
			var out bytes.Buffer
			if err := runMemory([]string{"--model", key, "--preset", preset, "--batch", "1", "--microbatches", "1", "--json"}, &out); err != nil {
				t.Fatal(err)
			}
			var r map[string]any
			if err := json.Unmarshal(out.Bytes(), &r); err != nil {
				t.Fatalf("not JSON: %v", err)
			}
			if got := r["params"].(float64); got != want {
				t.Errorf("%s %s: params %.0f, want %.0f", key, preset, got, want)
			}
		}
	}
	if n < len(published) {
		t.Errorf("%d presets checked, fewer than the %d published Llama counts", n, len(published))
	}
}

// TestTrainLlamaTiny: `train --model llama --preset tiny` learns: the loss falls over 6 steps, and
// the progress names the model.
func TestTrainLlamaTiny(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
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
}

// TestPlanLargestLlama: plan --largest --model llama answers the largest Llama 3 of the family
// (plan.ScaledLlamas) at the preset's sequence, with the tutorial's techniques and with 8-bit Adam
// and the optimizer offloaded, the second at least as large, then streamed (the Llama runs as
// stages) with Adam and 8-bit Adam within the device budget.
func TestPlanLargestLlama(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	var out bytes.Buffer
	if err := runPlan([]string{"--model", "llama", "--preset", "tiny", "--largest", "--budget", "2GiB", "--host", "1TiB", "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	var r struct {
		Largest []struct {
			Model  string `json:"model"`
			Params int64  `json:"params"`
			Memory int64  `json:"memory_bytes"`
			Fits   bool   `json:"fits"`
		} `json:"largest"`
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.String())
	}
	if len(r.Largest) != 4 || !r.Largest[2].Fits || !r.Largest[3].Fits || r.Largest[3].Memory > 2<<30 || !r.Largest[0].Fits || r.Largest[1].Params < r.Largest[0].Params || !strings.Contains(r.Largest[0].Model, "sequence 64") ||
		r.Largest[1].Memory > 2<<30 {
		t.Errorf("plan --largest --model llama: %+v", r.Largest)
	}
	if err := runPlan([]string{"--model", "llama", "--preset", "tiny", "--devices", "2"}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "plan the gpt") {
		t.Errorf("plan --devices 2 --model llama: %v", err)
	}
}

// TestCompareLlamaAgreesWithJAX: on the same XLA, onegpu and the Flax Llama of
// reference/jax/models.py train the tiny Llama to the same losses (float32 within 1e-5 relative,
// bfloat16 compute with remat and 4 micro-batches within 1e-2), with the updated state aliased as
// JAX donates it (the same bytes but for a few scalar counters: 1,380,124 vs 1,380,112) and a
// compiled step no larger than JAX's (measured 0.84x in float32, 0.64x with the techniques).
func TestCompareLlamaAgreesWithJAX(t *testing.T) {
	python := referencePython()
	plugin := os.Getenv(platform.EnvPlugin)
	if python == "" || plugin == "" {
		t.Skipf("needs ../../.venv/bin/python with JAX and $%s (both set up by .ci/run): the side-by-side with JAX is not run", platform.EnvPlugin)
	}
	if testing.Short() {
		t.Skip("compiles two train steps on each side (about 60 s)")
	}
	t.Parallel() // a JAX process and an XLA compile: beside the other comparisons
	var out, progress bytes.Buffer
	err := runCompare([]string{"--json", "--steps", "6", "--backend", "xla:" + plugin, "--python", python,
		"--config", compareSets["llama"][0], "--config", compareSets["llama"][1]}, &out, &progress)
	var report compareReport
	if jerr := json.Unmarshal(out.Bytes(), &report); jerr != nil {
		t.Fatalf("compare printed no JSON (%v; err %v):\n%s\n%s", jerr, err, out.String(), progress.String())
	}
	for _, c := range report.Configs {
		if c.Error != "" || !c.Agree {
			t.Errorf("%s does not agree with JAX: error %q, relative differences %v\n%s", c.Name, c.Error, c.LossRelDiff, progress.String())
			continue
		}
		ours, theirs := c.Ours.Memory, c.JAX.Memory
		t.Logf("%s: largest relative loss difference %.2g; compiled total %d vs JAX %d bytes, aliased %d vs %d; step time ours/JAX %s",
			c.Name, c.MaxRelDiff, ours.TotalBytes, theirs.TotalBytes, ours.AliasBytes, theirs.AliasBytes, stepRatio(c))
		// The same weights and Adam state: the aliased bytes differ only by scalars (step counters).
		if math.Abs(float64(ours.AliasBytes-theirs.AliasBytes)) > 64 || ours.TotalBytes > theirs.TotalBytes {
			t.Errorf("%s: compiled total %d bytes (JAX %d), aliased %d (JAX %d): want at most JAX's total and the same aliasing",
				c.Name, ours.TotalBytes, theirs.TotalBytes, ours.AliasBytes, theirs.AliasBytes)
		}
	}
	if err != nil || !report.Agree || len(report.Configs) != 2 {
		t.Errorf("compare = %v, agree %v, %d configurations", err, report.Agree, len(report.Configs))
	}
}

// TestCompareModelConfigs: compare --model M [--preset P] runs the techniques' configurations of
// M from the cpu and llama sets, at P; a model compare does not run, or a preset of the MLP, is an
// error.
func TestCompareModelConfigs(t *testing.T) {
	got, err := modelConfigs("llama", "tiny")
	if err != nil || strings.Join(got, "|") != strings.Join(compareSets["llama"], "|") {
		t.Errorf("llama tiny: %v, %v; want the llama set", got, err)
	}
	got, err = modelConfigs("gpt", "small")
	if err != nil || len(got) != 3 || !strings.Contains(got[1], "--model gpt --preset small --policy params=float32,compute=bfloat16") {
		t.Errorf("gpt small: %v, %v", got, err)
	}
	for _, c := range []struct{ model, preset, want string }{
		{"mlp", "tiny", "the mlp has one size"}, {"resnet", "", `unknown --model "resnet": compare runs mlp, gpt, llama`},
	} {
		if _, err := modelConfigs(c.model, c.preset); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: %v, want %q", c.model, c.preset, err, c.want)
		}
	}
	for _, args := range [][]string{{"--preset", "tiny"}, {"--model", "llama", "--configs", "cpu"}} {
		if err := runCompare(args, &bytes.Buffer{}, &bytes.Buffer{}); err == nil {
			t.Errorf("compare %v: no error", args)
		}
	}
}
