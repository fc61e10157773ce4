// Command ownmodel trains a model that is not the tutorial's with onegpu: a residual MLP with
// LayerNorm on synthetic regression, bfloat16 compute with float32 parameters, its blocks
// rematerialized, each batch in 4 micro-batches and a dynamic loss scale. This file is the code a
// user writes; check.go measures what the run promises (go run ./examples/ownmodel --json).
package main

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/remat"
	"github.com/onegpu/onegpu/train"
)

// ResMLP maps In features to Out targets through Blocks residual blocks x + MLP(LayerNorm(x)).
type ResMLP struct{ In, Width, Blocks, Out int }

func (m ResMLP) InputShapes(batch int) []shapes.Shape {
	return []shapes.Shape{shapes.Make(dtypes.Float32, batch, m.In), shapes.Make(dtypes.Float32, batch, m.Out)}
}

func (ResMLP) MetricNames() []string { return nil }

// Loss is the mean squared error, as a sum and a count so that micro-batches combine exactly.
func (m ResMLP) Loss(ctx *context.Context, batch []*graph.Node) (accum.Mean, []accum.Mean) {
	h := layers.Dense(ctx.In("input"), batch[0], m.Width)
	for i := range m.Blocks {
		h = graph.Add(h, remat.Block(ctx.In(fmt.Sprintf("block_%d", i)), "block", m.block, h)[0])
	}
	y := layers.Dense(ctx.In("output"), layers.LayerNorm(ctx.In("final_norm"), h), m.Out)
	return accum.MaskedMean(graph.Square(graph.Sub(mixed.Cast(y, dtypes.Float32), batch[1])), nil), nil
}

func (m ResMLP) block(ctx *context.Context, in []*graph.Node) []*graph.Node {
	h := layers.GELU(layers.Dense(ctx.In("up"), layers.LayerNorm(ctx.In("norm"), in[0]), 2*m.Width))
	return []*graph.Node{layers.Dense(ctx.In("down"), h, m.Width)}
}

// Setup is the run: bfloat16 compute over float32 parameters, remat of every "block", 4
// micro-batches per batch of 64, a dynamic loss scale and a constant learning rate, on regression
// data.
func Setup() (ResMLP, train.Config, Regression) {
	model := ResMLP{In: 16, Width: 48, Blocks: 3, Out: 4}
	config := train.Config{Model: model, Batch: 64, MicroBatches: 4, Remat: train.Remat{Kinds: []string{"block"}},
		LossScale: mixed.NewDynamicLossScale(), Schedule: optim.Constant(3e-3), Seed: 1,
		Policy: mixed.Policy{Param: dtypes.Float32, Compute: dtypes.BFloat16, Output: dtypes.Float32}}
	return model, config, Regression{Rows: config.Batch, In: model.In, Out: model.Out}
}

// Regression is synthetic data: the targets are tanh of a fixed linear map of random inputs.
type Regression struct{ Rows, In, Out int }

// Batch draws the step's inputs (the same for a resumed run) and computes their targets.
func (d Regression) Batch(step int) []*tensors.Tensor {
	rng := rand.New(rand.NewPCG(uint64(step), 7))
	x, y := make([]float32, d.Rows*d.In), make([]float32, d.Rows*d.Out)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for i := range y {
		s := 0.0
		for j := range d.In {
			s += float64(x[i/d.Out*d.In+j]) * math.Sin(float64(j*d.Out+i%d.Out)) / math.Sqrt(float64(d.In))
		}
		y[i] = float32(math.Tanh(s))
	}
	return []*tensors.Tensor{tensors.FromFlatDataAndDimensions(x, d.Rows, d.In), tensors.FromFlatDataAndDimensions(y, d.Rows, d.Out)}
}

func (d Regression) Describe() string {
	return fmt.Sprintf("synthetic regression %d -> %d", d.In, d.Out)
}
