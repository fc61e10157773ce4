package train

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/exact"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/remat"
)

// StepFn is the train step's graph function: the run's Settings applied to the context, the
// learning rate of the schedule, the micro-batched forward and backward passes, and the gradient
// chain (loss scale with an atomic skip, clipping, the optimizer). It returns the loss, the
// model's metrics, the count they average over (tokens or examples), the step's finite flag and
// the moving-average loss. Give it to analysis.ContextProgram to analyze the step without running it.
func (t *Trainer) StepFn() accum.StepFn {
	chain := t.mustChain()
	return func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
		g := inputs[0].Graph()
		t.Config.Settings().Apply(ctx, g)
		optim.ApplySchedule(ctx, g, t.Config.Schedule)
		r := chain.Step(ctx, inputs, t.lossFn())
		t.checkRematKinds(g)
		finite := optim.Finite(ctx, g)
		return append(r.Outputs(), r.Count, finite, movingAverage(ctx, g, r.Loss, finite))
	}
}

// checkRematKinds panics (the step's graph function's way to fail; Step and Program return it as
// an error) when the run asks to rematerialize a kind of block the model did not build in g: a
// misspelt kind would otherwise train without remat.
func (t *Trainer) checkRematKinds(g *graph.Graph) {
	if err := remat.MissingKinds(g, t.Config.Remat.Kinds); err != nil {
		panic(err)
	}
}

// Names of the moving-average loss's state, in MeanLossScope.
const (
	// MeanLossScope is the absolute scope of the moving-average loss.
	MeanLossScope = "/train/mean_loss"
	// MeanLossDecay weighs the newest loss, like GoMLX's Trainer's "~loss" (an exact mean for the
	// first 100 steps).
	MeanLossDecay = 0.01
)

// movingAverage updates and returns the exponential moving average of loss. A skipped step (finite
// false) leaves it as it was: its loss is not a loss of the model that continues training. It
// rounds the same on every backend (a float64 sum of exact products, a float64 reciprocal), so
// the optimizer offload's host reports the device's mean loss.
func movingAverage(ctx *context.Context, g *graph.Graph, loss, finite *graph.Node) *graph.Node {
	state := ctx.Checked(false).InAbsPath(MeanLossScope)
	meanVar := state.VariableWithValue("mean", float32(0)).SetTrainable(false)
	countVar := state.VariableWithValue("count", float32(0)).SetTrainable(false)
	mean, count := meanVar.ValueGraph(g), countVar.ValueGraph(g)
	newCount := graph.AddScalar(count, 1)
	f32 := dtypes.Float32
	weight := graph.Max(graph.Scalar(g, f32, MeanLossDecay), graph.ConvertDType(graph.Reciprocal(graph.ConvertDType(newCount, dtypes.Float64)), f32))
	newMean := graph.ConvertDType(exact.ProductSum(mean, graph.OneMinus(weight), graph.ConvertDType(loss, f32), weight), f32)
	meanVar.SetValueGraph(graph.Where(finite, newMean, mean))
	countVar.SetValueGraph(graph.Where(finite, newCount, count))
	return graph.Where(finite, newMean, mean)
}

// Chain returns the step's gradient chain: MicroBatches, then LossScale when the run has one, then
// ClipByGlobalNorm when it clips, then the optimizer.
func (t *Trainer) Chain() (*optim.Chain, error) {
	c := t.Config
	links := []optim.Transform{optim.MicroBatches(c.microBatches())}
	if c.LossScale != nil {
		links = append(links, optim.LossScale(c.LossScale))
	}
	if c.ClipNorm > 0 {
		links = append(links, optim.ClipByGlobalNorm(c.ClipNorm))
	}
	return optim.NewChain(append(links, optim.Apply(c.optimizer()))...)
}

// mustChain is Chain for the step's graph functions, which New's validation lets build it.
func (t *Trainer) mustChain() *optim.Chain {
	chain, err := t.Chain()
	if err != nil {
		panic(err)
	}
	return chain
}
