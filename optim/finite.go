package optim

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
	gomlxtrain "github.com/gomlx/gomlx/pkg/ml/train"
)

// finiteKey is the graph parameter, in DefaultScope, holding the step's finite flag.
const finiteKey = "optim_step_finite"

// Finite returns the boolean scalar that says whether the step built in g so far had finite
// gradients (the AND of every LossScale link's check), or a constant true when no link checked.
// Gate your own state with it, e.g. Rollback(ctx, g, optim.Finite(ctx, g), ...) around a metric's
// update, so that a skipped step leaves it as it was.
func Finite(ctx *context.Context, g *graph.Graph) *graph.Node {
	if v, ok := ctx.InAbsPath(DefaultScope).GetGraphParam(g, finiteKey); ok {
		return v.(*graph.Node)
	}
	return graph.Const(g, true)
}

// recordFinite ANDs finite into the step's flag.
func recordFinite(ctx *context.Context, g *graph.Graph, finite *graph.Node) {
	c := ctx.InAbsPath(DefaultScope)
	if v, ok := c.GetGraphParam(g, finiteKey); ok {
		finite = graph.LogicalAnd(v.(*graph.Node), finite)
	}
	c.SetGraphParam(g, finiteKey, finite)
}

// LastFiniteLossVariable holds, in DefaultScope, the loss of the last step with finite gradients
// (float32 scalar; 0 before the first).
const LastFiniteLossVariable = "last_finite_loss"

// keepTrainerLossesFinite replaces the losses GoMLX's train.Trainer hands its metrics after the
// optimizer (GetLosses, GetLossNoRegularization) by the last finite step's loss on a skipped step:
// its exponential moving averages would otherwise take the NaN in and stay NaN for the rest of the
// run.
func keepTrainerLossesFinite(ctx *context.Context, g *graph.Graph) {
	trainer := ctx.InAbsPath(gomlxtrain.TrainerAbsoluteScope)
	v, ok := trainer.GetGraphParam(g, gomlxtrain.TrainerLossGraphParamKey)
	if !ok || v == nil {
		return // not run by a train.Trainer
	}
	finite := Finite(ctx, g)
	lastVar := ctx.Checked(false).InAbsPath(DefaultScope).VariableWithValue(LastFiniteLossVariable, float32(0)).SetTrainable(false)
	last := lastVar.ValueGraph(g)
	kept := func(loss *graph.Node) *graph.Node {
		return graph.Where(finite, loss, graph.ConvertDType(last, loss.DType()))
	}
	loss := kept(v.(*graph.Node))
	trainer.SetGraphParam(g, gomlxtrain.TrainerLossGraphParamKey, loss)
	lastVar.SetValueGraph(graph.ConvertDType(loss, dtypes.Float32))
	if v, ok := trainer.GetGraphParam(g, gomlxtrain.TrainerLossNoRegularizationGraphParamKey); ok && v != nil {
		trainer.SetGraphParam(g, gomlxtrain.TrainerLossNoRegularizationGraphParamKey, kept(v.(*graph.Node)))
	}
}
