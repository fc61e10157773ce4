package mixed_test

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
)

// Reference math in float64 on the exact bfloat16 input values.

func sum64(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v
	}
	return s
}

func max64(x []float64) float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, v)
	}
	return m
}

func logSumExp64(x []float64) float64 {
	m := max64(x)
	s := 0.0
	for _, v := range x {
		s += math.Exp(v - m)
	}
	return m + math.Log(s)
}

// rows applies fn to each row of length n of x and concatenates the results.
func rows(x []float64, n int, fn func(row []float64) []float64) []float64 {
	var out []float64
	for i := 0; i < len(x); i += n {
		out = append(out, fn(x[i:i+n])...)
	}
	return out
}

// TestIslands checks each float32 island on bfloat16 inputs of realistic size (4096 values per
// reduction) against float64 math on the same values, and that the naive bfloat16 computation
// is far off there (the embedded backend accumulates bfloat16 sums in bfloat16).
func TestIslands(t *testing.T) {
	const n = 4096
	positive, xs := bf16Tensor(normal(1, 3, 1), n)  // N(3, 1): sums grow large
	logits, ls := bf16Tensor(normal(2, 0, 2), 4, n) // 4 rows of 4096 logits
	labels := tensors.FromFlatDataAndDimensions([]int32{7, 4095, 0, 1234}, 4)
	labelOf := []int{7, 4095, 0, 1234}

	for _, tc := range []struct {
		name      string
		input     *tensors.Tensor
		island    func(x, labels *graph.Node) *graph.Node
		naive     func(x, labels *graph.Node) *graph.Node // the same in bfloat16 with GoMLX's ops
		want      []float64
		tolerance float64 // relative L2 error allowed for the island
		naiveMin  float64 // relative L2 error the naive bfloat16 computation must exceed
	}{
		{"Sum", positive,
			func(x, _ *graph.Node) *graph.Node { return mixed.Sum(x, f32) },
			func(x, _ *graph.Node) *graph.Node { return graph.ReduceAllSum(x) },
			[]float64{sum64(xs)}, 1e-6, 0.05},
		{"Sum to bfloat16", positive,
			func(x, _ *graph.Node) *graph.Node { return mixed.Sum(x, dtypes.InvalidDType) },
			func(x, _ *graph.Node) *graph.Node { return graph.ReduceAllSum(x) },
			[]float64{sum64(xs)}, 1.0 / 128, 0.05}, // one bfloat16 rounding (truncation in GoMLX v0.26.0)
		{"Mean", positive,
			func(x, _ *graph.Node) *graph.Node { return mixed.Mean(x, f32) },
			func(x, _ *graph.Node) *graph.Node { return graph.ReduceAllMean(x) },
			[]float64{sum64(xs) / n}, 1e-6, 0.05},
		{"Softmax", logits,
			func(x, _ *graph.Node) *graph.Node { return mixed.Softmax(x, f32) },
			func(x, _ *graph.Node) *graph.Node { return graph.Softmax(x, -1) },
			rows(ls, n, func(r []float64) []float64 {
				lse, out := logSumExp64(r), make([]float64, len(r))
				for i, v := range r {
					out[i] = math.Exp(v - lse)
				}
				return out
			}), 1e-5, 0.05},
		{"LogSoftmax", logits,
			func(x, _ *graph.Node) *graph.Node { return mixed.LogSoftmax(x, f32, -1) },
			func(x, _ *graph.Node) *graph.Node { return graph.LogSoftmax(x, -1) },
			rows(ls, n, func(r []float64) []float64 {
				lse, out := logSumExp64(r), make([]float64, len(r))
				for i, v := range r {
					out[i] = v - lse
				}
				return out
			}), 1e-6, 0.05},
		{"LogSumExp", logits,
			func(x, _ *graph.Node) *graph.Node { return mixed.LogSumExp(x, f32) },
			func(x, _ *graph.Node) *graph.Node {
				shift := graph.StopGradient(graph.ReduceAndKeep(x, graph.ReduceMax, -1))
				return graph.Add(graph.Log(graph.ReduceSum(graph.Exp(graph.Sub(x, shift)), -1)), graph.Squeeze(shift, -1))
			},
			rows(ls, n, func(r []float64) []float64 { return []float64{logSumExp64(r)} }), 1e-6, 0.05},
		{"SoftmaxCrossEntropy", logits,
			func(x, y *graph.Node) *graph.Node { return mixed.SoftmaxCrossEntropy(x, y, f32) },
			func(x, y *graph.Node) *graph.Node {
				return graph.Neg(graph.ReduceSum(graph.Mul(graph.LogSoftmax(x, -1), graph.OneHot(y, n, x.DType())), -1))
			},
			func() []float64 {
				out := make([]float64, 4)
				for i := range out {
					r := ls[i*n : (i+1)*n]
					out[i] = logSumExp64(r) - r[labelOf[i]]
				}
				return out
			}(), 1e-6, 0.05},
		{"LayerNormStats mean", positive,
			func(x, _ *graph.Node) *graph.Node { m, _ := mixed.LayerNormStats(x); return m },
			func(x, _ *graph.Node) *graph.Node { return graph.ReduceAndKeep(x, graph.ReduceMean, -1) },
			[]float64{sum64(xs) / n}, 1e-6, 0.05},
		{"LayerNormStats variance", positive,
			func(x, _ *graph.Node) *graph.Node { _, v := mixed.LayerNormStats(x); return v },
			func(x, _ *graph.Node) *graph.Node {
				mean := graph.ReduceAndKeep(x, graph.ReduceMean, -1)
				c := graph.Sub(x, mean)
				return graph.ReduceAndKeep(graph.Mul(c, c), graph.ReduceMean, -1)
			},
			[]float64{variance64(xs)}, 1e-5, 0.02},
		{"Normalize", positive,
			func(x, _ *graph.Node) *graph.Node { return mixed.Normalize(x, 1e-6) },
			func(x, _ *graph.Node) *graph.Node {
				mean := graph.ReduceAndKeep(x, graph.ReduceMean, -1)
				c := graph.Sub(x, mean)
				v := graph.ReduceAndKeep(graph.Mul(c, c), graph.ReduceMean, -1)
				return graph.Mul(c, graph.Rsqrt(graph.AddScalar(v, 1e-6)))
			},
			func() []float64 {
				m, v := sum64(xs)/n, variance64(xs)
				out := make([]float64, n)
				for i, x := range xs {
					out[i] = (x - m) / math.Sqrt(v+1e-6)
				}
				return out
			}(), 1.0 / 128, 0.05},
		{"RMSNormalize", positive,
			func(x, _ *graph.Node) *graph.Node { return mixed.RMSNormalize(x, 1e-6) },
			func(x, _ *graph.Node) *graph.Node {
				return graph.Mul(x, graph.Rsqrt(graph.AddScalar(graph.ReduceAndKeep(graph.Mul(x, x), graph.ReduceMean, -1), 1e-6)))
			},
			func() []float64 {
				square := 0.0
				for _, x := range xs {
					square += x * x
				}
				out := make([]float64, n)
				for i, x := range xs {
					out[i] = x / math.Sqrt(square/n+1e-6)
				}
				return out
			}(), 1.0 / 128, 0.05},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := run(t, func(in []*graph.Node) []*graph.Node {
				return []*graph.Node{tc.island(in[0], in[1]), tc.naive(in[0], in[1])}
			}, tc.input, labels)
			got, naive := testkit.RelL2(out[0], tc.want), testkit.RelL2(out[1], tc.want)
			t.Logf("relative L2 error: island %.2g, naive bfloat16 %.2g", got, naive)
			if got > tc.tolerance {
				t.Errorf("island error %.3g > %.3g", got, tc.tolerance)
			}
			if !(naive > tc.naiveMin) {
				t.Errorf("naive bfloat16 error %.3g: expected it to fail (> %.3g) at this size", naive, tc.naiveMin)
			}
		})
	}
}

func variance64(x []float64) float64 {
	m := sum64(x) / float64(len(x))
	s := 0.0
	for _, v := range x {
		s += (v - m) * (v - m)
	}
	return s / float64(len(x))
}

// TestIslandDTypes: results come back in the requested dtype (the input's by default) and
// float64 inputs stay float64.
func TestIslandDTypes(t *testing.T) {
	in, _ := bf16Tensor(normal(3, 0, 1), 2, 8)
	run(t, func(xs []*graph.Node) []*graph.Node {
		x := xs[0]
		x64 := graph.ConvertDType(x, f64)
		for _, tc := range []struct {
			name string
			node *graph.Node
			want dtypes.DType
		}{
			{"Sum default", mixed.Sum(x, dtypes.InvalidDType), bf16},
			{"Mean f32", mixed.Mean(x, f32, -1), f32},
			{"Softmax bf16", mixed.Softmax(x, bf16), bf16},
			{"LogSumExp f64 input", mixed.LogSumExp(x64, dtypes.InvalidDType), f64},
			{"Normalize keeps dtype", mixed.Normalize(x, 1e-5), bf16},
			{"RMSNormalize keeps dtype", mixed.RMSNormalize(x, 1e-5), bf16},
		} {
			if tc.node.DType() != tc.want {
				t.Errorf("%s: dtype %s, want %s", tc.name, tc.node.DType(), tc.want)
			}
		}
		m, v := mixed.LayerNormStats(x)
		if m.DType() != f32 || v.DType() != f32 || m.Shape().Dim(-1) != 1 {
			t.Errorf("LayerNormStats: %s, %s; want float32 with the axis kept", m.Shape(), v.Shape())
		}
		return []*graph.Node{mixed.Sum(x, f32)}
	}, in)
}

// TestCrossEntropyMasked: weighted and masked sums against float64 over a batch of 4096 bfloat16
// examples; padded examples whose logits are -Inf contribute nothing (not NaN), and the mean's
// gradient with respect to the bfloat16 logits is within 1% of float64's (softmax - onehot)·w/Σw.
func TestCrossEntropyMasked(t *testing.T) {
	const batch, classes = 4096, 10
	logitsT, ls := bf16Tensor(normal(4, 0, 1), batch, classes)
	ys := make([]int32, batch)
	mask := make([]bool, batch)
	weights := make([]float32, batch)
	for i := range ys {
		ys[i] = int32((i * 7) % classes)
		mask[i] = i%3 != 0
		weights[i] = float32(i%4) * 0.5
	}
	// Padded examples (mask false) get -Inf logits: their loss is NaN or Inf.
	for i := range mask {
		if !mask[i] {
			for c := range classes {
				ls[i*classes+c] = math.Inf(-1)
			}
		}
	}
	logitsT, _ = func() (*tensors.Tensor, []float64) {
		i := 0
		return bf16Tensor(func() float64 { v := ls[i]; i++; return v }, batch, classes)
	}()
	losses := make([]float64, batch)
	for i := range losses {
		r := ls[i*classes : (i+1)*classes]
		losses[i] = logSumExp64(r) - r[ys[i]]
	}
	var maskSum, maskCount, wSum, wCount float64
	for i, l := range losses {
		if mask[i] {
			maskSum, maskCount = maskSum+l, maskCount+1
			w := float64(weights[i])
			wSum, wCount = wSum+w*l, wCount+w
		}
	}
	// The weights of padded examples are 0 too.
	for i := range weights {
		if !mask[i] {
			weights[i] = 0
		}
	}
	wantGrad := make([]float64, batch*classes)
	for i := range batch {
		if weights[i] == 0 {
			continue
		}
		r := ls[i*classes : (i+1)*classes]
		lse := logSumExp64(r)
		for c := range classes {
			p := math.Exp(r[c] - lse)
			if c == int(ys[i]) {
				p--
			}
			wantGrad[i*classes+c] = p * float64(weights[i]) / wCount
		}
	}

	out := run(t, func(in []*graph.Node) []*graph.Node {
		logits, labels, m, w := in[0], in[1], in[2], in[3]
		sumM, countM := mixed.SoftmaxCrossEntropySum(logits, labels, m)
		sumW, countW := mixed.SoftmaxCrossEntropySum(logits, labels, w)
		mean := mixed.SoftmaxCrossEntropyMean(logits, labels, w, f32)
		grad := graph.Gradient(mean, logits)[0]
		return []*graph.Node{sumM, countM, sumW, countW, mean, graph.ConvertDType(grad, f32)}
	}, logitsT, tensors.FromFlatDataAndDimensions(ys, batch), tensors.FromFlatDataAndDimensions(mask, batch),
		tensors.FromFlatDataAndDimensions(weights, batch))

	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"masked sum", out[0][0], maskSum}, {"masked count", out[1][0], maskCount},
		{"weighted sum", out[2][0], wSum}, {"weighted count", out[3][0], wCount},
		{"weighted mean", out[4][0], wSum / wCount},
	} {
		if rel := math.Abs(c.got-c.want) / math.Abs(c.want); !(rel < 1e-5) {
			t.Errorf("%s = %g, want %g (relative error %.2g)", c.name, c.got, c.want, rel)
		}
	}
	if e := testkit.RelL2(out[5], wantGrad); !(e < 0.01) {
		t.Errorf("gradient of the weighted mean: relative L2 error %.3g > 1%%", e)
	}

	zero := run(t, func(in []*graph.Node) []*graph.Node {
		mean := mixed.SoftmaxCrossEntropyMean(in[0], in[1], graph.ZerosLike(graph.ConvertDType(in[1], f32)), f32)
		return []*graph.Node{mean, graph.ConvertDType(graph.Gradient(mean, in[0])[0], f32)}
	}, logitsT, tensors.FromFlatDataAndDimensions(ys, batch))
	if zero[0][0] != 0 || testkit.RelL2(zero[1], make([]float64, batch*classes)) != 0 {
		t.Errorf("all-zero weights: mean %g, gradient not all zero", zero[0][0])
	}
}
