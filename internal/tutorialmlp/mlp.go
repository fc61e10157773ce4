// Package tutorialmlp is the MLP classifier of the JAX tutorial "Training Larger Models on a Single
// GPU" (Part 1.1) as plain GoMLX graph functions of parameter nodes: 128 inputs -> Dense 256 ->
// LayerNorm -> SiLU -> Dense 100 -> log-softmax in float32, trained with mean cross-entropy on
// random data.
//
// models.Classifier is the model users train (context variables, a precision policy). This copy
// takes its parameters as plain nodes, which the gradient tests of vjp/, mixed/ and accum/ need:
// they feed the same values as float32 and as float64 and compare, and split compute and matmul
// dtypes. Parameters are float32; the LayerNorm statistics, the log-softmax and the loss run in
// float32 (or float64).
package tutorialmlp

import (
	"math"
	"math/rand/v2"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// The tutorial's sizes.
const (
	Inputs     = 128
	Hidden     = 256
	Classes    = 100
	Batch      = 512
	layerNormε = 1e-6 // Flax's LayerNorm default
)

// ParamNames lists the parameters in the order of Params' fields and of InitialParams.
var ParamNames = []string{"dense1/kernel", "dense1/bias", "norm/scale", "norm/bias", "dense2/kernel", "dense2/bias"}

// Params are the model's parameter nodes, in the order of ParamNames.
type Params struct {
	Kernel1, Bias1, Scale, Offset, Kernel2, Bias2 *graph.Node
}

// ParamsFromSlice maps nodes given in ParamNames order.
func ParamsFromSlice(p []*graph.Node) Params {
	return Params{p[0], p[1], p[2], p[3], p[4], p[5]}
}

// ParamShapes returns the shapes of the parameters in ParamNames order.
func ParamShapes(dtype dtypes.DType) []shapes.Shape {
	return []shapes.Shape{
		shapes.Make(dtype, Inputs, Hidden), shapes.Make(dtype, Hidden),
		shapes.Make(dtype, Hidden), shapes.Make(dtype, Hidden),
		shapes.Make(dtype, Hidden, Classes), shapes.Make(dtype, Classes),
	}
}

// InitialParams returns deterministic initial values in ParamNames order, as float32 tensors: Flax's
// defaults (LeCun-normal kernels, zero biases, unit LayerNorm scale), except that biases and the
// LayerNorm parameters get small random values so that every gradient is exercised.
func InitialParams(seed uint64) []*tensors.Tensor {
	rng := rand.New(rand.NewPCG(seed, 1))
	normal := func(n int, mean, std float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(mean + std*rng.NormFloat64())
		}
		return v
	}
	return []*tensors.Tensor{
		tensors.FromFlatDataAndDimensions(normal(Inputs*Hidden, 0, 1/math.Sqrt(Inputs)), Inputs, Hidden),
		tensors.FromFlatDataAndDimensions(normal(Hidden, 0, 0.1), Hidden),
		tensors.FromFlatDataAndDimensions(normal(Hidden, 1, 0.1), Hidden),
		tensors.FromFlatDataAndDimensions(normal(Hidden, 0, 0.1), Hidden),
		tensors.FromFlatDataAndDimensions(normal(Hidden*Classes, 0, 1/math.Sqrt(Hidden)), Hidden, Classes),
		tensors.FromFlatDataAndDimensions(normal(Classes, 0, 0.1), Classes),
	}
}

// RandomBatch returns a batch of the tutorial's synthetic task: inputs drawn from N(0, 1) and labels
// that depend on the inputs (the arg-max of a fixed random projection), so that the loss can fall.
func RandomBatch(seed uint64, batch int) (x, labels *tensors.Tensor) {
	rng := rand.New(rand.NewPCG(seed, 2))
	proj := rand.New(rand.NewPCG(7, 7)) // the task: fixed across batches
	w := make([]float64, Inputs*Classes)
	for i := range w {
		w[i] = proj.NormFloat64()
	}
	xs := make([]float32, batch*Inputs)
	ys := make([]int32, batch)
	for b := range batch {
		for i := range Inputs {
			xs[b*Inputs+i] = float32(rng.NormFloat64())
		}
		best, bestScore := 0, math.Inf(-1)
		for c := range Classes {
			var s float64
			for i := range Inputs {
				s += float64(xs[b*Inputs+i]) * w[i*Classes+c]
			}
			if s > bestScore {
				best, bestScore = c, s
			}
		}
		ys[b] = int32(best)
	}
	return tensors.FromFlatDataAndDimensions(xs, batch, Inputs), tensors.FromFlatDataAndDimensions(ys, batch)
}

// LogProbs runs the classifier on x and returns log-probabilities [batch, Classes] in float32
// (float64 when compute is float64). The two Dense products run in matmul; their outputs are cast
// to compute, in which the biases, LayerNorm (statistics in at least float32) and SiLU run.
//
// compute == matmul == bfloat16 is the tutorial's bf16 policy; matmul = bfloat16 with compute =
// float32 confines 16-bit arithmetic to the matmuls.
func LogProbs(p Params, x *graph.Node, compute, matmul dtypes.DType) *graph.Node {
	row := func(n *graph.Node) *graph.Node { return graph.InsertAxes(convert(n, compute), 0) } // [n] -> [1, n]
	dense := func(in, kernel, bias *graph.Node) *graph.Node {
		product := graph.Dot(convert(in, matmul), convert(kernel, matmul))
		return graph.Add(convert(product, compute), row(bias))
	}
	h := dense(x, p.Kernel1, p.Bias1)
	h = layerNorm(h, row(p.Scale), row(p.Offset))
	h = graph.Mul(h, graph.Logistic(h)) // SiLU
	logits := dense(h, p.Kernel2, p.Bias2)
	wide := dtypes.Float32
	if compute == dtypes.Float64 {
		wide = dtypes.Float64
	}
	return graph.LogSoftmax(convert(logits, wide), -1)
}

// layerNorm normalizes the last axis with statistics computed in at least float32.
func layerNorm(x, scale, offset *graph.Node) *graph.Node {
	wide := convert(x, dtypes.Float32)
	if x.DType() == dtypes.Float64 {
		wide = x
	}
	mean := graph.ReduceAndKeep(wide, graph.ReduceMean, -1)
	centered := graph.Sub(wide, mean)
	variance := graph.ReduceAndKeep(graph.Mul(centered, centered), graph.ReduceMean, -1)
	normalized := graph.Mul(centered, graph.Rsqrt(graph.AddScalar(variance, layerNormε)))
	return graph.Add(graph.Mul(convert(normalized, x.DType()), scale), offset)
}

// Loss is the mean cross-entropy of integer labels under log-probabilities logp.
func Loss(logp, labels *graph.Node) *graph.Node {
	oneHot := graph.OneHot(labels, Classes, logp.DType())
	return graph.Neg(graph.ReduceAllMean(graph.ReduceSum(graph.Mul(logp, oneHot), -1)))
}

// ContextParams creates (or reuses) the model's variables in ctx, initialized with InitialParams(seed).
func ContextParams(ctx *context.Context, g *graph.Graph, seed uint64) Params {
	init := InitialParams(seed)
	nodes := make([]*graph.Node, len(ParamNames))
	for i, name := range ParamNames {
		scope, variable, _ := strings.Cut(name, "/")
		nodes[i] = ctx.In(scope).Checked(false).VariableWithValue(variable, init[i]).ValueGraph(g)
	}
	return ParamsFromSlice(nodes)
}

// convert casts x to dtype, returning x itself when it already has it.
func convert(x *graph.Node, dtype dtypes.DType) *graph.Node {
	if x.DType() == dtype {
		return x
	}
	return graph.ConvertDType(x, dtype)
}
