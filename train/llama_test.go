package train_test

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/train"
)

// llamaReference is the plain run the Llama's techniques are held to: the tiny Llama preset in
// float32, without remat, a batch of 8 sequences in one micro-batch, Adam at a constant 3e-3.
func llamaReference(t *testing.T) train.Config {
	c, err := models.LlamaPreset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	m, err := models.NewLlama(c)
	if err != nil {
		t.Fatal(err)
	}
	return train.Config{Model: m, Batch: 8, MicroBatches: 1, Policy: mixed.Float32, Schedule: optim.Constant(3e-3), Seed: 11}
}

// llamaLosses trains config for steps steps on the shipped text and returns the losses.
func llamaLosses(t *testing.T, backend backends.Backend, config train.Config, steps int) []float64 {
	t.Helper()
	tr, err := train.New(backend, config)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	seq, _ := config.Model.(train.LanguageModel).TokenShape()
	batches, err := data.NewText(data.Corpus, config.Batch, seq, 2)
	if err != nil {
		t.Fatal(err)
	}
	h, err := tr.Run(batches, train.RunOptions{Steps: steps})
	if err != nil {
		t.Fatal(err)
	}
	var losses []float64
	for _, s := range h.Steps {
		losses = append(losses, s.Loss)
	}
	return losses
}

// TestLlamaTechniques: every technique trains the tiny Llama. Against the plain float32 run (same
// seed, same data): remat of attention, MLP or whole layers and the optimizer offloaded to the
// host give its losses bit for bit (the same math, recomputed or elsewhere), 4 micro-batches
// within 1e-5 relative (exact token-weighted means, summed in another order), bfloat16 compute
// within 2e-2; 8-bit Adam and Adafactor start from the same loss (the same initial weights) and
// lower it. The MLP a chunk of 24 positions at a time (each chunk rematerialized; whole layers
// too) within 1e-6 (the weights' gradients summed chunk by chunk). With the XLA plugin (not -short), 2 devices give one device's losses within 1e-5.
func TestLlamaTechniques(t *testing.T) {
	t.Parallel()
	checkTechniques(t, llamaReference(t), []technique{
		{"remat attn", func(c *train.Config) { c.Remat.Kinds = []string{models.KindAttention} }, 0, false, true},
		{"remat mlp", func(c *train.Config) { c.Remat.Kinds = []string{models.KindMLP} }, 0, false, false},
		{"remat block", func(c *train.Config) { c.Remat.Kinds = []string{models.KindBlock} }, 0, false, true},
		{"offload optimizer", func(c *train.Config) { c.Offload = train.OffloadOptimizer }, 0, false, true},
		{"4 micro-batches", func(c *train.Config) { c.MicroBatches = 4 }, 1e-5, false, true},
		{"bf16", func(c *train.Config) {
			c.Policy = mixed.Policy{Param: dtypes.Float32, Compute: dtypes.BFloat16, Output: dtypes.Float32}
		}, 2e-2, false, true},
		{"adam8bit", func(c *train.Config) { c.Optimizer = mustOptimizer(t, "adam8bit") }, -1, false, true},
		{"adafactor", func(c *train.Config) { c.Optimizer = mustOptimizer(t, "adafactor") }, -1, false, false},
		{"2 devices", func(c *train.Config) { c.Devices = train.Devices{Count: 2} }, 1e-5, true, false},
		{"mlp chunked", func(c *train.Config) { c.MLP = layers.MLP{Chunk: 24} }, 1e-6, false, true},
		{"mlp chunked, remat block", func(c *train.Config) {
			c.MLP, c.Remat.Kinds = layers.MLP{Chunk: 24}, []string{models.KindBlock}
		}, 1e-6, false, false},
	})
}

// technique is a change to a reference run and how close its losses must stay to the reference's.
type technique struct {
	name  string
	edit  func(c *train.Config)
	tol   float64 // relative, per step; negative: only the first loss is held to the reference, and the loss must fall
	xla   bool    // on the XLA plugin, against the reference on it (not -short)
	short bool    // also with -short
}

// checkTechniques trains reference and each technique's change of it for 4 steps on the same data
// and holds the losses to the reference's.
func checkTechniques(t *testing.T, reference train.Config, cases []technique) {
	const steps = 4
	backend := embedded()
	want := llamaLosses(t, backend, reference, steps)
	if !(want[steps-1] < want[0]) {
		t.Fatalf("the plain run does not learn: losses %v", want)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && !tc.short {
				t.Skip("-short: the other cases cover the same code")
			}
			b := backend
			if tc.xla {
				b = xlaBackend(t)
				defer b.Finalize()
			}
			config := reference
			tc.edit(&config)
			expected := want
			if tc.xla {
				expected = llamaLosses(t, b, reference, steps)
			}
			got := llamaLosses(t, b, config, steps)
			t.Logf("losses %v; plain %v", got, expected)
			if tc.tol < 0 {
				if got[0] != expected[0] || !(got[steps-1] < got[0]-0.02) {
					t.Errorf("losses %v: want the plain run's first loss %v and a fall", got, expected[0])
				}
				return
			}
			for i := range expected {
				if rel := math.Abs(got[i]-expected[i]) / expected[i]; !(rel <= tc.tol) {
					t.Errorf("step %d: loss %.9g, plain %.9g: relative %.2g > %g", i+1, got[i], expected[i], rel, tc.tol)
				}
			}
		})
	}
}

func mustOptimizer(t *testing.T, name string) optim.Optimizer {
	o, err := optim.ByName(name, optim.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	return o
}
