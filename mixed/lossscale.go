package mixed

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// LossScale multiplies the loss before differentiation so that small 16-bit gradients do not
// flush to zero, and divides the gradients afterwards. It is jmp's loss-scale protocol with the
// state kept in context variables instead of an immutable value:
//
//	scaled := ls.Scale(ctx, loss)             // differentiate scaled
//	grads = ls.Unscale(ctx, grads)            // float32 gradients of loss
//	finite := mixed.AllFinite(g, grads...)
//	ls.Adjust(ctx, finite)                    // the scale for the next step
//
// Scale and Unscale read the current scale, so call them before Adjust in a graph. The methods
// build graph nodes and panic on misuse. NoOpLossScale, StaticLossScale and DynamicLossScale
// implement it; optim.LossScale chains one with an optimizer.
type LossScale interface {
	// Scale returns loss times the current scale, in float32 (float64 for a float64 loss).
	Scale(ctx *context.Context, loss *graph.Node) *graph.Node
	// Unscale returns each gradient divided by the current scale, in float32 (float64 stays
	// float64). Nil entries stay nil and non-float entries are returned as they are.
	Unscale(ctx *context.Context, grads []*graph.Node) []*graph.Node
	// Adjust updates the scale for the next step given finite, a scalar boolean node that says
	// whether this step's gradients are all finite (see AllFinite).
	Adjust(ctx *context.Context, finite *graph.Node)
	// Value returns the current scale in g, a float32 scalar. After Adjust it is the next step's.
	Value(ctx *context.Context, g *graph.Graph) *graph.Node
}

// AllFinite returns a boolean scalar that is true when every value of every floating-point grad
// is finite (neither ±Inf nor NaN). Nil and non-float entries are ignored; with none left it is
// true. g is only used to build that constant.
func AllFinite(g *graph.Graph, grads ...*graph.Node) *graph.Node {
	var all *graph.Node
	for _, x := range grads {
		if x == nil || !x.DType().IsFloat() {
			continue
		}
		finite := graph.IsFinite(x)
		if !finite.IsScalar() {
			finite = graph.LogicalAll(finite)
		}
		if all == nil {
			all = finite
		} else {
			all = graph.LogicalAnd(all, finite)
		}
	}
	if all == nil {
		return graph.Const(g, true)
	}
	return all
}

// scaleLoss returns loss (widened to float32) times scale.
func scaleLoss(loss, scale *graph.Node) *graph.Node {
	w := widen(loss, "LossScale.Scale")
	return graph.Mul(w, graph.ConvertDType(scale, w.DType()))
}

// unscaleGrads divides each floating-point gradient (widened to float32) by scale; a nil scale
// only widens.
func unscaleGrads(grads []*graph.Node, scale *graph.Node) []*graph.Node {
	out := make([]*graph.Node, len(grads))
	for i, x := range grads {
		if x == nil || !x.DType().IsFloat() {
			out[i] = x
			continue
		}
		w := graph.ConvertDType(x, wide(x))
		if scale != nil {
			w = graph.Div(w, graph.ConvertDType(scale, w.DType()))
		}
		out[i] = w
	}
	return out
}

// NoOpLossScale does not scale: Scale and Unscale only convert to float32, and the scale is 1.
// In optim.LossScale it still skips non-finite steps (like optax.apply_if_finite).
type NoOpLossScale struct{}

// Scale returns the loss in float32.
func (NoOpLossScale) Scale(_ *context.Context, loss *graph.Node) *graph.Node {
	return widen(loss, "NoOpLossScale.Scale")
}

// Unscale returns the gradients in float32.
func (NoOpLossScale) Unscale(_ *context.Context, grads []*graph.Node) []*graph.Node {
	return unscaleGrads(grads, nil)
}

// Adjust does nothing.
func (NoOpLossScale) Adjust(*context.Context, *graph.Node) {}

// Value returns 1.
func (NoOpLossScale) Value(_ *context.Context, g *graph.Graph) *graph.Node {
	return graph.ScalarOne(g, dtypes.Float32)
}

// StaticLossScale scales by a fixed positive, finite factor, e.g. StaticLossScale(1024). Powers
// of two make scaling and unscaling exact.
type StaticLossScale float64

func (s StaticLossScale) value(g *graph.Graph) *graph.Node {
	v := float64(s)
	if !(v > 0) || math.IsInf(v, 0) || v > math.MaxFloat32 {
		panicf("mixed.StaticLossScale(%g): the scale must be positive and finite in float32", v)
	}
	return graph.Scalar(g, dtypes.Float32, v)
}

// Scale returns loss × s in float32.
func (s StaticLossScale) Scale(_ *context.Context, loss *graph.Node) *graph.Node {
	return scaleLoss(loss, s.value(loss.Graph()))
}

// Unscale returns each gradient ÷ s in float32.
func (s StaticLossScale) Unscale(_ *context.Context, grads []*graph.Node) []*graph.Node {
	for _, x := range grads {
		if x != nil {
			return unscaleGrads(grads, s.value(x.Graph()))
		}
	}
	return unscaleGrads(grads, nil)
}

// Adjust does nothing: the scale is fixed.
func (StaticLossScale) Adjust(*context.Context, *graph.Node) {}

// Value returns s as a float32 scalar.
func (s StaticLossScale) Value(_ *context.Context, g *graph.Graph) *graph.Node { return s.value(g) }

// Variable names of DynamicLossScale's state, in its scope (DefaultLossScaleScope by default).
const (
	// DefaultLossScaleScope is the absolute context scope of a DynamicLossScale's variables.
	DefaultLossScaleScope = "/mixed/loss_scale"
	// LossScaleVariable holds the current scale, a float32 scalar.
	LossScaleVariable = "scale"
	// FiniteStepsVariable counts the consecutive finite steps since the scale last changed or a
	// step was not finite (jmp's counter), an int64 scalar.
	FiniteStepsVariable = "finite_steps"
	// NonFiniteStepsVariable counts the consecutive non-finite steps, for hysteresis, an int64
	// scalar.
	NonFiniteStepsVariable = "nonfinite_steps"
)

// DynamicLossScale looks for the largest scale that keeps the gradients finite, as jmp's
// DynamicLossScale and PyTorch's GradScaler do: after Period consecutive finite steps the scale is
// multiplied by Factor (up to Max, and only if the result is finite); on a non-finite step the
// finite-step counter restarts and the scale is divided by Factor (down to Min).
//
// With Hysteresis(n) the scale is lowered only from the n-th consecutive non-finite step on (and
// at every further consecutive one); a finite step resets the count. This is DeepSpeed's
// hysteresis with consecutive_hysteresis=true; n = 1 (the default) is jmp's behaviour.
//
// The state (the scale and the two counters) lives in non-trainable context variables under
// Scope (DefaultLossScaleScope), so it is saved with checkpoints and a resumed run continues
// exactly. Configure it with the setters before building a graph; they panic on invalid values.
type DynamicLossScale struct {
	initial, factor, min, max float64
	period, hysteresis        int
	scope                     string
}

// NewDynamicLossScale returns a dynamic loss scale with jmp's defaults: initial scale 2^15,
// period 2000 steps, factor 2, minimum 1, no maximum and no hysteresis (1).
func NewDynamicLossScale() *DynamicLossScale {
	return &DynamicLossScale{initial: 1 << 15, factor: 2, min: 1, period: 2000, hysteresis: 1, scope: DefaultLossScaleScope}
}

// Initial sets the scale of the first step (default 2^15). It only matters until the scale
// variable exists: a context that already has one (e.g. loaded from a checkpoint) keeps it.
func (d *DynamicLossScale) Initial(scale float64) *DynamicLossScale {
	if !(scale > 0) || scale > math.MaxFloat32 {
		panicf("mixed.DynamicLossScale.Initial(%g): the scale must be positive and finite in float32", scale)
	}
	d.initial = scale
	return d
}

// Period sets how many consecutive finite steps raise the scale (default 2000).
func (d *DynamicLossScale) Period(steps int) *DynamicLossScale {
	if steps < 1 {
		panicf("mixed.DynamicLossScale.Period(%d): the period must be at least 1 step", steps)
	}
	d.period = steps
	return d
}

// Factor sets the growth factor; the back-off divides by the same factor (default 2).
func (d *DynamicLossScale) Factor(factor float64) *DynamicLossScale {
	if !(factor > 1) || math.IsInf(factor, 0) {
		panicf("mixed.DynamicLossScale.Factor(%g): the factor must be finite and > 1", factor)
	}
	d.factor = factor
	return d
}

// Min sets the smallest scale (default 1).
func (d *DynamicLossScale) Min(scale float64) *DynamicLossScale {
	if !(scale > 0) || scale > math.MaxFloat32 {
		panicf("mixed.DynamicLossScale.Min(%g): the minimum must be positive and finite in float32", scale)
	}
	d.min = scale
	return d
}

// Max sets the largest scale; 0 (the default) means no maximum other than float32's range.
func (d *DynamicLossScale) Max(scale float64) *DynamicLossScale {
	if scale < 0 || math.IsNaN(scale) || scale > math.MaxFloat32 {
		panicf("mixed.DynamicLossScale.Max(%g): the maximum must be 0 (none) or positive and finite in float32", scale)
	}
	d.max = scale
	return d
}

// Hysteresis sets how many consecutive non-finite steps it takes to lower the scale (default 1:
// every non-finite step lowers it). Non-finite steps are skipped either way.
func (d *DynamicLossScale) Hysteresis(steps int) *DynamicLossScale {
	if steps < 1 {
		panicf("mixed.DynamicLossScale.Hysteresis(%d): hysteresis must be at least 1 step", steps)
	}
	d.hysteresis = steps
	return d
}

// Scope sets the absolute context scope of the state variables (default DefaultLossScaleScope).
// Give each loss scale of a context its own scope.
func (d *DynamicLossScale) Scope(scope string) *DynamicLossScale {
	if !strings.HasPrefix(scope, context.ScopeSeparator) {
		panicf("mixed.DynamicLossScale.Scope(%q): the scope must be absolute (start with %q)", scope, context.ScopeSeparator)
	}
	d.scope = scope
	return d
}

// String describes the configuration, e.g. "dynamic(initial=32768, period=2000, factor=2, min=1)".
func (d *DynamicLossScale) String() string {
	s := fmt.Sprintf("dynamic(initial=%g, period=%d, factor=%g, min=%g", d.initial, d.period, d.factor, d.min)
	if d.max > 0 {
		s += fmt.Sprintf(", max=%g", d.max)
	}
	if d.hysteresis > 1 {
		s += fmt.Sprintf(", hysteresis=%d", d.hysteresis)
	}
	return s + ")"
}

func (d *DynamicLossScale) check() {
	if d.max > 0 && (d.min > d.max || d.initial > d.max) || d.initial < d.min {
		panicf("mixed.DynamicLossScale %s: need min <= initial <= max", d)
	}
}

// variables returns (creating them when missing) the state variables.
func (d *DynamicLossScale) variables(ctx *context.Context) (scale, finite, nonFinite *context.Variable) {
	d.check()
	c := ctx.Checked(false).InAbsPath(d.scope)
	scale = c.VariableWithValue(LossScaleVariable, float32(d.initial)).SetTrainable(false)
	finite = c.VariableWithValue(FiniteStepsVariable, int64(0)).SetTrainable(false)
	nonFinite = c.VariableWithValue(NonFiniteStepsVariable, int64(0)).SetTrainable(false)
	return
}

// Value returns the current scale variable's value in g.
func (d *DynamicLossScale) Value(ctx *context.Context, g *graph.Graph) *graph.Node {
	scale, _, _ := d.variables(ctx)
	return scale.ValueGraph(g)
}

// Scale returns loss × the current scale, in float32.
func (d *DynamicLossScale) Scale(ctx *context.Context, loss *graph.Node) *graph.Node {
	return scaleLoss(loss, d.Value(ctx, loss.Graph()))
}

// Unscale returns each gradient ÷ the current scale, in float32.
func (d *DynamicLossScale) Unscale(ctx *context.Context, grads []*graph.Node) []*graph.Node {
	for _, x := range grads {
		if x != nil {
			return unscaleGrads(grads, d.Value(ctx, x.Graph()))
		}
	}
	return unscaleGrads(grads, nil)
}

// Adjust sets the state variables to the next step's values (see DynamicLossScale).
func (d *DynamicLossScale) Adjust(ctx *context.Context, finite *graph.Node) {
	if finite.DType() != dtypes.Bool || !finite.IsScalar() {
		panicf("mixed.DynamicLossScale.Adjust: finite must be a boolean scalar, got %s", finite.Shape())
	}
	g := finite.Graph()
	scaleVar, finiteVar, nonFiniteVar := d.variables(ctx)
	scale, finiteSteps, nonFiniteSteps := scaleVar.ValueGraph(g), finiteVar.ValueGraph(g), nonFiniteVar.ValueGraph(g)
	zero, one := graph.ScalarZero(g, dtypes.Int64), graph.ScalarOne(g, dtypes.Int64)

	finiteSteps = graph.Where(finite, graph.Add(finiteSteps, one), zero)
	grow := graph.LogicalAnd(finite, graph.GreaterOrEqual(finiteSteps, graph.Scalar(g, dtypes.Int64, d.period)))
	finiteSteps = graph.Where(grow, zero, finiteSteps)
	nonFiniteSteps = graph.Where(finite, zero, graph.Add(nonFiniteSteps, one))
	lower := graph.LogicalAnd(graph.LogicalNot(finite),
		graph.GreaterOrEqual(nonFiniteSteps, graph.Scalar(g, dtypes.Int64, d.hysteresis)))

	grown := graph.MulScalar(scale, d.factor)
	if d.max > 0 {
		grown = graph.Min(grown, graph.Scalar(g, dtypes.Float32, d.max))
	}
	grown = graph.Where(graph.IsFinite(grown), grown, scale) // jmp's first_finite
	lowered := graph.Max(graph.DivScalar(scale, d.factor), graph.Scalar(g, dtypes.Float32, d.min))
	scaleVar.SetValueGraph(graph.Where(grow, grown, graph.Where(lower, lowered, scale)))
	finiteVar.SetValueGraph(finiteSteps)
	nonFiniteVar.SetValueGraph(nonFiniteSteps)
}

// Current returns the scale stored in ctx, or the initial scale when ctx has no state yet. It
// reads the variable on the host: use it between steps, not while building a graph.
func (d *DynamicLossScale) Current(ctx *context.Context) (float64, error) {
	v := ctx.GetVariableByScopeAndName(d.scope, LossScaleVariable)
	if v == nil {
		return d.initial, nil
	}
	t, err := v.Value()
	if err != nil {
		return 0, fmt.Errorf("loss scale variable %s: %w", v.ScopeAndName(), err)
	}
	scale, ok := t.Value().(float32)
	if !ok {
		return 0, fmt.Errorf("loss scale variable %s holds %s, want a float32 scalar", v.ScopeAndName(), t.Shape())
	}
	return float64(scale), nil
}

// Clear deletes the state variables from ctx: the next step starts again from the initial scale.
func (d *DynamicLossScale) Clear(ctx *context.Context) error {
	for _, name := range []string{LossScaleVariable, FiniteStepsVariable, NonFiniteStepsVariable} {
		if err := ctx.DeleteVariable(d.scope, name); err != nil {
			return err
		}
	}
	return nil
}

// String is "noop": no scaling (optim.LossScale with it still skips non-finite steps).
func (NoOpLossScale) String() string { return "noop" }

// String is "static=N", as ParseLossScale reads it.
func (s StaticLossScale) String() string { return fmt.Sprintf("static=%g", float64(s)) }

// DescribeLossScale describes ls for checkpoints' manifests and reports: "none" for nil (no
// scaling, no skipping), else its String ("static=1024", "dynamic(initial=32768, ...)"), or its
// type for a loss scale of your own without one.
func DescribeLossScale(ls LossScale) string {
	switch s := ls.(type) {
	case nil:
		return "none"
	case fmt.Stringer:
		return s.String()
	}
	return fmt.Sprintf("%T", ls)
}

// ParseLossScale reads a loss scale as a command line writes it: "none" (or "": nil, no scaling),
// "dynamic" (NewDynamicLossScale: jmp's defaults, 2^15, ×2 every 2000 finite steps) or "static=N"
// (N positive and finite in float32).
func ParseLossScale(s string) (LossScale, error) {
	switch {
	case s == "" || s == "none":
		return nil, nil
	case s == "dynamic":
		return NewDynamicLossScale(), nil
	case strings.HasPrefix(s, "static="):
		v, err := strconv.ParseFloat(strings.TrimPrefix(s, "static="), 64)
		if err != nil || !(v > 0) || v > math.MaxFloat32 {
			return nil, fmt.Errorf("loss scale %q: static needs a positive number, e.g. static=1024", s)
		}
		return StaticLossScale(v), nil
	}
	return nil, fmt.Errorf("unknown loss scale %q: use none, dynamic or static=N", s)
}
