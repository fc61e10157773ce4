package train

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/remat"
)

// StepFn is the train step's graph function: the policy and remat blocks set on the context, the
// learning rate of the schedule, the micro-batched forward and backward passes, and the gradient
// chain (loss scale with an atomic skip, Adam). It returns the loss, the model's metrics, the
// count they average over (tokens or examples), the step's finite flag and the moving-average
// loss. Give it to graph.ContextProgram to analyze the step without running it.
func (t *Trainer) StepFn() accum.StepFn {
	c := t.Config
	chain, err := t.Chain()
	if err != nil {
		panic(err) // NewFor validated the config
	}
	return func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
		g := inputs[0].Graph()
		t.setForModel(ctx, g)
		c.Schedule.Apply(ctx, g)
		r := chain.Step(ctx, inputs, t.Model.Loss)
		finite := optim.Finite(ctx, g)
		return append(r.Outputs(), r.Count, finite, movingAverage(ctx, g, r.Loss, finite))
	}
}

// setForModel sets what the model's layers read from the context: training mode, the precision
// policy and the remat blocks.
func (t *Trainer) setForModel(ctx *context.Context, g *graph.Graph) {
	ctx.SetTraining(g, true)
	mixed.SetPolicy(ctx, t.Config.Policy)
	remat.SetBlocks(ctx, remat.With(t.Config.RematPolicy), t.Config.RematBlocks...)
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
// false) leaves it as it was: its loss is not a loss of the model that continues training.
func movingAverage(ctx *context.Context, g *graph.Graph, loss, finite *graph.Node) *graph.Node {
	state := ctx.Checked(false).InAbsPath(MeanLossScope)
	meanVar := state.VariableWithValue("mean", float32(0)).SetTrainable(false)
	countVar := state.VariableWithValue("count", float32(0)).SetTrainable(false)
	mean, count := meanVar.ValueGraph(g), countVar.ValueGraph(g)
	newCount := graph.AddScalar(count, 1)
	weight := graph.Max(graph.Scalar(g, dtypes.Float32, MeanLossDecay), graph.Reciprocal(newCount))
	newMean := graph.Add(graph.Mul(mean, graph.OneMinus(weight)), graph.Mul(graph.ConvertDType(loss, dtypes.Float32), weight))
	meanVar.SetValueGraph(graph.Where(finite, newMean, mean))
	countVar.SetValueGraph(graph.Where(finite, newCount, count))
	return graph.Where(finite, newMean, mean)
}

// The Adam hyperparameters of the step (the tutorial's, optax.adam's defaults), as optax names them.
const (
	AdamBeta1   = 0.9
	AdamBeta2   = 0.999
	AdamEpsilon = 1e-8
)

// Values of Config.Optimizer.
const (
	OptimizerAdam     = "adam"
	OptimizerAdam8bit = "adam8bit"
)

// checkOptimizer refuses a Config.Optimizer that is not one of its values.
func checkOptimizer(name string) error {
	if name != "" && name != OptimizerAdam && name != OptimizerAdam8bit {
		return fmt.Errorf("unknown optimizer %q: use %s or %s", name, OptimizerAdam, OptimizerAdam8bit)
	}
	return nil
}

// Chain returns the step's gradient chain: MicroBatches, then LossScale when the config has one,
// then Adam (or 8-bit Adam).
func (t *Trainer) Chain() (*optim.Chain, error) {
	c := t.Config
	adam := optimizers.Adam().Betas(AdamBeta1, AdamBeta2).Epsilon(AdamEpsilon).LearningRate(c.Schedule.Peak).Done()
	if err := checkOptimizer(c.Optimizer); err != nil {
		return nil, err
	}
	if c.Optimizer == OptimizerAdam8bit {
		adam = optim.Adam8bit().Betas(AdamBeta1, AdamBeta2).Epsilon(AdamEpsilon).LearningRate(c.Schedule.Peak).Done()
	}
	links := []optim.Transform{optim.MicroBatches(c.MicroBatches)}
	scale, err := ParseLossScale(c.LossScale)
	if err != nil {
		return nil, err
	}
	if scale != nil {
		links = append(links, optim.LossScale(scale))
	}
	return optim.NewChain(append(links, optim.Apply(adam))...)
}
