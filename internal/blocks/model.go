package blocks

import (
	"fmt"
	"math/rand/v2"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/remat"
)

// Config sizes the model and its batch.
type Config struct {
	Batch, Seq, Width, Heads, Blocks int
	// Compute is the dtype of the arithmetic (parameters stay float32). The zero value means
	// float32.
	Compute dtypes.DType
	// Dropout is the rate of the dropout applied to each sublayer's output while training; 0
	// disables it.
	Dropout float64
}

// Default is the stack onegpu's design measurements use: 12 blocks of width 256 with 4 heads, on
// a batch of 4 sequences of 128 positions, in float32 (9.5M parameters; a train step's activations
// take about 184 MiB without rematerialization).
func Default() Config {
	return Config{Batch: 4, Seq: 128, Width: 256, Heads: 4, Blocks: 12, Compute: dtypes.Float32}
}

// Validate reports sizes that cannot build a model.
func (c Config) Validate() error {
	switch {
	case c.Batch < 1 || c.Seq < 1 || c.Width < 1 || c.Heads < 1 || c.Blocks < 1:
		return fmt.Errorf("blocks config %+v: batch, sequence, width, heads and blocks must be positive", c)
	case c.Width%c.Heads != 0:
		return fmt.Errorf("blocks config: width %d is not a multiple of heads %d", c.Width, c.Heads)
	case c.Dropout < 0 || c.Dropout >= 1:
		return fmt.Errorf("blocks config: dropout %g is not in [0, 1)", c.Dropout)
	case c.Compute != dtypes.InvalidDType && !c.Compute.IsFloat():
		return fmt.Errorf("blocks config: compute dtype %s is not a float", c.Compute)
	}
	return nil
}

func (c Config) compute() dtypes.DType {
	if c.Compute == dtypes.InvalidDType {
		return dtypes.Float32
	}
	return c.Compute
}

// InputShape is the shape of the model's input: float32 [batch, seq, width].
func (c Config) InputShape() shapes.Shape {
	return shapes.Make(dtypes.Float32, c.Batch, c.Seq, c.Width)
}

// Parameters counts the model's parameters.
func (c Config) Parameters() int {
	w := c.Width
	attention := 4*w*w + w + 2*w // q, k, v, out kernels; out bias; LayerNorm
	mlp := 8*w*w + 4*w + w + 2*w // fc1, fc2 kernels and biases; LayerNorm
	return c.Blocks * (attention + mlp)
}

// Block applies one block to x, checkpointing its sublayers as spec says, with rc's policy and
// settings. The attention's variables are in ctx.In("attn"), the MLP's in ctx.In("mlp"); a
// checkpointed sublayer is named after its scope in residual reports.
func Block(ctx *context.Context, x *graph.Node, c Config, spec Spec, rc remat.Config) *graph.Node {
	attention := func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		return []*graph.Node{Attention(ctx, in[0], c.Heads, c.Dropout)}
	}
	mlp := func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		return []*graph.Node{MLP(ctx, in[0], c.Dropout)}
	}
	if spec.Block {
		return rc.Named(ctx.Scope()).CheckpointCtx(ctx, func(ctx *context.Context, in []*graph.Node) []*graph.Node {
			return mlp(ctx.In("mlp"), attention(ctx.In("attn"), in))
		}, x)[0]
	}
	sublayer := func(ctx *context.Context, fn func(*context.Context, []*graph.Node) []*graph.Node, checkpoint bool) {
		if checkpoint {
			x = rc.Named(ctx.Scope()).CheckpointCtx(ctx, fn, x)[0]
		} else {
			x = fn(ctx, []*graph.Node{x})[0]
		}
	}
	sublayer(ctx.In("attn"), attention, spec.Attention)
	sublayer(ctx.In("mlp"), mlp, spec.MLP)
	return x
}

// Forward runs the stack on x (float32 [batch, seq, width]) and returns its output in the compute
// dtype. The blocks' variables are in ctx.In("block_NN").
func Forward(ctx *context.Context, x *graph.Node, c Config, spec Spec, rc remat.Config) *graph.Node {
	h := graph.ConvertDType(x, c.compute())
	for i := range c.Blocks {
		h = Block(ctx.Inf("block_%02d", i), h, c, spec, rc)
	}
	return h
}

// Loss is the mean square of the stack's output, in float32: a loss that needs no labels.
func Loss(ctx *context.Context, x *graph.Node, c Config, spec Spec, rc remat.Config) *graph.Node {
	return graph.ReduceAllMean(graph.Square(graph.ConvertDType(Forward(ctx, x, c, spec, rc), dtypes.Float32)))
}

// GradientStep returns a graph function for analysis.ContextProgram or context.NewExec: it marks ctx
// as training, computes the loss of its one input and returns the loss followed by the gradient of
// every trainable variable. It applies no optimizer, so that steps of different specs return the
// same values.
func GradientStep(c Config, spec Spec, rc remat.Config) func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
	return func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
		ctx.SetTraining(inputs[0].Graph(), true)
		loss := Loss(ctx, inputs[0], c, spec, rc)
		return append([]*graph.Node{loss}, ctx.BuildTrainableVariablesGradientsGraph(loss)...)
	}
}

// RandomInput returns an input batch with values uniform in [-1, 1).
func RandomInput(c Config, seed uint64) *tensors.Tensor {
	rng := rand.New(rand.NewPCG(seed, 2))
	values := make([]float32, c.Batch*c.Seq*c.Width)
	for i := range values {
		values[i] = 2*rng.Float32() - 1
	}
	return tensors.FromFlatDataAndDimensions(values, c.Batch, c.Seq, c.Width)
}

// Analysis is the memory picture of one GradientStep.
type Analysis struct {
	// Memory is the simulated sequential execution of the step (analysis.Analyze).
	Memory *analysis.Memory
	// Residuals lists what the backward pass keeps from each checkpointed block.
	Residuals remat.Report
}

// Analyze builds GradientStep for c, spec and rc on backend, without running it, and returns its
// memory analysis and residual report. Only the variables' shapes are needed, so it is fast even
// for large configurations.
func Analyze(backend backends.Backend, c Config, spec Spec, rc remat.Config) (Analysis, error) {
	if err := c.Validate(); err != nil {
		return Analysis{}, err
	}
	name := fmt.Sprintf("blocks_%s", spec)
	p, err := analysis.ContextProgram(backend, context.New(), name, []shapes.Shape{c.InputShape()}, GradientStep(c, spec, rc))
	if err != nil {
		return Analysis{}, err
	}
	defer p.Graph.Finalize()
	residuals, err := remat.Residuals(p)
	if err != nil {
		return Analysis{}, err
	}
	return Analysis{Memory: analysis.Analyze(p), Residuals: residuals}, nil
}
