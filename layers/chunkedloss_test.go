package layers_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
)

const lossBatch, lossSeq, lossWidth, lossVocab = 2, 7, 6, 11 // 14 tokens

type lossCase struct {
	chunk        int
	classesFirst bool
	bias         bool
	weights      string // "", "mask" or "float"
	tied         bool   // x is an embedding lookup in the projection's weight, plus an input
	classChunk   int    // Projection.ClassChunk: the vocabulary in pieces
}

func (c lossCase) String() string {
	return fmt.Sprintf("chunk%d_first%t_bias%t_w%s_tied%t_classes%d", c.chunk, c.classesFirst, c.bias, c.weights, c.tied, c.classChunk)
}

// lossCases: the first two also run on XLA.
var lossCases = []lossCase{
	{chunk: 4, classesFirst: true, tied: true, weights: "mask"},
	{chunk: 3, bias: true, weights: "float"},
	{chunk: 4},
	{chunk: 5, classesFirst: true, weights: "mask"},
	{chunk: 14, bias: true},
	{chunk: 100, classesFirst: true, tied: true},
	// the vocabulary of 11 in pieces of 4, 4, 3 and of 6, 5
	{chunk: 4, classesFirst: true, tied: true, weights: "mask", classChunk: 4},
	{chunk: 3, bias: true, weights: "float", classChunk: 6},
	{chunk: 5, classesFirst: true, bias: true, classChunk: 1},
}

// lossGradients returns the loss's sum and count and the gradients of the sum with respect to x,
// the weight and (with a bias) the bias, computing in dtype. Inputs: x, weight, bias, labels,
// tokens (for the tied lookup), weights.
func lossGradients(c lossCase, chunked bool, dtype dtypes.DType) func(xs []*graph.Node) []*graph.Node {
	return func(xs []*graph.Node) []*graph.Node {
		x, w, b := graph.ConvertDType(xs[0], dtype), graph.ConvertDType(xs[1], dtype), graph.ConvertDType(xs[2], dtype)
		labels, tokens := xs[3], xs[4]
		var weights *graph.Node
		switch c.weights {
		case "mask":
			weights = graph.GreaterThan(xs[5], graph.ScalarZero(xs[5].Graph(), dtypes.Float64))
		case "float":
			weights = graph.Abs(xs[5])
		}
		h := x
		if c.tied {
			h = graph.Add(graph.Mul(graph.Gather(w, graph.InsertAxes(tokens, -1)), x), x)
		}
		proj := layers.Projection{Weight: w, ClassesFirst: c.classesFirst, ClassChunk: c.classChunk}
		if c.bias {
			proj.Bias = b
		}
		var sum, count *graph.Node
		if chunked {
			sum, count = layers.ChunkedCrossEntropySum(h, proj, labels, weights, c.chunk)
		} else {
			contract := 0
			if c.classesFirst {
				contract = 1
			}
			logits := graph.DotGeneral(h, []int{2}, nil, w, []int{contract}, nil)
			if c.bias {
				logits = graph.Add(logits, graph.Reshape(b, 1, 1, lossVocab))
			}
			sum, count = mixed.SoftmaxCrossEntropySum(logits, labels, weights)
		}
		wrt := []*graph.Node{x, w}
		if c.bias {
			wrt = append(wrt, b)
		}
		outs := []*graph.Node{graph.ConvertDType(sum, dtypes.Float64), graph.ConvertDType(count, dtypes.Float64)}
		for _, g := range graph.Gradient(sum, wrt...) {
			outs = append(outs, graph.ConvertDType(g, dtypes.Float64))
		}
		return outs
	}
}

// TestChunkedCrossEntropyMatchesPlain: the chunked loss's sum, count and gradients (hidden states,
// projection weight in either layout, bias, tied embeddings whose gradient sums both uses) equal
// the plain loss's (mixed.SoftmaxCrossEntropySum of the whole logits): in float64 to float64
// rounding, in float32 within 1e-6 (loss) and 1e-5 relative L2 (gradients) of plain float64 and
// plain float32, with masks and weights, for token counts that are not multiples of the chunk.
func TestChunkedCrossEntropyMatchesPlain(t *testing.T) {
	for _, backend := range testkit.All() {
		for i, c := range lossCases {
			if backend != testkit.Embedded() && i >= 2 {
				break
			}
			t.Run(backend.Name()+"/"+c.String(), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(c.chunk), 7))
				wDims := []int{lossWidth, lossVocab}
				if c.classesFirst {
					wDims = []int{lossVocab, lossWidth}
				}
				labels := make([]int32, lossBatch*lossSeq)
				tokens := make([]int32, lossBatch*lossSeq)
				for i := range labels {
					labels[i], tokens[i] = int32(rng.IntN(lossVocab)), int32(rng.IntN(lossVocab))
				}
				inputs := []*tensors.Tensor{
					randomTensor(rng, lossBatch, lossSeq, lossWidth),
					randomTensor(rng, wDims...),
					randomTensor(rng, lossVocab),
					tensors.FromFlatDataAndDimensions(labels, lossBatch, lossSeq),
					tensors.FromFlatDataAndDimensions(tokens, lossBatch, lossSeq),
					randomTensor(rng, lossBatch, lossSeq),
				}
				want := testkit.Run(t, backend, lossGradients(c, false, dtypes.Float64), inputs...)
				got64 := testkit.Run(t, backend, lossGradients(c, true, dtypes.Float64), inputs...)
				compareLoss(t, "float64 chunked vs float64 plain", got64, want, 1e-12, 1e-12)
				got32 := testkit.Run(t, backend, lossGradients(c, true, dtypes.Float32), inputs...)
				compareLoss(t, "float32 chunked vs float64 plain", got32, want, 1e-6, 1e-5)
				plain32 := testkit.Run(t, backend, lossGradients(c, false, dtypes.Float32), inputs...)
				compareLoss(t, "float32 chunked vs float32 plain", got32, plain32, 1e-6, 1e-5)
			})
		}
	}
}

func compareLoss(t *testing.T, what string, got, want [][]float64, lossTol, gradTol float64) {
	t.Helper()
	for i, name := range []string{"sum", "count"} {
		if rel := testkit.RelL2(got[i], want[i]); rel > lossTol {
			t.Errorf("%s: %s %.10g vs %.10g (relative %.2g), want <= %g", what, name, got[i][0], want[i][0], rel, lossTol)
		}
	}
	for i, name := range []string{"x", "weight", "bias"}[:len(want)-2] {
		if rel := testkit.RelL2(got[i+2], want[i+2]); rel > gradTol {
			t.Errorf("%s: gradient of %s differs by %.2g relative L2, want <= %g", what, name, rel, gradTol)
		}
	}
}

// TestChunkedCrossEntropyIgnoresMaskedTokens: a token of weight 0 whose hidden state is not
// finite adds nothing to the sum, the count or any gradient, as in mixed.SoftmaxCrossEntropySum.
func TestChunkedCrossEntropyIgnoresMaskedTokens(t *testing.T) {
	x := tensors.FromFlatDataAndDimensions([]float32{1, 2, float32(posInf()), 0, 0.5, -1}, 3, 2)
	w := tensors.FromFlatDataAndDimensions([]float32{1, 0, -1, 0.5, 2, 1}, 2, 3)
	labels := tensors.FromFlatDataAndDimensions([]int32{0, 2, 1}, 3)
	mask := tensors.FromFlatDataAndDimensions([]bool{true, false, true}, 3)
	got := testkit.Run(t, testkit.Embedded(), func(xs []*graph.Node) []*graph.Node {
		sum, count := layers.ChunkedCrossEntropySum(xs[0], layers.Projection{Weight: xs[1]}, xs[2], xs[3], 2)
		grads := graph.Gradient(sum, xs[0], xs[1])
		return []*graph.Node{sum, count, grads[0], grads[1]}
	}, x, w, labels, mask)
	want := testkit.Run(t, testkit.Embedded(), func(xs []*graph.Node) []*graph.Node {
		// the same without the masked token
		keep := graph.Concatenate([]*graph.Node{graph.SliceAxis(xs[0], 0, graph.AxisElem(0)), graph.SliceAxis(xs[0], 0, graph.AxisElem(2))}, 0)
		labels := graph.Concatenate([]*graph.Node{graph.SliceAxis(xs[2], 0, graph.AxisElem(0)), graph.SliceAxis(xs[2], 0, graph.AxisElem(2))}, 0)
		sum, count := mixed.SoftmaxCrossEntropySum(graph.DotGeneral(keep, []int{1}, nil, xs[1], []int{0}, nil), labels, nil)
		return []*graph.Node{sum, count, graph.Gradient(sum, xs[1])[0]}
	}, x, w, labels, mask)
	if testkit.RelL2(got[0], want[0]) > 1e-6 || got[1][0] != 2 || testkit.RelL2(got[3], want[2]) > 1e-6 {
		t.Errorf("masked token counted: sum %v count %v dW %v, want sum %v count 2 dW %v", got[0], got[1], got[3], want[0], want[2])
	}
	for i, v := range got[2][2:4] {
		if v != 0 {
			t.Errorf("masked token's gradient [%d] = %v, want 0", i, v)
		}
	}
}

// TestChunkedCrossEntropyRejectsBadInput: misuse panics with a message naming the problem.
func TestChunkedCrossEntropyRejectsBadInput(t *testing.T) {
	cases := map[string]struct {
		weight []int
		labels []int
		chunk  int
	}{
		"does not take x's width":  {[]int{5, 11}, []int{2, 7}, 4},
		"labels must be integers":  {[]int{6, 11}, []int{2, 6}, 4},
		"chunk must be at least 1": {[]int{6, 11}, []int{2, 7}, 0},
		"ClassChunk must be 0":     {[]int{6, 11}, []int{2, 7}, -1},
	}
	for want, c := range cases {
		t.Run(want, func(t *testing.T) {
			err := catch(func() {
				g := graph.NewGraph(testkit.Embedded(), "bad")
				defer g.Finalize()
				x := graph.Parameter(g, "x", shapes.Make(dtypes.Float32, 2, 7, 6))
				w := graph.Parameter(g, "w", shapes.Make(dtypes.Float32, c.weight...))
				labels := graph.Parameter(g, "labels", shapes.Make(dtypes.Int32, c.labels...))
				chunk, classChunk := c.chunk, 0
				if chunk < 0 { // a bad ClassChunk
					chunk, classChunk = 4, chunk
				}
				layers.ChunkedCrossEntropySum(x, layers.Projection{Weight: w, ClassChunk: classChunk}, labels, nil, chunk)
			})
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("got %v, want a panic saying %q", err, want)
			}
		})
	}
}

func posInf() float64 { return math.Inf(1) }

// TestDenseProjectionMatchesDense: the chunked loss of DenseProjection's kernel and bias equals
// the plain loss of Dense's logits (the same variables), value and gradients of the input, kernel
// and bias, in float32.
func TestDenseProjectionMatchesDense(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 13))
	x := randomTensor(rng, lossBatch, lossSeq, lossWidth)
	labels := make([]int32, lossBatch*lossSeq)
	for i := range labels {
		labels[i] = int32(rng.IntN(lossVocab))
	}
	labelsT := tensors.FromFlatDataAndDimensions(labels, lossBatch, lossSeq)
	ctx := context.New()
	run := func(chunked bool) [][]float64 {
		return testkit.RunContext(t, testkit.Embedded(), ctx, func(ctx *context.Context, xs []*graph.Node) []*graph.Node {
			h := graph.ConvertDType(xs[0], dtypes.Float32)
			out := ctx.In("output_layer")
			var sum *graph.Node
			if chunked {
				sum, _ = layers.ChunkedCrossEntropySum(h, layers.DenseProjection(out, h.Graph(), lossWidth, lossVocab), xs[1], nil, 5)
			} else {
				sum, _ = mixed.SoftmaxCrossEntropySum(layers.Dense(out, h, lossVocab), xs[1], nil)
			}
			wrt := []*graph.Node{h}
			for v := range ctx.IterVariables() {
				if v.Trainable {
					wrt = append(wrt, v.ValueGraph(h.Graph()))
				}
			}
			return append([]*graph.Node{sum}, graph.Gradient(sum, wrt...)...)
		}, x, labelsT)
	}
	want := run(false)
	ctx = ctx.Reuse()
	got := run(true)
	if len(got) != 4 || len(want) != 4 {
		t.Fatalf("got %d and %d outputs, want 4 (loss, x, kernel, bias)", len(got), len(want))
	}
	for i, name := range []string{"loss", "x", "kernel", "bias"} {
		limit := 1e-5
		if i == 0 {
			limit = 1e-6
		}
		if rel := testkit.RelL2(got[i], want[i]); rel > limit {
			t.Errorf("%s: chunked differs from Dense by %.2g relative L2, want <= %g", name, rel, limit)
		}
	}
}

// TestChunkedCrossEntropyAccuracyCountsArgMax: the correct count is the summed weight of the
// tokens whose largest logit is their label, counted in float64 from the whole logits (ArgMax),
// without weights, with a mask and with float weights, for chunks that do not divide the tokens;
// the loss and its gradient are ChunkedCrossEntropySum's.
func TestChunkedCrossEntropyAccuracyCountsArgMax(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	x := randomTensor(rng, lossBatch, lossSeq, lossWidth)
	w := randomTensor(rng, lossWidth, lossVocab)
	labels := make([]int32, lossBatch*lossSeq)
	for i := range labels {
		labels[i] = int32(rng.IntN(lossVocab))
	}
	// A few labels are the argmax, so that the count is neither 0 nor every token.
	logits := testkit.Run(t, testkit.Embedded(), func(xs []*graph.Node) []*graph.Node {
		return []*graph.Node{graph.ArgMax(graph.DotGeneral(xs[0], []int{2}, nil, xs[1], []int{0}, nil), -1, dtypes.Int32)}
	}, x, w)[0]
	for i := 0; i < len(labels); i += 2 {
		labels[i] = int32(logits[i])
	}
	weights := randomTensor(rng, lossBatch, lossSeq)
	labelsT := tensors.FromFlatDataAndDimensions(labels, lossBatch, lossSeq)
	for _, kind := range []string{"", "mask", "float", "mask/pieces"} {
		classChunk := 0
		if strings.HasSuffix(kind, "/pieces") {
			kind, classChunk = strings.TrimSuffix(kind, "/pieces"), 3 // pieces of 3, 3, 3 and 2
		}
		got := testkit.Run(t, testkit.Embedded(), func(xs []*graph.Node) []*graph.Node {
			var weights *graph.Node
			switch kind {
			case "mask":
				weights = graph.GreaterThan(xs[3], graph.ScalarZero(xs[3].Graph(), xs[3].DType()))
			case "float":
				weights = graph.Abs(graph.ConvertDType(xs[3], dtypes.Float32))
			}
			h, proj := graph.ConvertDType(xs[0], dtypes.Float32), layers.Projection{Weight: graph.ConvertDType(xs[1], dtypes.Float32), ClassChunk: classChunk}
			sum, count, correct := layers.ChunkedCrossEntropyAccuracy(h, proj, xs[2], weights, 5)
			plainSum, _ := layers.ChunkedCrossEntropySum(h, proj, xs[2], weights, 5)
			return []*graph.Node{sum, count, correct, plainSum, graph.Gradient(sum, h)[0], graph.Gradient(plainSum, h)[0]}
		}, x, w, labelsT, weights)
		want, wantCount := 0.0, 0.0
		for i, label := range labels {
			weight := 1.0
			switch v := weights.Value().([][]float64)[i/lossSeq][i%lossSeq]; kind {
			case "mask":
				weight = 0
				if v > 0 {
					weight = 1
				}
			case "float":
				weight = float64(float32(math.Abs(v)))
			}
			wantCount += weight
			if int(logits[i]) == int(label) {
				want += weight
			}
		}
		if math.Abs(got[2][0]-want) > 1e-5*wantCount || want == 0 || want == wantCount {
			t.Errorf("weights %q: correct %g, want %g (of %g)", kind, got[2][0], want, wantCount)
		}
		if got[0][0] != got[3][0] || testkit.RelL2(got[4], got[5]) != 0 {
			t.Errorf("weights %q: loss %g and its gradient differ from ChunkedCrossEntropySum's %g", kind, got[0][0], got[3][0])
		}
	}
}
