package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/platform"
)

// TestTrainLoRA: train --lora (and --quantize-base nf4, --base-dtype bfloat16) trains the tiny
// Llama's adapters: the loss falls, and QLoRA starts within 1% of LoRA (the same weights, then
// quantized).
func TestTrainLoRA(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	first := map[string]float64{}
	for name, args := range map[string][]string{
		"lora":  {"--lora", "rank=4,alpha=8,targets=q,k,v,o,gate,up,down"},
		"qlora": {"--lora", "rank=4,alpha=8,targets=q,k,v,o,gate,up,down", "--quantize-base", "nf4", "--base-dtype", "bfloat16"},
	} {
		var out bytes.Buffer
		if err := runTrain(append([]string{"--model", "llama", "--preset", "tiny", "--steps", "6", "--batch", "8", "--microbatches", "2", "--lr", "1e-2", "--json"}, args...), &out); err != nil {
			t.Fatal(err)
		}
		var r struct{ Steps []struct{ Loss float64 } }
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out.String())
		}
		if f, last := r.Steps[0].Loss, r.Steps[len(r.Steps)-1].Loss; !(last < f) {
			t.Errorf("%s: loss %v -> %v: want a fall", name, f, last)
		}
		first[name] = r.Steps[0].Loss
	}
	if d := first["qlora"]/first["lora"] - 1; d > 0.01 || d < -0.01 {
		t.Errorf("first losses: LoRA %g, QLoRA %g", first["lora"], first["qlora"])
	}
}

// TestLoRAFlagErrors: the adapters' flags are checked before anything is built, in the flags'
// words.
func TestLoRAFlagErrors(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	for want, args := range map[string][]string{
		"--quantize-base applies to a run with adapters on a frozen base: give --lora too": {"--quantize-base", "nf4"},
		"--base-dtype applies to a run with adapters":                                      {"--base-dtype", "bfloat16"},
		"--lora: lora: \"rank=0\" has no rank":                                             {"--lora", "rank=0"},
		"--quantize-base: quant: unknown format \"nf3\"":                                   {"--lora", "rank=2", "--quantize-base", "nf3"},
		"--base-dtype \"int8\": want float32 or bfloat16":                                  {"--lora", "rank=2", "--base-dtype", "int8"},
		"--lora targets x_proj, which the model does not have":                             {"--lora", "rank=2,targets=q,x_proj"},
	} {
		var out bytes.Buffer
		err := runTrain(append([]string{"--model", "llama", "--preset", "tiny", "--steps", "1", "--batch", "8"}, args...), &out)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: error %v, want one saying %q", args, err, want)
		}
	}
}
