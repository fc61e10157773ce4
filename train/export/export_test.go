package export_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/train"
	"github.com/onegpu/onegpu/train/export"
)

// embedded is the embedded backend in sequential mode, shared by the tests.
var embedded = testkit.Embedded

// tinyConfig is the tiny GPT with the tutorial's techniques: bfloat16 compute, remat of MLP and
// attention, 4 micro-batches.
func tinyConfig(t *testing.T) train.Config {
	p, err := mixed.ParsePolicy("params=float32,compute=bfloat16,output=float32")
	if err != nil {
		t.Fatal(err)
	}
	return train.Config{Model: models.GPT{Config: models.Presets["tiny"]}, Batch: 16, MicroBatches: 4, Policy: p,
		Remat: train.Remat{Kinds: []string{"mlp", "attn"}}, Schedule: optim.WarmupExponentialDecay(0, 3e-3, 10, 1, 0.999), Seed: 7}
}

// TestExportTinyGPT: Initialize compiles and initializes without updating anything; Write writes
// every parameter under its Flax path, the batches and a config; the first step starts from
// exactly the exported weights (its learning rate is 0, so they are still equal after it).
func TestExportTinyGPT(t *testing.T) {
	config := tinyConfig(t)
	gpt := models.Presets["tiny"]
	gpt.Layers = 1
	config.Model = models.GPT{Config: gpt}
	tr, err := train.New(embedded(), config)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	batches, err := data.NewSyntheticTokens(config.Batch, gpt.SeqLen, gpt.Vocab, 3)
	must(t, err)
	must(t, tr.Initialize())
	if tr.GlobalStep() != 0 {
		t.Fatalf("after Initialize the global step is %d, want 0", tr.GlobalStep())
	}
	dir := t.TempDir()
	ref, err := export.Write(tr, dir, batches, 3)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	var size int64
	for _, p := range ref.Params {
		paths = append(paths, p.Path)
		n := int64(1)
		for _, d := range p.Shape {
			n *= int64(d)
		}
		size += n
	}
	for _, want := range []string{"embed/embedding", "pos_emb", "block_0/mlp/pre_norm/scale", "block_0/mlp/input_layer/kernel",
		"block_0/mlp/output_layer/bias", "block_0/attn/qkv/kernel", "block_0/attn/output_layer/kernel", "post_norm/bias", "output_layer/kernel"} {
		if !slices.Contains(paths, want) {
			t.Errorf("exported parameters %v lack %s", paths, want)
		}
	}
	if want := gpt.Params(); size != want {
		t.Errorf("exported %d parameter values, want %d", size, want)
	}
	qkv, err := data.ReadNPYFile(filepath.Join(dir, "params", "block_0", "attn", "qkv", "kernel.npy"))
	if err != nil {
		t.Fatal(err)
	}
	c := gpt
	if got, want := qkv.Shape().Dimensions, []int{c.Hidden, c.Heads(), 3 * c.HeadDim}; !slices.Equal(got, want) {
		t.Errorf("qkv kernel shape %v, want %v (Flax's DenseGeneral layout)", got, want)
	}
	inputs, err := data.ReadNPYFile(filepath.Join(dir, "inputs.npy"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := inputs.Shape().Dimensions, []int{3, config.Batch, c.SeqLen}; !slices.Equal(got, want) {
		t.Errorf("inputs shape %v, want %v", got, want)
	}
	var back export.Reference
	blob, err := os.ReadFile(filepath.Join(dir, "config.json"))
	must(t, err)
	must(t, json.Unmarshal(blob, &back))
	if back.GPT == nil || back.GPT.Heads != c.Heads() || back.Policy["compute"] != "bfloat16" || !slices.Equal(back.Remat, []string{"mlp", "attn"}) ||
		back.MicroBatches != config.MicroBatches || back.Schedule.Peak != 3e-3 || back.Schedule.Init != 0 || back.Optimizer != "adam" ||
		back.OptimizerParams["eps"] != 1e-8 || back.Adam["b2"] != 0.999 || back.LossScale != "none" {
		t.Errorf("config.json = %s", blob)
	}

	if _, err := tr.Step(batches.Batch(0)); err != nil { // learning rate 0: the weights stay
		t.Fatal(err)
	}
	after := t.TempDir()
	if _, err := export.Write(tr, after, batches, 1); err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		a, err1 := os.ReadFile(filepath.Join(dir, "params", p+".npy"))
		b, err2 := os.ReadFile(filepath.Join(after, "params", p+".npy"))
		if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
			t.Errorf("%s changed in a step of learning rate 0 (%v, %v): the step did not start from the exported weights", p, err1, err2)
		}
	}
}

// TestExportClassifierNames: the MLP's parameters carry Flax's automatic names.
func TestExportClassifierNames(t *testing.T) {
	c := models.TutorialClassifier
	c.Inputs, c.Hidden, c.Classes = 8, 16, 5
	p := tinyConfig(t).Policy
	tr, err := train.New(embedded(), train.Config{Model: models.Classifier{Config: c}, Batch: 4, MicroBatches: 1, Policy: p,
		Schedule: optim.Constant(1e-3), Optimizer: optim.AdamW().Done()})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	batches, err := data.NewClassifierBatch(4, 8, 5, 1)
	must(t, err)
	must(t, tr.Initialize())
	ref, err := export.Write(tr, t.TempDir(), batches, 1)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, p := range ref.Params {
		paths = append(paths, p.Path)
	}
	want := []string{"Dense_0/bias", "Dense_0/kernel", "Dense_1/bias", "Dense_1/kernel", "LayerNorm_0/bias", "LayerNorm_0/scale"}
	if !slices.Equal(paths, want) {
		t.Errorf("classifier parameters %v, want %v", paths, want)
	}
	// A constant rate is optax's warm-up/exponential decay from the rate to itself; AdamW is optax's.
	if s := ref.Schedule; ref.Model != "mlp" || s.Init != 1e-3 || s.Peak != 1e-3 || s.WarmupSteps != 0 || s.DecayRate != 1 ||
		ref.Optimizer != "adamw" || ref.OptimizerParams["weight_decay"] != 1e-4 {
		t.Errorf("the classifier's reference: %+v", ref)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
