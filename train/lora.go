package train

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	ograph "github.com/onegpu/onegpu/graph"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/quant"
)

// validateLoRA refuses a LoRA that cannot be used, a BaseDType without one, and the executors
// that do not train adapters yet.
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
	if c.Offload != OffloadNone {
		return fmt.Errorf("Config.LoRA with Config.Offload %s: adapters train on the device's step only (offload none) for now", c.Offload)
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
		loss, metrics := t.Config.Model.Loss(ctx, batch)
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

// quantizeBase makes a QLoRA run's quantized base, once: the targeted weights in ctx (set by
// SetWeights, or initialized here from the seed by the step's graph without quantization) are
// replaced by their codes (layers.QuantizeWeights). It does nothing without LoRA.Quantize or when
// the codes exist.
func (t *Trainer) quantizeBase() error {
	lora := t.Config.LoRA
	if !lora.Active() || lora.Quantize.Format == "" {
		return nil
	}
	for v := range t.Ctx.IterVariables() {
		if strings.HasSuffix(strings.TrimSuffix(v.Scope(), context.ScopeSeparator), context.ScopeSeparator+layers.QuantizedScope) {
			return nil // quantized already
		}
	}
	if !t.hasWeights() {
		// The float weights from the seed: the step built without quantization, initialized.
		t.Config.LoRA.Quantize = quant.Config{}
		p, err := ograph.ContextProgram(t.Backend, t.Ctx, "initialize_base", t.InputShapes(), t.StepFn())
		t.Config.LoRA = lora
		if err != nil {
			return fmt.Errorf("building the base model: %w", err)
		}
		p.Graph.Finalize()
		if err := t.Ctx.InitializeVariables(t.Backend, nil); err != nil {
			return fmt.Errorf("initializing the base model: %w", err)
		}
		t.Ctx = t.Ctx.Checked(false)
	}
	n, err := layers.QuantizeWeights(t.Ctx, lora)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("Config.LoRA.Quantize: the model has no weight of the targets %s to quantize", strings.Join(lora.Resolved().Targets, ", "))
	}
	return nil
}

// hasWeights reports whether the context holds any of the model's weights with a value.
func (t *Trainer) hasWeights() bool {
	for v := range t.Ctx.IterVariables() {
		if v.Name() == "weight" && v.Shape().Rank() == 2 && !layers.IsAdapter(v) {
			if _, err := v.Value(); err == nil {
				return true
			}
		}
	}
	return false
}

// WeightDType is the dtype the model's weights are created and loaded in: under LoRA the
// frozen base's (BaseDType, when set), else the policy's param dtype.
func (c Config) WeightDType() dtypes.DType {
	if c.LoRA.Active() && c.BaseDType != dtypes.InvalidDType {
		return c.BaseDType
	}
	return c.policy().Param
}
