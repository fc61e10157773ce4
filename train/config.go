package train

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/remat"
)

// Config describes one run, typed: the model, and everything the run does with it. A model's own
// config holds its shape; this holds how it trains. Strings are read into it at the edges only
// (the CLI's flags, recipes.Defaults, a checkpoint's manifest).
type Config struct {
	// Model is what trains: models.GPT, models.Classifier or a model of your own.
	Model Model
	// Batch is the number of examples (sequences for a language model) per optimizer step, split
	// into MicroBatches equal micro-batches whose gradients are accumulated in the step's graph
	// (0 means 1).
	Batch, MicroBatches int
	// Policy is the precision policy of the model's layers; the trainer sets it on the context's
	// root scope (mixed.SetPolicy), its one home while the step is built. The zero Policy means
	// float32 throughout.
	Policy mixed.Policy
	// Remat selects the kinds of block (remat.Block) the model marks that are rematerialized, and
	// what they save.
	Remat Remat
	// Attention says how a language model's attention computes: the whole [seq, seq] scores at
	// once (the zero value, plain) or block by block with memory linear in the sequence
	// (layers.Attention{Chunked: true}, its blocks chosen by layers.AutoAttentionBlock unless
	// given). The trainer sets it on the context's root scope (layers.SetAttention), as the policy,
	// and the models' attention layers read it there. Like Remat it changes how a step is computed,
	// not its result (to float32 rounding), so it may change when a run resumes.
	Attention layers.Attention
	// CrossEntropy says how a language model's loss computes its logits: all [tokens, vocab] at
	// once (the zero value) or Chunk tokens at a time (layers.ChunkedCrossEntropySum), set on the
	// context (layers.SetCrossEntropy) as Attention is; it may change on resume too.
	CrossEntropy layers.CrossEntropy
	// MLP says how a language model's MLP computes: the whole sequence at once (the zero value) or
	// Chunk positions at a time, each chunk rematerialized (layers.TiledBranch), set on the context
	// (layers.SetMLP) as Attention is; it may change on resume too. Only a model whose MLP reads
	// it (MLPTiler: the Llama family) takes a chunk.
	MLP layers.MLP
	// Optimizer applies the gradients: optim.Adam().Done(), optim.AdamW().WeightDecay(0.01).Done(),
	// optim.Adam8bit().Done(), optim.ByName("adam", ...) or a type of your own (optim.Optimizer);
	// its hyperparameters, epsilon and weight decay among them, are its own. Nil is the tutorial's
	// Adam (optim.Adam(): optax.adam's defaults).
	Optimizer optim.Optimizer
	// LossScale multiplies the loss before differentiation and skips steps whose gradients are not
	// finite: nil for none (no scaling, no skipping), mixed.StaticLossScale(1024),
	// mixed.NewDynamicLossScale() (jmp's), or mixed.NoOpLossScale{} to skip non-finite steps only.
	LossScale mixed.LossScale
	// Schedule is the learning rate as a function of the step: optim.Constant(1e-3),
	// optim.WarmupCosine(...), optim.WarmupExponentialDecay(...) (the tutorial's) or your own.
	Schedule optim.Schedule
	// ClipNorm, when positive, scales the gradients down to at most this global L2 norm (after the
	// loss scale's unscaling: optim.ClipByGlobalNorm); 0 does not clip.
	ClipNorm float64
	// Offload says where the optimizer's state lives: on the device with the step (OffloadNone,
	// the default), in host memory, updated there (OffloadOptimizer), or, with the master weights
	// too, in host memory with the weights streamed to the device a block at a time
	// (OffloadParams): the name of a mode (RegisterMode), whose executor runs the step.
	Offload Offload
	// DeviceBudget, with Offload OffloadParams, is the most device memory a streamed step may use
	// at once, in bytes: each stage program's memory by XLA's account plus the buffers the step
	// keeps on the device while it runs (StreamStats.DevicePeakBytes). A step that would use more
	// stops with an error naming the program and the bytes. 0 sets no limit.
	DeviceBudget int64
	// SerialHostUpdate, with Offload OffloadParams, updates every stage on the host after the
	// backward pass, as the optimizer offload does: the step's time is then the device's plus the
	// host update's. By default (false) the host updates each stage as soon as its gradients are
	// on the host, while the device computes the next stage's backward pass (stream_host.go); both
	// give the same weights, bit for bit. Set it to compare the two.
	SerialHostUpdate bool
	// Devices runs the step on several devices of an XLA backend (see Devices); zero is one device.
	Devices Devices
	// LoRA trains low-rank adapters on the model's projections (layers.LoRA: rank, alpha,
	// targets, dropout, rsLoRA) instead of the model: every other weight is frozen (no gradient, no
	// optimizer state; graph.FreezeVariable), and the first step's loss is the base model's.
	// LoRA.Quantize keeps the targeted base weights in a block code (QLoRA: quant.QLoRA()),
	// quantized once, when the weights are set (SetWeights) or initialized. The zero value trains
	// the whole model.
	LoRA layers.LoRA
	// BaseDType is, under LoRA, the dtype of the frozen base's weights (bfloat16 halves them); the
	// adapters and their optimizer state follow the policy's param dtype. InvalidDType: the
	// policy's param dtype.
	BaseDType dtypes.DType
	// Seed fixes the initial weights, the dropout masks and the data.
	Seed uint64
}

// Remat selects what is rematerialized in a run: the kinds of block a model marks with
// remat.Block ("mlp", "attn", "block" for the GPT), and what those blocks save for the backward
// pass. The zero Remat rematerializes nothing.
type Remat struct {
	// Kinds are the kinds of block rematerialized; a kind the model does not mark is an error.
	Kinds []string
	// Policy says what a rematerialized block saves; the zero Policy is remat.NothingSaveable.
	Policy remat.Policy
}

// None reports whether nothing is rematerialized.
func (r Remat) None() bool { return len(r.Kinds) == 0 }

// String is the kinds as remat.ParseKinds reads them ("none", "mlp,attn", "block"), followed by
// the policy in parentheses when it is not the default.
func (r Remat) String() string {
	s := remat.KindsString(r.Kinds)
	if !r.None() && r.Policy.String() != remat.NothingSaveable.String() {
		s += " (" + r.Policy.String() + ")"
	}
	return s
}

// microBatches is MicroBatches, 0 read as 1.
func (c Config) microBatches() int { return max(c.MicroBatches, 1) }

// policy is Policy, the zero Policy read as float32.
func (c Config) policy() mixed.Policy {
	if c.Policy == (mixed.Policy{}) {
		return mixed.Float32
	}
	return c.Policy
}

// optimizer is the run's optimizer: Config.Optimizer, or the tutorial's Adam.
func (c Config) optimizer() optim.Optimizer {
	if c.Optimizer == nil {
		return optim.Adam().Done()
	}
	return c.Optimizer
}

// Validate returns an error naming the setting that cannot work and how to fix it, before
// anything is built: the model's own checks (a Validate and ValidateBatch method, when it has
// them), the batch and its micro-batches (their split across devices, and at most
// MaxUnrolledBlocks micro-batch × layer copies: an *UnrolledError), the remat kinds (when
// the model lists its kinds with RematKinds; otherwise they are checked when the step is built),
// the attention and cross-entropy (chunked for a language model only), the schedule, the clipping norm and the offload.
func (c Config) Validate() error {
	if c.Model == nil {
		return fmt.Errorf("no model: set Config.Model to a train.Model (models.GPT, models.Classifier or your own)")
	}
	if v, ok := c.Model.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return err
		}
	}
	if c.Batch < 1 || c.MicroBatches < 0 {
		return fmt.Errorf("batch %d and micro-batches %d: the batch must be at least 1, the micro-batches at least 1 (0 means 1)", c.Batch, c.MicroBatches)
	}
	if c.Batch%c.microBatches() != 0 {
		return fmt.Errorf("a batch of %d does not split into %d equal micro-batches: choose micro-batches that divide the batch", c.Batch, c.MicroBatches)
	}
	if err := c.checkUnrolled(); err != nil { // before anything builds the step
		return err
	}
	if v, ok := c.Model.(interface {
		ValidateBatch(batch, microBatch int) error
	}); ok {
		if err := v.ValidateBatch(c.Batch, c.Batch/c.microBatches()); err != nil {
			return err
		}
	}
	if err := c.validateRemat(); err != nil {
		return err
	}
	if err := c.validateChunking(); err != nil {
		return err
	}
	if err := optim.ValidateSchedule(c.Schedule); err != nil {
		return err
	}
	if !(c.ClipNorm >= 0) || math.IsInf(c.ClipNorm, 0) {
		return fmt.Errorf("clip norm %g: clip by a positive finite global norm, or 0 for no clipping", c.ClipNorm)
	}
	if err := c.checkOffload(); err != nil {
		return err
	}
	if err := c.validateLoRA(); err != nil {
		return err
	}
	return c.Devices.validate(c.Batch, c.microBatches())
}

// validateRemat refuses empty kinds, a policy without kinds, and kinds the model says it does not
// have.
func (c Config) validateRemat() error {
	for _, kind := range c.Remat.Kinds {
		if strings.TrimSpace(kind) == "" {
			return fmt.Errorf("remat kinds %q: a kind is empty; use the names the model gives remat.Block", c.Remat.Kinds)
		}
	}
	if c.Remat.None() && c.Remat.Policy.String() != remat.NothingSaveable.String() {
		return fmt.Errorf("remat policy %s does not apply: no kind of block is rematerialized", c.Remat.Policy)
	}
	declared, ok := c.Model.(interface{ RematKinds() []string })
	if !ok {
		return nil
	}
	have := declared.RematKinds()
	if len(have) == 0 && !c.Remat.None() {
		return fmt.Errorf("remat %s: the model has no blocks to rematerialize (it marks none with remat.Block); use remat none", remat.KindsString(c.Remat.Kinds))
	}
	for _, kind := range c.Remat.Kinds {
		if !slices.Contains(have, kind) {
			return fmt.Errorf("remat %s: the model has no block of kind %q; its kinds are %s", remat.KindsString(c.Remat.Kinds), kind,
				remat.KindsString(have))
		}
	}
	return nil
}

// validateChunking refuses invalid attention blocks or loss chunks, and chunking asked of a model
// that is not a language model (it has no attention nor token loss to chunk).
func (c Config) validateChunking() error {
	if err := c.Attention.Validate(); err != nil {
		return err
	}
	if err := c.CrossEntropy.Validate(); err != nil {
		return err
	}
	if err := c.MLP.Validate(); err != nil {
		return err
	}
	if t, ok := c.Model.(MLPTiler); c.MLP.Chunk > 0 && (!ok || !t.TilesMLP()) {
		return fmt.Errorf("Config.MLP %s: %s computes its MLP whole (it is not a train.MLPTiler: the Llama family is); use plain (the zero layers.MLP)",
			c.MLP, describeModel(c.Model))
	}
	if _, ok := c.Model.(LanguageModel); !ok && (c.Attention.Chunked || c.CrossEntropy.Chunk > 0) {
		return fmt.Errorf("attention %s, cross-entropy %s: %s is not a language model (train.LanguageModel), it has no attention or token loss to chunk; "+
			"use plain (the zero layers.Attention and layers.CrossEntropy)", c.Attention, c.CrossEntropy, describeModel(c.Model))
	}
	return nil
}
