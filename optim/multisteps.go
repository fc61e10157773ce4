package optim

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/initializers"
)

// Names of MultiSteps' state.
const (
	// MultiStepsScope is the absolute context scope of MultiSteps' variables.
	MultiStepsScope = DefaultScope + "/multisteps"
	// GradientsScope holds, under MultiStepsScope, one accumulator per trainable variable, under
	// the variable's own scope and name (e.g. /optim/multisteps/gradients/dense1/kernel): the sum
	// of the window's gradients so far, weighted by their counts, float32 (float64 for float64
	// variables).
	GradientsScope = "gradients"
	// MicroStepVariable counts the calls since the last update, 0 to every-1 (int64 scalar).
	MicroStepVariable = "micro_step"
	// CountVariable is the window's ΣCount so far (float32 scalar).
	CountVariable = "count"
)

// multiSteps is the MultiSteps link.
type multiSteps struct{ every int }

// MultiSteps accumulates gradients over `every` calls (steps of the chain) and runs the rest of the
// chain once per window, on the window's mean gradient: optax.MultiSteps, or GoMLX's
// Trainer.AccumulateGradients as a link. k calls on k parts of a batch move the model as one step
// on the whole batch. Each call is weighed by its Update.Count when it has one (Chain.Step passes
// the tokens that count), so the update stays exact when parts of the batch hold different
// numbers of tokens.
//
// GoMLX v0.26.0 has no conditionals, so every call builds both the accumulation and the rest of
// the chain, whose results are kept only on the last call of a window (see Rollback): parameters,
// the optimizer's moments, the global step and learning-rate schedules (/optimizers) advance once
// per window. The accumulators are context variables (MultiStepsScope), so a window can span
// checkpoints. every < 1 is an error at NewChain.
func MultiSteps(every int) Transform { return multiSteps{every: every} }

func (multiSteps) kind() kind { return kindMultiSteps }

func (m multiSteps) String() string { return fmt.Sprintf("MultiSteps(%d)", m.every) }

func (m multiSteps) Apply(u Update, next func(Update)) {
	if m.every < 1 {
		panicf("optim.MultiSteps(%d): the number of steps must be at least 1", m.every)
	}
	g := u.Graph
	if len(u.Variables) != len(u.Gradients) {
		panicf("optim.MultiSteps: %d gradients for %d trainable variables", len(u.Gradients), len(u.Variables))
	}
	state := u.Ctx.Checked(false).InAbsPath(MultiStepsScope)
	stepVar := state.VariableWithValue(MicroStepVariable, int64(0)).SetTrainable(false)
	countVar := state.VariableWithValue(CountVariable, float32(0)).SetTrainable(false)

	step := graph.AddScalar(stepVar.ValueGraph(g), 1)
	apply := graph.GreaterOrEqual(step, graph.Scalar(g, dtypes.Int64, m.every))
	weight := graph.ScalarOne(g, dtypes.Float32)
	if u.Count != nil {
		weight = graph.ConvertDType(u.Count, dtypes.Float32)
	}
	windowCount := graph.Add(countVar.ValueGraph(g), weight)
	denominator := nonZero(windowCount)

	accVars := make([]*context.Variable, len(u.Variables))
	sums := make([]*graph.Node, len(u.Variables))
	means := make([]*graph.Node, len(u.Variables))
	for i, v := range u.Variables {
		if !slices.Equal(u.Gradients[i].Shape().Dimensions, v.Shape().Dimensions) {
			panicf("optim.MultiSteps: gradient #%d has shape %s but variable %s has %s", i, u.Gradients[i].Shape(), v.ScopeAndName(), v.Shape())
		}
		accVars[i] = accumulator(u.Ctx, v)
		acc := accVars[i].ValueGraph(g)
		grad := graph.ConvertDType(u.Gradients[i], acc.DType())
		if u.Count != nil {
			grad = graph.Mul(grad, graph.ConvertDType(weight, acc.DType()))
		}
		sums[i] = graph.Add(acc, grad)
		means[i] = graph.Div(sums[i], graph.ConvertDType(denominator, acc.DType()))
	}

	window := u
	window.Gradients = means
	window.Count = windowCount
	Rollback(u.Ctx, g, apply, []string{OptimizersScope}, []string{MultiStepsScope}, func() { next(window) })

	for i, accVar := range accVars {
		accVar.SetValueGraph(graph.Where(apply, graph.ScalarZero(g, sums[i].DType()), sums[i]))
	}
	countVar.SetValueGraph(graph.Where(apply, graph.ScalarZero(g, dtypes.Float32), windowCount))
	stepVar.SetValueGraph(graph.Where(apply, graph.ScalarZero(g, dtypes.Int64), step))
}

// nonZero returns den with 0 replaced by 1, so that an empty window gives zero gradients.
func nonZero(den *graph.Node) *graph.Node {
	g := den.Graph()
	return graph.Where(graph.Equal(den, graph.ScalarZero(g, den.DType())), graph.ScalarOne(g, den.DType()), den)
}

// accumulator returns (creating it when missing, zero) the accumulator variable of v.
func accumulator(ctx *context.Context, v *context.Variable) *context.Variable {
	scope := MultiStepsScope + context.ScopeSeparator + GradientsScope
	if v.Scope() != context.RootScope {
		scope += v.Scope()
	}
	shape := shapes.Make(wideDType(v.DType()), v.Shape().Dimensions...)
	return ctx.Checked(false).InAbsPath(scope).WithInitializer(initializers.Zero).
		VariableWithShape(v.Name(), shape).SetTrainable(false)
}

// MultiStepsStats is MultiSteps' state as stored in a context between calls.
type MultiStepsStats struct {
	// MicroStep is the number of calls accumulated since the last update: 0 right after one.
	MicroStep int64
	// Count is the window's ΣCount so far.
	Count float64
}

// ReadMultiSteps reads MultiSteps' counters from ctx, on the host (between calls, not while
// building a graph). Counters that do not exist yet read 0.
func ReadMultiSteps(ctx *context.Context) (MultiStepsStats, error) {
	step, err := readScalar[int64](ctx, MultiStepsScope, MicroStepVariable)
	if err != nil {
		return MultiStepsStats{}, err
	}
	count, err := readScalar[float32](ctx, MultiStepsScope, CountVariable)
	return MultiStepsStats{MicroStep: step, Count: float64(count)}, err
}

// Clear deletes MultiSteps' accumulators and counters: a partly accumulated window is dropped.
func (multiSteps) Clear(ctx *context.Context) error {
	return ctx.InAbsPath(MultiStepsScope).DeleteVariablesInScope()
}
