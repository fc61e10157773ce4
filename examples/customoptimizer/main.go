// Command customoptimizer trains a model of its own with an optimizer of its own through onegpu's
// loop (train.Trainer.Run): signSGD (Bernstein et al. 2018), which moves each parameter by the
// learning rate times the sign of its gradient, on the tutorial's classification batch, in 4
// micro-batches. main_test.go checks what it promises (go test ./examples/customoptimizer).
package main

import (
	"fmt"
	"os"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
	"github.com/janpfeifer/must"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/platform"
	"github.com/onegpu/onegpu/train"
)

// Probe classifies the batch's 128 features through one hidden layer.
type Probe struct{ Hidden, Classes int }

func (Probe) InputShapes(batch int) []shapes.Shape {
	return []shapes.Shape{shapes.Make(dtypes.Float32, batch, 128), shapes.Make(dtypes.Int32, batch)}
}

func (Probe) MetricNames() []string { return nil }

func (p Probe) Loss(ctx *context.Context, b []*graph.Node) (accum.Mean, []accum.Mean) {
	h := layers.GELU(layers.Dense(ctx.In("hidden"), b[0], p.Hidden))
	sum, count := mixed.SoftmaxCrossEntropySum(layers.Dense(ctx.In("out"), h, p.Classes), b[1], nil)
	return accum.Mean{Sum: sum, Count: count}, nil
}

// SignSGD is signSGD as an optim.Optimizer: the description checkpoints record, and the update.
type SignSGD struct{}

func (SignSGD) String() string { return "signsgd" }

func (SignSGD) Clear(*context.Context) error { return nil } // it keeps no state

func (o SignSGD) UpdateGraph(ctx *context.Context, _ *graph.Graph, loss *graph.Node) {
	o.UpdateGraphWithGradients(ctx, ctx.BuildTrainableVariablesGradientsGraph(loss), loss.DType())
}

// UpdateGraphWithGradients gets one gradient per trainable variable the step uses, in context order.
func (SignSGD) UpdateGraphWithGradients(ctx *context.Context, grads []*graph.Node, _ dtypes.DType) {
	g := grads[0].Graph()
	lr := optimizers.LearningRateVar(ctx, dtypes.Float32, 0).ValueGraph(g) // the schedule's rate
	optimizers.IncrementGlobalStepGraph(ctx, g, dtypes.Int64)              // count the update
	for i, v := range accum.TrainableVariables(ctx, g) {
		v.SetValueGraph(graph.Sub(v.ValueGraph(g), graph.Mul(lr, graph.Sign(grads[i]))))
	}
}

// Setup is the run: the probe, signSGD at a constant rate, batches of 256 in 4 micro-batches.
func Setup() train.Config {
	return train.Config{Model: Probe{Hidden: 64, Classes: 10}, Batch: 256, MicroBatches: 4,
		Optimizer: SignSGD{}, Schedule: optim.Constant(2e-3), Seed: 1}
}

func main() {
	backend := must.M1(platform.NewBackend(""))
	trainer := must.M1(train.New(backend, Setup()))
	batches := must.M1(data.NewClassifierBatch(trainer.Config.Batch, 128, 10, 1))
	h := must.M1(trainer.Run(batches, train.RunOptions{Steps: 40, Progress: os.Stdout}))
	fmt.Printf("loss %.4f -> %.4f with %s\n", h.Steps[0].Loss, h.Steps[len(h.Steps)-1].Loss, trainer.Config.Optimizer)
}
