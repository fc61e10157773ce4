package train

import (
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/remat"
)

// Settings are what a run sets on the context its graphs are built in, for the model's layers to
// read: training mode (dropout on), the precision policy, the kinds of block rematerialized, how
// attention and the loss compute. Apply is the one place they are set: the trainer's step and
// its executors' programs, Load's evaluation, the planner's analyses and `onegpu eval` all call
// it, so a setting a later feature adds (an adapter, a mask) is added here once and every graph
// follows it.
type Settings struct {
	// Training switches training-only behaviour on (dropout): true for a train step, false for
	// evaluation and generation.
	Training bool
	// Policy is the precision policy of the model's layers (mixed.SetPolicy); the zero Policy
	// computes in float32.
	Policy mixed.Policy
	// Remat names the kinds of block rematerialized and what they save (remat.SetBlocks); the zero
	// Remat rematerializes nothing.
	Remat Remat
	// Attention and CrossEntropy say how attention and a language model's loss compute
	// (layers.SetAttention, layers.SetCrossEntropy); the zero values compute them whole.
	Attention    layers.Attention
	CrossEntropy layers.CrossEntropy
	// MLP says how the MLPs compute (layers.SetMLP); the zero value, the whole sequence at once.
	MLP layers.MLP
	// LoRA adapts the model's projections (layers.SetLoRA) and BaseDType is its frozen weights'
	// dtype (the param dtype of the policy set on the context; the adapters keep Policy's): see
	// Config.LoRA. The zero LoRA adapts nothing.
	LoRA      layers.LoRA
	BaseDType dtypes.DType
}

// Settings are the settings of c's train step: training mode and the run's policy, remat,
// attention, cross-entropy and adapters.
func (c Config) Settings() Settings {
	return Settings{Training: true, Policy: c.Policy, Remat: c.Remat, Attention: c.Attention, CrossEntropy: c.CrossEntropy,
		MLP: c.MLP, LoRA: c.LoRA, BaseDType: c.BaseDType}
}

// Apply sets s on ctx's scope (the root scope, for a whole model) for the graph g being built:
// call it first in a graph function, before the model builds anything.
func (s Settings) Apply(ctx *context.Context, g *graph.Graph) {
	ctx.SetTraining(g, s.Training)
	policy, lora := s.Policy, s.LoRA
	if lora.Active() {
		if lora.DType == dtypes.InvalidDType {
			lora.DType = policy.Param
		}
		if s.BaseDType != dtypes.InvalidDType {
			policy.Param = s.BaseDType
		}
	}
	mixed.SetPolicy(ctx, policy)
	layers.SetLoRA(ctx, lora)
	remat.SetBlocks(ctx, remat.With(s.Remat.Policy), s.Remat.Kinds...)
	layers.SetAttention(ctx, s.Attention)
	layers.SetCrossEntropy(ctx, s.CrossEntropy)
	layers.SetMLP(ctx, s.MLP)
}

// without returns s with the remat kind taken out of its remat kinds, the others kept (with
// their policy).
func (s Settings) without(kind string) Settings {
	s.Remat.Kinds = slices.DeleteFunc(slices.Clone(s.Remat.Kinds), func(k string) bool { return k == kind })
	return s
}
