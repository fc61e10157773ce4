package train

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
)

// validateLoRA refuses a LoRA that cannot be used, and a BaseDType without one.
func (c Config) validateLoRA() error {
	if err := c.LoRA.Resolved().Validate(); err != nil {
		return fmt.Errorf("Config.LoRA: %w", err)
	}
	if !c.LoRA.Active() {
		if c.BaseDType != dtypes.InvalidDType {
			return fmt.Errorf("Config.BaseDType %s is the dtype of a LoRA run's frozen base: set Config.LoRA too, or leave it out", c.BaseDType)
		}
		return nil
	}
	if c.BaseDType != dtypes.InvalidDType && !c.BaseDType.IsFloat() {
		return fmt.Errorf("Config.BaseDType %s is not a float dtype", c.BaseDType)
	}
	return nil
}

// lossFn is the model's loss function; under LoRA it freezes every weight but the adapters once
// the model has built them (before the gradients are taken), and panics when a target built no
// adapter: the model has no projection of that name.
func (t *Trainer) lossFn() accum.LossFn {
	if !t.Config.LoRA.Active() {
		return t.Config.Model.Loss
	}
	lora := t.Config.LoRA.Resolved()
	return func(ctx *context.Context, batch []*graph.Node) (accum.Mean, []accum.Mean) {
		loss, metrics := t.modelLoss(ctx, batch)
		if err := checkTargets(ctx, lora); err != nil {
			panic(err)
		}
		layers.FreezeBase(ctx)
		return loss, metrics
	}
}

// checkTargets returns an error naming the targets of lora that built no adapter in ctx, and the
// projections the model has (the scopes of its 2-D "weight" variables).
func checkTargets(ctx *context.Context, lora layers.LoRA) error {
	adapted, projections := map[string]bool{}, map[string]bool{}
	for v := range ctx.IterVariables() {
		parts := strings.Split(strings.TrimSuffix(v.Scope(), context.ScopeSeparator), context.ScopeSeparator)
		switch last := parts[len(parts)-1]; {
		case last == layers.LoRAAName && len(parts) > 1:
			adapted[parts[len(parts)-2]] = true
		case v.Name() == "weight" && v.Shape().Rank() == 2 && last != layers.LoRABName:
			projections[last] = true
		case last == layers.QuantizedScope && len(parts) > 1:
			projections[parts[len(parts)-2]] = true
		}
	}
	var missing []string
	for _, target := range lora.Targets {
		if !adapted[target] {
			missing = append(missing, target)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	var have []string
	for p := range projections {
		have = append(have, p)
	}
	return fmt.Errorf("Config.LoRA targets %s, which the model does not have: its projections are %s", strings.Join(missing, ", "), strings.Join(slices.Sorted(slices.Values(have)), ", "))
}

// WeightDType is the dtype the model's weights are created and loaded in: under LoRA the
// frozen base's (BaseDType, when set), else the policy's param dtype.
func (c Config) WeightDType() dtypes.DType {
	if c.LoRA.Active() && c.BaseDType != dtypes.InvalidDType {
		return c.BaseDType
	}
	return c.policy().Param
}

// DescribeAdapters says what the run trains on a frozen base, as a checkpoint records it
// (checkpoint.WrittenBy's Adapters): the LoRA, the base's dtype and code, e.g. "lora
// rank=16,alpha=32,targets=q_proj,v_proj; base bfloat16, nf4 (blocks of 64, ...)"; "" without LoRA.
func (c Config) DescribeAdapters() string {
	if !c.LoRA.Active() {
		return ""
	}
	s := fmt.Sprintf("lora %s; base %s", c.LoRA, strings.ToLower(c.WeightDType().String()))
	if q := c.LoRA.Quantize; q.Format != "" {
		s += ", " + q.String()
	}
	return s
}

// modelLoss is the model's loss on the step's inputs: Model.Loss, or with the embedding gathered
// on the host (hostembed.go) the stages after it, from its output.
func (t *Trainer) modelLoss(ctx *context.Context, batch []*graph.Node) (accum.Mean, []accum.Mean) {
	if t.embedding().on {
		return lossFromEmbedding(ctx, t.Config.Model.(Staged), batch)
	}
	return t.Config.Model.Loss(ctx, batch)
}

// lossFromEmbedding is a Staged model's loss from the embedding stage's output, gathered on the
// host in the base's dtype (batch[0]; the rest of the micro-batch as it is): cast to the compute
// dtype, then the blocks and the head, as Loss runs them.
func lossFromEmbedding(ctx *context.Context, m Staged, batch []*graph.Node) (accum.Mean, []accum.Mean) {
	x := mixed.PolicyOf(ctx).CastToCompute(batch[0])
	for i := range m.Blocks() {
		x = m.BlockStage(inScopePath(ctx, m.BlockScope(i)), x, batch)
	}
	return m.HeadStage(ctx, x, batch)
}
