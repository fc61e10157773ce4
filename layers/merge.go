package layers

import (
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/quant"
)

// MergeAdapters folds the adapters of every adapted projection in ctx into its weight, as PEFT's
// merge_and_unload does: W + s·B·A, computed on the host in float64 and rounded once to float32,
// the merged weight's dtype (a quantized weight is dequantized first). The adapters' variables
// and the quantized parts are deleted, so that ctx holds the plain model, ready for a Hugging Face
// export; it returns the number of projections merged.
func MergeAdapters(ctx *context.Context, l LoRA) (int, error) {
	l = l.Resolved()
	var scopes []string
	for v := range ctx.IterVariables() {
		scope := strings.TrimSuffix(v.Scope(), context.ScopeSeparator)
		if projection, ok := strings.CutSuffix(scope, context.ScopeSeparator+LoRAAName); ok && v.Name() == "weight" {
			scopes = append(scopes, projection)
		}
	}
	for _, scope := range scopes {
		if err := mergeProjection(ctx, scope, l); err != nil {
			return 0, fmt.Errorf("merging the adapters of %s: %w", scope, err)
		}
	}
	return len(scopes), nil
}

// mergeProjection merges the adapters of the projection at scope.
func mergeProjection(ctx *context.Context, scope string, l LoRA) error {
	a := ctx.GetVariableByScopeAndName(scope+context.ScopeSeparator+LoRAAName, "weight")
	b := ctx.GetVariableByScopeAndName(scope+context.ScopeSeparator+LoRABName, "weight")
	if a == nil || b == nil {
		return fmt.Errorf("its lora_A or lora_B is missing")
	}
	rank, in, out := a.Shape().Dim(0), a.Shape().Dim(1), b.Shape().Dim(0)
	w, weight, err := baseWeight(ctx, scope, out, in, l)
	if err != nil {
		return err
	}
	av, err := float64Values(a)
	if err != nil {
		return err
	}
	bv, err := float64Values(b)
	if err != nil {
		return err
	}
	s := l.Scaling()
	for o := range out {
		for i := range in {
			var sum float64
			for r := range rank {
				sum += bv[o*rank+r] * av[r*in+i]
			}
			w[o*in+i] += s * sum
		}
	}
	merged := make([]float32, len(w))
	for i, x := range w {
		merged[i] = float32(x)
	}
	if err := ctx.DeleteVariable(weight.Scope(), weight.Name()); err != nil {
		return err
	}
	ctx.InAbsPath(scope).Checked(false).VariableWithValue("weight", tensors.FromFlatDataAndDimensions(merged, out, in))
	for _, sub := range []string{LoRAAName, LoRABName} {
		if err := ctx.DeleteVariable(scope+context.ScopeSeparator+sub, "weight"); err != nil {
			return err
		}
	}
	return nil
}

// baseWeight returns the values of the projection's weight [out, in] in float64 and its float
// variable, made from its quantized parts (float32, the parts deleted) when it is quantized.
func baseWeight(ctx *context.Context, scope string, out, in int, l LoRA) ([]float64, *context.Variable, error) {
	if v := ctx.GetVariableByScopeAndName(scope, "weight"); v != nil {
		w, err := float64Values(v)
		return w, v, err
	}
	c := l.Quantize
	if c.Format == "" {
		return nil, nil, fmt.Errorf("it has no weight")
	}
	layout, err := quant.NewLayout(c, out, in)
	if err != nil {
		return nil, nil, err
	}
	q := &quant.Tensor{Layout: layout}
	parts := scope + context.ScopeSeparator + QuantizedScope
	for _, p := range layout.Parts() {
		v := ctx.GetVariableByScopeAndName(parts, p.Name)
		if v == nil {
			return nil, nil, fmt.Errorf("its quantized part %s is missing", p.Name)
		}
		value, err := v.Value()
		if err != nil {
			return nil, nil, err
		}
		switch p.Name {
		case quant.CodesName:
			q.Codes = tensors.MustCopyFlatData[uint8](value)
		case quant.ScalesName:
			q.Scales = tensors.MustCopyFlatData[float32](value)
		case quant.ScaleCodesName:
			q.ScaleCodes = tensors.MustCopyFlatData[uint8](value)
		case quant.ScaleScalesName:
			q.ScaleScales = tensors.MustCopyFlatData[float32](value)
		case quant.ScaleOffsetName:
			q.ScaleOffset = tensors.MustCopyFlatData[float32](value)[0]
		}
		if err := ctx.DeleteVariable(parts, p.Name); err != nil {
			return nil, nil, err
		}
	}
	values := q.Dequantize()
	w := make([]float64, len(values))
	for i, x := range values {
		w[i] = float64(x)
	}
	v := ctx.InAbsPath(scope).Checked(false).VariableWithValue("weight", tensors.FromFlatDataAndDimensions(values, out, in))
	return w, v, nil
}

// float64Values returns a float variable's values in float64 (exactly).
func float64Values(v *context.Variable) ([]float64, error) {
	value, err := v.Value()
	if err != nil {
		return nil, err
	}
	if value.DType() == dtypes.Float64 {
		return tensors.MustCopyFlatData[float64](value), nil
	}
	values, err := quant.Float32Values(value)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", v.ScopeAndName(), err)
	}
	out := make([]float64, len(values))
	for i, x := range values {
		out[i] = float64(x)
	}
	return out, nil
}
