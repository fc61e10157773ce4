package train

import (
	"cmp"
	"fmt"

	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/layers"
)

// SetWeights starts the run from weights of one's own instead of the seed's: load fills the
// context the step reads and updates (e.g. hf.Open of a published checkpoint into it, which creates
// the model's variables under their names), and the first step finds them there, creating only
// what load left out (the optimizer's state). It must come before the first step, of a run that
// starts at step 0: a run that resumes from a checkpoint takes its weights from the checkpoint.
//
// Under LoRA it gives the frozen base (and may give adapters: hf.LoadAdapter), also to a run that
// resumes: its checkpoints hold the adapters and record the base's SHA-256, not the base. The base
// is made from what SetWeights gave when the run starts (Initialize, Run or the first Step: hashed,
// then quantized for QLoRA), from the seed when it gave no weight of the model; set BaseSource to
// say where it came from. SetBase makes the base as it is loaded instead, without holding it whole
// in full precision.
func (t *Trainer) SetWeights(load func(ctx *context.Context) error) error {
	if t.started {
		return fmt.Errorf("set weights: the trainer has already run a step")
	}
	if t.base != nil {
		return fmt.Errorf("set weights: the LoRA run's base was made already (by SetBase, Initialize or Run, from %s): set the weights before", t.base.from)
	}
	if err := load(t.Ctx); err != nil {
		return err
	}
	// The step's graph finds the variables instead of creating them, as after Initialize.
	t.Ctx = t.Ctx.Checked(false)
	return nil
}

// SetBase makes a LoRA run's frozen base as it is loaded, one weight at a time, instead of from
// weights set whole (SetWeights, then hashed and quantized when the run starts): load gives every
// weight of the base to b, in the order of their full names (hf.OpenWith with b as its Sink does),
// and b hashes each into the base's SHA-256 and quantizes those the run stores quantized before
// the next one is read, so that a QLoRA run's host memory holds the quantized base and one weight
// in full precision, not the whole base (a 70B in bfloat16 is 141 GB). The base, its hash and the
// variables are those SetWeights then the first step would make, bit for bit. from says where the
// base comes from, for the checkpoints' records (BaseSource when empty).
//
// It must come before the first step, after any SetWeights (adapters from a PEFT folder: the
// base is made here). A weight load sets in the context without giving it to b is an error, as
// is a base without the weights the run quantizes. An error may leave part of the base loaded:
// start again with a new Trainer.
//
//	err := t.SetBase("Hugging Face folder "+dir, func(ctx *context.Context, b *train.BaseWeights) error {
//		_, err := hf.OpenWith(ctx, dir, hf.Options{DType: t.Config.WeightDType(), Sink: b})
//		return err
//	})
func (t *Trainer) SetBase(from string, load func(ctx *context.Context, b *BaseWeights) error) error {
	lora := t.Config.LoRA
	switch {
	case !lora.Active():
		return fmt.Errorf("set base: Config.LoRA is not set, and a run without adapters has no frozen base: give its weights with SetWeights")
	case t.started:
		return fmt.Errorf("set base: the trainer has already run a step")
	case t.base != nil:
		return fmt.Errorf("set base: the LoRA run's base was made already, from %s", t.base.from)
	}
	b := &BaseWeights{quantize: layers.QuantizingSink{LoRA: lora}, hash: newBaseHash(), added: map[string]bool{}, parts: map[string]bool{}}
	if err := load(t.Ctx, b); err != nil {
		return err
	}
	t.Ctx = t.Ctx.Checked(false)
	for v := range t.Ctx.IterVariables() {
		if name := v.ScopeAndName(); analysis.IsWeight(t.Ctx, v) && !layers.IsAdapter(v) && !b.added[name] && !b.parts[name] {
			return fmt.Errorf("set base: the loader set the weight %s without giving it to BaseWeights.Add: the base's hash would leave it out", name)
		}
	}
	if b.hash.n == 0 {
		return fmt.Errorf("set base: the loader gave no weight")
	}
	if lora.Quantize.Format != "" && b.taken == 0 {
		return nothingQuantized(lora)
	}
	t.base = &base{sha256: b.hash.sum(), from: cmp.Or(from, t.BaseSource, "weights set by SetBase")}
	return nil
}
