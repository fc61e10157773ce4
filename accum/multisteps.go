package accum

import (
	"fmt"
	"slices"
	"strings"

	gomlxtrain "github.com/gomlx/gomlx/pkg/ml/train"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/initializers"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
)

// GradientsOptimizer is an optimizer that can also apply gradients computed elsewhere, as GoMLX's
// Adam, AdamW, RMSProp and SGD can (the method set of GoMLX's train.OptimizeWithGradients).
type GradientsOptimizer interface {
	optimizers.Interface
	// UpdateGraphWithGradients applies grads, one per trainable variable used in the graph, in
	// context order; lossDType is the dtype the optimizer computes in by default.
	gomlxtrain.OptimizeWithGradients
}

// Names of MultiSteps' state, in its scope (DefaultScope by default).
const (
	// DefaultScope is the absolute context scope of MultiSteps' variables.
	DefaultScope = "/accum"
	// GradientsScope holds, under the MultiSteps scope, one accumulator per trainable variable,
	// under the variable's own scope and name (e.g. /accum/gradients/dense1/kernel): the sum of
	// the window's gradients so far, weighted by their counts, float32 (float64 for float64
	// variables).
	GradientsScope = "gradients"
	// MicroStepVariable counts the calls since the last update, 0 to every-1 (int64 scalar).
	MicroStepVariable = "micro_step"
	// CountVariable is the window's ΣCount so far (float32 scalar).
	CountVariable = "count"
	// SkippedWindowsVariable counts the windows whose gradients were not finite and were dropped
	// (int64 scalar; only with a loss scale).
	SkippedWindowsVariable = "skipped_windows"
)

// MultiSteps accumulates gradients over several calls and applies them with an inner optimizer
// once every Every() calls: optax.MultiSteps, or GoMLX's Trainer.AccumulateGradients as an
// optimizer. Use it when even one micro-batch per graph (see Gradients) is too much for a batch: k
// calls on k parts of a batch move the model as one step on the whole batch.
//
// It implements optimizers.Interface, so train.Trainer and context.Exec use it like any optimizer.
// GoMLX v0.26.0 has no conditionals, so every call builds both the accumulation and the inner
// update, and the update's results are kept only on the last call of a window: every variable the
// inner optimizer changes (parameters, Adam's moments and step, the global step) and every
// variable changed under /optimizers (the learning rate and schedules such as cosineschedule, which
// run in the model function) keeps its value, bit for bit, on the other calls. The global step and
// learning-rate schedules therefore advance once per window.
//
// The accumulators are float32 context variables (see GradientsScope), so a window can span
// checkpoints. UpdateGraph weighs every call equally (its loss is a mean); UpdateGraphWithMean and
// ApplyResult weigh each call by its count, which keeps the update exact when parts of the batch
// hold different numbers of tokens.
//
// With a loss scale (WithLossScale), each call differentiates the scaled loss; the window's sum is
// unscaled once, checked once and applied only if every value is finite: a non-finite call spoils
// the window's sum, so nothing is applied, the scale is adjusted (lowered) once and the window is
// counted in SkippedWindowsVariable. The scale stays the same within a window.
type MultiSteps struct {
	inner GradientsOptimizer
	every int
	scale LossScale
	scope string
}

// NewMultiSteps wraps inner, which must apply gradients (GoMLX's Adam, SGD, RMSProp do), to update
// once every `every` calls. It returns an error for every < 1 or an inner optimizer without
// UpdateGraphWithGradients.
func NewMultiSteps(inner optimizers.Interface, every int) (*MultiSteps, error) {
	if every < 1 {
		return nil, fmt.Errorf("accumulating over %d steps: the number of steps must be at least 1", every)
	}
	withGrads, ok := inner.(GradientsOptimizer)
	if !ok {
		return nil, fmt.Errorf("optimizer %T cannot apply accumulated gradients (it has no UpdateGraphWithGradients method): "+
			"use optimizers.Adam(), optimizers.StochasticGradientDescent() or optimizers.RMSProp(), and give a loss scale "+
			"with MultiSteps.WithLossScale rather than wrapping the optimizer in one", inner)
	}
	return &MultiSteps{inner: withGrads, every: every, scope: DefaultScope}, nil
}

// WithLossScale makes each call differentiate the loss scaled by ls and the window apply only
// finite gradients (see MultiSteps). mixed's loss scales satisfy LossScale. A nil ls removes it.
func (m *MultiSteps) WithLossScale(ls LossScale) *MultiSteps {
	m.scale = ls
	return m
}

// Scope sets the absolute context scope of the accumulators and counters (default DefaultScope).
// It panics when scope is not absolute.
func (m *MultiSteps) Scope(scope string) *MultiSteps {
	if !strings.HasPrefix(scope, context.ScopeSeparator) {
		panicf("accum.MultiSteps.Scope(%q): the scope must be absolute (start with %q)", scope, context.ScopeSeparator)
	}
	m.scope = strings.TrimSuffix(scope, context.ScopeSeparator)
	return m
}

// Every returns the number of calls per update.
func (m *MultiSteps) Every() int { return m.every }

// LossScale returns the loss scale, nil for none.
func (m *MultiSteps) LossScale() LossScale { return m.scale }

// Inner returns the wrapped optimizer.
func (m *MultiSteps) Inner() optimizers.Interface { return m.inner }

// UpdateGraph accumulates the gradients of loss, a scalar mean, with respect to the trainable
// variables g uses, counting the call as 1, and applies the window's mean gradient on its last
// call. It implements optimizers.Interface.
func (m *MultiSteps) UpdateGraph(ctx *context.Context, g *graph.Graph, loss *graph.Node) {
	if !loss.IsScalar() || !loss.DType().IsFloat() {
		panicf("accum.MultiSteps.UpdateGraph: the loss must be a floating-point scalar, got %s", loss.Shape())
	}
	vars, grads := m.differentiate(ctx, g, loss)
	m.accumulate(ctx, g, vars, grads, nil, loss.DType())
}

// UpdateGraphWithMean is UpdateGraph for a loss given as a Mean: the call counts as loss.Count, so
// the window applies ΣSum / ΣCount's gradient over all its calls, exactly, however the counts
// differ from call to call.
func (m *MultiSteps) UpdateGraphWithMean(ctx *context.Context, g *graph.Graph, loss Mean) {
	loss.check("accum.MultiSteps.UpdateGraphWithMean")
	value := loss.Value()
	vars, grads := m.differentiate(ctx, g, value)
	m.accumulate(ctx, g, vars, grads, loss.Count, value.DType())
}

// ApplyResult accumulates gradients already computed over micro-batches in this graph by Gradients
// (or by ScaledGradients with the MultiSteps' loss scale, when it has one), weighted by r.Count.
// Combined, they split a batch into Every() calls of k micro-batches each.
func (m *MultiSteps) ApplyResult(ctx *context.Context, g *graph.Graph, r *Result) {
	switch {
	case m.scale == nil && r.scale != nil:
		panicf("accum.MultiSteps.ApplyResult: the gradients are scaled but the MultiSteps has no loss scale: use Gradients")
	case m.scale != nil && r.scale == nil:
		panicf("accum.MultiSteps.ApplyResult: the MultiSteps has a loss scale but the gradients are not scaled: " +
			"use ScaledGradients with MultiSteps.LossScale()")
	}
	m.accumulate(ctx, g, r.Variables, r.Gradients, r.Count, r.Loss.DType())
}

// differentiate returns the trainable variables g uses and the gradients of the (scaled) loss.
func (m *MultiSteps) differentiate(ctx *context.Context, g *graph.Graph, loss *graph.Node) ([]*context.Variable, []*graph.Node) {
	target := loss
	if m.scale != nil {
		target = m.scale.Scale(ctx, loss)
	}
	vars := trainableInUse(ctx, g)
	if len(vars) == 0 {
		panicf("accum.MultiSteps: the loss uses no trainable variables: there is nothing to optimize")
	}
	values := make([]*graph.Node, len(vars))
	for i, v := range vars {
		values[i] = v.ValueGraph(g)
	}
	return vars, graph.Gradient(target, values...)
}

// accumulate adds grads (mean gradients of the call, scaled if there is a loss scale) times count
// (nil: 1) to the accumulators and builds the gated update.
func (m *MultiSteps) accumulate(ctx *context.Context, g *graph.Graph, vars []*context.Variable, grads []*graph.Node, count *graph.Node, lossDType dtypes.DType) {
	if len(vars) != len(grads) {
		panicf("accum.MultiSteps: %d gradients for %d trainable variables", len(grads), len(vars))
	}
	state := ctx.Checked(false).InAbsPath(m.scope)
	stepVar := state.VariableWithValue(MicroStepVariable, int64(0)).SetTrainable(false)
	countVar := state.VariableWithValue(CountVariable, float32(0)).SetTrainable(false)

	step := graph.AddScalar(stepVar.ValueGraph(g), 1)
	apply := graph.GreaterOrEqual(step, graph.Scalar(g, dtypes.Int64, m.every))
	weight := graph.ScalarOne(g, dtypes.Float32)
	if count != nil {
		weight = graph.ConvertDType(count, dtypes.Float32)
	}
	windowCount := graph.Add(countVar.ValueGraph(g), weight)

	accVars := make([]*context.Variable, len(vars))
	sums := make([]*graph.Node, len(vars))
	means := make([]*graph.Node, len(vars))
	denominator := nonZero(windowCount)
	for i, v := range vars {
		if !slices.Equal(grads[i].Shape().Dimensions, v.Shape().Dimensions) {
			panicf("accum.MultiSteps: gradient #%d has shape %s but variable %s has %s", i, grads[i].Shape(), v.ScopeAndName(), v.Shape())
		}
		accVars[i] = m.accumulator(ctx, v)
		acc := accVars[i].ValueGraph(g)
		grad := graph.ConvertDType(grads[i], acc.DType())
		if count != nil {
			grad = graph.Mul(grad, graph.ConvertDType(weight, acc.DType()))
		}
		sums[i] = graph.Add(acc, grad)
		means[i] = graph.Div(sums[i], graph.ConvertDType(denominator, acc.DType()))
	}

	gate, finite := apply, (*graph.Node)(nil)
	if m.scale != nil {
		means = m.scale.Unscale(ctx, means)
		finite = allFinite(means)
		gate = graph.LogicalAnd(apply, finite)
	}
	if lossDType != dtypes.Float64 {
		lossDType = dtypes.Float32
	}
	m.keepOnlyIf(ctx, g, gate, true, func() { m.inner.UpdateGraphWithGradients(ctx, means, lossDType) })
	if m.scale != nil {
		m.keepOnlyIf(ctx, g, apply, false, func() { m.scale.Adjust(ctx, finite) })
		skippedVar := state.VariableWithValue(SkippedWindowsVariable, int64(0)).SetTrainable(false)
		skipped := graph.LogicalAnd(apply, graph.LogicalNot(finite))
		skippedVar.SetValueGraph(graph.Add(skippedVar.ValueGraph(g), graph.ConvertDType(skipped, dtypes.Int64)))
	}

	for i, accVar := range accVars {
		accVar.SetValueGraph(graph.Where(apply, graph.ScalarZero(g, sums[i].DType()), sums[i]))
	}
	countVar.SetValueGraph(graph.Where(apply, graph.ScalarZero(g, dtypes.Float32), windowCount))
	stepVar.SetValueGraph(graph.Where(apply, graph.ScalarZero(g, dtypes.Int64), step))
}

// keepOnlyIf runs build, then gives every variable build changed (and, with guardOptimizers, every
// variable changed under /optimizers) its value from before the graph where keep is false. Variables
// of the MultiSteps' own scope are left alone.
func (m *MultiSteps) keepOnlyIf(ctx *context.Context, g *graph.Graph, keep *graph.Node, guardOptimizers bool, build func()) {
	before := map[*context.Variable]*graph.Node{}
	for v := range ctx.IterVariables() {
		if v.InUseByGraph(g) {
			before[v] = v.ValueGraph(g)
		}
	}
	build()
	for v := range ctx.IterVariables() {
		if !v.ChangedInGraph(g) || inScope(v, m.scope) {
			continue
		}
		updated := v.ValueGraph(g)
		if previous, used := before[v]; used && updated == previous && !(guardOptimizers && inScope(v, optimizersScope)) {
			continue // not changed by build
		}
		old := g.GetParameterByName(v.ParameterName())
		if old == nil {
			panicf("accum.MultiSteps: variable %s changed in graph %q but has no parameter node", v.ScopeAndName(), g.Name())
		}
		v.SetValueGraph(graph.Where(keep, updated, old))
	}
}

// optimizersScope is GoMLX's scope for learning rates and schedules.
const optimizersScope = context.ScopeSeparator + optimizers.Scope

// inScope reports whether v lives in the absolute scope or below it.
func inScope(v *context.Variable, scope string) bool {
	return v.Scope() == scope || strings.HasPrefix(v.Scope(), scope+context.ScopeSeparator)
}

// accumulator returns (creating it when missing, zero) the accumulator variable of v.
func (m *MultiSteps) accumulator(ctx *context.Context, v *context.Variable) *context.Variable {
	scope := m.scope + context.ScopeSeparator + GradientsScope
	if v.Scope() != context.RootScope {
		scope += v.Scope()
	}
	shape := shapes.Make(wideDType(v.DType()), v.Shape().Dimensions...)
	return ctx.Checked(false).InAbsPath(scope).WithInitializer(initializers.Zero).
		VariableWithShape(v.Name(), shape).SetTrainable(false)
}

// MultiStepsStats is MultiSteps' state as stored in a context between calls.
type MultiStepsStats struct {
	// MicroStep is the number of calls accumulated since the last update: 0 right after an update
	// (or a skipped window).
	MicroStep int64
	// Count is the window's ΣCount so far.
	Count float64
	// SkippedWindows is the number of windows dropped because their gradients were not finite.
	SkippedWindows int64
}

// Stats reads MultiSteps' counters from ctx, on the host (between calls, not while building a
// graph). Counters that do not exist yet read 0.
func (m *MultiSteps) Stats(ctx *context.Context) (MultiStepsStats, error) {
	var s MultiStepsStats
	read := func(name string, into func(any) bool) error {
		v := ctx.GetVariableByScopeAndName(m.scope, name)
		if v == nil {
			return nil
		}
		t, err := v.Value()
		if err != nil {
			return fmt.Errorf("variable %s: %w", v.ScopeAndName(), err)
		}
		if !into(t.Value()) {
			return fmt.Errorf("variable %s holds %s, not the scalar it should", v.ScopeAndName(), t.Shape())
		}
		return nil
	}
	int64Into := func(dst *int64) func(any) bool {
		return func(x any) bool { v, ok := x.(int64); *dst = v; return ok }
	}
	if err := read(MicroStepVariable, int64Into(&s.MicroStep)); err != nil {
		return s, err
	}
	if err := read(SkippedWindowsVariable, int64Into(&s.SkippedWindows)); err != nil {
		return s, err
	}
	err := read(CountVariable, func(x any) bool { v, ok := x.(float32); s.Count = float64(v); return ok })
	return s, err
}

// Clear deletes the inner optimizer's variables, the loss scale's state (when it has a Clear
// method, as mixed.DynamicLossScale does) and MultiSteps' accumulators and counters: a partly
// accumulated window is dropped. It implements optimizers.Interface.
func (m *MultiSteps) Clear(ctx *context.Context) error {
	if err := m.inner.Clear(ctx); err != nil {
		return err
	}
	if c, ok := m.scale.(interface{ Clear(*context.Context) error }); ok {
		if err := c.Clear(ctx); err != nil {
			return err
		}
	}
	return ctx.InAbsPath(m.scope).DeleteVariablesInScope()
}
