package layers

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/initializers"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/exact"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/quant"
)

// QuantizedScope is the sub-scope of a projection that holds its quantized frozen weight's parts
// (quant.Layout.Parts' names: codes, scales or scale_codes, scale_scales, scale_offset).
const QuantizedScope = "quantized"

// frozen is Linear.Apply under a LoRA: the weight (a float variable, or its quantized parts) and
// the bias are frozen, the product rebuilds the weight in the backward pass instead of keeping it
// (frozenProduct), and a targeted projection adds its adapters.
func (l Linear) frozen(ctx *context.Context, x *graph.Node, features int) *graph.Node {
	lora := LoRAOf(ctx)
	g, in := x.Graph(), x.Shape().Dim(-1)
	targeted := lora.Targeted(lastScope(ctx))
	var weight func(dep *graph.Node) *graph.Node
	if targeted && lora.Quantize.Format != "" {
		parts := quantizedWeight(ctx, g, in, features, lora.Quantize)
		compute := mixed.PolicyOf(ctx).Compute
		weight = func(dep *graph.Node) *graph.Node { return parts.After(dep).Dequantize(compute) }
	} else {
		w := l.Projection(ctx, g, in, features).Weight
		weight = func(dep *graph.Node) *graph.Node {
			if w.DType() == mixed.PolicyOf(ctx).Compute {
				return w // used as it is: nothing to keep or rebuild
			}
			return after(w, dep) // cast to the compute dtype where it is used
		}
	}
	y := frozenProduct(ctx, x, weight)
	if l.Bias {
		bias := l.Projection(ctx, g, in, features).Bias
		y = graph.Add(y, broadcastFor(mixed.PolicyOf(ctx).CastToCompute(bias), y, exact.NegativeZeroFrom(y)))
	}
	if targeted {
		y = graph.Add(y, lora.delta(ctx, x, features))
	}
	return y
}

// frozenProduct is LinearWith(ctx, x, W) for a frozen weight W that weight(dep) builds after dep
// exists (ordered by a data dependency: quant.Nodes.After, after): x for the forward product, the
// cotangent v for the backward one, v·W, the gradient of x (the weight gets none). A weight that
// is expanded for the product (dequantized, cast to the compute dtype) is then a temporary of the
// forward product and again of the backward one: neither computed ahead of its layer (XLA hoists
// what depends on variables only: all of a model's dequantized weights at the step's start) nor
// kept from the forward pass to the backward one. The quantized base of QLoRA stays quantized.
func frozenProduct(ctx *context.Context, x *graph.Node, weight func(dep *graph.Node) *graph.Node) *graph.Node {
	// No StopGradient on x: withGradients stops the value's own gradient, and an Identity of x
	// (which the adapters read too) would be a copy of it on the embedded backend.
	value := LinearWith(ctx, x, weight(x))
	return withGradients("frozen projection", []*graph.Node{x}, value, func(_, v *graph.Node) []*graph.Node {
		w := mixed.PolicyOf(ctx).CastToCompute(weight(v))
		return []*graph.Node{graph.DotGeneral(v, []int{v.Rank() - 1}, nil, w, []int{0}, nil)}
	})
}

// quantizedWeight returns the quantized weight [features, in] of the projection in scope ctx,
// creating its part variables (not trainable, zeros until QuantizeWeights fills them) when they
// do not exist.
func quantizedWeight(ctx *context.Context, g *graph.Graph, in, features int, c quant.Config) quant.Nodes {
	layout, err := quant.NewLayout(c, features, in)
	if err != nil {
		panic(fmt.Sprintf("layers.Linear(%s): %v", ctx.Scope(), err))
	}
	scope := ctx.In(QuantizedScope).WithInitializer(initializers.Zero)
	var parts []*graph.Node
	for _, p := range layout.Parts() {
		parts = append(parts, analysis.FreezeVariable(ctx, scope.VariableWithShape(p.Name, p.Shape)).ValueGraph(g))
	}
	return quant.NewNodes(layout, parts...)
}

// QuantizeWeights replaces the float weight of every projection l targets in ctx with its
// quantized parts (l.Quantize's code, quantized on the host from the weight's values), deleting
// the float variable: what a QLoRA run does once, after the base model is loaded or initialized
// and before its step is built. It returns the number of weights quantized; a targeted weight
// without a value is an error.
func QuantizeWeights(ctx *context.Context, l LoRA) (int, error) {
	var weights []*context.Variable
	for v := range ctx.IterVariables() {
		if l.Quantizes(ctx.InAbsPath(v.Scope()), v.Name(), v.Shape()) {
			weights = append(weights, v)
		}
	}
	for _, v := range weights {
		value, err := v.Value()
		if err != nil {
			return 0, fmt.Errorf("quantizing %s: %w", v.ScopeAndName(), err)
		}
		if err := QuantizeWeight(ctx.InAbsPath(v.Scope()), value, l.Quantize); err != nil {
			return 0, fmt.Errorf("quantizing %s: %w", v.ScopeAndName(), err)
		}
		if err := ctx.DeleteVariable(v.Scope(), v.Name()); err != nil {
			return 0, fmt.Errorf("quantizing %s: %w", v.ScopeAndName(), err)
		}
	}
	return len(weights), nil
}

// Quantizes reports whether l stores the variable name of scope quantized: the weight of a
// projection it targets, under l.Quantize.
func (l LoRA) Quantizes(scope *context.Context, name string, shape shapes.Shape) bool {
	return l.Quantize.Format != "" && name == "weight" && shape.Rank() == 2 && l.Targeted(lastScope(scope))
}

// QuantizingSink quantizes a base's weights as they are loaded (an hf.Sink: hf.OpenWith(ctx, dir,
// hf.Options{..., Sink: layers.QuantizingSink{lora}})): the float weight of each projection the
// LoRA quantizes is read into a buffer, stored as its quantized parts (QuantizeWeight) and never
// made a variable; the other weights load as they are. The model's variables are then those of
// loading it whole and calling QuantizeWeights, bit for bit, without the whole float base in
// memory.
type QuantizingSink struct {
	LoRA LoRA
}

// Takes reports whether the sink takes the weight (LoRA.Quantizes).
func (q QuantizingSink) Takes(scope *context.Context, name string, shape shapes.Shape) bool {
	return q.LoRA.Quantizes(scope, name, shape)
}

// Add quantizes a weight the sink takes into its parts in scope; it does nothing to the others.
func (q QuantizingSink) Add(scope *context.Context, name string, value *tensors.Tensor) error {
	if !q.Takes(scope, name, value.Shape()) {
		return nil
	}
	if err := QuantizeWeight(scope, value, q.LoRA.Quantize); err != nil {
		return fmt.Errorf("quantizing %s: %w", context.JoinScope(scope.Scope(), name), err)
	}
	return nil
}

// QuantizeWeight stores value, the float weight of the projection in scope, as its quantized parts
// (c's code, quantized on the host: quant.QuantizeTensor) in scope's QuantizedScope, frozen: the
// variables a QLoRA step reads in place of the weight. A part that exists gets the new value
// (its shape must be the layout's). The caller drops the float weight (QuantizeWeights deletes
// its variable; a base quantized as it is loaded never makes one).
func QuantizeWeight(scope *context.Context, value *tensors.Tensor, c quant.Config) error {
	q, err := quant.QuantizeTensor(c, value)
	if err != nil {
		return err
	}
	parts, values := scope.In(QuantizedScope).Checked(false), q.Tensors()
	for i, p := range q.Parts() {
		value := values[i]
		part := parts.InspectVariableInScope(p.Name)
		if part == nil {
			part = parts.VariableWithValue(p.Name, value)
		} else if !part.Shape().Equal(p.Shape) {
			return fmt.Errorf("its %s part exists as %s, want %s", p.Name, part.Shape(), p.Shape)
		} else if err := part.SetValue(value); err != nil {
			return err
		}
		analysis.FreezeVariable(scope, part)
	}
	return nil
}
