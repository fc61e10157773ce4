package train_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/quant"
	"github.com/onegpu/onegpu/train"
)

// allProjections adapts every projection of the Llama's layers.
var allProjections = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

// TestLoRAStartsAtTheBase: the tiny Llama's first loss with LoRA on every projection equals the
// base model's bit for bit (B starts at zero), in float32 and with bfloat16 compute, 2
// micro-batches and remat of whole layers, with tied embeddings and untied ones (whose table the
// LoRA run keeps in host memory, gathering the rows there: EmbeddingOnHost); after 4 steps every
// base weight is bit-identical, every adapter has moved, the loss fell, and the optimizer holds
// state for the adapters only.
func TestLoRAStartsAtTheBase(t *testing.T) {
	bf16 := mixed.Policy{Param: dtypes.Float32, Compute: dtypes.BFloat16, Output: dtypes.Float32}
	for _, tc := range []struct {
		policy mixed.Policy
		tied   bool
	}{{mixed.Float32, true}, {bf16, true}, {mixed.Float32, false}, {bf16, false}} {
		policy := tc.policy
		base := llamaReference(t)
		base.Policy, base.MicroBatches, base.Remat = policy, 2, train.Remat{Kinds: []string{"block"}}
		if !tc.tied {
			l := base.Model.(models.Llama)
			l.Config.TiedEmbeddings = false
			base.Model = l
		}
		adapted := base
		adapted.LoRA = layers.LoRA{Rank: 4, Alpha: 8, Targets: allProjections}
		first := llamaLosses(t, testkit.Embedded(), base, 1)
		tr, err := train.New(testkit.Embedded(), adapted)
		if err != nil {
			t.Fatal(err)
		}
		if tr.EmbeddingOnHost() == tc.tied {
			t.Errorf("%s, tied %t: EmbeddingOnHost %t, want %t", policy, tc.tied, tr.EmbeddingOnHost(), !tc.tied)
		}
		ctx := context.New()
		p, err := analysis.ContextProgram(testkit.Embedded(), ctx, "step", tr.StepShapes(), tr.DeviceStepFn())
		if err != nil {
			t.Fatal(err)
		}
		for v := range ctx.IterVariables() {
			if strings.Contains(v.Scope(), "embed_tokens") && v.InUseByGraph(p.Graph) == !tc.tied {
				t.Errorf("%s, tied %t: the device step reads %s: %t", policy, tc.tied, v.ScopeAndName(), !tc.tied)
			}
		}
		p.Graph.Finalize()
		if err := tr.Initialize(); err != nil {
			t.Fatal(err)
		}
		before := testkit.Variables(t, tr.Ctx)
		seq, _ := adapted.Model.(train.LanguageModel).TokenShape()
		batches, err := data.NewText(data.Corpus, adapted.Batch, seq, 2)
		if err != nil {
			t.Fatal(err)
		}
		h, err := tr.Run(batches, train.RunOptions{Steps: 4})
		if err != nil {
			t.Fatal(err)
		}
		if h.Steps[0].Loss != first[0] {
			t.Errorf("%s: first loss %.9g with LoRA, %.9g without: want the same bits", policy, h.Steps[0].Loss, first[0])
		}
		if !(h.Steps[3].Loss < h.Steps[0].Loss) {
			t.Errorf("%s: LoRA did not lower the loss: %.6g -> %.6g", policy, h.Steps[0].Loss, h.Steps[3].Loss)
		}
		after := testkit.Variables(t, tr.Ctx)
		var adapters, state, adapterParams int
		for v := range tr.Ctx.IterVariables() {
			name := v.ScopeAndName()
			switch role := analysis.VariableRole(tr.Ctx, v); {
			case layers.IsAdapter(v):
				adapters++
				adapterParams += v.Shape().Size()
				if role != analysis.RoleTrainable || slices.Equal(testkit.Floats(before[name]), testkit.Floats(after[name])) {
					t.Errorf("%s: adapter %s (%s) did not train", policy, name, role)
				}
			case role == analysis.RoleFrozen:
				if !slices.Equal(testkit.Bits(before[name]), testkit.Bits(after[name])) {
					t.Errorf("%s: frozen weight %s changed", policy, name)
				}
			case role == analysis.RoleTrainable:
				t.Errorf("%s: base weight %s is trainable", policy, name)
			case role == analysis.RoleOptimizerState:
				state += v.Shape().Size()
			}
		}
		// Adam's two moments for each adapter parameter (plus scalars): nothing for the base.
		if adapters != 2*7*2 || state != 2*adapterParams {
			t.Errorf("%s: %d adapter variables (want 28), optimizer state %d values for %d adapter parameters (want twice)", policy, adapters, state, adapterParams)
		}
	}
}

// TestQLoRAFollowsLoRA: rank 8 on every projection of the tiny Llama, 50 steps: with the base in
// NF4 (quantized once from the seed's weights) the final loss is within 2% of LoRA's with the
// float base, and both lower the loss (the figures are logged).
func TestQLoRAFollowsLoRA(t *testing.T) {
	if testing.Short() {
		t.Skip("100 steps of the tiny Llama")
	}
	t.Parallel()
	config := llamaReference(t)
	config.LoRA = layers.LoRA{Rank: 8, Alpha: 16, Targets: allProjections}
	lora := llamaLosses(t, testkit.Embedded(), config, 50)
	config.LoRA.Quantize = quant.QLoRA()
	qlora := llamaLosses(t, testkit.Embedded(), config, 50)
	t.Logf("tiny Llama, rank 8 on every projection, 50 steps: LoRA %.4f -> %.4f, QLoRA (NF4 base) %.4f -> %.4f (final %.2f%% apart)",
		lora[0], lora[49], qlora[0], qlora[49], 100*math.Abs(qlora[49]-lora[49])/lora[49])
	if math.Abs(qlora[49]-lora[49]) > 0.02*lora[49] || !(lora[49] < lora[0]) || !(qlora[49] < qlora[0]) {
		t.Errorf("LoRA %g -> %g, QLoRA %g -> %g: want both lower, the finals within 2%%", lora[0], lora[49], qlora[0], qlora[49])
	}
}

// TestLoRAConfigErrors: a target the model lacks, a rank larger than a matrix, a base dtype
// without LoRA and a dropout out of range are errors before any step runs.
func TestLoRAConfigErrors(t *testing.T) {
	for want, edit := range map[string]func(c *train.Config){
		"Config.LoRA targets x_proj, which the model does not have: its projections are": func(c *train.Config) {
			c.LoRA = layers.LoRA{Rank: 2, Targets: []string{"q_proj", "x_proj"}}
		},
		"LoRA.Rank 40 is larger than k_proj's matrix [32, 64]":               func(c *train.Config) { c.LoRA = layers.LoRA{Rank: 40, Targets: []string{"k_proj"}} },
		"Config.BaseDType BFloat16 is the dtype of a LoRA run's frozen base": func(c *train.Config) { c.BaseDType = dtypes.BFloat16 },
		"Config.LoRA: lora: LoRA.Dropout 2 must be in [0, 1)":                func(c *train.Config) { c.LoRA = layers.LoRA{Rank: 2, Dropout: 2} },
	} {
		c := llamaReference(t)
		edit(&c)
		tr, err := train.New(testkit.Embedded(), c)
		if err == nil {
			err = tr.Initialize()
			tr.Close()
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want one saying %q", err, want)
		}
	}
}

// TestLoRATechniques: every technique trains adapters (rank 4 on every projection of the tiny
// Llama). Against the plain float32 LoRA run: remat of whole layers, the optimizer offloaded to the
// host and a static loss scale of 1024 (a power of two: scaling and unscaling are exact) give its
// losses bit for bit, 4 micro-batches, chunked attention and the chunked loss within 1e-5, a dynamic
// loss scale too; bfloat16 compute within 2e-2; 8-bit Adam starts from the same loss and lowers
// it. With the XLA plugin (not -short): 4 devices with the parameters sharded (SPMD with FSDP: the
// frozen base split too) give one device's losses within 1e-5 (XLA compiles both: ~40 s here).
func TestLoRATechniques(t *testing.T) {
	t.Parallel()
	reference := llamaReference(t)
	reference.LoRA = layers.LoRA{Rank: 4, Alpha: 8, Targets: allProjections}
	reference.Schedule = optim.Constant(1e-2)
	checkTechniques(t, reference, []technique{
		{"remat block", func(c *train.Config) { c.Remat.Kinds = []string{models.KindBlock} }, 0, false, true},
		{"offload optimizer", func(c *train.Config) { c.Offload = train.OffloadOptimizer }, 0, false, true},
		{"static loss scale", func(c *train.Config) { c.LossScale = mixed.StaticLossScale(1024) }, 0, false, true},
		{"dynamic loss scale", func(c *train.Config) { c.LossScale = mixed.NewDynamicLossScale() }, 1e-5, false, false},
		{"4 micro-batches", func(c *train.Config) { c.MicroBatches = 4 }, 1e-5, false, true},
		{"chunked attention", func(c *train.Config) { c.Attention = layers.Attention{Chunked: true, Block: 16} }, 1e-5, false, true},
		{"chunked loss", func(c *train.Config) { c.CrossEntropy = layers.CrossEntropy{Chunk: 64} }, 1e-5, false, false},
		{"bf16", func(c *train.Config) {
			c.Policy = mixed.Policy{Param: dtypes.Float32, Compute: dtypes.BFloat16, Output: dtypes.Float32}
		}, 2e-2, false, false},
		{"adam8bit", func(c *train.Config) { c.Optimizer = mustOptimizer(t, "adam8bit") }, -1, false, true},
		{"4 devices, params sharded", func(c *train.Config) { c.Devices = train.Devices{Count: 4, Shard: train.ShardParams} }, 1e-5, true, false},
	})
	// Untied embeddings, whose table stays in host memory (EmbeddingOnHost): the offloaded
	// optimizer and micro-batches read the host's rows as the plain step does.
	untied := reference
	l := untied.Model.(models.Llama)
	l.Config.TiedEmbeddings = false
	untied.Model = l
	t.Run("untied", func(t *testing.T) {
		checkTechniques(t, untied, []technique{
			{"offload optimizer", func(c *train.Config) { c.Offload = train.OffloadOptimizer }, 0, false, true},
			{"4 micro-batches", func(c *train.Config) { c.MicroBatches = 4 }, 1e-5, false, true},
		})
	})
}
