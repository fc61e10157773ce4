package mixed_test

import (
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
)

// weighted returns Σ w·y in float32 with fixed pseudo-random weights w of y's shape, so that each
// element of y gets a different cotangent.
func weighted(y *graph.Node) *graph.Node {
	rng := rand.New(rand.NewPCG(11, uint64(y.Shape().Size())))
	w := make([]float64, y.Shape().Size())
	for i := range w {
		w[i] = rng.Float64()*2 - 1
	}
	weights := graph.Const(y.Graph(), tensors.FromFlatDataAndDimensions(w, y.Shape().Dimensions...))
	return mixed.Sum(graph.Mul(graph.ConvertDType(y, dtypes.Float64), weights), dtypes.Float32)
}

// TestIslandGradients checks the closed-form gradients of the islands against GoMLX's automatic
// differentiation of the same math in float64: to float32 precision for float32 inputs, and within
// 1% (the output and the gradient are rounded to bfloat16) for bfloat16 inputs. With a PJRT plugin
// configured it runs on XLA too.
func TestIslandGradients(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dims   []int
		island func(x, labels *graph.Node) *graph.Node
		ref    func(x64, labels *graph.Node) *graph.Node // in float64 with GoMLX's ops
	}{
		{"Softmax", []int{8, 64},
			func(x, _ *graph.Node) *graph.Node { return mixed.Softmax(x, dtypes.InvalidDType) },
			func(x, _ *graph.Node) *graph.Node { return graph.Softmax(x, -1) }},
		{"Softmax over axis 0", []int{8, 64},
			func(x, _ *graph.Node) *graph.Node { return mixed.Softmax(x, f32, 0) },
			func(x, _ *graph.Node) *graph.Node { return graph.Softmax(x, 0) }},
		{"LogSoftmax", []int{8, 64},
			func(x, _ *graph.Node) *graph.Node { return mixed.LogSoftmax(x, f32) },
			func(x, _ *graph.Node) *graph.Node { return graph.LogSoftmax(x, -1) }},
		{"LogSumExp", []int{8, 64},
			func(x, _ *graph.Node) *graph.Node { return mixed.LogSumExp(x, f32) },
			func(x, _ *graph.Node) *graph.Node { return graph.Log(graph.ReduceSum(graph.Exp(x), -1)) }},
		{"LogSumExp over two axes", []int{4, 8, 16},
			func(x, _ *graph.Node) *graph.Node { return mixed.LogSumExp(x, f32, 2, 0) },
			func(x, _ *graph.Node) *graph.Node { return graph.Log(graph.ReduceSum(graph.Exp(x), 0, 2)) }},
		{"SoftmaxCrossEntropy", []int{8, 64},
			func(x, y *graph.Node) *graph.Node { return mixed.SoftmaxCrossEntropy(x, y, f32) },
			func(x, y *graph.Node) *graph.Node {
				return graph.Neg(graph.ReduceSum(graph.Mul(graph.LogSoftmax(x, -1), graph.OneHot(y, 64, x.DType())), -1))
			}},
		{"Normalize", []int{8, 64},
			func(x, _ *graph.Node) *graph.Node { return mixed.Normalize(x, 1e-5) },
			func(x, _ *graph.Node) *graph.Node { return normalize64(x, 1e-5, 1) }},
		{"Normalize over two axes", []int{4, 8, 16},
			func(x, _ *graph.Node) *graph.Node { return mixed.Normalize(x, 1e-5, -1, 1) },
			func(x, _ *graph.Node) *graph.Node { return normalize64(x, 1e-5, 1, 2) }},
		{"RMSNormalize", []int{8, 64},
			func(x, _ *graph.Node) *graph.Node { return mixed.RMSNormalize(x, 1e-5) },
			func(x, _ *graph.Node) *graph.Node { return rmsNormalize64(x, 1e-5, 1) }},
		{"RMSNormalize over two axes", []int{4, 8, 16},
			func(x, _ *graph.Node) *graph.Node { return mixed.RMSNormalize(x, 1e-5, -1, 1) },
			func(x, _ *graph.Node) *graph.Node { return rmsNormalize64(x, 1e-5, 1, 2) }},
		{"Sum", []int{8, 64},
			func(x, _ *graph.Node) *graph.Node { return mixed.Sum(x, f32, 1) },
			func(x, _ *graph.Node) *graph.Node { return graph.ReduceSum(x, 1) }},
		{"Mean", []int{8, 64},
			func(x, _ *graph.Node) *graph.Node { return mixed.Mean(x, f32, 0) },
			func(x, _ *graph.Node) *graph.Node { return graph.ReduceMean(x, 0) }},
	} {
		for _, backend := range backendsUnderTest() {
			for _, dtype := range []dtypes.DType{f32, bf16} {
				t.Run(backend.Name()+"/"+tc.name+"/"+dtype.String(), func(t *testing.T) {
					in, _ := bf16Tensor(normal(21, 0.5, 2), tc.dims...) // values exact in both dtypes
					labels := tensors.FromFlatDataAndDimensions([]int32{3, 0, 63, 17, 5, 9, 40, 2}, 8)
					out := runOn(t, backend, func(nodes []*graph.Node) []*graph.Node {
						x := graph.ConvertDType(nodes[0], dtype)
						var y *graph.Node
						if len(tc.dims) == 2 {
							y = nodes[1]
						}
						got := graph.Gradient(weighted(tc.island(x, y)), x)[0]
						x64 := graph.ConvertDType(nodes[0], f64)
						want := graph.Gradient(weighted(tc.ref(x64, y)), x64)[0]
						return []*graph.Node{graph.ConvertDType(got, f64), want}
					}, in, labels)
					tolerance := 1e-5
					if dtype == bf16 {
						tolerance = 1e-2
					}
					if err := testkit.RelL2(out[0], out[1]); !(err <= tolerance) {
						t.Errorf("gradient relative L2 error %.3g > %.3g", err, tolerance)
					}
				})
			}
		}
	}
}

// normalize64 is (x - mean)/sqrt(variance + ε) over axes with GoMLX's ops.
func normalize64(x *graph.Node, epsilon float64, axes ...int) *graph.Node {
	mean := graph.ReduceAndKeep(x, graph.ReduceMean, axes...)
	c := graph.Sub(x, mean)
	variance := graph.ReduceAndKeep(graph.Mul(c, c), graph.ReduceMean, axes...)
	return graph.Div(c, graph.Sqrt(graph.AddScalar(variance, epsilon)))
}

// rmsNormalize64 is x/sqrt(mean(x²) + ε) over axes with GoMLX's ops.
func rmsNormalize64(x *graph.Node, epsilon float64, axes ...int) *graph.Node {
	meanSquare := graph.ReduceAndKeep(graph.Mul(x, x), graph.ReduceMean, axes...)
	return graph.Div(x, graph.Sqrt(graph.AddScalar(meanSquare, epsilon)))
}
