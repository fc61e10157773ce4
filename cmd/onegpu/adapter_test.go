package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/platform"
)

// evalLoss runs eval --json with args and returns its loss.
func evalLoss(t *testing.T, args ...string) float64 {
	t.Helper()
	var out bytes.Buffer
	if err := runEval(append(args, "--json"), &out); err != nil {
		t.Fatalf("eval %v: %v", args, err)
	}
	var r evalReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	return r.Loss
}

// trainLosses runs train --json with args and returns its losses.
func trainLosses(t *testing.T, args ...string) []float64 {
	t.Helper()
	var out bytes.Buffer
	if err := runTrain(append(args, "--json"), &out); err != nil {
		t.Fatalf("train %v: %v\n%s", args, err, out.String())
	}
	var r struct{ Steps []struct{ Loss float64 } }
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.String())
	}
	var losses []float64
	for _, s := range r.Steps {
		losses = append(losses, s.Loss)
	}
	return losses
}

// TestAdapterRoundTrip: on the untied Llama fixture (float32), an adapter peft wrote starts a run
// (--init-adapter) whose first loss is eval --adapter's; a LoRA run (and a QLoRA one) exports its
// adapters (--export-adapter) and the merged model (--export-hf --merge), and eval gives the same
// loss for both (1e-5 relative; the QLoRA adapter evaluated on the base quantized as it trained,
// eval --quantize-base nf4, the merged model holding the dequantized base). Where $ONEGPU_TRANSFORMERS_PYTHON names a Python with
// transformers and peft, peft loads the exported adapter without missing or unexpected keys and
// computes eval's loss within 2e-4, and transformers the merged model's.
func TestAdapterRoundTrip(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	fx := testkit.ReadHFFixture(t, "llama3_untied")
	tokens := fx.Dir + ".tokens.npy"
	peftAdapter := filepath.Join(filepath.Dir(fx.Dir), "peft", "llama3_untied_lora")
	run := []string{"--init-hf", fx.Dir, "--data", tokens, "--seq", "23", "--batch", "2", "--microbatches", "1", "--policy", "float32"}

	first := trainLosses(t, append(run, "--init-adapter", peftAdapter, "--steps", "1")...)[0]
	want := evalLoss(t, "--hf", fx.Dir, "--adapter", peftAdapter, "--tokens", tokens)
	t.Logf("peft's adapter: first train loss %.7f, eval --adapter %.7f", first, want)
	if math.Abs(first-want) > 1e-6*want {
		t.Errorf("--init-adapter's first loss %.9g, eval --adapter's %.9g", first, want)
	}

	for name, extra := range map[string][]string{"lora": nil, "qlora": {"--quantize-base", "nf4"}} {
		dir := t.TempDir()
		adapter, merged := filepath.Join(dir, "adapter"), filepath.Join(dir, "merged")
		args := append(append(run, "--lora", "rank=4,alpha=8,targets=q,k,v,o,gate,up,down", "--steps", "4", "--lr", "5e-2",
			"--export-adapter", adapter, "--export-hf", merged, "--merge"), extra...)
		losses := trainLosses(t, args...)
		adapted := evalLoss(t, append([]string{"--hf", fx.Dir, "--adapter", adapter, "--tokens", tokens}, extra...)...)
		whole := evalLoss(t, "--hf", merged, "--tokens", tokens)
		t.Logf("%s: train %.4f -> %.4f; eval with the adapter %.7f, of the merged export %.7f", name, losses[0], losses[len(losses)-1], adapted, whole)
		if math.Abs(adapted-whole) > 1e-5*adapted {
			t.Errorf("%s: eval with the adapter %.9g, of the merged model %.9g", name, adapted, whole)
		}
		if !(adapted < want) && !(adapted < losses[0]) {
			t.Errorf("%s: the trained adapter's loss %g did not fall from %g", name, adapted, losses[0])
		}
		python := os.Getenv("ONEGPU_TRANSFORMERS_PYTHON")
		if python == "" || name != "lora" {
			continue
		}
		script := filepath.Join("..", "..", "reference", "hf", "peft_fixture.py")
		for _, cmd := range [][]string{{"loss", fx.Dir, adapter, tokens}, {"merged", merged, fx.Dir, adapter, tokens}} {
			raw, err := exec.Command(python, append([]string{script}, cmd...)...).Output()
			if err != nil {
				t.Fatalf("%s %v: %v\n%s", script, cmd, err, raw)
			}
			lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
			var r struct {
				Loss, MergedLoss, PeftMergedLoss float64
				Missing, Unexpected              []string
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &m); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %v", cmd[0], m)
			r.Loss, _ = m["loss"].(float64)
			r.MergedLoss, _ = m["merged_loss"].(float64)
			if cmd[0] == "loss" && (math.Abs(r.Loss-adapted) > 2e-4 || len(m["missing_keys"].([]any))+len(m["unexpected_keys"].([]any)) > 0) {
				t.Errorf("peft's loss of the exported adapter %g (keys %v), onegpu's %g", r.Loss, m, adapted)
			}
			if cmd[0] == "merged" && math.Abs(r.MergedLoss-whole) > 2e-4 {
				t.Errorf("transformers' loss of the merged export %g, onegpu's %g", r.MergedLoss, whole)
			}
		}
	}
}

// TestAdapterFlagErrors: adapter flags that cannot apply are refused before training.
func TestAdapterFlagErrors(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	fx := testkit.ReadHFFixture(t, "llama3_untied")
	peftAdapter := filepath.Join(filepath.Dir(fx.Dir), "peft", "llama3_untied_lora")
	out := filepath.Join(t.TempDir(), "out")
	run := []string{"--init-hf", fx.Dir, "--seq", "23", "--steps", "1", "--batch", "2", "--microbatches", "1"}
	for want, args := range map[string][]string{
		"--export-hf with --lora: give --merge":                       {"--lora", "rank=2", "--export-hf", out},
		"--merge applies to a run with adapters: give --lora too":     {"--merge", "--export-hf", out},
		"--export-adapter applies to a run with adapters":             {"--export-adapter", out},
		"--merge applies to --export-hf":                              {"--lora", "rank=2", "--merge"},
		"is not --init-adapter":                                       {"--lora", "rank=2", "--init-adapter", peftAdapter},
		"--init-adapter: reading the adapter":                         {"--init-adapter", out},
		`--export-adapter: lora: target "x_proj" is not a projection`: {"--lora", "rank=2,targets=x_proj", "--export-adapter", out},
	} {
		var log bytes.Buffer
		err := runTrain(append(run, args...), &log)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: error %v, want one saying %q", args, err, want)
		}
	}
}

// TestLoRAResumeLoadsTheBaseAgain: a QLoRA run from the Llama fixture (--init-hf) saves
// checkpoints of its adapters only; resumed with the same flags it loads and quantizes --init-hf
// again and takes the uninterrupted run's losses bit for bit; resumed on another base (a copy of
// the fixture with one weight changed) it is refused, naming both bases, before any step.
func TestLoRAResumeLoadsTheBaseAgain(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	fx := testkit.ReadHFFixture(t, "llama3_untied")
	tokens := fx.Dir + ".tokens.npy"
	run := []string{"--data", tokens, "--seq", "23", "--batch", "2", "--microbatches", "1", "--policy", "float32",
		"--lora", "rank=4,alpha=8,targets=q,k,v,o,gate,up,down", "--quantize-base", "nf4", "--lr", "5e-2"}
	withBase := append([]string{"--init-hf", fx.Dir}, run...)
	straight := trainLosses(t, append(withBase, "--steps", "4")...)
	dir := filepath.Join(t.TempDir(), "run")
	resumed := trainLosses(t, append(withBase, "--steps", "2", "--checkpoint", dir)...)
	resumed = append(resumed, trainLosses(t, append(withBase, "--steps", "4", "--checkpoint", dir)...)...)
	if !slices.Equal(straight, resumed) {
		t.Errorf("losses uninterrupted %v, resumed %v", straight, resumed)
	}
	bins, err := filepath.Glob(filepath.Join(dir, "checkpoint-*.bin"))
	if err != nil || len(bins) == 0 {
		t.Fatalf("no checkpoint in %s (%v)", dir, err)
	}
	info, err := os.Stat(bins[len(bins)-1])
	if err != nil {
		t.Fatal(err)
	}
	base, err := os.Stat(filepath.Join(fx.Dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a checkpoint's data %d bytes; the base's safetensors %d bytes", info.Size(), base.Size())
	// Another base of the same shape: the fixture with one weight's lowest byte changed.
	other := copyFolder(t, fx.Dir, filepath.Join(t.TempDir(), "other"))
	weights := filepath.Join(other, "model.safetensors")
	raw, err := os.ReadFile(weights)
	if err != nil {
		t.Fatal(err)
	}
	raw[8+binary.LittleEndian.Uint64(raw)] ^= 1 // the first tensor's first byte
	if err := os.WriteFile(weights, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = runTrain(append(append([]string{"--init-hf", other}, run...), "--steps", "6", "--checkpoint", dir), &out)
	if err == nil || !strings.Contains(err.Error(), "holds adapters trained on another base") || !strings.Contains(err.Error(), "llama3_untied in float32)") ||
		!strings.Contains(err.Error(), "other in float32)") {
		t.Errorf("resumed on another base: %v, want an error naming both bases", err)
	}
	t.Logf("resumed on another base: %v", err)
}
